"""The journal of an ApplyPatch in flight, and recovery from one.

Before a patch touches its first file it writes, in the journal directory
of its target (``.mevedel/patches/`` on a workspace, ``.mevedel-patches/``
at the root of a memory root of its own)::

    patch-<32 hex>.data    every file's old and new bytes, concatenated
    patch-<32 hex>-N.keep  a second name (a hard link, where the
                           filesystem has them) of each file the patch
                           removes, so a rollback brings back the file
                           itself, permission bits and all
    patch-<32 hex>.json    the marker: each file's path, the digests and
                           spans of its old and new bytes (None: absent),
                           its keep name, and the directories the patch
                           creates

all flushed by a barrier before the first file is touched. Removing the
marker is the patch's commit point: it is removed only after a second
barrier has flushed every file, so a marker that survives a crash means
the patch did not commit, and recovery rolls it back:

- a file holding its old bytes is left alone;
- a file holding the patch's new bytes, or a prefix of them (a write a
  power loss cut short), gets its old bytes back (or is removed, if the
  patch created it), keeping its permission bits; one absent where the
  patch removed it is linked back from its keep name;
- a file holding anything else was changed by someone after the crash and
  is left as it is;

then the directories the patch created are removed when empty, a barrier
flushes the restores, and the marker goes, then its data. Every recovery
program is guarded by ``Verify`` of the marker (whoever gets there first
recovers; the other finds the marker gone) and of each file's current
bytes, and holds the target's root lock, as the patch's own write program
does, so no recovery ever rolls back a patch still running.

A marker that cannot be decoded, or whose data does not hold the bytes it
names, was cut short by a crash before its barrier, so no file was touched:
it is removed, and so are data and keep files without a marker (from
before the marker was written, or after the commit), and the temporary
files of journal writes a crash cut short.

Recovery runs at the start of the next ApplyPatch on the same target
(:func:`recover`), and when a patch's own write program fails.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field

import msgspec

from ...targets import (
    Barrier,
    ControlProgram,
    CreateLinked,
    ListDir,
    ReadFiles,
    Remove,
    Status,
    Target,
    Verify,
    WriteProject,
)

FORMAT = 1
ROOT_LOCK = ""
_MARKER = re.compile(r"^patch-([0-9a-f]{32})\.json\Z")
_DATA = re.compile(r"^patch-([0-9a-f]{32})(?:\.data|-[0-9]+\.keep)\Z")
#: A temporary file of a journal write a crash cut short.
_JOURNAL_DEBRIS = re.compile(r"^\.patch-[0-9a-f]{32}(?:\.json|\.data|-[0-9]+\.keep)\..*\.tmp\Z", re.DOTALL)
#: The target's temporary file of a write of NAME: ``.NAME.<12 hex>.tmp``.
_FILE_DEBRIS = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp\Z", re.DOTALL)
#: The largest journal (marker or data) recovery reads.
_MAX_JOURNAL = 1024 * 1024 * 1024
#: Times recovery starts over when a file changes under it.
_ATTEMPTS = 3


class JournalFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    path: str
    old: str | None
    new: str | None
    old_at: int = 0
    old_length: int = 0
    new_at: int = 0
    new_length: int = 0
    #: The keep name of a file the patch removes.
    keep: str | None = None


class JournalRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    format: int
    files: list[JournalFile]
    #: Directories the patch creates, shallowest first.
    directories: list[str] = []


def new_id() -> str:
    return secrets.token_hex(16)


def marker_name(directory: str, ident: str) -> str:
    return f"{directory}/patch-{ident}.json"


def data_name(directory: str, ident: str) -> str:
    return f"{directory}/patch-{ident}.data"


def keep_name(directory: str, ident: str, number: int) -> str:
    return f"{directory}/patch-{ident}-{number}.keep"


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def encode(files: list[tuple[str, bytes | None, bytes | None, str | None]], directories: list[str]) -> tuple[bytes, bytes]:
    """``(marker, data)`` of a patch changing ``files`` (path, old, new,
    keep name)."""
    chunks: list[bytes] = []
    at = 0
    entries = []
    for path, old, new, keep in files:
        spans = []
        for data in (old, new):
            length = 0 if data is None else len(data)
            spans += [at, length]
            if data is not None:
                chunks.append(data)
                at += length
        entries.append(JournalFile(path, _digest(old), _digest(new), spans[0], spans[1], spans[2], spans[3], keep))
    marker = msgspec.json.encode(JournalRecord(FORMAT, entries, directories))
    return marker, b"".join(chunks)


@dataclass(frozen=True)
class Change:
    """One file of a journal: its old and new bytes (None: absent)."""

    path: str
    old: bytes | None
    new: bytes | None
    keep: str | None = None


def decode(marker: bytes, data: bytes) -> tuple[list[Change], list[str]] | None:
    """The journal's changes and created directories; None when the marker
    or its data was cut short (then no file was touched)."""
    try:
        record = msgspec.json.decode(marker, type=JournalRecord)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if record.format != FORMAT:
        return None
    changes = []
    for entry in record.files:
        old = _span(data, entry.old, entry.old_at, entry.old_length)
        new = _span(data, entry.new, entry.new_at, entry.new_length)
        if old is False or new is False:
            return None
        changes.append(Change(entry.path, old, new, entry.keep))  # type: ignore[arg-type]
    return changes, list(record.directories)


def _span(data: bytes, digest: str | None, at: int, length: int) -> bytes | None | bool:
    if digest is None:
        return None
    piece = data[at : at + length]
    return piece if len(piece) == length and hashlib.sha256(piece).hexdigest() == digest else False


@dataclass
class Recovered:
    """What recovering one journal did, by file path."""

    restored: list[str] = field(default_factory=list)
    #: Changed by someone else since: left as they are.
    left: list[str] = field(default_factory=list)
    #: Could not be restored: the journal stays for another attempt.
    failed: list[str] = field(default_factory=list)
    #: Someone else recovered (or committed) it first.
    gone: bool = False


@dataclass(frozen=True)
class Pending:
    """What a journal directory holds: patches that did not commit
    (markers), data files without a marker, and temporary files of writes
    a crash cut short."""

    markers: list[str]
    #: Journal files (data, keep names) of an id without a marker.
    orphans: dict[str, list[str]]
    debris: list[str]

    def __bool__(self) -> bool:
        return bool(self.markers or self.orphans or self.debris)


def journal_ids(names: tuple[str, ...]) -> Pending:
    markers = [m.group(1) for m in map(_MARKER.match, names) if m]
    orphans: dict[str, list[str]] = {}
    for name in names:
        match = _DATA.match(name)
        if match and match.group(1) not in markers:
            orphans.setdefault(match.group(1), []).append(name)
    debris = [name for name in names if _JOURNAL_DEBRIS.match(name)]
    return Pending(markers, orphans, debris)


async def _listed(target: Target, directory: str) -> Pending | None:
    """What the journal directory holds; None when there is none."""
    listed = (await target.run(ControlProgram([ListDir(directory, optional=True)])))[0]
    return journal_ids(listed.value) if listed.ok else None


async def recover(target: Target, directory: str) -> list[Recovered]:
    """Roll back every patch of this target that did not commit, and
    remove what journals left behind."""
    found = await _listed(target, directory)
    if found is None:
        return []
    outcomes = await recover_pending(target, directory, found)
    # An empty journal directory (a crash just before its removal) goes too.
    await target.run(ControlProgram([Remove(directory, optional=True)], lock=ROOT_LOCK))
    return outcomes


async def recover_pending(target: Target, directory: str, found: Pending) -> list[Recovered]:
    outcomes = [await recover_one(target, directory, ident) for ident in found.markers]
    if found.markers:
        # A marker cut short leaves its data and keep names without one.
        found = await _listed(target, directory) or found
    if found.orphans or found.debris:
        # Journal files whose marker never came (its patch touched nothing)
        # or is gone (its patch committed), and what a cut-short write of
        # the journal left.
        ops: list = [Remove(f"{directory}/{name}", optional=True) for name in found.debris]
        for ident, names in found.orphans.items():
            ops.append(Verify(marker_name(directory, ident), None))
            ops += [Remove(f"{directory}/{name}", optional=True) for name in names]
        ops.append(Remove(directory, optional=True))
        await target.run(ControlProgram(ops, lock=ROOT_LOCK))
    return outcomes


async def recover_one(target: Target, directory: str, ident: str) -> Recovered:
    """Roll back the patch ``ident``, whatever part of it ran."""
    marker, data = marker_name(directory, ident), data_name(directory, ident)
    changes: list[Change] = []
    for _attempt in range(_ATTEMPTS):
        names = (f"patch-{ident}.json", f"patch-{ident}.data")
        read = ReadFiles(directory, names=names, max_bytes=_MAX_JOURNAL, budget=_MAX_JOURNAL)
        found = (await target.run(ControlProgram([read])))[0]
        reads = found.value if found.ok else ()
        if len(reads) < 1 or reads[0].status is Status.ABSENT:
            return Recovered(gone=True)
        marker_bytes = reads[0].data
        data_bytes = reads[1].data if len(reads) > 1 and reads[1].ok else None
        decoded = None if marker_bytes is None or data_bytes is None else decode(marker_bytes, data_bytes)
        guard = Verify(marker, marker_bytes)
        if decoded is None:
            # Cut short before its barrier: nothing was touched.
            cleanup = [guard, Remove(marker), Remove(data, optional=True), Remove(directory, optional=True)]
            await target.run(ControlProgram(cleanup, lock=ROOT_LOCK))
            return Recovered()
        changes, directories = decoded
        currents, debris = await _currents(target, [change.path for change in changes])
        outcome = Recovered()
        ops: list = [guard]
        restoring: list[str] = []
        for change in changes:
            current = currents[change.path]
            if current is _UNREADABLE:
                outcome.failed.append(change.path)
                continue
            if current == change.old:
                continue
            if not _ours(change, current):  # type: ignore[arg-type]
                outcome.left.append(change.path)
                continue
            ops.append(Verify(change.path, current))  # type: ignore[arg-type]
            if change.old is None:
                ops.append(Remove(change.path, deferred=True))
            elif current is None and change.keep is not None:
                ops.append(CreateLinked(change.path, change.old, deferred=True, source=f"{directory}/{change.keep}"))
            else:
                ops.append(WriteProject(change.path, change.old, deferred=True))
            restoring.append(change.path)
        ops += [Remove(path, optional=True, deferred=True) for path in debris]
        ops += [Remove(path, optional=True, deferred=True) for path in reversed(directories)]
        if outcome.failed:
            result = await target.run(ControlProgram(ops + [Barrier()], lock=ROOT_LOCK))
            if result.completed:
                outcome.restored = restoring
            else:
                outcome.failed += restoring
            return outcome
        keeps = [Remove(f"{directory}/{change.keep}", optional=True) for change in changes if change.keep is not None]
        ops += [Barrier(), Remove(marker), *keeps, Remove(data, optional=True), Remove(directory, optional=True)]
        result = await target.run(ControlProgram(ops, lock=ROOT_LOCK))
        if result.completed:
            outcome.restored = restoring
            return outcome
        stopped = result.stopped_at
        assert stopped is not None
        if stopped == 0:
            return Recovered(gone=True)
        if isinstance(ops[stopped], Verify):
            continue  # a file changed under us: look again
        outcome.failed = restoring
        return outcome
    return Recovered(failed=[change.path for change in changes])


_UNREADABLE = object()


def _ours(change: Change, current: bytes | None) -> bool:
    """Whether ``current`` is what the patch wrote (or a write of it cut
    short), rather than someone's later change."""
    if change.new is None:
        return current is None
    return current is not None and change.new.startswith(current)


async def _currents(target: Target, paths: list[str]) -> tuple[dict[str, object], list[str]]:
    """Each path's bytes now (None: absent; ``_UNREADABLE``: neither), and
    the temporary files a write of one of them cut short left beside it
    (``.NAME.<12 hex>.tmp``, the target's own temporary names)."""
    if not paths:
        return {}, []
    parents = sorted({path.rpartition("/")[0] for path in paths})
    ops: list = [ReadFiles("", names=tuple(paths), max_bytes=_MAX_JOURNAL, budget=_MAX_JOURNAL)]
    ops += [ListDir(parent, optional=True) for parent in parents]
    found = await target.run(ControlProgram(ops))
    reads = found[0]
    out: dict[str, object] = {path: _UNREADABLE for path in paths}
    if reads.ok:
        for path, read in zip(paths, reads.value):
            if read.ok and read.data is not None:
                out[path] = read.data
            elif read.status is Status.ABSENT or (read.reason or "").endswith("is not a directory"):
                out[path] = None
    leaves: dict[str, set[str]] = {}
    for path in paths:
        parent, _, leaf = path.rpartition("/")
        leaves.setdefault(parent, set()).add(leaf[:80])
    debris = []
    for parent, listed in zip(parents, list(found)[1:]):
        for name in listed.value if listed.ok else ():
            match = _FILE_DEBRIS.match(name)
            if match and match.group(1) in leaves[parent]:
                debris.append(f"{parent}/{name}" if parent else name)
    return out, debris
