"""Translation between control programs and the plain form the executor
speaks (tuples of strings, bytes and ints; see :mod:`.executor`).

The local target translates in-process; the SSH target translates and sends
the plain form over the wire, so both report exactly the same results.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .clock import Clock
from .errors import (
    ROOT_REPLACED,
    PathAbsentError,
    RootReplacedError,
    TargetError,
    TargetOperationError,
    UnsafePathError,
)
from .executor import ProgramRefused, is_family_member
from .process_group import ProcessGroup, group_state
from .program import (
    CAPTURE_RECORD,
    FILE_SCAN_RECORD,
    Barrier,
    Chain,
    ChainLink,
    ControlProgram,
    CreateExclusive,
    CreateInPlace,
    CreateLinked,
    DirSurvey,
    Entry,
    FileRead,
    FileScan,
    FileStat,
    ListDir,
    ListTree,
    MakeDirs,
    NewestIs,
    Operation,
    OpResult,
    ProgramResult,
    PutEntry,
    Read,
    ReadChain,
    ReadEntry,
    ReadFiles,
    ReadNewest,
    ReadSlice,
    Remove,
    Replace,
    ScanPaths,
    ScanTree,
    Snapshot,
    SnapshotFile,
    StampedCreate,
    StampedCreateInPlace,
    StampedWrite,
    Stat,
    Status,
    SurveyDirs,
    SurveyedDir,
    TreeListing,
    TreeWalk,
    Verify,
    WalkedEntry,
    WalkTree,
    WriteProject,
)

_KINDS: dict[type, str] = {
    cls: cls.__name__
    for cls in (
        Read,
        ReadNewest,
        ReadChain,
        SurveyDirs,
        Verify,
        NewestIs,
        Stat,
        ListDir,
        CreateExclusive,
        CreateInPlace,
        CreateLinked,
        StampedCreate,
        StampedCreateInPlace,
        Replace,
        WriteProject,
        Remove,
        MakeDirs,
        Clock,
        Barrier,
        ProcessGroup,
        WalkTree,
        ListTree,
        ReadFiles,
        ScanTree,
        ScanPaths,
        SnapshotFile,
        ReadSlice,
        ReadEntry,
        PutEntry,
    )
}
_STATUSES = {status.value: status for status in Status}
_OK = Status.OK
_CAPTURE_RECORD = struct.Struct(CAPTURE_RECORD)

PlainOperation = tuple[str, str, bool, object, bool]


def plain_operation(op: Operation) -> PlainOperation:
    # An operation class the executor does not know travels under its own
    # name and comes back "failed: unsupported operation".
    kind = _KINDS.get(type(op), f"unsupported {type(op).__name__}")
    if isinstance(op, CreateLinked):
        argument: object = [op.data, op.source]
    elif isinstance(op, (CreateExclusive, Replace, WriteProject)):
        argument = op.data
    elif isinstance(op, Verify):
        argument = op.expected
    elif isinstance(op, StampedWrite):
        argument = list(op.plain_parts())
    elif isinstance(op, ReadNewest):
        argument = [op.prefix, op.digits, op.suffix]
        if op.max_bytes is not None:
            argument.append(op.max_bytes)
    elif isinstance(op, NewestIs):
        argument = [op.prefix, op.digits, op.suffix, op.name]
    elif isinstance(op, ReadChain):
        argument = [op.prefix, op.digits, op.suffix, [[list(hop.keys), hop.base] for hop in op.hops]]
    elif isinstance(op, SurveyDirs):
        argument = [
            None if op.names is None else list(op.names),
            op.after,
            op.limit,
            op.budget,
            [[c.directory, c.prefix, c.digits, c.suffix, [[list(h.keys), h.base] for h in c.hops]] for c in op.chains],
        ]
    elif isinstance(op, WalkTree):
        argument = [op.limit, op.depth]
    elif isinstance(op, ListTree):
        argument = [op.limit, op.depth, list(op.resume)]
        if op.read_first:
            argument += [op.read_first, op.read_max_bytes, op.read_budget]
    elif isinstance(op, ReadFiles):
        argument = [list(op.names), op.max_bytes, op.budget]
    elif isinstance(op, ScanTree):
        argument = [list(op.skip_names), list(op.skip_paths), list(op.descend), op.limit, op.racy_ns]
        if isinstance(op, ScanPaths):
            argument.append(list(op.paths))
        if op.directories_too or op.capture_pack is not None:
            argument.append(op.directories_too)
        if op.capture_pack is not None:
            argument.append([op.capture_store, op.capture_bytes, op.capture_pack])
    elif isinstance(op, SnapshotFile):
        argument = [op.store, op.max_bytes] + ([op.pack, op.known] if op.pack is not None else [])
    elif isinstance(op, ReadSlice):
        argument = [op.offset, op.size]
    elif isinstance(op, ReadEntry):
        argument = op.max_bytes
    elif isinstance(op, ProcessGroup):
        argument = [op.pgid, op.kill, op.boot_id]
    elif isinstance(op, PutEntry):
        argument = [None if op.expected is None else op.expected.plain(), None if op.wanted is None else op.wanted.plain()]
    else:
        argument = None
    return (kind, op.path, op.optional, argument, op.deferred)


def plain_operations(program: ControlProgram) -> list[PlainOperation]:
    return [plain_operation(op) for op in program.operations]


def _value(op: Operation, status: Status, value: object) -> object:
    kind = type(op)
    if kind is ReadEntry or kind is PutEntry:
        return plain_entry(value) if value is not None else value
    if kind is NewestIs:
        return _newest_name(op, status, value)  # type: ignore[arg-type]
    if status is not Status.OK:
        return value
    decode = _DECODERS.get(kind)
    return value if decode is None else decode(op, value)


def _stat_value(_op: Operation, value: object) -> FileStat:
    kind, size, mtime, *change = value  # type: ignore[misc]
    return FileStat(str(kind), int(size), int(mtime), *(int(part) for part in change))


def _newest_value(op: ReadNewest, value: object) -> tuple[str, bytes]:
    name, data = value  # type: ignore[misc]
    data = _bytes(data)
    if op.max_bytes is not None and len(data) > op.max_bytes:
        raise ValueError("a read of the newest member answered more bytes than it was asked for")
    return (_text(name), data)


def _newest_name(op: NewestIs, status: Status, value: object) -> str | None:
    """A :class:`NewestIs` value: the name it expected when ok, else a
    member of its family or None (no member)."""
    if status is Status.OK:
        if value != op.name:
            raise ValueError("a newest-member check found what it expected, yet answered another name")
        return op.name
    if status is not Status.MISMATCH:
        if value is not None:
            raise ValueError(f"a newest-member check of status {status.value!r} carried a value")
        return None
    if value == op.name or (value is not None and not is_family_member(value, op.prefix, op.digits, op.suffix)):
        raise ValueError("a newest-member mismatch answered what it expected, or a name outside its family")
    return value  # type: ignore[return-value]


def _names_value(_op: object, value: object) -> tuple[str, ...]:
    names = tuple(value)  # type: ignore[arg-type]
    for name in names:
        if type(name) is not str:
            raise ValueError(f"expected a name, got {type(name).__name__}")
    return names


#: How an ok value of each operation class is rebuilt (one look-up per
#: result rather than a chain of isinstance tests; the classes are final).
_DECODERS = {
    Stat: _stat_value,
    ListDir: _names_value,
    ReadNewest: _newest_value,
    Read: lambda _op, value: _bytes(value),
    ReadSlice: lambda _op, value: _bytes(value),
    WalkTree: lambda _op, value: _tree_walk(value),
    ListTree: lambda op, value: _tree_listing(op, value),
    ReadFiles: lambda op, value: _file_reads(op, value),
    ReadChain: lambda op, value: _chain(len(op.hops), value),
    SurveyDirs: lambda op, value: _survey(op, value),
    ScanTree: lambda op, value: _file_scan(op, value),
    ScanPaths: lambda op, value: _file_scan(op, value),
    ProcessGroup: lambda _op, value: group_state(value),
    SnapshotFile: lambda op, value: _snapshot(op, value),
}


def plain_entry(value: object) -> Entry:
    """An executor's ``[kind, mode, data, size]``, refused unless it has
    that shape."""
    kind, mode, data, size = value  # type: ignore[misc]
    if kind not in (Entry.FILE, Entry.DIRECTORY, Entry.SYMLINK):
        raise ValueError(f"an entry of kind {kind!r}")
    if mode is not None and (isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777):
        raise ValueError("an entry's mode is permission bits")
    if data is not None and not isinstance(data, (bytes, bytearray)):
        raise ValueError("an entry's data is bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("an entry's size is a whole number")
    return Entry(kind, mode, None if data is None else bytes(data), size)


def _file_scan(op: ScanTree, value: object) -> FileScan:
    """The answer of a :class:`ScanTree`, refused unless it has its shape:
    one facts record per NUL-terminated name, ``(path, reason)`` pairs, path
    strings, a flag and a clock reading (and, capturing, one capture record
    per entry). (The paths themselves are checked as any operation path
    is, when a later operation names one.)"""
    names, facts, unwalked, racy, truncated, started, *extra = value  # type: ignore[misc]
    if op.capture_pack is not None and len(extra) not in (1, 3):
        raise ValueError("a capturing tree scan answers its captures last")
    captured = extra.pop() if op.capture_pack is not None else None
    captures, pack_bytes = None, 0
    if captured is not None:
        pack_bytes, captures = captured  # type: ignore[misc]
        if not isinstance(captures, (bytes, bytearray)) or len(captures) != len(facts) // FILE_SCAN_RECORD * _CAPTURE_RECORD.size:
            raise ValueError("a tree scan's captures do not match its entries")
        if isinstance(pack_bytes, bool) or not isinstance(pack_bytes, int) or pack_bytes < 0:
            raise ValueError("a tree scan's pack size is a whole number")
        captures = bytes(captures)
    if len(extra) not in (0, 2):
        raise ValueError("a tree scan answers six or eight parts (and its captures when asked)")
    if not isinstance(names, str) or not isinstance(facts, (bytes, bytearray)):
        raise ValueError("a tree scan's names are text and its facts bytes")
    if len(facts) != names.count("\0") * FILE_SCAN_RECORD or (names and not names.endswith("\0")):
        raise ValueError("a tree scan's facts do not match its names")
    pairs = tuple((_text(path), _text(reason)) for path, reason in unwalked)  # type: ignore[union-attr]
    if not isinstance(truncated, bool) or isinstance(started, bool) or not isinstance(started, int):
        raise ValueError("a tree scan's flag or clock is malformed")
    lists = tuple(tuple(_text(path) for path in part) for part in extra)  # type: ignore[union-attr]
    return FileScan(
        names, bytes(facts), pairs, tuple(_text(path) for path in racy), truncated, started, *lists,  # type: ignore[union-attr]
        captures=captures, pack_bytes=pack_bytes,  # type: ignore[arg-type]
    )


def _tree_listing(op: ListTree, value: object) -> TreeListing:
    """The answer of a :class:`ListTree`, refused unless every record is a
    directory path and a text of names, and it read no more files than
    asked."""
    records, pending, *read = value  # type: ignore[misc]
    out = tuple((_text(directory), _text(names)) for directory, names in records)  # type: ignore[union-attr]
    files = read[0] if read else []
    if len(files) > op.read_first:
        raise ValueError("a tree listing read more files than it was asked to")
    reads = _reads([item[1:] for item in files])
    named = tuple((_text(item[0]), found) for item, found in zip(files, reads))
    return TreeListing(out, tuple(_text(directory) for directory in pending), named)  # type: ignore[union-attr]


def _file_reads(op: ReadFiles, value: object) -> tuple[FileRead, ...]:
    """The answer of a :class:`ReadFiles`: at most one result per name,
    bytes only with an ok status."""
    if not isinstance(value, (list, tuple)) or len(value) > len(op.names):
        raise ValueError("a batch read answered more files than it named")
    return _reads(value)


def _reads(value: object) -> tuple[FileRead, ...]:
    out: list[FileRead] = []
    for status_text, data, reason, unsafe, size in value:  # type: ignore[union-attr]
        status = _STATUSES.get(status_text)  # type: ignore[arg-type]
        if status is None or status is Status.SKIPPED:
            raise ValueError(f"a batch read's file of status {status_text!r}")
        if data is not None and (status is not Status.OK or not isinstance(data, (bytes, bytearray))):
            raise ValueError("a batch read carried bytes it did not read")
        if reason is not None and not isinstance(reason, str):
            raise ValueError("a batch read's reason is text")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError("a batch read's size is a whole number")
        out.append(FileRead(status, None if data is None else bytes(data), reason, bool(unsafe), size))
    return tuple(out)


def _snapshot(op: SnapshotFile, value: object) -> Snapshot:
    digest, size, mtime, ctime, inode, written, *where = value  # type: ignore[misc]
    offset = where[0] if where else None
    packed = op.pack is not None and written
    if (offset is not None) != packed or len(where) > 1:
        raise ValueError("a snapshot answers an offset when it appended to its pack, and only then")
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0):
        raise ValueError("a snapshot's offset is a whole number")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64 and not digest.strip("0123456789abcdef")):
        raise ValueError("a snapshot's digest is 64 hex digits")
    numbers = (size, mtime, ctime, inode)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers) or not isinstance(written, bool):
        raise ValueError("a snapshot's facts are whole numbers")
    return Snapshot(digest, size, mtime, ctime, inode, written, offset)


def _chain(hops: int, value: object) -> Chain:
    """The answer of a :class:`ReadChain` of ``hops`` hops, refused unless
    it has its shape: member names, then at most one link per file the
    chain can read, each after an ok one, with bytes when ok and a reason
    otherwise."""
    names, links = value  # type: ignore[misc]
    names = _names_value(None, names)
    if len(links) > 1 + hops:
        raise ValueError("the chain's names or links do not fit the operation")
    out: list[ChainLink] = []
    failed = False
    for path, status_text, payload, unsafe in links:
        if status_text == "ok" and type(payload) is bytes and type(path) is str and not failed:
            # The usual link, as the checks below would take it (a listing
            # reads three a session).
            out.append(ChainLink(path, _OK, payload))
            continue
        status = _STATUSES.get(status_text)  # type: ignore[arg-type]
        if status is None or status is Status.SKIPPED or not isinstance(path, str):
            raise ValueError(f"a chain link of status {status_text!r}")
        if failed:
            raise ValueError("a chain goes on after a link that failed")
        if status is Status.OK and isinstance(payload, (bytes, bytearray)):
            out.append(ChainLink(path, status, bytes(payload)))
        elif status is not Status.OK and isinstance(payload, str):
            out.append(ChainLink(path, status, None, payload, bool(unsafe)))
            failed = True
        else:
            raise ValueError(f"a chain link of status {status_text!r} carrying {type(payload).__name__}")
    return Chain(names, tuple(out))


def _survey(op: SurveyDirs, value: object) -> DirSurvey:
    """The answer of a :class:`SurveyDirs`, refused unless it has its
    shape: at most ``limit`` entries (the names asked for, when it named
    them), each a stat, a listing and one chain per chain asked for."""
    entries, complete = value  # type: ignore[misc]
    if not isinstance(complete, bool) or len(entries) > op.limit:  # type: ignore[arg-type]
        raise ValueError("a survey answered more entries than its limit")
    hops = [len(chain.hops) for chain in op.chains]
    width = len(hops)
    named = op.names
    out: list[SurveyedDir] = []
    for name, stat, listing, chains in entries:  # type: ignore[union-attr]
        if type(name) is not str or len(chains) != width:
            raise ValueError("a survey entry does not fit the operation")
        if named is not None and (len(out) >= len(named) or named[len(out)] != name):
            raise ValueError(f"a survey answered entry {name!r}, which it did not name")
        read = []
        for index in range(width):
            read.append(_nested(chains[index], _chain, hops[index]))
        out.append(SurveyedDir(name, _nested(stat, _stat_value, None), _nested(listing, _names_value, None), tuple(read)))
    return DirSurvey(tuple(out), complete)


def _nested(plain: object, decode, argument) -> OpResult:  # type: ignore[no-untyped-def]
    """An operation result nested in a value, its ok value rebuilt by
    ``decode(argument, value)``."""
    status_text, value, reason, unsafe = plain  # type: ignore[misc]
    if status_text == "ok":
        return OpResult(Status.OK, decode(argument, value), reason, bool(unsafe))
    status = _STATUSES.get(status_text)  # type: ignore[arg-type]
    if status is None or status is Status.SKIPPED or (reason is not None and type(reason) is not str):
        raise ValueError(f"a nested result of status {status_text!r}")
    return OpResult(status, None, reason, bool(unsafe))


def _bytes(value: object) -> bytes:
    # bytes(n) of an integer would be n zero bytes: a malformed answer must
    # be refused, never read as content.
    if not isinstance(value, (bytes, bytearray)):
        raise ValueError(f"expected bytes, got {type(value).__name__}")
    return bytes(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a name, got {type(value).__name__}")
    return value


def _tree_walk(value: object) -> TreeWalk:
    entries, truncated = value  # type: ignore[misc]
    walked = tuple(WalkedEntry(str(path), str(kind), int(size), int(mtime)) for path, kind, size, mtime in entries)
    return TreeWalk(walked, bool(truncated))


def program_result(program: ControlProgram, results: Sequence[Sequence[object]], stopped_at: int | None) -> ProgramResult:
    """Rebuild a :class:`ProgramResult` from plain results, checking that
    they answer this program (one result per operation, known statuses)."""
    ops = program.operations
    if len(results) != len(ops):
        raise ValueError(f"{len(results)} results for a program of {len(ops)} operations")
    if stopped_at is not None and not 0 <= stopped_at < len(ops):
        raise ValueError(f"stopped at operation {stopped_at} of {len(ops)}")
    out: list[OpResult] = []
    for op, (status_text, value, reason, unsafe) in zip(ops, results):
        status = _STATUSES.get(status_text)  # type: ignore[arg-type]
        if status is None:
            raise ValueError(f"unknown status {status_text!r}")
        out.append(OpResult(status, _value(op, status, value), reason, bool(unsafe)))  # type: ignore[arg-type]
    return ProgramResult(tuple(out), stopped_at)


def refusal_error(refusal: ProgramRefused) -> TargetError:
    """The exception a program-level refusal (root, lock directory) raises."""
    return refusal_error_of(refusal.kind, refusal.path, refusal.reason)


def refusal_error_of(kind: str, path: str, reason: str) -> TargetError:
    if kind == "absent":
        return PathAbsentError(path, reason)
    if kind == "unsafe":
        if ROOT_REPLACED in reason:
            return RootReplacedError(path, reason)
        return UnsafePathError(path, reason)
    return TargetOperationError(path, reason)
