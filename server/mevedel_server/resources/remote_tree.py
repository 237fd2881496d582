"""Read, Glob and Grep of a file family on a workspace reached over SSH,
through the store's target: the remote counterpart of :mod:`.tree`.

A node is probed in one program (``Stat``, a ``WalkTree`` and, when its
bytes are wanted, ``Read``), so a Glob is one round trip and a Grep one
more per batch of files read. Grep reads the files and searches them here
with the very matcher the local Grep uses (Python ``re`` over the same
lines), rather than compiling the pattern remotely: the results, limits,
skipped-file notices and previews are then the local ones by construction,
at the cost of carrying the searched bytes. The walk returns physical
entries; the family's presenter (hidden, renamed, gzip-stored names) and the
sort by logical name are applied here exactly as the local tree does.

Deviation from the local tree: the remote executor refuses symbolic links,
so a walk neither lists nor follows any link, including one whose target
stays inside the root (a local walk lists those).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from ..addresses.model import AddressError, ErrorKind, Operation
from ..targets import ControlProgram, Read, Stat, Status, Target, TargetError
from ..targets.program import OpResult, TreeWalk, WalkTree
from .attempt import Request
from .file_operations import glob_answer, grep_answer
from .options import GrepOptions, ReadOptions
from .projection import page_lines, split_lines
from .results import GlobResult, GrepResult, ReadResult
from .text_source import MAX_FILE_BYTES, InflationBudget, text_of_bytes, too_large
from .tree import GrepOutcome, Presenter, _present_as_is, address_of, grep_lines

#: Entries one walk may return; past it a search says it is incomplete.
WALK_LIMIT = 100_000
#: File bytes one Grep program carries (a bigger file travels alone).
READ_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RemoteTree:
    """A family root on the target: ``root`` is target-relative."""

    root: str
    base: str
    present: Presenter = _present_as_is

    def address(self, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
        return address_of(self.base, parts, is_dir=is_dir)

    def path(self, physical: tuple[str, ...]) -> str:
        return "/".join((self.root, *physical))


@dataclass(frozen=True, slots=True)
class RemoteEntry:
    name: str
    is_dir: bool
    #: Target-relative path of the physical entry.
    path: str
    size: int
    compressed: bool = False


class Walked:
    """A walk's entries, grouped by physical parent directory."""

    def __init__(self, tree: RemoteTree, start: str, walk: TreeWalk) -> None:
        self.tree = tree
        self.start = start
        self.truncated = walk.truncated
        self._children: dict[str, list[tuple[str, bool, int]]] = {}
        for entry in walk.entries:
            parent, _, name = entry.path.rpartition("/")
            self._children.setdefault(parent, []).append((name, entry.kind == "directory", entry.size))

    def entries(self, relative: str, parts: tuple[str, ...]) -> list[RemoteEntry]:
        """Presented entries of one walked directory, sorted by logical name
        (``relative`` is its physical path below the walk's start)."""
        raw = self._children.get(relative, [])
        siblings = frozenset(name for name, _d, _s in raw)
        found: list[RemoteEntry] = []
        for name, is_dir, size in raw:
            shown = self.tree.present(parts, name, is_dir, siblings)
            if shown is None:
                continue
            logical, compressed = shown
            child = f"{relative}/{name}" if relative else name
            found.append(RemoteEntry(logical, is_dir, f"{self.start}/{child}", size, compressed))
        found.sort(key=lambda entry: entry.name)
        return found

    def files(self, relative: str = "", parts: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], RemoteEntry]]:
        """Every file in sorted depth-first order, as :meth:`.Tree.walk_files`."""
        for entry in self.entries(relative, parts):
            here = parts + (entry.name,)
            if entry.is_dir:
                below = entry.path[len(self.start) + 1 :]
                yield from self.files(below, here)
            else:
                yield here, entry


@dataclass(frozen=True)
class Scope:
    """Where a remote Glob or Grep starts: a walked directory, or one file
    (``entry``) whose bytes may already have been read (``data``)."""

    tree: RemoteTree
    parts: tuple[str, ...]
    walked: Walked | None = None
    entry: RemoteEntry | None = None
    data: bytes | None = None

    def files(self) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], RemoteEntry]]:
        if self.walked is not None:
            for parts, entry in self.walked.files("", self.parts):
                yield parts[len(self.parts) :], parts, entry
        elif self.entry is not None:
            yield (self.entry.name,), self.parts, self.entry


def later(function: Callable[..., Awaitable[object]], *args: object) -> Callable[[], Awaitable[object]]:
    """A runner for ``Prepared``: the resolver awaits a coroutine function."""

    async def run() -> object:
        return await function(*args)

    return run


def unreachable(authored: str, error: TargetError) -> AddressError:
    return AddressError(ErrorKind.UNAVAILABLE, authored, f"the SSH workspace could not be read ({error.reason})")


def not_plain(authored: str) -> AddressError:
    return AddressError(ErrorKind.UNAVAILABLE, authored, "cannot be read on the SSH workspace (not a plain file or directory)")


async def walk_roots(target: Target, trees: list[RemoteTree], authored: str) -> list[Walked | None]:
    """Walk each family root in one program; None for a root not created yet."""
    try:
        found = await target.run(ControlProgram([WalkTree(tree.root, limit=WALK_LIMIT, optional=True) for tree in trees]))
    except TargetError as error:
        raise unreachable(authored, error) from None
    out: list[Walked | None] = []
    for tree, result in zip(trees, found):
        if result.ok:
            out.append(Walked(tree, tree.root, result.value))
        elif result.status is Status.ABSENT:
            out.append(None)
        else:
            raise AddressError(ErrorKind.UNREADABLE, tree.address(()), "its directory cannot be listed")
    return out


def top_lines(walked: Walked | None) -> list[str]:
    """:func:`.tree.listing_lines` of a walked root."""
    if walked is None:
        return []
    return [walked.tree.address((e.name,), is_dir=e.is_dir) for e in walked.entries("", ())]


@dataclass(frozen=True)
class Node:
    """An explicit address: its physical path and, for a retired execution
    log, the gzip-stored alternative read when the raw file is absent."""

    tree: RemoteTree
    parts: tuple[str, ...]
    path: str
    compressed_path: str | None = None


async def run_node(
    target: Target, node: Node, request: Request, authored: str, canonical: str
) -> ReadResult | GlobResult | GrepResult:
    """Read, Glob or Grep an explicit node with the local answers and errors."""
    operation = request.operation
    wants_bytes = operation is not Operation.GLOB
    depth = 1 if operation is Operation.READ else None
    candidates = [node.path] if node.compressed_path is None else [node.path, node.compressed_path]
    ops = []
    for path in candidates:
        ops.append(Stat(path, optional=True))
        ops.append(WalkTree(path, limit=WALK_LIMIT, depth=depth, optional=True))
        if wants_bytes:
            ops.append(Read(path, optional=True))
    try:
        found = list(await target.run(ControlProgram(ops)))
    except TargetError as error:
        raise unreachable(authored, error) from None
    step = 3 if wants_bytes else 2
    probes = [found[i : i + step] for i in range(0, len(found), step)]
    probe = probes[0]
    compressed = False
    if node.compressed_path is not None and probe[0].status is Status.ABSENT:
        if probes[1][0].ok and probes[1][0].value.kind == "file":
            probe, compressed = probes[1], True
    stat, walk = probe[0], probe[1]
    read = probe[2] if wants_bytes else None
    if stat.status is Status.ABSENT:
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
    if not stat.ok or stat.value.kind == "other":
        raise not_plain(authored)
    if stat.value.kind == "directory":
        if not walk.ok:
            raise AddressError(ErrorKind.UNREADABLE, node.tree.address(node.parts), "its directory cannot be listed")
        walked = Walked(node.tree, node.path, walk.value)
        if operation is Operation.READ:
            assert isinstance(request.options, ReadOptions)
            lines = [node.tree.address(node.parts + (e.name,), is_dir=e.is_dir) for e in walked.entries("", node.parts)]
            notice = None if lines else f"{canonical} is an empty directory"
            return page_lines(lines, request.options, authored, canonical, "directory", notice)
        return await search(target, [Scope(node.tree, node.parts, walked=walked)], request, authored, canonical)
    data = None
    if wants_bytes:
        data = _bytes_of(read, authored)
    entry = RemoteEntry(node.parts[-1], False, stat_path(node, compressed), stat.value.size, compressed)
    if operation is Operation.READ:
        assert isinstance(request.options, ReadOptions) and data is not None
        text = text_of_bytes(data, authored, compressed=compressed)
        notice = None if text else f"{canonical} is an empty file"
        return page_lines(split_lines(text), request.options, authored, canonical, "file", notice)
    scope = Scope(node.tree, node.parts, entry=entry, data=data)
    return await search(target, [scope], request, authored, canonical, explicit_file=True)


def stat_path(node: Node, compressed: bool) -> str:
    return node.compressed_path if compressed and node.compressed_path is not None else node.path


def _bytes_of(result: OpResult | None, authored: str) -> bytes:
    if result is not None and result.ok:
        return result.value
    if result is not None and result.status is Status.ABSENT:
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
    if result is not None and result.unsafe:
        raise not_plain(authored)
    reason = (result.reason if result is not None else None) or "the storage could not be read"
    if "Permission denied" in reason:
        raise AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: permission denied")
    raise AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: the SSH workspace refused it")


def _walk_notice(scopes: list[Scope], notice: str | None) -> str | None:
    if any(scope.walked is not None and scope.walked.truncated for scope in scopes):
        extra = f"the SSH workspace walk stopped after {WALK_LIMIT} entries; results may be incomplete"
        return extra if notice is None else f"{notice}\n{extra}"
    return notice


async def search(
    target: Target,
    scopes: list[Scope],
    request: Request,
    authored: str,
    canonical: str,
    *,
    explicit_file: bool = False,
    notice: str | None = None,
) -> GlobResult | GrepResult:
    """:func:`.file_operations.search` over remote scopes."""
    if request.operation is Operation.GLOB:
        assert request.glob is not None
        limit = request.options.limit  # type: ignore[union-attr]
        found: list[str] = []
        truncated = False
        for scope in scopes:
            for relative, parts, _entry in scope.files():
                if request.glob.matches(relative):
                    if len(found) == limit:
                        truncated = True
                        break
                    found.append(scope.tree.address(parts))
            if truncated:
                break
        answer = glob_answer(found, truncated, request, authored, canonical, notice)
        if any(scope.walked is not None and scope.walked.truncated for scope in scopes):
            return GlobResult(answer.address, answer.canonical, answer.matches, True, _walk_notice(scopes, answer.notice))
        return answer
    if request.operation is Operation.GREP:
        assert isinstance(request.options, GrepOptions) and request.grep is not None
        outcome = await _grep(target, scopes, request, authored if explicit_file else None)
        answer = grep_answer(outcome, request, authored, canonical, notice)
        return GrepResult(
            answer.address, answer.canonical, answer.matches, answer.files_searched,
            answer.truncated, _walk_notice(scopes, answer.notice),
        )
    raise AddressError(ErrorKind.INTERNAL, authored, f"{request.operation.value} reached the remote file search")


async def _grep(target: Target, scopes: list[Scope], request: Request, explicit_file: str | None) -> GrepOutcome:
    plan, options = request.grep, request.options
    assert plan is not None and isinstance(options, GrepOptions)
    candidates: list[tuple[str, RemoteEntry, bytes | None]] = []
    for scope in scopes:
        for relative, parts, entry in scope.files():
            if plan.glob is not None and not plan.glob.matches(relative):
                continue
            candidates.append((scope.tree.address(parts), entry, scope.data))
    outcome = GrepOutcome()
    budget = InflationBudget()
    index = 0
    while index < len(candidates):
        # The next batch: files whose bytes fit one program (at least one).
        batch, size = [], 0
        while index < len(candidates) and (not batch or size + candidates[index][1].size <= READ_BATCH_BYTES):
            batch.append(candidates[index])
            size += candidates[index][1].size
            index += 1
        wanted = [entry.path for _a, entry, data in batch if data is None and _readable_size(entry)]
        read: dict[str, OpResult] = {}
        if wanted:
            try:
                results = await target.run(ControlProgram([Read(path, optional=True) for path in wanted]))
            except TargetError as error:
                raise unreachable(explicit_file or batch[0][0], error) from None
            read = dict(zip(wanted, results))
        for address, entry, data in batch:
            shown = explicit_file or address
            try:
                if data is None and not _readable_size(entry):
                    raise too_large(shown)
                raw = data if data is not None else _bytes_of(read[entry.path], shown)
                text = text_of_bytes(raw, shown, compressed=entry.compressed, budget=budget)
            except AddressError:
                if explicit_file is not None or budget.exhausted:
                    raise
                outcome.skipped.append(address)
                continue
            outcome.files_searched += 1
            if grep_lines(address, split_lines(text), plan, options, outcome):
                outcome.truncated = True
                return outcome
    return outcome


def _readable_size(entry: RemoteEntry) -> bool:
    return entry.compressed or entry.size <= MAX_FILE_BYTES

