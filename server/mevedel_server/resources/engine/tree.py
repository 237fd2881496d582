"""Family roots on a target, presented under an address prefix, and the
Read/Glob/Grep operations every file-backed family shares -- one
implementation for every target (this machine's and an SSH workspace's).

What a tree holds is the same everywhere: directories and regular files.
A symbolic link is neither listed, searched nor followed (an explicit
address through one is refused as ``containment``), and a FIFO, socket or
device is neither listed nor opened, so no listing leads outside its root
and no read can block. The target enforces this (:class:`ListTree`,
:class:`ReadFiles`: descriptor chains with ``O_NOFOLLOW``, non-blocking
opens of regular files only), so a swap of a directory for a link between
two steps is refused too.

An explicit node is probed in one program (``Stat``, a first ``ListTree``
chunk and, when its bytes are wanted, ``ReadFiles``). A walk lists the
tree in chunks (:class:`Walk`): a Glob that reaches its limit stops
listing. Grep reads the walked files in batches (one program each) and
matches them here with Python ``re`` over the Read projection's lines, so
results, limits, skipped-file notices and previews are the same on every
target. The family's presenter (hidden, renamed, gzip-stored names) and
the sort by logical name are applied here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from ...addresses.encoding import encode_component
from ...addresses.model import AddressError, ErrorKind, Operation
from ...targets import (
    ControlProgram,
    FileRead,
    ListTree,
    OpResult,
    ProgramResult,
    ReadFiles,
    Stat,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
    TreeListing,
)
from .attempt import Request
from .containment import through_link
from .glob_pattern import GlobPattern
from .options import GlobOptions, GrepOptions, GrepPlan, ReadOptions
from .pattern_clock import ON_LOOP_SECONDS, OnLoopCapReached, PatternClock
from .places import Place
from .projection import page_lines, split_lines
from .results import GlobResult, GrepMatch, GrepResult, ReadResult
from .text_source import MAX_FILE_BYTES, InflationBudget, text_of_bytes, too_large

#: Widest preview a Grep match shows; a longer line is cut to the Read page
#: (``char_offset``) that contains the match.
PREVIEW_WIDTH = 2000
#: Entries the first program of a walk lists (whole directories, so a few
#: more); each later one lists four times more, up to ``MAX_CHUNK``. A
#: search that stops early (a Grep at its limit) lists little.
FIRST_CHUNK = 256
MAX_CHUNK = 32768
#: Files the first read of a Grep carries; each later one twice as many,
#: up to ``MAX_BATCH``, and at most ``READ_BUDGET`` bytes (a bigger file
#: travels alone).
FIRST_BATCH = 32
MAX_BATCH = 2048
READ_BUDGET = 8 * 1024 * 1024
#: Text larger than this (a Read, or a Grep batch) is decoded and searched
#: in a worker thread, so the event loop keeps serving other requests; less
#: costs less than the hop.
THREAD_TEXT = 256 * 1024
#: A walk whose listed entries pass this is matched in a worker thread.
THREAD_ENTRIES = 4096

ROOT_CHANGED = "its owning root changed after the operation was prepared; prepare it again"

#: Maps a physical entry to its logical name and whether it is gzip-stored,
#: or hides it (None). Receives the parent's logical parts, the physical
#: name, whether it is a directory, and the physical names of its siblings.
Presenter = Callable[[tuple[str, ...], str, bool, frozenset[str]], "tuple[str, bool] | None"]


def _present_as_is(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    return name, False


def _every_file(parts: tuple[str, ...]) -> bool:
    return True


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

    place: Place
    base: str
    present: Presenter = _present_as_is
    #: Files a search or listing may show (mevedel:// keeps only Markdown).
    file_filter: Callable[[tuple[str, ...]], bool] = _every_file
    #: Why an explicit file the filter hides is not there.
    filtered: str = "does not exist"
    label: str | None = None

    def address(self, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
        return address_of(self.base, parts, is_dir=is_dir)

    def path(self, physical: tuple[str, ...]) -> str:
        return self.place.path(physical)


@dataclass(frozen=True, slots=True)
class Entry:
    """One logical directory entry: its name as addresses spell it, and its
    physical path relative to the walk's start (``/``-separated)."""

    name: str
    is_dir: bool
    physical: str
    compressed: bool = False


def later(function: Callable[..., Awaitable[object]], *args: object) -> Callable[[], Awaitable[object]]:
    """A runner for ``Prepared``: the resolver awaits a coroutine function."""

    async def run() -> object:
        return await function(*args)

    return run


def fail(error: AddressError) -> Callable[[], Awaitable[object]]:
    """A runner that reports a target problem at execution time."""

    async def run() -> object:
        raise error

    return run


async def run_program(target: Target, program: ControlProgram, authored: str) -> ProgramResult:
    """Run ``program``; a target that cannot run it is an error naming
    ``authored``."""
    try:
        return await target.run(program)
    except TargetUnavailable as error:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, f"its workspace could not be reached ({error.reason})") from None
    except TargetError:
        raise AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED) from None


def root_refused(result: OpResult | FileRead) -> bool:
    """Whether the target refused its pinned root (replaced, gone, a link)."""
    return result.status is Status.FAILED and (result.reason or "").startswith("the target root ")


def refusal(result: OpResult | FileRead, authored: str, *, missing: str = "does not exist") -> AddressError:
    """The error of a probe or read of an explicit address that did not
    succeed, without the target's reason (which names the backing path)."""
    if result.status is Status.ABSENT:
        return AddressError(ErrorKind.MISSING_TARGET, authored, missing)
    if root_refused(result):
        return AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED)
    if result.unsafe:
        return through_link(authored)
    reason = result.reason or ""
    if reason.endswith("is not a directory"):
        return AddressError(ErrorKind.MISSING_TARGET, authored, missing)
    if reason.endswith("is not a regular file"):
        return AddressError(ErrorKind.UNREADABLE, authored, "is not a regular file")
    if "Permission denied" in reason:
        return AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: permission denied")
    return AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: the storage refused it")


def _bytes_of(read: FileRead, authored: str) -> bytes:
    if not read.ok:
        raise refusal(read, authored)
    if read.data is None:
        raise too_large(authored)
    return read.data


# -- walks ---------------------------------------------------------------------

#: What :meth:`Walk.files` yields when the next directory is not listed yet.
NEED = object()


class Walk:
    """The tree below one directory of a target, listed lazily in chunks:
    ``start`` is its target-relative path, ``parts`` its logical parts in
    the tree."""

    def __init__(self, tree: Tree, start: str, parts: tuple[str, ...], listing: TreeListing, depth: int | None = None) -> None:
        self.tree = tree
        self.start = start
        self.parts = parts
        self.depth = depth
        self._records: dict[str, str] = {}
        self._pending: tuple[str, ...] = ()
        self._chunk = FIRST_CHUNK
        #: Bytes of names listed so far (what matching them costs).
        self.listed = 0
        #: Files read with the first listing (a Grep's first ones), by
        #: physical path below the start; each is used once.
        self.prefetched: dict[str, FileRead] = dict(listing.files)
        self._add(listing)

    def _add(self, listing: TreeListing) -> None:
        self._records.update(listing.records)
        self._pending = listing.pending
        self.listed += sum(len(names) for _directory, names in listing.records)

    async def more(self, authored: str) -> None:
        """List the next chunk of the tree."""
        target = self.tree.place.target
        assert target is not None and self._pending
        self._chunk = min(self._chunk * 4, MAX_CHUNK)
        program = ControlProgram([ListTree(self.start, limit=self._chunk, depth=self.depth, resume=self._pending)])
        result = (await run_program(target, program, authored))[0]
        if not result.ok:
            # The walked directory itself went away (or became a link).
            raise listing_failure(result, self.tree.address(self.parts), authored)
        self._add(result.value)

    def entries(self, physical: str, parts: tuple[str, ...]) -> list[Entry] | None:
        """The presented entries of a listed directory (``physical``
        relative to the start), sorted by logical name; None when it is not
        listed yet (an unlisted one with nothing pending is empty)."""
        names = self._records.get(physical)
        if names is None:
            return None if self._pending else []
        raw = names.split("\0") if names else []
        siblings = frozenset(name[:-1] if name.endswith("/") else name for name in raw)
        present, keep = self.tree.present, self.tree.file_filter
        prefix = physical + "/" if physical else ""
        found: list[Entry] = []
        for name in raw:
            is_dir = name.endswith("/")
            if is_dir:
                name = name[:-1]
            shown = present(parts, name, is_dir, siblings)
            if shown is None:
                continue
            logical, compressed = shown
            if not is_dir and not keep(parts + (logical,)):
                continue
            found.append(Entry(logical, is_dir, prefix + name, compressed))
        found.sort(key=_by_name)
        return found

    def files(self) -> Iterator[object]:
        """``(tree parts, entry)`` of every file in sorted depth-first
        order, with :data:`NEED` where the next directory is not listed yet
        (await :meth:`more`, then iterate on)."""
        while (top := self.entries("", self.parts)) is None:
            yield NEED
        stack: list[tuple[Iterator[Entry], tuple[str, ...]]] = [(iter(top), self.parts)]
        while stack:
            entries, parts = stack[-1]
            for entry in entries:
                here = parts + (entry.name,)
                if not entry.is_dir:
                    yield here, entry
                    continue
                while (children := self.entries(entry.physical, here)) is None:
                    yield NEED
                stack.append((iter(children), here))
                break
            else:
                stack.pop()


def _by_name(entry: Entry) -> str:
    return entry.name


def listing_failure(result: OpResult, address: str, authored: str) -> AddressError:
    if root_refused(result):
        return AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED)
    if result.unsafe:
        return AddressError(ErrorKind.CONTAINMENT, authored, f"{address} is reached through a symbolic link, which mevedel does not follow")
    return AddressError(ErrorKind.UNREADABLE, address, "its directory cannot be listed")


async def open_walks(trees: list[Tree], authored: str, operation: Operation = Operation.GLOB) -> list[Walk | None]:
    """The first chunk of each tree's walk, one program per target (a
    Grep's with its first files read); None for a root that does not exist
    (yet)."""
    out: list[Walk | None] = [None] * len(trees)
    by_target: dict[int, list[int]] = {}
    for index, tree in enumerate(trees):
        tree.place.require(tree.address(()))
        if tree.place.target is not None:
            by_target.setdefault(id(tree.place.target), []).append(index)
    for indices in by_target.values():
        target = trees[indices[0]].place.target
        assert target is not None
        program = ControlProgram([first_listing(trees[i].place.root, operation) for i in indices])
        results = await run_program(target, program, authored)
        for index, result in zip(indices, results):
            tree = trees[index]
            if result.ok:
                out[index] = Walk(tree, tree.place.root, (), result.value)
            elif result.status is not Status.ABSENT and not (result.reason or "").endswith("is not a directory"):
                raise listing_failure(result, tree.address(()), authored)
    return out


async def all_files(walk: Walk, authored: str) -> list[tuple[tuple[str, ...], Entry]]:
    """Every file of a walk (listing all of it)."""
    found: list[tuple[tuple[str, ...], Entry]] = []
    for item in walk.files():
        if item is NEED:
            await walk.more(authored)
        else:
            found.append(item)  # type: ignore[arg-type]
    return found


def top_lines(walk: Walk | None) -> list[str]:
    """One address per entry of a walked root; directories end with ``/``."""
    if walk is None:
        return []
    entries = walk.entries("", ())
    return [walk.tree.address((e.name,), is_dir=e.is_dir) for e in entries or []]


def has_entries(walk: Walk | None) -> bool:
    return walk is not None and bool(walk.entries("", ()))


# -- explicit nodes ------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """An explicit address: its logical parts, physical path and, for a
    retired execution log, the gzip-stored path read when the raw file is
    absent."""

    tree: Tree
    parts: tuple[str, ...]
    path: str
    compressed_path: str | None = None


def node_of(tree: Tree, parts: tuple[str, ...], compressed_path: str | None = None) -> Node:
    return Node(tree, parts, tree.path(parts), compressed_path)


def _split(path: str) -> tuple[str, str]:
    parent, _, leaf = path.rpartition("/")
    return parent, leaf


def first_listing(path: str, operation: Operation, depth: int | None = None) -> ListTree:
    """The first chunk of a walk; a Grep's has its first files read too."""
    if operation is Operation.GREP:
        return ListTree(path, limit=FIRST_CHUNK, depth=depth, read_first=FIRST_BATCH, read_budget=THREAD_TEXT, optional=True)
    return ListTree(path, limit=FIRST_CHUNK, depth=depth, optional=True)


def _probe(path: str, operation: Operation, depth: int | None) -> list:
    """What a node is, in one program: listed as a directory, read as a
    file, or (a Glob, which wants no bytes) stat'ed. A Read only reads:
    most Reads name a file, and a directory is listed by a second program."""
    read = None
    if operation is not Operation.GLOB and path:
        parent, leaf = _split(path)
        read = ReadFiles(parent, names=(leaf,), max_bytes=MAX_FILE_BYTES, budget=0, optional=True)
    if operation is Operation.READ and read is not None:
        return [read]
    return [first_listing(path, operation, depth), read or Stat(path, optional=True)]


@dataclass(frozen=True)
class _Probed:
    """A node as its probe found it: its kind (``directory``, ``file``,
    ``other``, or ``unlisted``: not a regular file, not listed yet), else
    the result that says why it is none."""

    kind: str | None
    found: OpResult | FileRead
    listing: OpResult | None = None
    data: bytes | None = None


def _probed(results: list[OpResult]) -> _Probed:
    listing = results[0] if len(results) == 2 else None
    if listing is not None and listing.ok:
        return _Probed("directory", listing, listing)
    second = results[-1]
    if not second.ok or not isinstance(second.value, tuple):  # a failed read, or a Stat
        return _Probed(second.value.kind if second.ok else None, second, listing)
    read: FileRead = second.value[0]
    if read.ok:
        return _Probed("file", read, listing, read.data)
    if read.reason and read.reason.endswith("is not a regular file") and not read.unsafe:
        return _Probed("unlisted", read) if listing is None else _unlisted(listing)
    return _Probed(None, read, listing)


def _unlisted(listing: OpResult) -> _Probed:
    """A node that is not a regular file, by its listing: a directory (one
    that could not be listed too), a link, or something else (a FIFO...)."""
    if listing.ok:
        return _Probed("directory", listing, listing)
    if listing.unsafe:
        return _Probed(None, listing)
    if (listing.reason or "").endswith("is not a directory"):
        return _Probed("other", listing)
    return _Probed("directory", listing, listing)


@dataclass(frozen=True)
class Scope:
    """Where a Glob or Grep starts: a walked directory, or one file
    (``entry``) whose bytes may already have been read (``data``)."""

    tree: Tree
    parts: tuple[str, ...]
    walk: Walk | None = None
    entry: Entry | None = None
    #: The directory ``entry.physical`` is relative to.
    directory: str = ""
    data: bytes | None = None


async def run_node(node: Node, request: Request, authored: str, canonical: str) -> ReadResult | GlobResult | GrepResult:
    """Read, Glob or Grep an explicit node."""
    place = node.tree.place
    place.require(authored)
    target = place.target
    if target is None:
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
    operation = request.operation
    wants_bytes = operation is not Operation.GLOB
    depth = 1 if operation is Operation.READ else None
    candidates = [node.path] if node.compressed_path is None else [node.path, node.compressed_path]
    probes = []
    ops: list = []
    for path in candidates:
        probe = _probe(path, operation, depth)
        probes.append((len(ops), len(probe)))
        ops.extend(probe)
    found = list(await run_program(target, ControlProgram(ops), authored))
    probed = [_probed(found[start : start + size]) for start, size in probes]
    probe, compressed = probed[0], False
    if len(probed) > 1 and probe.kind is None and probe.found.status is Status.ABSENT and probed[1].kind == "file":
        probe, compressed = probed[1], True
    if probe.kind == "unlisted":  # a Read of a directory (or of a FIFO...)
        listing = (await run_program(target, ControlProgram([ListTree(node.path, depth=1, optional=True)]), authored))[0]
        probe = _unlisted(listing)
    if probe.kind is None:
        raise refusal(probe.found, authored)
    if probe.kind == "other":
        raise AddressError(ErrorKind.UNREADABLE, authored, "is not a regular file or directory")
    if probe.kind == "directory":
        if probe.listing is None or not probe.listing.ok:
            raise listing_failure(probe.listing or probe.found, node.tree.address(node.parts), authored)  # type: ignore[arg-type]
        walk = Walk(node.tree, node.path, node.parts, probe.listing.value, depth)
        if operation is Operation.READ:
            assert isinstance(request.options, ReadOptions)
            entries = walk.entries("", node.parts) or []
            lines = [node.tree.address(node.parts + (e.name,), is_dir=e.is_dir) for e in entries]
            notice = None if lines else f"{canonical} is an empty directory"
            return page_lines(lines, request.options, authored, canonical, "directory", notice)
        return await search([Scope(node.tree, node.parts, walk=walk)], request, authored, canonical)
    if not node.tree.file_filter(node.parts):
        raise AddressError(ErrorKind.MISSING_TARGET, authored, node.tree.filtered)
    path = node.compressed_path if compressed and node.compressed_path is not None else node.path
    directory, leaf = _split(path)
    data = _bytes_of(probe.found, authored) if wants_bytes else None  # type: ignore[arg-type]
    if operation is Operation.READ:
        assert isinstance(request.options, ReadOptions) and data is not None
        return await _page_file(data, compressed, request.options, authored, canonical)
    entry = Entry(node.parts[-1], False, leaf, compressed)
    scope = Scope(node.tree, node.parts, entry=entry, directory=directory, data=data)
    return await search([scope], request, authored, canonical, explicit_file=True)


async def run_root(node: Node, request: Request, authored: str, canonical: str, unused: str) -> ReadResult | GlobResult | GrepResult:
    """:func:`run_node` of a family root that nothing has created yet: an
    unused root is an empty answer saying so (``unused``), not a miss."""
    try:
        return await run_node(node, request, authored, canonical)
    except AddressError as error:
        if error.kind is not ErrorKind.MISSING_TARGET:
            raise
    if request.operation is Operation.READ:
        return read_listing([], request, authored, canonical, unused)
    return await search([], request, authored, canonical, notice=unused)


def _page(data: bytes, compressed: bool, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    text = text_of_bytes(data, authored, compressed=compressed)
    notice = None if text else f"{canonical} is an empty file"
    return page_lines(split_lines(text), options, authored, canonical, "file", notice)


async def _page_file(data: bytes, compressed: bool, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    if len(data) > THREAD_TEXT or compressed:
        return await asyncio.to_thread(_page, data, compressed, options, authored, canonical)
    return _page(data, compressed, options, authored, canonical)


# -- Glob and Grep -------------------------------------------------------------


async def search(
    scopes: list[Scope],
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
        matches, truncated = await _glob(scopes, request.glob, request.options.limit, authored)
        return glob_answer(matches, truncated, request, authored, canonical, notice)
    if request.operation is Operation.GREP:
        assert isinstance(request.options, GrepOptions) and request.grep is not None
        outcome = await _grep(scopes, request.grep, request.options, authored if explicit_file else None, authored)
        return grep_answer(outcome, request, authored, canonical, notice)
    raise AddressError(ErrorKind.INTERNAL, authored, f"{request.operation.value} reached the file search")


def _scope_files(scope: Scope) -> Iterator[object]:
    """``(relative-to-scope parts, tree parts, entry)`` of each file in
    scope, with :data:`NEED` where the walk must list more."""
    if scope.walk is None:
        if scope.entry is not None:
            yield (scope.entry.name,), scope.parts, scope.entry
        return
    skip = len(scope.parts)
    for item in scope.walk.files():
        if item is NEED:
            yield NEED
        else:
            parts, entry = item  # type: ignore[misc]
            yield parts[skip:], parts, entry


async def _glob(scopes: list[Scope], pattern: GlobPattern, limit: int, authored: str) -> tuple[list[str], bool]:
    found: list[str] = []
    clock = pattern.clock()
    for scope in scopes:
        files = _scope_files(scope)
        while True:
            # A slow glob always matches in a thread: it must not hold the loop.
            if pattern.slow is not None or (scope.walk is not None and scope.walk.listed > THREAD_ENTRIES * 16):
                outcome = await asyncio.to_thread(_glob_some, files, scope.tree, pattern, limit, found, clock)
            else:
                outcome = _glob_some(files, scope.tree, pattern, limit, found, clock)
            if outcome is NEED:
                assert scope.walk is not None
                await scope.walk.more(authored)
                continue
            if outcome:
                return found, True
            break
    return found, False


def _glob_some(
    files: Iterator[object], tree: Tree, pattern: GlobPattern, limit: int, found: list[str], clock: PatternClock
) -> object:
    """Match files until the walk needs more (NEED), the limit is passed
    (True) or the scope ends (False)."""
    for item in files:
        if item is NEED:
            return NEED
        relative, parts, _entry = item  # type: ignore[misc]
        if pattern.matches(relative, clock):
            if len(found) == limit:
                return True
            found.append(tree.address(parts))
    return False


@dataclass(slots=True)
class GrepOutcome:
    matches: list[GrepMatch] = field(default_factory=list)
    files_searched: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated: bool = False
    #: The operation's matching budget, started by its first search.
    clock: PatternClock | None = None

    def clock_for(self, plan: GrepPlan) -> PatternClock:
        if self.clock is None:
            self.clock = plan.clock()
        return self.clock


async def _grep(
    scopes: list[Scope], plan: GrepPlan, options: GrepOptions, explicit_file: str | None, authored: str
) -> GrepOutcome:
    """Search every text file in scope; an explicit file that is not text
    is an error, a non-text file met in a directory search is skipped.
    The next batch is read while this one is searched."""
    outcome = GrepOutcome()
    budget = InflationBudget()
    glob_clock = None if plan.glob is None else plan.glob.clock()
    size = FIRST_BATCH
    for scope in scopes:
        files = _scope_files(scope)
        batch = await _collect(files, scope, plan, size, authored, glob_clock)
        reading = asyncio.ensure_future(_read_batch(scope, [entry for _a, entry in batch], authored)) if batch else None
        try:
            first = True
            while reading is not None:
                reads = await reading
                reading = None
                size = min(size * 4, MAX_BATCH)
                # The first batch is searched before the next is read: a
                # search that stops within it reads nothing more.
                following = [] if first else await _collect(files, scope, plan, size, authored, glob_clock)
                if following:
                    reading = asyncio.ensure_future(_read_batch(scope, [entry for _a, entry in following], authored))
                bytes_read = sum(len(read) if isinstance(read, bytes) else len(read.data or b"") for read in reads)
                arguments = (batch, reads, plan, options, outcome, budget, explicit_file)
                if bytes_read > THREAD_TEXT:
                    stop = await asyncio.to_thread(_grep_batch, *arguments)
                else:
                    stop = await _grep_batch_on_loop(arguments, plan, outcome, budget)
                if stop:
                    outcome.truncated = True
                    return outcome
                if first:
                    first = False
                    following = await _collect(files, scope, plan, size, authored, glob_clock)
                    if following:
                        reading = asyncio.ensure_future(_read_batch(scope, [entry for _a, entry in following], authored))
                batch = following
        finally:
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(BaseException):
                    await reading
    return outcome


async def _grep_batch_on_loop(arguments: tuple, plan: GrepPlan, outcome: GrepOutcome, budget: InflationBudget) -> bool:
    """Search a small batch on the event loop, unless its pattern takes
    longer than :data:`ON_LOOP_SECONDS`: then what the batch added is undone
    and it is searched again in a thread, so a slow pattern never holds the
    loop (the ``regex`` module releases the GIL while it matches)."""
    clock = outcome.clock_for(plan)
    marks = (len(outcome.matches), outcome.files_searched, len(outcome.skipped), budget.remaining, budget.exhausted)
    clock.cap = time.monotonic() + ON_LOOP_SECONDS
    try:
        return _grep_batch(*arguments)
    except OnLoopCapReached:
        pass
    finally:
        clock.cap = None
    matches, searched, skipped, remaining, exhausted = marks
    del outcome.matches[matches:], outcome.skipped[skipped:]
    outcome.files_searched, budget.remaining, budget.exhausted = searched, remaining, exhausted
    return await asyncio.to_thread(_grep_batch, *arguments)


async def _collect(
    files: Iterator[object], scope: Scope, plan: GrepPlan, size: int, authored: str, glob_clock: PatternClock | None
) -> list[tuple[str, Entry]]:
    """The next ``size`` files of a scope that the Grep glob keeps (a slow
    glob matches in a thread, off the loop)."""
    batch: list[tuple[str, Entry]] = []
    while len(batch) < size:
        item = next(files, None)
        if item is None:
            break
        if item is NEED:
            assert scope.walk is not None
            await scope.walk.more(authored)
            continue
        relative, parts, entry = item  # type: ignore[misc]
        if plan.glob is None:
            kept = True
        elif plan.glob.slow is None:
            kept = plan.glob.matches(relative)
        else:
            kept = await asyncio.to_thread(plan.glob.matches, relative, glob_clock)
        if kept:
            batch.append((scope.tree.address(parts), entry))
    return batch


async def _read_batch(scope: Scope, entries: list[Entry], authored: str) -> list[FileRead | bytes]:
    """The bytes (or the failed read) of each entry, in as many programs as
    the read budget needs."""
    if scope.data is not None:
        return [scope.data]
    target = scope.tree.place.target
    assert target is not None
    directory = scope.directory if scope.walk is None else scope.walk.start
    prefetched = scope.walk.prefetched if scope.walk is not None else {}
    found: dict[str, FileRead] = {entry.physical: prefetched.pop(entry.physical) for entry in entries if entry.physical in prefetched}
    names = [entry.physical for entry in entries if entry.physical not in found]
    reads: list[FileRead] = []
    while len(reads) < len(names):
        op = ReadFiles(directory, names=tuple(names[len(reads) :]), max_bytes=MAX_FILE_BYTES, budget=READ_BUDGET)
        result = (await run_program(target, ControlProgram([op]), authored))[0]
        if not result.ok or not result.value:
            # The searched directory itself went away: its files are unread.
            reads.extend([FileRead(result.status, None, result.reason, result.unsafe, 0)] * (len(names) - len(reads)))
            break
        reads.extend(result.value)
    found.update(zip(names, reads))
    return [found[entry.physical] for entry in entries]


def _grep_batch(
    batch: list[tuple[str, Entry]],
    reads: list[FileRead | bytes],
    plan: GrepPlan,
    options: GrepOptions,
    outcome: GrepOutcome,
    budget: InflationBudget,
    explicit_file: str | None,
) -> bool:
    """Grep one batch; True once the match limit is exceeded. The files are
    decoded first and searched together; a file that cannot be decoded is
    skipped (or its error raised) only if the search gets that far."""
    files: list[tuple[str, list[str]]] = []
    # (files before it, address, its error, whether that error ends the Grep)
    unreadable: list[tuple[int, str, AddressError, bool]] = []
    for (address, entry), read in zip(batch, reads):
        shown = explicit_file or address
        try:
            data = read if isinstance(read, bytes) else _bytes_of(read, shown)
            text = text_of_bytes(data, shown, compressed=entry.compressed, budget=budget)
        except AddressError as error:
            fatal = explicit_file is not None or budget.exhausted
            unreadable.append((len(files), address, error, fatal))
            if fatal:
                break
            continue
        files.append((address, split_lines(text)))
    searched_before = outcome.files_searched
    stop = grep_files(files, plan, options, outcome)
    reached = outcome.files_searched - searched_before  # files whose search ran
    for before, address, error, fatal in unreadable:
        if stop and before >= reached:
            break  # the search stopped before this file
        if fatal:
            raise error
        outcome.skipped.append(address)
    return stop


def grep_lines(address: str, lines: list[str], plan: GrepPlan, options: GrepOptions, outcome: GrepOutcome) -> bool:
    """Append the matches of one projection's lines (virtual text searches
    exactly what Read shows); True once the limit is exceeded."""
    return grep_files([(address, lines)], plan, options, outcome, count=False)


def grep_files(
    files: list[tuple[str, list[str]]], plan: GrepPlan, options: GrepOptions, outcome: GrepOutcome, *, count: bool = True
) -> bool:
    """Append the matches of several files' lines, in order, searched
    together; True once the limit is exceeded. With ``count``, each file up
    to the one where the search stops counts as searched."""
    context = options.context_lines
    counted = -1
    for number, index, column in plan.pattern.first_matches([lines for _a, lines in files], outcome.clock_for(plan)):
        if count:
            outcome.files_searched += number - counted
            counted = number
        if len(outcome.matches) == options.limit:
            return True
        address, lines = files[number]
        line = lines[index]
        start = 0 if len(line) <= PREVIEW_WIDTH else (column // PREVIEW_WIDTH) * PREVIEW_WIDTH
        before = tuple((n + 1, lines[n][:PREVIEW_WIDTH]) for n in range(max(0, index - context), index))
        after = tuple((n + 1, lines[n][:PREVIEW_WIDTH]) for n in range(index + 1, min(len(lines), index + 1 + context)))
        outcome.matches.append(
            GrepMatch(address, index + 1, column + 1, line[start : start + PREVIEW_WIDTH], start, before, after)
        )
    if count:
        outcome.files_searched += len(files) - 1 - counted
    return False


# -- answers -------------------------------------------------------------------


def glob_answer(
    matches: list[str], truncated: bool, request: Request, authored: str, canonical: str, notice: str | None
) -> GlobResult:
    assert isinstance(request.options, GlobOptions)
    parts = [notice] if notice and not matches else []
    if truncated:
        parts.append(f"showing the first {request.options.limit} matches; narrow the pattern or raise limit")
    return GlobResult(authored, canonical, tuple(matches), truncated, "\n".join(parts) or None)


def grep_answer(outcome: GrepOutcome, request: Request, authored: str, canonical: str, notice: str | None) -> GrepResult:
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
