"""Contained directory trees presented under an address prefix, and the
Read/Glob/Grep operations every file-backed family shares.

A tree lists entries with one ``os.scandir`` per directory, in sorted order.
Symbolic links are followed only when their target stays inside the real
root; walks do not descend into symlinked directories, so a link cycle can
never make a search run forever (an explicit address through a contained
directory link still resolves).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..addresses.encoding import encode_component
from ..addresses.model import AddressError, ErrorKind
from .containment import Contained, is_inside
from .glob_pattern import GlobPattern
from .options import GrepOptions, GrepPlan, ReadOptions
from .projection import page_lines, split_lines
from .results import GrepMatch, ReadKind, ReadResult
from .text_source import InflationBudget, read_text

#: Widest preview a Grep match shows; a longer line is cut to the Read page
#: (``char_offset``) that contains the match.
PREVIEW_WIDTH = 2000


@dataclass(frozen=True, slots=True)
class Entry:
    """One logical directory entry: its name as addresses spell it."""

    name: str
    is_dir: bool
    path: Path
    compressed: bool = False
    symlink: bool = False


#: Maps a physical entry to its logical name and whether it is gzip-stored,
#: or hides it (None). Receives the parent's logical parts, the physical
#: name, whether it is a directory, and the physical names of its siblings.
Presenter = Callable[[tuple[str, ...], str, bool, frozenset[str]], "tuple[str, bool] | None"]


def _present_as_is(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    return name, False


def address_of(base: str, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
    """The address of ``parts`` below a family prefix ``base``."""
    if not parts:
        return base if base.endswith("://") else base.rstrip("/")
    text = base + "/".join(encode_component(part) for part in parts)
    return text + "/" if is_dir else text


@dataclass(frozen=True)
class Tree:
    """A family root. ``base`` is the address prefix of its descendants
    (``"work://shared/"``, ``"memory://local-mevedel/"``, ``"artifact://"``)."""

    root: Path
    base: str
    present: Presenter = _present_as_is
    #: Files a search or listing may show (mevedel:// keeps only Markdown).
    file_filter: Callable[[tuple[str, ...]], bool] = lambda parts: True
    label: str | None = None
    real_root: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "real_root", os.path.realpath(self.root))

    def address(self, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
        return address_of(self.base, parts, is_dir=is_dir)

    def exists(self) -> bool:
        return os.path.isdir(self.root)

    def entries(self, directory: Path, parts: tuple[str, ...], *, strict: bool = True) -> list[Entry]:
        """The contained, presented entries of one directory, sorted by name.

        An unlistable directory is an error when it was asked for
        (``strict``) and is skipped when a walk merely meets it.
        """
        try:
            with os.scandir(directory) as scan:
                raw = list(scan)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError:
            if not strict:
                return []
            raise AddressError(ErrorKind.UNREADABLE, self.address(parts), "its directory cannot be listed") from None
        siblings = frozenset(item.name for item in raw)
        found: list[Entry] = []
        for item in raw:
            symlink = item.is_symlink()
            if symlink and not is_inside(os.path.realpath(item.path), self.real_root):
                continue
            try:
                is_dir = item.is_dir()
            except OSError:
                continue
            shown = self.present(parts, item.name, is_dir, siblings)
            if shown is None:
                continue
            name, compressed = shown
            if not is_dir and not self.file_filter(parts + (name,)):
                continue
            found.append(Entry(name, is_dir, Path(item.path), compressed, symlink))
        found.sort(key=lambda entry: entry.name)
        return found

    def walk_files(
        self, directory: Path, parts: tuple[str, ...], *, strict: bool = True
    ) -> Iterator[tuple[tuple[str, ...], Entry]]:
        """Every file below ``directory`` in sorted depth-first order."""
        for entry in self.entries(directory, parts, strict=strict):
            here = parts + (entry.name,)
            if entry.is_dir:
                if not entry.symlink:
                    yield from self.walk_files(entry.path, here, strict=False)
            else:
                yield here, entry


@dataclass(frozen=True)
class Located:
    """An explicit node in a tree: a file or directory the address named."""

    tree: Tree
    parts: tuple[str, ...]
    contained: Contained
    compressed: bool = False

    @property
    def path(self) -> Path:
        return self.contained.path


def listing_lines(tree: Tree, directory: Path, parts: tuple[str, ...]) -> list[str]:
    """One address per entry of a directory; directories end with ``/``."""
    return [tree.address(parts + (e.name,), is_dir=e.is_dir) for e in tree.entries(directory, parts)]


def read_located(node: Located, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    """Read an explicit file or directory; a missing one is missing-target."""
    node.contained.verify(authored)
    path = node.path
    if path.is_dir() and not node.compressed:
        lines = listing_lines(node.tree, path, node.parts)
        notice = None if lines else f"{canonical} is an empty directory"
        return page_lines(lines, options, authored, canonical, "directory", notice)
    if not path.exists():
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
    text = read_text(path, authored, compressed=node.compressed)
    kind: ReadKind = "file"
    notice = None if text else f"{canonical} is an empty file"
    return page_lines(split_lines(text), options, authored, canonical, kind, notice)


def require_existing(node: Located, authored: str) -> None:
    node.contained.verify(authored)
    if not node.path.exists():
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")


@dataclass(frozen=True)
class SearchScope:
    """Where a Glob or Grep starts: a directory (or file) inside a tree."""

    tree: Tree
    parts: tuple[str, ...]
    path: Path
    compressed: bool = False


def scope_files(scope: SearchScope) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], Entry]]:
    """(relative-to-scope parts, tree parts, entry) for each file in scope."""
    if scope.path.is_dir() and not scope.compressed:
        for parts, entry in scope.tree.walk_files(scope.path, scope.parts):
            yield parts[len(scope.parts) :], parts, entry
    elif scope.path.exists() and scope.parts:
        name = scope.parts[-1]
        yield (name,), scope.parts, Entry(name, False, scope.path, scope.compressed)


def glob_scopes(scopes: Iterable[SearchScope], pattern: GlobPattern, limit: int) -> tuple[list[str], bool]:
    found: list[str] = []
    for scope in scopes:
        for relative, parts, _entry in scope_files(scope):
            if pattern.matches(relative):
                if len(found) == limit:
                    return found, True
                found.append(scope.tree.address(parts))
    return found, False


@dataclass(slots=True)
class GrepOutcome:
    matches: list[GrepMatch] = field(default_factory=list)
    files_searched: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated: bool = False


def grep_scopes(
    scopes: Iterable[SearchScope],
    plan: GrepPlan,
    options: GrepOptions,
    *,
    explicit_file: str | None = None,
) -> GrepOutcome:
    """Search every text file in scope; an explicit file that is not text
    is an error, a non-text file met in a directory search is skipped."""
    outcome = GrepOutcome()
    budget = InflationBudget()
    for scope in scopes:
        for relative, parts, entry in scope_files(scope):
            if plan.glob is not None and not plan.glob.matches(relative):
                continue
            address = scope.tree.address(parts)
            try:
                text = read_text(entry.path, explicit_file or address, compressed=entry.compressed, budget=budget)
            except AddressError as error:
                if explicit_file is not None or budget.exhausted:
                    raise
                outcome.skipped.append(address)
                continue
            outcome.files_searched += 1
            if _grep_text(address, text, plan, options, outcome):
                outcome.truncated = True
                return outcome
    return outcome


def _grep_text(address: str, text: str, plan: GrepPlan, options: GrepOptions, outcome: GrepOutcome) -> bool:
    """Append this file's matches; True once the limit is exceeded."""
    return grep_lines(address, split_lines(text), plan, options, outcome)


def grep_lines(address: str, lines: list[str], plan: GrepPlan, options: GrepOptions, outcome: GrepOutcome) -> bool:
    """Append the matches of one projection's lines (virtual text searches
    exactly what Read shows); True once the limit is exceeded."""
    context = options.context_lines
    for index, line in enumerate(lines):
        hit = plan.regex.search(line)
        if hit is None:
            continue
        if len(outcome.matches) == options.limit:
            return True
        column = hit.start() + 1
        start = 0 if len(line) <= PREVIEW_WIDTH else (hit.start() // PREVIEW_WIDTH) * PREVIEW_WIDTH
        before = tuple((n + 1, lines[n][:PREVIEW_WIDTH]) for n in range(max(0, index - context), index))
        after = tuple((n + 1, lines[n][:PREVIEW_WIDTH]) for n in range(index + 1, min(len(lines), index + 1 + context)))
        outcome.matches.append(
            GrepMatch(address, index + 1, column, line[start : start + PREVIEW_WIDTH], start, before, after)
        )
    return False
