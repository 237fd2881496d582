"""The file-state record as bytes: what :class:`~.file_state.FileStateRecord`
keeps on the target between processes (``<blob_dir>/index``), so that a new
process -- every ``mevedel prompt`` is one -- starts from the facts and
digests the last one left instead of reading every file again (git's index
is the same idea). Pure: bytes in, state out.

Layout: the magic line, then a SHA-256 of the body, then the body (msgpack):
the format version, the size limit and blob directory it was made with (a
record made under another limit is not this one's), and the state itself,
packed for speed -- every recorded path NUL-separated (UTF-8 with
``surrogateescape``: a name that is no UTF-8 keeps its bytes), their facts
in the scan's own packing, a digest of 32 bytes per path (zeros and a
``captured`` flag of 0 for a path whose content is not kept), then the
small maps (unreadable files, link targets, racy paths, directories not
walked), and what the record derives from the facts (entries below each
directory, those tracked, the known paths: a delta carries them whole),
so that a load need not derive them again from every path.

A save rewrites the whole index only now and then: in between it writes a
*delta* (``<blob_dir>/index.delta``, replaced each time), the entries of
the paths changed since the whole one and the paths gone, naming the whole
index it applies to by its checksum -- so a command's save costs what it
changed, not the workspace. A delta whose whole index is not the one on
disk (a crash between the two writes) is ignored: the whole index alone is
an earlier state, and any earlier state is a sound start (a file whose
facts still match it still holds those bytes).

Anything that does not decode -- torn by a crash, another version, another
limit, bytes that fail their checksum -- is not an error: the caller starts
from nothing, as before the index existed, and reads every file again.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import operator
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec

from ..targets import SCAN_FACTS
from .file_state_table import RecordTable

MAGIC = b"mevedel file-state index\n"
FORMAT_VERSION = 2
_FACTS = struct.Struct(SCAN_FACTS)
_DIGEST = 32


@dataclass
class RecordState:
    """What a record holds, as :class:`~.file_state.FileStateRecord` keeps it."""

    #: path -> its facts (packed as a walk packs them, :data:`SCAN_FACTS`),
    #: digest and blob location, in columns.
    table: RecordTable
    unreadable: dict[str, str]
    links: dict[str, bytes]
    racy: set[str]
    unwalked: dict[str, str]
    #: pack -> its bytes.
    pack_sizes: dict[str, int]
    #: A delta: the checksum of the whole index it applies to, and the
    #: paths gone since it (empty for a whole index; None for a whole one
    #: moved on by a delta).
    base: bytes = b""
    removed: set[str] | None = field(default_factory=set)
    #: What the record derives from the facts, kept with them so that a
    #: new process need not derive it again from every path (a third of
    #: a load's time): directory -> recorded entries below it, the same
    #: counting only the tracked ones, and the paths flagged known. None:
    #: not kept (an index of an earlier version): derived at load.
    holding: dict[str, int] | None = None
    tracked: dict[str, int] | None = None
    known: set[str] | None = None
    #: Encoding a delta: the paths changed since the whole index (the
    #: table is the whole record's).
    changed: list[str] | None = None
    #: Encoding a whole index: its paths in this order (every recorded
    #: path once; None: the table's), the last walk's, so that the next
    #: process's walk lines up with the rows it loads
    #: (:meth:`~.file_state_table.RecordTable.walk_facts`).
    order: list[str] | None = None


class _Body(msgspec.Struct, array_like=True):
    version: int
    max_file_bytes: int
    blob_dir: str
    # The columns are views of the index read (decoded without a copy: 10
    # MB at 100,000 files, fresh memory a loaded machine is slow to give);
    # whatever keeps them copies them.
    paths: memoryview
    facts: memoryview
    captured: memoryview
    digests: memoryview
    unreadable: list[tuple[bytes, bytes]]
    links: list[tuple[bytes, bytes]]
    racy: list[bytes]
    unwalked: list[tuple[bytes, bytes]]
    packs: list[str]
    pack_sizes: list[int]
    #: This machine's byte order: the two arrays below are in it.
    byteorder: str
    #: Per path: 1 + the index of its blob's pack (0: none, or loose), and
    #: the offset there (arrays of unsigned 32 and 64 bits).
    pack_numbers: memoryview
    offsets: memoryview
    base: bytes
    removed: list[bytes]
    #: The derived counts and known paths of the whole state (a delta's
    #: too: they are small), or absent.
    holding: list[tuple[bytes, int]] | None = None
    tracked: list[tuple[bytes, int]] | None = None
    known: list[bytes] | None = None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection while a record's entries are built or compared
    (a dict of 100,000 paths, their facts and digests: half a million
    objects, none in a cycle): each collection the allocations would set
    off walks every object the process holds, a third of the decode's
    time and more in a process that has imported the agent SDKs. Only
    around code that does not await: nothing else runs meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _name(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _text(name: bytes | memoryview) -> str:
    return str(name, "utf-8", "surrogateescape")


def _pairs(texts: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(_name(key), _name(value)) for key, value in texts.items()]


def _texts(pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {_text(key): _text(value) for key, value in pairs}


def index_checksum(data: bytes) -> bytes:
    """The checksum an encoded index carries (what a delta names)."""
    return data[len(MAGIC) : len(MAGIC) + _DIGEST]


def encode_index(state: RecordState, *, max_file_bytes: int, blob_dir: str) -> bytes:
    """A whole index of ``state``, or a delta when ``state.base`` is set
    (of its ``changed`` paths)."""
    packs = sorted(state.pack_sizes)
    paths, facts, captured, digests, numbers, offsets = state.table.columns(packs, state.changed if state.base else state.order)
    body = _Body(
        version=FORMAT_VERSION,
        max_file_bytes=max_file_bytes,
        blob_dir=blob_dir,
        # One join and one encoding for all paths: 100,000 calls cost a
        # tenth of a second.
        paths=memoryview(_name("\0".join(paths))),
        facts=memoryview(facts),
        captured=memoryview(captured),
        digests=memoryview(digests),
        unreadable=_pairs(state.unreadable),
        links=[(_name(path), target) for path, target in state.links.items()],
        racy=sorted(_name(path) for path in state.racy),
        unwalked=_pairs(state.unwalked),
        packs=packs,
        pack_sizes=[state.pack_sizes[pack] for pack in packs],
        byteorder=sys.byteorder,
        pack_numbers=memoryview(numbers),
        offsets=memoryview(offsets),
        base=state.base,
        removed=sorted(_name(path) for path in state.removed),
        holding=None if state.holding is None else [(_name(path), count) for path, count in state.holding.items()],
        tracked=None if state.tracked is None else [(_name(path), count) for path, count in state.tracked.items()],
        known=None if state.known is None else sorted(_name(path) for path in state.known),
    )
    raw = msgspec.msgpack.encode(body)
    return MAGIC + hashlib.sha256(raw).digest() + raw


def decode_index(data: bytes, *, max_file_bytes: int, blob_dir: str) -> RecordState | None:
    """The state ``data`` holds, or None when it is not a sound index made
    for this size limit and blob directory."""
    head = len(MAGIC)
    if not data.startswith(MAGIC) or len(data) < head + _DIGEST:
        return None
    raw = memoryview(data)[head + _DIGEST :]
    if hashlib.sha256(raw).digest() != data[head : head + _DIGEST]:
        return None
    try:
        body = msgspec.msgpack.decode(raw, type=_Body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if body.version != FORMAT_VERSION or body.max_file_bytes != max_file_bytes or body.blob_dir != blob_dir:
        return None
    if body.byteorder != sys.byteorder:
        return None
    joined = _text(body.paths)
    paths = joined.split("\0") if body.paths else []
    count = len(paths)
    if len(body.facts) != count * _FACTS.size or len(body.captured) != count or len(body.digests) != count * _DIGEST:
        return None
    numbers, offsets = array("I"), array("Q")
    numbers.frombytes(body.pack_numbers[: len(body.pack_numbers) // numbers.itemsize * numbers.itemsize])
    offsets.frombytes(body.offsets[: len(body.offsets) // offsets.itemsize * offsets.itemsize])
    if len(numbers) != count or len(offsets) != count or len(body.pack_sizes) != len(body.packs):
        return None
    if len(body.pack_numbers) != count * numbers.itemsize or len(body.offsets) != count * offsets.itemsize:
        return None
    if body.base and len(body.base) != _DIGEST or body.removed and not body.base:
        return None
    if numbers and max(numbers) > len(body.packs):
        return None
    if any(itertools.compress(numbers, map(operator.not_, body.captured))):  # a blob located for a path not captured
        return None
    table = RecordTable(paths, body.facts, body.digests, body.captured, numbers, offsets, body.packs, joined=joined)
    if len(table) != count:
        return None  # a path twice
    unreadable = _texts(body.unreadable)
    links = {_text(path): target for path, target in body.links}
    racy = {_text(path) for path in body.racy}
    derived = (body.holding, body.tracked, body.known)
    if any(part is None for part in derived):
        holding = tracked = known = None
    else:
        holding = {_text(path): count for path, count in body.holding}
        tracked = {_text(path): count for path, count in body.tracked}
        known = {_text(path) for path in body.known}
        if min(holding.values(), default=1) < 1 or min(tracked.values(), default=1) < 1:
            return None
    state = RecordState(table, unreadable, links, racy, _texts(body.unwalked), dict(zip(body.packs, body.pack_sizes)),
                        body.base, {_text(name) for name in body.removed}, holding=holding, tracked=tracked, known=known)
    return state if body.base or _consistent(state) else None


def _consistent(state: RecordState) -> bool:
    rows = state.table.rows
    if state.known is not None and not state.known <= rows.keys():
        return False
    captured = state.table.captured
    return state.unreadable.keys() <= rows.keys() and state.links.keys() <= rows.keys() and all(captured[rows.get(path, 0)] for path in state.racy)


def apply_delta(whole: RecordState, checksum: bytes, delta: RecordState | None) -> RecordState:
    """``whole`` (whose index carried ``checksum``) moved on by ``delta``
    (in place: ``whole`` is given up); ``whole`` alone when the delta is for
    another whole index or unsound. A blob in a pack gone since lies
    nowhere (read back as missing)."""
    if delta is None or delta.base != checksum:
        return whole
    table, changes = whole.table, delta.table
    # The delta's few paths looked up (no set of the whole index's made).
    if not (delta.unreadable.keys() | delta.links.keys() | delta.racy) - changes.rows.keys() <= table.rows.keys():
        return whole
    for path in delta.removed:
        if path in table:
            table.drop(path)
    for path in changes:
        # Where the delta says, not where another path's copy lies.
        table.set(path, changes.facts_of(path), changes.digest_of(path), changes.location_of(path), share=False)  # type: ignore[arg-type]
    table.forget_packs(set(delta.pack_sizes))
    # ``removed`` None: a state moved on by a delta.
    state = RecordState(table, delta.unreadable, delta.links, delta.racy, delta.unwalked, delta.pack_sizes, b"", None,
                        holding=delta.holding, tracked=delta.tracked, known=delta.known)
    return state if _consistent(state) else RecordState(RecordTable(), {}, {}, set(), {}, {})
