"""Which versions an item keeps, and the one program that publishes one.

A version is one file, ``versions/NNNNNNNNNN.version``: a magic line, the
version index as of that version (one JSON line, this version its last
entry), then the primary file's bytes. The newest whole version file is the
item's index; nothing is renamed into place. A publication creates the next
file under its number (``StampedCreateInPlace``, its entry's time the new
file's own) and flushes it with its directory in one barrier round -- where
a separate index renamed after its blob took two, the second after the
first. Until that flush a power loss (or a writer killed mid-write) can
leave the newest file torn; a reader passes over a newest file that is not
whole (its header does not decode, its size or digest does not match) to
the one before it, which its successor's publisher read whole under the
lock. Only the newest can be torn: a publication is proved against the
newest member's *name* (``NewestIs``) under the store lock, so it never
builds on a file it did not read, and a torn newest is skipped over (the
next number past it) and dropped.

Publication compares under the store lock: the index it builds on came
from the newest member it read, and ``NewestIs`` proves that member is
still the newest before the new file is written. Two publishers therefore
never take the same number; the loser reads again and publishes the next
one. Files the new index drops are removed after it, by a program of their
own (:func:`drop_versions`) that the publisher need not wait for, without a
flush: a removal a power loss undoes leaves a file no index names, which is
never read (numbers only grow) and which the next save that reads the item
removes.

A store made before version files kept ``versions.json`` and bare
``versions/NNNNNNNNNN`` blobs. They are read while no version file exists;
the first publication writes a version file whose index names the old
blobs it keeps (read by either name), and ``versions.json`` goes with the
first removal after it.
"""

from __future__ import annotations

import hashlib
import logging

import msgspec

from ..targets import (
    Barrier,
    ClockStamp,
    ControlProgram,
    CreateInPlace,
    ListDir,
    MakeDirs,
    NewestIs,
    Operation,
    OpResult,
    Read,
    ReadNewest,
    Remove,
    StampedCreateInPlace,
    Stat,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from .errors import ArtifactError, missing
from .layout import LOCK_DIR, VERSION_DIGITS, VERSION_FAMILY, ItemPaths
from .records import (
    RecordRefused,
    VersionEntry,
    VersionIndex,
    VersionReason,
    decode_record,
    encode,
    load,
)

DEFAULT_MAX_VERSIONS = 20
DEFAULT_MAX_VERSION_BYTES = 64 * 1024 * 1024
_ATTEMPTS = 16
_log = logging.getLogger(__name__)
#: A version file's first line.
MAGIC = b"MEVEDEL-VERSION 1\n"
#: At most this many version files not whole are passed over to the whole
#: one before them (each was a publication a crash cut short).
_MOST_TORN = 32


def retained(versions: list[VersionEntry], max_count: int, max_bytes: int) -> list[VersionEntry]:
    """The newest versions within both caps, oldest first; the latest is
    always kept, even alone over the byte cap."""
    kept: list[VersionEntry] = []
    total = 0
    for entry in reversed(versions):
        if kept and (len(kept) >= max_count or total + entry.size > max_bytes):
            break
        kept.append(entry)
        total += entry.size
    kept.reverse()
    return kept


def load_index(raw: bytes | None, item_id: str) -> VersionIndex:
    """A legacy ``versions.json``'s index (empty when absent)."""
    return load(VersionIndex, raw, item_id, "version index")


# Version files --------------------------------------------------------------


def version_file_bytes(index: VersionIndex, data: bytes) -> bytes:
    """A version file whose index (its last entry the version of ``data``)
    is ``index``."""
    return b"".join((MAGIC, _index_line(index), data))


def _index_line(index: VersionIndex) -> bytes:
    """The index as a version file's second line (the codec's one line)."""
    raw = encode(index)
    return raw if raw.endswith(b"\n") else raw + b"\n"


#: The new entry's time as encoded before the target stamps it: no stored
#: time is negative, and outside a string a quote is a key's.
_UNSTAMPED = b'"at":-1'


def _stamped_parts(index: VersionIndex, data: bytes) -> tuple[bytes | ClockStamp, ...]:
    """A version file's content with its newest entry's ``at`` (-1 until
    then) a clock stamp: the target writes the new file's own time."""
    raw = _index_line(index)
    cut = raw.rindex(_UNSTAMPED) + len(_UNSTAMPED) - 2
    return (MAGIC + raw[:cut], ClockStamp(0), raw[cut + 2 :] + data)


def member_number(name: str) -> int | None:
    """N of a version file's name ``NNNNNNNNNN.version`` (None: not one)."""
    digits, suffix = VERSION_FAMILY[1], VERSION_FAMILY[2]
    head = name[:digits]
    if name[digits:] != suffix or len(head) != digits or not (head.isascii() and head.isdigit()):
        return None
    return int(head)


def _blob_number(name: str) -> int | None:
    """N of a legacy blob's name ``NNNNNNNNNN`` (None: not one)."""
    return int(name) if len(name) == VERSION_DIGITS and name.isascii() and name.isdigit() else None


def _header(raw: bytes, number: int) -> tuple[VersionIndex, int] | None:
    """The index a version file ``number`` starts with and where its bytes
    start; None when ``raw`` does not start with a whole header of that
    version."""
    if not raw.startswith(MAGIC):
        return None
    end = raw.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        index = decode_record(VersionIndex, raw[len(MAGIC) : end], "version file")
    except RecordRefused:
        return None
    if not index.versions or index.versions[-1].number != number or index.next_number <= number:
        return None
    return index, end + 1


def _whole_size(index: VersionIndex, start: int) -> int:
    """The size of a whole version file whose header (``index``, the bytes
    starting at ``start``) was read."""
    return start + index.versions[-1].size


def sized_whole(stat: OpResult, size: int) -> bool:
    """Whether a ``Stat`` of a version file whose header was read shows the
    size a whole one has (a file a crash cut short does not)."""
    return stat.ok and stat.value.kind == "file" and stat.value.size == size


def parse_version_file(raw: bytes, number: int) -> tuple[VersionIndex, bytes] | None:
    """``(index, bytes)`` of version file ``number`` when it is whole: its
    header decodes and names it last, and its bytes have the size and digest
    that entry records. None for a file a crash tore (or any other bytes)."""
    head = _header(raw, number)
    if head is None:
        return None
    index, start = head
    entry = index.versions[-1]
    data = raw[start:]
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
        return None
    return index, data


class ListedCount(msgspec.Struct, frozen=True):
    """How many versions an item keeps, from the start of its newest
    version file (:func:`newest_count`)."""

    count: int
    #: The size the whole file must have when only its start was read
    #: (None: the bytes read were all of it, checked to their digest).
    size: int | None = None


def newest_count(name: str, raw: bytes) -> ListedCount | None:
    """How many versions the newest version file ``name`` keeps, from its
    first :data:`HEAD_BYTES` bytes ``raw`` (a listing's bounded read): a
    small file's whole bytes are checked; a longer one's header is, and the
    file's size is left to the caller's ``Stat`` (a file a crash cut short
    fails it). None when the bytes read are not that of a whole version
    file, which :func:`read_index` settles."""
    number = member_number(name)
    if number is None:
        return None
    if len(raw) < HEAD_BYTES:
        parsed = parse_version_file(raw, number)
        return None if parsed is None else ListedCount(len(parsed[0].versions))
    head = _header(raw, number)
    if head is None:
        return None
    index, start = head
    return ListedCount(len(index.versions), _whole_size(index, start))


# Reading --------------------------------------------------------------------


class IndexView(msgspec.Struct, frozen=True):
    """An item's version index as read, and what a publication proves
    against: the newest version file's name (whole or not) or, while there
    is none, the legacy ``versions.json``'s bytes."""

    index: VersionIndex
    #: The newest member of the version files (None: none yet).
    newest: str | None
    #: A legacy store's ``versions.json`` (None: absent or not consulted).
    legacy: bytes | None = None
    #: The versions directory's entries as listed beside the read: files no
    #: index names are found among them.
    names: tuple[str, ...] = ()
    #: The newest file's bytes when they were not whole: torn by a crash, or
    #: read while its publisher was still writing it (reads take no lock).
    #: A publication proves them unchanged under the lock -- only then is
    #: the file a crash's and passed over.
    unwhole: bytes | None = None


#: How much of the newest version file a reader of the index reads: a
#: document's whole; a larger file's header, its size proved by a ``Stat``
#: (one program more, not the previous version's bytes over the wire).
HEAD_BYTES = 64 * 1024


def _view_ops(paths: ItemPaths) -> list[Operation]:
    return [
        ReadNewest(paths.versions_dir, *VERSION_FAMILY, optional=True, max_bytes=HEAD_BYTES),
        Read(paths.versions_index, optional=True),
        ListDir(paths.versions_dir, optional=True),
    ]


async def _view(target: Target, item_id: str, ops: list[Operation], results: list) -> IndexView:
    """The index view from the results of :func:`_view_ops`'s operations,
    reading older version files while the newest is not whole."""
    paths = ItemPaths(item_id)
    for _ in range(_ATTEMPTS):
        view = await _view_once(target, item_id, ops, results)
        if view is not None:
            return view
        # A file older than a newest one not whole was dropped meanwhile:
        # that newest was whole by then, so read again from the top.
        ops = _view_ops(paths)
        results = list(await target.run(ControlProgram(ops)))
    raise ArtifactError("unavailable", item_id, "its versions kept changing while reading them; try again")


async def _view_once(target: Target, item_id: str, ops: list[Operation], results: list) -> IndexView | None:
    newest_op, legacy_op, listing_op = ops
    newest_res, legacy_res, listing_res = results
    names: tuple[str, ...] = ()
    if listing_res.status is not Status.ABSENT:
        raise_for_result(listing_op, listing_res)
        names = tuple(listing_res.value)
    legacy = None
    if legacy_res.status is not Status.ABSENT:
        raise_for_result(legacy_op, legacy_res)
        legacy = legacy_res.value
    if newest_res.status is Status.ABSENT:
        return IndexView(load_index(legacy, item_id), None, legacy, names)
    raise_for_result(newest_op, newest_res)
    newest, raw = newest_res.value
    number = member_number(newest)
    paths = ItemPaths(item_id)
    if number is not None and len(raw) >= HEAD_BYTES:
        # Only its start was read: whole when its header holds and its
        # size is what the header says; else read whole and judged below.
        head = _header(raw, number)
        path = f"{paths.versions_dir}/{newest}"
        stat, read = Stat(path, optional=True), Read(path, optional=True)
        ops_more: list[Operation] = [stat] if head is not None else [read]
        more = (await target.run(ControlProgram(ops_more)))[0]
        if more.status is Status.ABSENT:
            return None  # dropped meanwhile (a newer one is the newest)
        raise_for_result(ops_more[0], more)
        if head is not None:
            index, start = head
            if sized_whole(more, _whole_size(index, start)):
                return IndexView(index, newest, None, names)
            read_res = (await target.run(ControlProgram([read])))[0]
            if read_res.status is Status.ABSENT:
                return None
            raise_for_result(read, read_res)
            raw = read_res.value
        else:
            raw = more.value
    parsed = parse_version_file(raw, number) if number is not None else None
    if parsed is not None:
        return IndexView(parsed[0], newest, None, names)
    _refuse_newer(item_id, newest, raw)
    # Not whole: torn by a crash, or still being written. The newest whole
    # one before it is the index either way (a publication proves which,
    # see ``unwhole``); files between them that are not whole are
    # publications a crash cut short (only the newest is ever being
    # written), which the next save drops. With no whole file at all the
    # item is refused, never taken for an empty history, which the next
    # save would drop every file of.
    older = sorted((n for n in map(member_number, names) if n is not None and number is not None and n < number), reverse=True)
    for passed, candidate in enumerate(older[:_MOST_TORN]):
        op = Read(paths.version_file(candidate), optional=True)
        res = (await target.run(ControlProgram([op])))[0]
        if res.status is Status.ABSENT:
            return None
        raise_for_result(op, res)
        parsed = parse_version_file(res.value, candidate)
        if parsed is not None:
            if passed:
                _log.warning("versions of %s: passed over %d more version files that are not whole", item_id, passed)
            return IndexView(parsed[0], newest, None, names, raw)
        _refuse_newer(item_id, paths.version_file(candidate), res.value)
    if legacy is not None and len(older) < _MOST_TORN:
        # The first version files of a store of the old layout, not whole.
        return IndexView(load_index(legacy, item_id), newest, legacy, names, raw)
    raise ArtifactError(
        "unreadable", item_id,
        f"none of its newest version files ({newest} and {min(len(older), _MOST_TORN)} before it) is whole; "
        "a crash tears only a publication it cut short, so the history was damaged otherwise and is left as it is",
    )


def _refuse_newer(item_id: str, name: str, raw: bytes) -> None:
    """A version file of a later format is refused, not taken for torn."""
    line_end = raw.find(b"\n")
    if raw.startswith(MAGIC[:16]) and line_end > 0 and raw[: line_end + 1] != MAGIC:
        raise ArtifactError(
            "unreadable", item_id,
            f"its version file {name.rsplit('/', 1)[-1]} is of a later format "
            f"({raw[:line_end].decode('ascii', 'replace')!r}); update mevedel to read or save this item",
        )


async def read_index(target: Target, item_id: str) -> IndexView:
    paths = ItemPaths(item_id)
    ops = [Stat(paths.meta), *_view_ops(paths)]
    result = await target.run(ControlProgram(ops))
    if result[0].status is Status.ABSENT:
        raise missing(item_id)
    raise_for_result(ops[0], result[0])
    return await _view(target, item_id, ops[1:], list(result)[1:])


class ForVersion(msgspec.Struct, frozen=True):
    """What saving a version of an item reads (:func:`read_for_version`)."""

    meta_raw: bytes
    #: None: not that item's primary file (any more).
    data: bytes | None
    view: IndexView


async def read_for_version(target: Target, item_id: str, primary: str) -> ForVersion:
    """What saving a version of the item needs, in one program: the item's
    metadata, the bytes of ``primary`` (the primary file's name as the
    caller last knew it: ``None`` when it is not that item's primary file
    any more, which the caller sees in the metadata and asks again) and the
    version index with the files it does not name."""
    paths = ItemPaths(item_id)
    ops: list[Operation] = [Read(paths.meta), Read(paths.file(primary), optional=True), *_view_ops(paths)]
    result = await target.run(ControlProgram(ops))
    if result[0].status is Status.ABSENT:
        raise missing(item_id)
    raise_for_result(ops[0], result[0])
    data = None
    if result[1].status is not Status.ABSENT:
        raise_for_result(ops[1], result[1])
        data = result[1].value
    view = await _view(target, item_id, ops[2:], list(result)[2:])
    return ForVersion(result[0].value, data, view)


async def read_version(target: Target, item_id: str, number: int) -> tuple[VersionEntry, bytes]:
    """Version ``number``'s entry and bytes, in one program (more only past
    a torn newest file)."""
    paths = ItemPaths(item_id)
    ops: list[Operation] = [
        Stat(paths.meta),
        *_view_ops(paths),
        Read(paths.version_file(number), optional=True),
        Read(paths.version_blob(number), optional=True),
    ]
    result = await target.run(ControlProgram(ops))
    if result[0].status is Status.ABSENT:
        raise missing(item_id)
    raise_for_result(ops[0], result[0])
    view = await _view(target, item_id, ops[1:4], list(result)[1:4])
    for entry in view.index.versions:
        if entry.number != number:
            continue
        data = None
        if result[4].status is not Status.ABSENT:
            raise_for_result(ops[4], result[4])
            parsed = parse_version_file(result[4].value, number)
            data = parsed[1] if parsed is not None else None
        elif result[5].status is not Status.ABSENT:
            raise_for_result(ops[5], result[5])
            data = result[5].value
        if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise ArtifactError("unreadable", f"{item_id} version {number}", "its stored bytes do not match their recorded digest")
        return entry, data
    kept = ", ".join(str(v.number) for v in reversed(view.index.versions)) or "none"
    raise ArtifactError("missing-target", f"{item_id} version {number}", f"no such version is kept (kept: {kept})")


# Publishing -----------------------------------------------------------------


class Published(msgspec.Struct, frozen=True):
    entry: VersionEntry
    #: The index as written (the new file's), which a later publication
    #: builds on when the file is still the newest.
    index: VersionIndex
    #: The new file's name.
    newest: str
    #: Versions no index names any more, for :func:`drop_versions`.
    dropped: tuple[int, ...] = ()
    #: The publication moved a legacy store to version files: its
    #: ``versions.json`` goes too.
    legacy_index: bool = False


async def drop_versions(target: Target, item_id: str, numbers: tuple[int, ...], *, legacy_index: bool = False) -> None:
    """Remove the files of versions ``numbers`` of an item (either layout's
    name), which no index names any more (a publication dropped them), and
    ``legacy_index``: the ``versions.json`` a version file replaced -- no
    flush, no answer to wait for: one left behind is removed by a later
    save that reads the item."""
    paths = ItemPaths(item_id)
    ops = [
        Remove(path, optional=True, deferred=True)
        for number in numbers
        for path in (paths.version_file(number), paths.version_blob(number))
    ]
    if legacy_index:
        ops.append(Remove(paths.versions_index, optional=True, deferred=True))
    await target.run(ControlProgram(ops, lock=LOCK_DIR))


class Disproved(msgspec.Struct, frozen=True):
    """A publication's proof did not hold: nothing was written."""

    #: Which of the proofs.
    proof: int
    #: What the file holds instead (None: it is absent).
    actual: bytes | None


def first_version(paths: ItemPaths, entry: VersionEntry, data: bytes) -> Operation:
    """The file of an item's first version (a new item's, whose state
    directory is new too), deferred to the barrier before its metadata."""
    index = VersionIndex(next_number=entry.number + 1, versions=[entry])
    return CreateInPlace(paths.version_file(entry.number), version_file_bytes(index, data), deferred=True)


def _unnamed(names: tuple[str, ...], below: int, kept: set[int]) -> tuple[int, ...]:
    """Numbers of the files among ``names`` (either layout) below ``below``
    that no kept version is: dropped earlier and left, or torn."""
    found = set()
    for name in names:
        number = member_number(name)
        if number is None:
            number = _blob_number(name)
        if number is not None and number < below and number not in kept:
            found.add(number)
    return tuple(sorted(found))


async def publish_version(
    target: Target,
    item_id: str,
    data: bytes,
    *,
    reason: VersionReason,
    max_count: int,
    max_bytes: int,
    session_id: str | None = None,
    turn: int | None = None,
    known: IndexView | None = None,
    proofs: tuple[Verify, ...] = (),
) -> Published | Disproved:
    """Publish ``data`` as the item's next version, stamped with the target
    clock as its file is written; ``known``: the index as last seen, proved
    by the publication itself (read again only if it moved). ``proofs``:
    what else must hold for ``data`` to be the version (the metadata's
    bytes, the primary file's), proved under the store lock beside the
    index; the first that does not hold is answered, nothing written."""
    paths = ItemPaths(item_id)
    digest = hashlib.sha256(data).hexdigest()
    # An item with versions has their directory; it is made only when the
    # write finds it gone.
    make_dirs = False
    for _ in range(_ATTEMPTS):
        view = known if known is not None else await read_index(target, item_id)
        known = None
        index = view.index
        newest = member_number(view.newest) if view.newest is not None else None
        # Past a torn newest file, never into it: its name is what the
        # proof below holds to.
        number = max(index.next_number, (newest or 0) + 1)
        entry = VersionEntry(number=number, at=-1, reason=reason, size=len(data), sha256=digest, session_id=session_id, turn=turn)
        kept = retained([*index.versions, entry], max_count, max_bytes)
        kept_numbers = {v.number for v in kept}
        dropped = tuple(v.number for v in index.versions if v.number not in kept_numbers)
        dropped = tuple(sorted(set(dropped) | set(_unnamed(view.names, number, kept_numbers))))
        written = VersionIndex(next_number=number + 1, versions=kept)
        create = StampedCreateInPlace(paths.version_file(number), _stamped_parts(written, data), deferred=True)
        checks: list[Operation] = [NewestIs(paths.versions_dir, *VERSION_FAMILY, view.newest)]
        if view.newest is None:
            checks.append(Verify(paths.versions_index, view.legacy))
        elif view.unwhole is not None:
            # Still as read, under the lock no publisher writes outside of:
            # torn by a crash, so passed over. Changed: it was being
            # written, and is the index now.
            checks.append(Verify(f"{paths.versions_dir}/{view.newest}", view.unwhole))
        ops: list[Operation] = [
            *(proofs or (Stat(paths.meta),)),
            *checks,
            *((MakeDirs(paths.versions_dir, optional=True),) if make_dirs else ()),
            create,
            Barrier(),
        ]
        result = await target.run(ControlProgram(ops, lock=LOCK_DIR))
        if result.completed:
            at = result[ops.index(create)].value
            stamped = msgspec.structs.replace(entry, at=at)
            written = msgspec.structs.replace(written, versions=[*kept[:-1], stamped])
            name = paths.version_file(number).rsplit("/", 1)[1]
            return Published(stamped, written, name, dropped, view.legacy is not None)
        stop = result.stopped_at
        first_check = len(proofs) or 1  # after the proofs (or the metadata's Stat)
        if stop == 0 and result[0].status is Status.ABSENT:
            raise missing(item_id)
        if stop < first_check and result[stop].status is Status.MISMATCH:
            return Disproved(stop, result[stop].value)
        if first_check <= stop < first_check + len(checks) and result[stop].status is Status.MISMATCH:
            continue  # another publisher took this number: read again
        if ops[stop] is create and result[stop].status is Status.ABSENT and not make_dirs:
            make_dirs = True  # the versions directory is gone: make it
            known = view
            continue
        raise_for_result(ops[stop], result[stop])
    raise ArtifactError("unavailable", item_id, "the version index kept changing while publishing; try again")
