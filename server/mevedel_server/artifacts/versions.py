"""Which versions an item keeps, and the one program that publishes one.

Publication compares the previous index under the store lock: it reads
``versions.json``, builds the next index, then, holding the lock, verifies
the index is still exactly what it read before writing the new blob and
index. Two publishers therefore never take the same number; the loser reads
again and publishes the next one. The blob and the new index's temporary
file are flushed together, and only then is the index renamed into place
(a ``ReplaceAtBarrier`` committed by the ``Barrier``: two flushes, as one
durable write takes), so a reader following the index never meets a
missing or torn blob, and a crash leaves the old index or the new one.
Blobs the new index drops are removed after it, by a program of their own
(:func:`drop_versions`) that the publisher need not wait for, without a
flush: a removal a power loss (or a crash before it) undoes leaves a blob
no index names, which is never read (numbers only grow) and which the next
save that reads the item removes. A publication's cost is its two flushes;
freeing a blob's blocks took a fast disk's publication a fifth of a durable
write more.
"""

from __future__ import annotations

import hashlib

import msgspec

from ..targets import (
    Barrier,
    ClockStamp,
    ControlProgram,
    CreateInPlace,
    ListDir,
    MakeDirs,
    Operation,
    Read,
    Remove,
    Replace,
    ReplaceAtBarrier,
    Stat,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from .errors import ArtifactError, missing
from .layout import LOCK_DIR, VERSION_DIGITS, ItemPaths
from .records import VersionEntry, VersionIndex, VersionReason, encode, load

DEFAULT_MAX_VERSIONS = 20
DEFAULT_MAX_VERSION_BYTES = 64 * 1024 * 1024
_ATTEMPTS = 16


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
    return load(VersionIndex, raw, item_id, "version index")


async def read_index(target: Target, item_id: str) -> tuple[VersionIndex, bytes | None]:
    paths = ItemPaths(item_id)
    meta, index = Stat(paths.meta), Read(paths.versions_index, optional=True)
    result = await target.run(ControlProgram([meta, index]))
    if result[0].status is Status.ABSENT:
        raise missing(item_id)
    raise_for_result(meta, result[0])
    if result[1].status is Status.ABSENT:
        return VersionIndex(), None
    raise_for_result(index, result[1])
    return load_index(result[1].value, item_id), result[1].value


class ForVersion(msgspec.Struct, frozen=True):
    """What saving a version of an item reads (:func:`read_for_version`)."""

    meta_raw: bytes
    #: None: not that item's primary file (any more).
    data: bytes | None
    index: VersionIndex
    #: The index's bytes, which the publication verifies (None: no index).
    index_raw: bytes | None
    #: Blobs below the index's next number that it does not name: left by
    #: a crash between a publication's commit and its removal of the
    #: blobs it dropped.
    garbage: tuple[int, ...]


async def read_for_version(target: Target, item_id: str, primary: str) -> ForVersion:
    """What saving a version of the item needs, in one program: the item's
    metadata, the bytes of ``primary`` (the primary file's name as the
    caller last knew it: ``None`` when it is not that item's primary file
    any more, which the caller sees in the metadata and asks again), the
    version index and the blobs it does not name."""
    paths = ItemPaths(item_id)
    ops: list[Operation] = [
        Read(paths.meta),
        Read(paths.file(primary), optional=True),
        Read(paths.versions_index, optional=True),
        ListDir(paths.versions_dir, optional=True),
    ]
    result = await target.run(ControlProgram(ops))
    if result[0].status is Status.ABSENT:
        raise missing(item_id)
    raise_for_result(ops[0], result[0])
    data = None
    if result[1].status is not Status.ABSENT:
        raise_for_result(ops[1], result[1])
        data = result[1].value
    raw = None
    index = VersionIndex()
    if result[2].status is not Status.ABSENT:
        raise_for_result(ops[2], result[2])
        raw = result[2].value
        index = load_index(raw, item_id)
    named = {v.number for v in index.versions}
    garbage = tuple(
        number
        for number in (_blob_number(name) for name in (result[3].value or () if result[3].ok else ()))
        if number is not None and number < index.next_number and number not in named
    )
    return ForVersion(result[0].value, data, index, raw, garbage)


def _blob_number(name: str) -> int | None:
    return int(name) if len(name) == VERSION_DIGITS and name.isascii() and name.isdigit() else None


#: The new entry's time as encoded before the target stamps it: no stored
#: time is negative, and outside a string a quote is a key's.
_UNSTAMPED = b'"at":-1'


def _stamped(path: str, new_index: VersionIndex) -> ReplaceAtBarrier:
    """The index's replacement at ``path``, its newest entry's ``at`` (-1
    until then) stamped with the target clock as it is written."""
    raw = encode(new_index)
    cut = raw.rindex(_UNSTAMPED) + len(_UNSTAMPED) - 2
    return ReplaceAtBarrier(path, (raw[:cut], ClockStamp(0), raw[cut + 2 :]))


class Published(msgspec.Struct, frozen=True):
    entry: VersionEntry
    #: The index as written, which a later publication may verify, and
    #: decoded.
    index_raw: bytes
    index: VersionIndex
    #: Blobs the index no longer names, for :func:`drop_versions`.
    dropped: tuple[int, ...] = ()


async def drop_versions(target: Target, item_id: str, numbers: tuple[int, ...]) -> None:
    """Remove the blobs ``numbers`` of an item, which no index names any
    more (a publication dropped them): no flush, no answer to wait for --
    one left behind is removed by a later save that reads the item."""
    paths = ItemPaths(item_id)
    ops = [Remove(paths.version_blob(number), optional=True, deferred=True) for number in numbers]
    await target.run(ControlProgram(ops, lock=LOCK_DIR))


class Disproved(msgspec.Struct, frozen=True):
    """A publication's proof did not hold: nothing was written."""

    #: Which of the proofs.
    proof: int
    #: What the file holds instead (None: it is absent).
    actual: bytes | None


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
    known: tuple[VersionIndex, bytes | None] | None = None,
    proofs: tuple[Verify, ...] = (),
    garbage: tuple[int, ...] = (),
) -> Published | Disproved:
    """Publish ``data`` as the item's next version, stamped with the target
    clock as the index is written; ``known``: the index and its raw bytes
    as last seen, verified by the publication itself (read again only if
    it moved). ``proofs``: what else must hold for ``data`` to be the
    version (the metadata's bytes, the primary file's), proved under the
    store lock beside the index; the first that does not hold is
    answered, nothing written. ``garbage``: blobs ``known``'s index does
    not name, answered in ``Published.dropped`` with those it drops (only
    if it is still that index) for :func:`drop_versions`."""
    paths = ItemPaths(item_id)
    digest = hashlib.sha256(data).hexdigest()
    # An index naming versions was written beside their directory, which
    # is then made only if a blob's write finds it gone.
    make_dirs = False
    # The blob is written under its number, which no reader reaches before
    # the index names it after the barrier's flush: no temporary file,
    # rename or random name. A file already there is a publication's that
    # never committed (a crash): replaced, never written into (it could
    # be a hard link to a file outside the store).
    leftover = False
    for _ in range(_ATTEMPTS):
        if known is None:
            index, raw = await read_index(target, item_id)
            garbage = ()
        else:
            index, raw = known
            known = None
        make_dirs = make_dirs or not index.versions
        entry = VersionEntry(
            number=index.next_number, at=-1, reason=reason, size=len(data), sha256=digest, session_id=session_id, turn=turn
        )
        kept = retained([*index.versions, entry], max_count, max_bytes)
        kept_numbers = {v.number for v in kept}
        dropped = tuple(v.number for v in index.versions if v.number not in kept_numbers) + garbage
        written = VersionIndex(next_number=index.next_number + 1, versions=kept)
        commit = _stamped(paths.versions_index, written)
        blob_path = paths.version_blob(entry.number)
        blob = Replace(blob_path, data, deferred=True) if leftover else CreateInPlace(blob_path, data, deferred=True)
        ops: list[Operation] = [
            *(proofs or (Stat(paths.meta),)),
            Verify(paths.versions_index, raw),
            *((MakeDirs(paths.versions_dir, optional=True),) if make_dirs else ()),
            blob,
            commit,
            Barrier(),
        ]
        result = await target.run(ControlProgram(ops, lock=LOCK_DIR))
        if result.completed:
            at = result[ops.index(commit)].value
            stamped = msgspec.structs.replace(entry, at=at)
            written = msgspec.structs.replace(written, versions=[*kept[:-1], stamped])
            return Published(stamped, commit.content(at), written, dropped)
        stop = result.stopped_at
        index_check = len(proofs) or 1  # after the proofs (or the metadata's Stat)
        if stop == 0 and result[0].status is Status.ABSENT:
            raise missing(item_id)
        if stop < index_check and result[stop].status is Status.MISMATCH:
            return Disproved(stop, result[stop].value)
        if stop == index_check and result[stop].status is Status.MISMATCH:
            continue  # another publisher took this number: read again
        if ops[stop] is blob and result[stop].status is Status.ABSENT and not make_dirs:
            make_dirs = True  # the versions directory is gone: make it
            known = (index, raw)
            continue
        if ops[stop] is blob and result[stop].status is Status.CONFLICT and not leftover:
            leftover = True
            known = (index, raw)
            continue
        raise_for_result(ops[stop], result[stop])
    raise ArtifactError("unavailable", item_id, "the version index kept changing while publishing; try again")


async def read_version(target: Target, item_id: str, number: int) -> tuple[VersionEntry, bytes]:
    index, _ = await read_index(target, item_id)
    for entry in index.versions:
        if entry.number == number:
            paths = ItemPaths(item_id)
            op = Read(paths.version_blob(number))
            result = (await target.run(ControlProgram([op])))[0]
            raise_for_result(op, result)
            if hashlib.sha256(result.value).hexdigest() != entry.sha256:
                raise ArtifactError("unreadable", f"{item_id} version {number}", "its stored bytes do not match their recorded digest")
            return entry, result.value
    kept = ", ".join(str(v.number) for v in reversed(index.versions)) or "none"
    raise ArtifactError("missing-target", f"{item_id} version {number}", f"no such version is kept (kept: {kept})")
