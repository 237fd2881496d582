"""Read, Glob and Grep over file-backed nodes and discovery unions.

Families decide *what* an address names (an explicit node, or a union of
search scopes); these functions turn that into results the same way for all
of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..addresses.model import AddressError, ErrorKind, Operation
from .attempt import Request
from .options import GlobOptions, GrepOptions, ReadOptions
from .projection import page_lines
from .results import GlobResult, GrepResult, ReadResult
from .tree import GrepOutcome, Located, SearchScope, glob_scopes, grep_scopes, read_located, require_existing


def fail(error: AddressError) -> Callable[[], object]:
    """A runner that reports a target problem at execution time."""

    def run() -> object:
        raise error

    return run


def run_located(request: Request, node: Located, authored: str, canonical: str) -> ReadResult | GlobResult | GrepResult:
    """Run a request on an explicit file or directory."""
    if request.operation is Operation.READ:
        assert isinstance(request.options, ReadOptions)
        return read_located(node, request.options, authored, canonical)
    require_existing(node, authored)
    scope = SearchScope(node.tree, node.parts, node.path, node.compressed)
    is_file = node.compressed or not node.path.is_dir()
    return search([scope], request, authored, canonical, explicit_file=is_file)


def search(
    scopes: Sequence[SearchScope],
    request: Request,
    authored: str,
    canonical: str,
    *,
    explicit_file: bool = False,
    notice: str | None = None,
) -> GlobResult | GrepResult:
    """Glob or Grep over ``scopes`` (in order); ``notice`` explains an empty union."""
    if request.operation is Operation.GLOB:
        assert isinstance(request.options, GlobOptions) and request.glob is not None
        matches, truncated = glob_scopes(scopes, request.glob, request.options.limit)
        return glob_answer(matches, truncated, request, authored, canonical, notice)
    if request.operation is Operation.GREP:
        assert isinstance(request.options, GrepOptions) and request.grep is not None
        outcome = grep_scopes(
            scopes, request.grep, request.options, explicit_file=authored if explicit_file else None
        )
        return grep_answer(outcome, request, authored, canonical, notice)
    raise AddressError(ErrorKind.INTERNAL, authored, f"{request.operation.value} reached the file search")


def glob_answer(
    matches: list[str], truncated: bool, request: Request, authored: str, canonical: str, notice: str | None
) -> GlobResult:
    """The Glob result of ``matches`` (a local or a remote walk's)."""
    assert isinstance(request.options, GlobOptions)
    parts = [notice] if notice and not matches else []
    if truncated:
        parts.append(f"showing the first {request.options.limit} matches; narrow the pattern or raise limit")
    return GlobResult(authored, canonical, tuple(matches), truncated, "\n".join(parts) or None)


def grep_answer(outcome: GrepOutcome, request: Request, authored: str, canonical: str, notice: str | None) -> GrepResult:
    """The Grep result of ``outcome`` (a local or a remote search's)."""
    assert isinstance(request.options, GrepOptions)
    parts = [notice] if notice and not outcome.matches else []
    if outcome.skipped:
        parts.append(f"{len(outcome.skipped)} non-text file(s) skipped: " + ", ".join(outcome.skipped[:20]))
    if outcome.truncated:
        parts.append(f"showing the first {request.options.limit} matching lines; narrow the pattern or raise limit")
    return GrepResult(
        authored,
        canonical,
        tuple(outcome.matches),
        outcome.files_searched,
        outcome.truncated,
        "\n".join(parts) or None,
    )


def read_listing(
    lines: list[str], request: Request, authored: str, canonical: str, notice: str | None = None
) -> ReadResult:
    """Read of a discovery listing (virtual text of addresses)."""
    assert isinstance(request.options, ReadOptions)
    return page_lines(lines, request.options, authored, canonical, "listing", notice)
