"""Glob and Grep over walked trees: Glob matches names as the walk lists
them (and stops listing at its limit); Grep reads the walked files in
batches (one program each), searching one batch while the next is read,
with Python ``re`` over the Read projection's lines, so results, limits,
skipped-file notices and previews are the same on every target. The first
listing chunk already reads the first :data:`~.tree.FIRST_BATCH` (32)
files, and they are searched before anything more is read, so a Grep that
stops there costs one program."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...addresses import AddressError, ErrorKind, Operation
from ...targets import (
    ControlProgram,
    FileRead,
    ReadFiles,
)
from .attempt import Request
from .counts import counted
from .glob_pattern import GlobPattern
from .options import GlobOptions, GrepOptions, GrepPlan
from .pattern_clock import ON_LOOP_SECONDS, OnLoopCapReached, PatternClock
from .projection import split_lines
from .results import GlobResult, GrepMatch, GrepResult
from .runners import bytes_of, run_program
from .text_source import MAX_FILE_BYTES, InflationBudget, text_of_bytes
from .tree import (
    FIRST_BATCH,
    MAX_BATCH,
    NEED,
    READ_BUDGET,
    THREAD_ENTRIES,
    THREAD_TEXT,
    Entry,
    Tree,
    Walk,
)

#: Widest preview a Grep match shows; a longer line is cut to the Read page
#: (``char_offset``) that contains the match.
PREVIEW_WIDTH = 2000


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
            data = read if isinstance(read, bytes) else bytes_of(read, shown)
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


def glob_answer(
    matches: list[str], truncated: bool, request: Request, authored: str, canonical: str, notice: str | None
) -> GlobResult:
    assert isinstance(request.options, GlobOptions)
    parts = [notice] if notice and not matches else []
    if truncated:
        parts.append(limit_notice(request.options.limit, "match", "matches"))
    return GlobResult(authored, canonical, tuple(matches), truncated, "\n".join(parts) or None)


def limit_notice(limit: int, one: str, many: str) -> str:
    """The notice of a listing cut at its ``limit`` (``one`` match or
    ``many`` of them: a count of 1 reads as one)."""
    shown = f"the first {one}" if limit == 1 else f"the first {limit} {many}"
    return f"showing {shown}; narrow the pattern or raise limit"


def grep_answer(outcome: GrepOutcome, request: Request, authored: str, canonical: str, notice: str | None) -> GrepResult:
    assert isinstance(request.options, GrepOptions)
    parts = [notice] if notice and not outcome.matches else []
    if outcome.skipped:
        parts.append(f"{counted(len(outcome.skipped), 'non-text file')} skipped: " + ", ".join(outcome.skipped[:20]))
    if outcome.truncated:
        parts.append(limit_notice(request.options.limit, "matching line", "matching lines"))
    return GrepResult(
        authored,
        canonical,
        tuple(outcome.matches),
        outcome.files_searched,
        outcome.truncated,
        "\n".join(parts) or None,
    )
