"""An incremental record of a workspace's file state, so that what an agent's
shell command changes can enter the turn's checkpoint with its content from
*before* the command.

:meth:`FileStateRecord.refresh` brings the record up to date before a
command; :meth:`FileStateRecord.changes` afterwards lists every file the
command created, changed or deleted, with its earlier bytes, and moves the
record on to the new state. Everything goes through the workspace's
``Target``, so an SSH workspace works alike:

- One :class:`~mevedel_server.targets.ScanTree` program per walk: the target
  walks the tree and applies the ``.gitignore`` files itself (so an ignored
  directory is never descended), and answers each regular file's and link's
  ``lstat`` facts packed (flags, size, ``mtime_ns``, ``ctime_ns``, inode). An
  unchanged tree answers the very same bytes, so "nothing changed" costs the
  walk and one comparison.
- The first walk of a record that holds nothing (no index was kept) and
  knows it before that walk's program is built (watched: the index is read
  first; walked: :meth:`FileStateRecord.preload`) reads every file as it
  goes: a capturing scan (``ScanTree.capture_pack``) reads each regular
  file not ignored and within the limit while its directory is open,
  appends its bytes (once per content) to one pack and answers its digest
  and offset in a column, and the record adopts that answer whole, as it
  would a kept index (:meth:`FileStateRecord._adopt`): no operation,
  answer and row update per file -- at 100,000 files most of a first
  turn's time. What it left (links, files that changed while read) is
  found new by the same walk and read as below. Watched, the walk made
  again once the directories are watched only looks: what changed since
  the capture is a change between the two.
- A file whose facts changed is read by
  :class:`~mevedel_server.targets.SnapshotFile`, which appends its bytes on
  the target to the pack ``<blob_dir>/blobs/pack-<hex>`` of that program
  (one file for many blobs, not a 4 KiB block for each; nothing appended
  when the file still holds the bytes recorded for it) and answers the
  digest and where they went: content never travels to refresh the record.
  The record holds facts, digests and pack offsets, never contents.
- Before-content is read back from the packs
  (:class:`~mevedel_server.targets.ReadSlice`, checked against the digest)
  only for the files :meth:`~FileStateRecord.changes` reports, in the
  program of the snapshots. A pack none of whose blobs a recorded file
  names any more is removed by the next walk's program or, when none comes
  first, by a program of its own run once the sync that stopped naming it
  has answered (a command does not wait for the unlinks, which cost
  milliseconds each on some filesystems): a refresh with nothing changed is
  one program, with files changed two. A walked record (an SSH workspace:
  every sync walks) leaves them to its next walk's program instead, since
  a round trip costs more there than the unlinks. The removal is not flushed: a pack a
  crash brings back is one no record names, which the next process's first
  walk removes. Past :data:`MAX_PACKS` packs a save copies the live blobs
  of the smaller ones into one (superseded bytes go then). Loose blobs
  ``<blob_dir>/blobs/<sha256>`` of an earlier version are removed by the
  first walk like any blob no record names.
- The record is kept for the next process as ``<blob_dir>/index``
  (:mod:`.file_state_index`), so that a new process -- every ``mevedel
  prompt`` is one -- starts from it and reads only the files changed since
  (git's index): written whole by the first refresh that read everything
  (by the next walk's program, for a walked record whose first read fit in
  one program: reading it again costs no more than the save would),
  after a pack merge and when the changes since outgrow
  :data:`DELTA_PATHS`; otherwise a save writes ``index.delta``, the paths
  changed since the whole index, at the head of the next sync's program
  (no round trip of its own), or in another's program
  (:meth:`~FileStateRecord.keep_ops`: the agent engine has the turn's
  settlement keep the state its last sync left, which the next process
  would otherwise read again). Neither is
  flushed: one torn or lost in a crash fails its checksum, and the next
  process starts from an earlier state (sound: a file whose facts still
  match it holds those bytes) or reads everything.

On a :class:`~mevedel_server.targets.LocalTarget` the record is kept
current between commands by inotify
(:class:`~mevedel_server.targets.tree_watch.TreeWatch`): every directory the
walk lists is watched, and a sync drains the event queue and looks, by one
:class:`~mevedel_server.targets.ScanPaths` program through the target, only
at the paths the events named (a directory among them: all of it), the
racy files and the files with more than one link. With no event and
nothing racy a sync runs no program at all. Events are hints: the facts
are the target's ``lstat`` through its pinned descriptors, and a directory
newly watched is scanned once more after its watch began (what changed in
it before that is in the second answer). Whatever makes events
untrustworthy -- the first sync, an overflowed queue, a watched directory
moved, the root deleted or moved, one directory at two paths -- makes the
next sync a whole walk (with a fresh watch); no watch to be had (the watch
limit, no inotify, a network or FUSE filesystem, an SSH target) means the
walk every time, and :attr:`FileStateRecord.unwatched` says why. Left to
inotify's own blind spot: a write through a shared writable ``mmap`` alone
sends no event, so the record sees it at its next whole walk only.

What the record does not see or cannot give, and how it says so:

- ``.git/`` and ``.mevedel/`` (at any depth) and ``blob_dir`` are never
  walked. Nor is a directory a ``.gitignore`` ignores: a change inside one
  is not seen at all (git's own rule: nothing below an ignored directory
  can be re-included). Only the workspace's own ``.gitignore`` files count
  (those of its root and below); ``.git/info/exclude``, ``core.excludesFile``
  and the ``.gitignore`` of a repository the workspace is a subdirectory of
  do not. A directory that cannot be listed is not walked either; what the
  record knew below it is kept as it was. A directory that comes to be
  ignored while the record tracks entries below it is entered by the next
  walk once more (what a command changed there keeps its before), its
  entries are then recorded ignored and it is left out from then on. A
  process's first walk does the same for the entries the kept index tracks:
  watched, the walk is built once the index is loaded; walked, the index is
  read in the walk's own program, and when the walk left such a directory
  out it walks again (rare: once walked, they are recorded ignored). Were
  it left out, the next walk would charge the turn with every change there
  since the index was kept, against the index's bytes.
- Save a path the agent wrote there through ``fs/*`` (:meth:`~FileStateRecord.
  remember`, told by the write, which checkpointed it): the next sync
  records it as a tracked file (flagged :data:`_KNOWN`, so kept in the
  index with its facts and never a reason to walk its directory), and
  every sync after looks at each such path by one
  :class:`~mevedel_server.targets.ScanPaths` program that ``lstat``-s it
  through its parents' descriptors (links never followed) and lists
  nothing: a command's change, removal or ``chmod`` of it is a change with
  its earlier state, as a tracked file's. Once gone it is forgotten (a file
  a command makes there again is unseen). With no such path, no program.
- An ignored file is recorded by its facts only and never read; a change to
  it (created, modified, deleted) is a :class:`FileChange` with the gap
  :data:`IGNORED_GAP`. So is a file found in a directory that was ignored
  (or unreadable) at the previous walk and no longer is: what was there
  before is unknown.
- Every entry's permission bits are among its facts, so a ``chmod`` alone
  is a change (its earlier mode given with its bytes). Directories are
  entries too (their mode and inode; their times are left out, so what
  changes inside one does not change it): one made or removed is a change
  like a file's.
- A file larger than ``max_file_bytes``: facts only; its change gives its
  earlier mode and size but no bytes, and the checkpoint seam
  (``SessionService.turns.record_pre_state``, the one rule) makes it a gap. A
  file a command *created* is nothing-before, whatever its size. A
  symbolic link is recorded by its own ``lstat`` and its target text (read
  with ``readlink``, never followed); one whose target could not be read
  is the gap :data:`LINK_GAP`. A regular file that could not be read has a
  gap saying why. FIFOs, sockets and devices are never opened and not
  recorded.
- Facts can hide a change made within the same timestamp tick as the walk
  that recorded them (same size, inode and times; worst on filesystems with
  coarse timestamps). A file whose modification or change time is within
  :data:`RACY_NS` of the walk is therefore read again at the next one, and
  compared by digest (git's "racily clean" entries). A walked record
  (not watched) snapshots them in the walk's own program, after its scan:
  the record knows them before building it (a process's first walk when
  the kept index was read earlier, :meth:`FileStateRecord.preload`: by
  ``mevedel prompt`` in the program that creates or resumes its session).
- A file the agent writes through ``fs/write_text_file`` is snapshotted in
  the write's own program, right after the write
  (:meth:`FileStateRecord.write_snapshot`): the next sync that finds it
  with the facts that snapshot read takes it as its own (the write
  checkpointed the file: not a change to report) rather than a program of
  snapshots. Taken before that walk, it could miss a change made after it
  in its timestamp's tick whatever the file's age: such a file is racy,
  read again at the walk after.
- Past :data:`SCAN_LIMIT` entries the walk is incomplete, and the record
  refuses to guess: :class:`FileStateError`.

One record per ``blob_dir`` at a time: which blobs are live is counted in this
object's memory, and the blobs its first walk finds in the store but does
not name (left by an earlier process) are removed with the next one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import operator
import os
import secrets
import struct
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from ..store import STATE_DIR
from ..targets import (
    CAPTURE_LEFT,
    CAPTURE_RECORD,
    CAPTURED,
    SCAN_DIR,
    SCAN_FACTS,
    SCAN_IGNORED,
    SCAN_IGNORED_REASON,
    SCAN_LINK,
    ControlProgram,
    CreateExclusive,
    Entry,
    FileScan,
    ListDir,
    LocalTarget,
    MakeDirs,
    Operation,
    OpResult,
    ProgramResult,
    Read,
    ReadEntry,
    ReadSlice,
    Remove,
    Replace,
    ScanFacts,
    ScanPaths,
    ScanTree,
    Snapshot,
    SnapshotFile,
    Status,
    Target,
    TreeWatch,
    WatchUnavailable,
    clamp_ns,
    differing_records,
    raise_for_result,
    split_target_path,
    unwatchable,
)
from .file_state_index import (
    RecordState,
    apply_delta,
    decode_index,
    encode_index,
    gc_paused,
    index_checksum,
)
from .file_state_table import SEARCHES, RecordTable

#: The gap of a file a .gitignore ignores (or that was in an ignored
#: directory at the previous walk).
IGNORED_GAP = "ignored by .gitignore"
#: The gap of a symbolic link whose target could not be read.
LINK_GAP = "a symbolic link whose target could not be read"
#: The gap of a file whose blob vanished or no longer matches its digest.
LOST_BLOB_GAP = "its snapshot blob is missing or damaged"
#: Never walked, at any depth.
SKIP_NAMES = (".git", STATE_DIR)
#: Entries (files, links, directories) one walk may meet.
SCAN_LIMIT = 500_000
#: A file modified this close to a walk is read again at the next one.
RACY_NS = 2_000_000_000
#: Operations per control program when reading and snapshotting.
OPS_PER_PROGRAM = 512
#: Blob bytes one program may read back.
READ_BYTES_PER_PROGRAM = 64 * 1024 * 1024
#: A first read of at most this many bytes (and one program's files) is
#: kept by the next sync's program rather than one of its own.
SAVE_AT_ONCE_BYTES = 1024 * 1024
#: Packs past which a save first merges them into one (each program that
#: snapshots files writes a pack of its own).
MAX_PACKS = 16
#: Pack bytes one merge may read (larger packs are left as they are).
MERGE_BYTES = 64 * 1024 * 1024
#: Changed paths a delta of the index may hold before a save writes the
#: whole index again (or an eighth of the record, when that is more).
DELTA_PATHS = 1024
#: A path's parent directory (``""`` at the top), and a facts record's kind
#: bits, as C callables for ``map``.
_SPLIT_PARENT = operator.methodcaller("rpartition", "/")
_PARENT = operator.itemgetter(0)
_KIND_BITS = operator.itemgetter(0)
#: A capturing scan's records (status, digest, offset), and their parts.
_CAPTURE = struct.Struct(CAPTURE_RECORD)
_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
#: A status byte -> 1 when the entry is kept as the scan read it (not left
#: to be read), and -> 1 when its file was read, for ``bytes.translate``.
_NOT_LEFT = bytes(int(status != CAPTURE_LEFT) for status in range(256))
_IS_CAPTURED = bytes(int(status == CAPTURED) for status in range(256))
#: The kind bits of a directory a walk enters (not ignored).
_WALKED_KIND = SCAN_DIR | SCAN_IGNORED
#: A flags byte -> 1 when it is a walked directory's (else 0), for
#: ``bytes.translate``.
_WALKED_DIRECTORY = bytes(int(flags & _WALKED_KIND == SCAN_DIR) for flags in range(256))
#: The record's own flag (never a walk's) of a path the agent wrote
#: through ``fs/*`` inside an ignored directory (:meth:`FileStateRecord.
#: remember`): captured like a tracked file, looked at by a stat of its
#: own at every sync, never a reason to walk its directory. Kept in the
#: index with the facts.
_KNOWN = 0x80
#: The flags that keep an entry from counting as tracked.
_UNTRACKED = SCAN_IGNORED | _KNOWN
#: Facts packed (a flags byte first: the kind bits are ``packed[0]``), and
#: where among them the size is.
_FACTS = struct.Struct(SCAN_FACTS)
_SIZE = struct.Struct("<q")
_SIZE_AT = struct.calcsize("<B")
#: Walks in a row that may each find directories not watched yet before
#: the watch is given up on for this refresh (the next one walks).
WATCH_PASSES = 3


#: Runs a walk's operations inside a program of another's (the turn's
#: first publication, behind its lease proof: one round trip for both),
#: answering their results, or None when they were not run there (then the
#: record runs them itself).
Carrier = Callable[[list[Operation]], Awaitable["tuple[OpResult, ...] | None"]]


@dataclass
class Passengers:
    """Operations of a caller's that a walk's program runs too, after the
    scan (:meth:`FileStateRecord.changes`), and their results once it did
    (None: a watched record ran no walk, or its own programs)."""

    ops: tuple[Operation, ...]
    results: tuple[OpResult, ...] | None = None


#: Where a workspace's record is kept (a Worktree Fork's checkout has one of its own).
BLOB_DIR = ".mevedel/file-state"


def kept_reads(blob_dir: str = BLOB_DIR) -> list[Operation]:
    """The reads of the record kept in ``blob_dir`` (its index and the
    delta since), for :meth:`FileStateRecord.preload`."""
    return [Read(f"{blob_dir}/index", optional=True), Read(f"{blob_dir}/index.delta", optional=True)]


class FileStateError(Exception):
    """The record cannot be brought up to date (it is left as it was)."""


@dataclass(frozen=True)
class FileChange:
    #: Workspace-relative, ``/``-separated.
    path: str
    #: The path's whole state before the command (a file's bytes and mode
    #: -- bytes None when over the size limit --, a directory's mode, a
    #: link's target); None: nothing was there.
    before: Entry | None
    #: Set instead of ``before`` when the prior content cannot be given;
    #: then ``before`` is None and means nothing.
    gap: str | None = None
    #: A directory the command made (for rules that match directories only).
    made_directory: bool = field(default=False, compare=False)


def _ancestors(path: str) -> Iterator[str]:
    index = path.rfind("/")
    while index > 0:
        path = path[:index]
        yield path
        index = path.rfind("/")


def _facts_of(walked: ScanFacts, snapshot: Snapshot) -> ScanFacts:
    """The facts a snapshot read the file with (the walk's flags and mode)."""
    return (walked[0], snapshot.size, snapshot.mtime_ns, snapshot.ctime_ns, snapshot.inode, walked[5])


def _packed(facts: ScanFacts) -> bytes:
    """``facts`` packed as a walk packs them (times clamped as it clamps)."""
    try:
        return _FACTS.pack(*facts)
    except struct.error:
        flags, size, mtime, ctime, inode, mode = facts
        return _FACTS.pack(flags, size, clamp_ns(mtime), clamp_ns(ctime), inode, mode)


def _size(packed: bytes) -> int:
    """The size among packed facts."""
    return _SIZE.unpack_from(packed, _SIZE_AT)[0]


def _refuse_truncated(scan: FileScan) -> None:
    """A walk that stopped at :data:`SCAN_LIMIT` records nothing."""
    if scan.truncated:
        raise FileStateError(f"the workspace holds more than {SCAN_LIMIT} entries not ignored; its file state is not recorded")


def _content(facts: ScanFacts) -> tuple[int, ...]:
    """The facts that tell a change of state (not whether it is ignored)."""
    return (facts[0] & (SCAN_LINK | SCAN_DIR), *facts[1:])


class FileStateRecord:
    """The workspace's file state as last seen (facts and digests), and the
    blobs of the content it names. See the module docstring."""

    def __init__(
        self,
        target: Target,
        *,
        blob_dir: str = BLOB_DIR,
        max_file_bytes: int = 10 * 1024 * 1024,
        watch: LocalTarget | bool | None = None,
        base: str = "",
        skip: tuple[str, ...] = (),
        scanner: LocalTarget | None = None,
    ) -> None:
        parts = split_target_path(blob_dir)
        if not parts:
            raise ValueError("the blob directory is a directory below the workspace root")
        #: The tree recorded: a directory below the target's root (a
        #: session's working directory, such as a Worktree Fork's checkout),
        #: "" for the root. Its ``.gitignore`` files are the ones that
        #: count, and changes are named target-relative (``base/path``).
        self._base = "/".join(split_target_path(base))
        #: Target-relative paths (below the root) a walk of the root leaves out.
        self._skip = tuple("/".join(split_target_path(path)) for path in skip)
        #: With a base on this machine: a LocalTarget rooted at it, which
        #: walks (and is watched) as a root would be, its own .gitignore
        #: files alone applying; the blobs stay on ``target``.
        self._scanner = scanner if self._base else None
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 0:
            raise ValueError("max_file_bytes is a whole, non-negative number")
        self._target = target
        self._blob_dir = "/".join(parts)
        self._store = f"{self._blob_dir}/blobs"
        self._index = f"{self._blob_dir}/index"
        self._delta = f"{self._blob_dir}/index.delta"
        #: The checksum of the whole index on disk (None: none kept yet, or
        #: the next save must write one), and the paths changed since it.
        self._index_base: bytes | None = None
        self._since_index: set[str] = set()
        #: Packs merged into another, which the index on disk may still name.
        self._retiring: set[str] = set()
        #: The record moved on since it was last kept as ``index``.
        self._unsaved = False
        #: The record started from the index an earlier process kept.
        self._from_index = False
        self._max = max_file_bytes
        self._lock = asyncio.Lock()
        self._primed = False
        #: path -> facts as last seen (a regular file, a link or a
        #: directory), packed as a walk packs them (:func:`_packed`), the
        #: sha256 of its content (captured files only) and where in a pack
        #: its blob lies (none: the loose file ``blobs/<digest>`` an
        #: earlier version kept), in columns: a record of 100,000 files
        #: loads as one dict of rows, and a sync looks up the few paths it
        #: touches (:mod:`.file_state_table`).
        self._table = RecordTable()
        #: path -> why a regular file under the limit could not be read.
        self._unreadable: dict[str, str] = {}
        #: path -> a recorded link's target (never followed).
        self._links: dict[str, bytes] = {}
        #: pack -> its bytes.
        self._pack_size: dict[str, int] = {}
        #: Where this sync's snapshots put their bytes: digest -> (pack, offset).
        self._landed: dict[str, tuple[str, int]] = {}
        #: Captured paths whose facts may hide a change (read them again).
        self._racy: set[str] = set()
        #: directory -> recorded entries below it that are not ignored (the
        #: directories to walk even when a .gitignore comes to ignore them).
        self._tracked: dict[str, int] = {}
        #: Directories the last walk did not enter: path -> reason.
        self._unwalked: dict[str, str] = {}
        #: The last walk's answer, while the record is exactly it, and its
        #: paths in order (None: not split from its names yet, see
        #: :meth:`_walk_paths`).
        self._same_as: FileScan | None = None
        self._paths: list[str] | None = []
        #: Blobs no recorded file names any more: removed by the next walk.
        self._orphans: set[str] = set()
        self._pruning: asyncio.Task[None] | None = None
        #: The first refresh, begun early by :meth:`prime`.
        self._priming: asyncio.Task[None] | None = None
        #: directory -> recorded entries below it (ignored ones too).
        self._holding: dict[str, int] = {}
        #: Recorded regular files with more than one link (looked at every
        #: time: a write through another of their names sends no event).
        self._shared: set[str] = set()
        #: Recorded paths inside ignored directories the agent wrote through
        #: ``fs/*`` (flagged :data:`_KNOWN`): stat-ed by every sync. And the
        #: paths it wrote since the last sync, not yet recorded.
        self._known: set[str] = set()
        self._remembered: set[str] = set()
        #: A sync recorded a remembered path for the first time: keep the
        #: record for the next process now.
        self._keep_known = False
        #: A refresh left what it read to be kept by the :meth:`hold` that
        #: follows it (``refresh(keep=False)``).
        self._keep_at_hold = False
        # Between commands, inotify says where to look (a LocalTarget's
        # tree; ``watch``: True/None for ``target`` itself when it is one, a
        # LocalTarget of the same root when ``target`` wraps it, False:
        # always walk).
        local = target if watch in (None, True) and isinstance(target, LocalTarget) else watch if isinstance(watch, LocalTarget) else None
        if self._base:
            # A watch's path scans start at the target's root, where other
            # .gitignore files apply: a directory below it is watched only
            # through a target of its own, else walked.
            local = self._scanner if watch is not False else None
        self._local: LocalTarget | None = local
        self._watch: TreeWatch | None = None
        #: Why the tree is walked every time (None: it is watched).
        self.unwatched: str | None = (
            None if local is not None else "not watched" if watch is False
            else "a working directory below the workspace root, not on this machine" if self._base else "not a local workspace"
        )
        #: Paths events named since the record last moved on.
        self._pending: set[str] = set()
        #: The next sync walks everything (first, or events were lost).
        self._walk_all = True
        #: Records that look at the tree at the same moments as this one
        #: (the artifact store's authored files): each walk's program runs
        #: their ``ride_op()`` too and hands each its result (``landed``),
        #: one round trip for both over SSH. Not when the tree is watched
        #: (a watched sync may run no program at all).
        self.riders: list = []
        #: The refresh's carrier, until its walk's program is built.
        self._carrier: Carrier | None = None
        #: The kept index and its delta as another's program read them
        #: before the first walk (:meth:`preload`): the walk's program is
        #: built knowing the racy paths.
        self._preloaded: tuple[OpResult, OpResult] | None = None
        #: A first walk's capturing scan (:meth:`_capturing`) and its pack,
        #: until the sync adopts what it read.
        self._captured: tuple[FileScan, str] | None = None
        #: The walk's program's own snapshots of the racy paths, taken
        #: after its scan: path -> what :meth:`_snapshots` would answer.
        self._early: dict[str, Snapshot | str | None] = {}
        #: Snapshots the agent's writes took in their own programs, just
        #: after writing (:meth:`written`), in order: the path, the
        #: snapshot and its pack, the record's once a sync takes them (a
        #: sync in between would sweep a pack it does not know of yet).
        self._written: list[tuple[str, Snapshot, str]] = []
        #: What the caller of ``changes()`` has its walk's program run too.
        self._passengers: Passengers | None = None
        #: The baselines of turns in flight (:meth:`hold`), this process's
        #: and those another left (a crash): while one is held, no blob is
        #: removed and the whole index is not replaced, since a recovery
        #: compares the tree with that baseline (the whole index and the
        #: marker's delta) and reads the files' earlier bytes from its blobs.
        self._turns = f"{self._blob_dir}/turns"
        self._holds: set[str] = set()
        #: marker -> the names of the paths its turn's agent wrote where no
        #: walk looks (:meth:`written_ops`).
        self._journaled: dict[str, set[str]] = {}
        #: The kept delta applied to the kept index at the first walk.
        self._delta_applied = False

    # -- the API -------------------------------------------------------------

    def prime(self) -> None:
        """Begin the first refresh now, in the background, while the caller
        does something else that changes no file of the tree (an agent's
        process starting): the refresh awaited before the turn then finds
        the walk done and looks only at what the watch saw change since,
        so the baseline is the tree as it stands at that refresh, exactly
        as without priming. Only for a watched record that was never
        refreshed: a walked one would walk twice."""
        if self._primed or self._priming is not None or self._watching() is None:
            return
        self._priming = asyncio.get_running_loop().create_task(self._prime())

    async def _prime(self) -> None:
        try:
            await self.refresh()
        except Exception:  # noqa: BLE001 -- the refresh the turn awaits walks again, and says why
            pass

    async def refresh(self, *, carrier: Carrier | None = None, keep: bool = True) -> None:
        """Bring the record up to date before a command: the first call
        walks the tree and keeps the content of every file not ignored and
        under the limit; later ones walk by ``lstat`` and read only what
        changed, storing a blob only for a digest not stored yet.
        ``carrier``: runs the walk's program inside another program (the
        turn's first publication), see :data:`Carrier`. ``keep``: False
        when the caller's next step is :meth:`hold`, whose program keeps
        the record too (a whole read is otherwise kept at once, in a
        program of its own)."""
        async with self._lock:
            first = not self._primed
            self._carrier = carrier
            try:
                await self._sync(report=False)
            finally:
                self._carrier = None
            if first and not self._from_index and not self._cheap_to_read_again() or self._keep_known:
                self._keep_known = False
                if keep:
                    await self._save()
                else:
                    self._keep_at_hold = True  # a whole read (or a path only the record knows to look at) is worth keeping at once
        self._prune_soon()

    def _cheap_to_read_again(self) -> bool:
        """Whether the tree is walked at every sync (not watched: an SSH
        workspace) and the files recorded are few and small enough to read
        in one program: such a first read is not kept in a program of its
        own (the next sync's walk keeps it in its program; a process ending
        first leaves the next one that one program to read again). A
        watched sync may run no program at all, so a watched record saves
        at once."""
        table = self._table
        if self._watch is not None or table.captured_count > OPS_PER_PROGRAM:
            return False
        return sum(_size(table.facts_of(path)) for path in table.captured_paths()) <= SAVE_AT_ONCE_BYTES

    def remember(self, path: str) -> None:
        """``path`` (target-relative) was just written by the agent's
        ``fs/*`` request, which checkpointed it: when it lies inside a
        directory a ``.gitignore`` ignores, the next sync records it (not
        as a change of the turn: the write's own capture is) and from then
        on every sync looks at it by a stat of its own, so what a shell
        command does to it is captured as to a tracked file. Elsewhere the
        walk sees it anyway, and it is forgotten. A path that is no plain
        relative one is not remembered (the write was refused before)."""
        own = self._own(path)
        if own is not None:
            self._remembered.add(own)

    def _own(self, path: str) -> str | None:
        """The recorded (base-relative) spelling of target-relative
        ``path``; None when it lies outside the tree or is no plain path."""
        try:
            parts = tuple(split_target_path(path))
        except ValueError:
            return None
        if self._base:
            base = tuple(self._base.split("/"))
            if parts[: len(base)] != base or len(parts) == len(base):
                return None
            parts = parts[len(base) :]
        return "/".join(parts) if parts else None

    def kept_reads(self) -> list[Operation]:
        """Reads of the record an earlier process kept, for a program that
        runs before the first walk (a resume's: the one that reads the
        committed bytes); :meth:`preload` takes their results."""
        return kept_reads(self._blob_dir)

    def preload(self, results: tuple[OpResult, ...] | None) -> None:
        """The results of :meth:`kept_reads` (None: not run). The first walk
        starts from them instead of reading them in its own program: built
        knowing which recorded files are racy, its program snapshots them
        after its scan, not a program of their own once it answered."""
        if results is not None and len(results) == 2 and not self._primed:
            self._preloaded = (results[0], results[1])

    def write_snapshot(self, path: str) -> list[Operation]:
        """Operations snapshotting ``path`` (target-relative), for the end
        of the program of the agent's ``fs/*`` write of it, which has just
        checkpointed it (:meth:`written` takes their results): the next
        sync finds the file with these facts and snapshots it no more."""
        own = self._own(path)
        if own is None:
            return []
        return [
            MakeDirs(self._store, optional=True),
            SnapshotFile(path, store=self._store, max_bytes=self._max, pack=f"pack-{secrets.token_hex(16)}",
                         known=self._kept(own), optional=True),
        ]

    def written(self, path: str, ops: list[Operation], results: tuple[OpResult, ...]) -> None:
        """The results of :meth:`write_snapshot`'s ``ops`` for ``path``.
        Taken before the walk that uses it, the snapshot's facts can hide
        a change made after it within their timestamp's tick: the file is
        read again at the walk after (racy, whatever its times)."""
        own = self._own(path)
        if own is None or len(ops) != 2 or len(results) != 2 or not results[1].ok:
            return
        snapshot, op = results[1].value, ops[1]
        if not isinstance(snapshot, Snapshot) or snapshot.digest is None or not isinstance(op, SnapshotFile):
            return
        self._written.append((own, snapshot, op.pack))

    def close(self) -> None:
        """Stop watching the tree (the record stays usable: it walks)."""
        self._unwatch("the record was closed")
        for task in (self._pruning, self._priming):
            if task is not None:
                task.cancel()
        self._pruning = self._priming = None

    def _prune_soon(self) -> None:
        """Remove the blobs no recorded file names any more in a program of
        their own, once this sync has answered (an unlink of a blob written
        seconds ago costs milliseconds on some filesystems: not while a
        command waits). A sync that comes first removes them itself. A
        walked tree (an SSH workspace) leaves them to its next walk, whose
        program removes them (a round trip costs more than the unlinks;
        a process that ends first leaves them to the next one's first walk,
        which finds every blob no record names)."""
        self._keep_live()
        if self._watch is None:
            return
        if self._orphans and (self._pruning is None or self._pruning.done()):
            self._pruning = asyncio.get_running_loop().create_task(self._prune())

    async def _prune(self) -> None:
        async with self._lock:
            self._keep_live()
            removes = self._removes()
            if not removes:
                return
            try:
                result = await self._target.run(ControlProgram(removes))
            except Exception:  # noqa: BLE001 -- best effort: the next program tries again
                return
            self._removed(removes, result)

    async def changes(self, *, passengers: Passengers | None = None) -> list[FileChange]:
        """Walk again and return every file created, modified or deleted
        since the record was last brought up to date, with its content from
        then (sorted by path); the record moves on to the new state.
        ``passengers``: the caller's operations for the walk's program."""
        async with self._lock:
            if not self._primed:
                raise FileStateError("the file-state record was never brought up to date: call refresh() before a command")
            self._passengers = passengers
            try:
                found = await self._sync(report=True)
            finally:
                self._passengers = None
            if self._keep_known:
                self._keep_known = False
                await self._save()
        self._prune_soon()
        return found

    async def keep_ops(self, *, release: str | None = None) -> tuple[list[Operation], Callable[[tuple[OpResult, ...]], None]]:
        """The operations that keep the record as it stands for the next
        process, for another's program (the turn's settlement: a process's
        last sync is otherwise not kept, and the next process reads again
        what it found), and the callback taking their results. None to run
        when the record is kept already. ``release``: the marker of the
        turn whose baseline (:meth:`hold`) the program no longer needs (it
        runs after the settlement's commit point), removed after them."""
        releasing = frozenset((release,)) if release in self._holds else frozenset()
        async with self._lock:
            ops, done = await self._save_ops(releasing)
        ops = list(ops)
        at = len(ops)
        if releasing:
            ops += self._let_go(release)

        def taken(results: tuple[OpResult, ...]) -> None:
            if at:
                done(ProgramResult(tuple(results)), 0)
            if releasing and len(results) == len(ops) and results[-1].status in (Status.OK, Status.ABSENT):
                self._holds -= releasing
                self._journaled.pop(release, None)

        return ops, taken

    # -- a turn's baseline, for its recovery after a crash ---------------------

    def held_marker(self, session_id: str, turn_id: str) -> str:
        """Where the baseline of turn ``turn_id`` of ``session_id`` is held
        (target-relative)."""
        return f"{self._turns}/{session_id}.{turn_id}"

    async def hold(self, marker: str) -> None:
        """Keep the record as it stands -- the tree before the agent of a
        turn is dispatched, refreshed just now -- as that turn's baseline
        until its settlement committed (:meth:`keep_ops`'s ``release``, or
        :meth:`release`): ``marker`` (:meth:`held_marker`) is a delta of it
        against the whole index, which is not replaced, and no blob is
        removed, while any turn's baseline is held (this process's, or
        another's it finds beside its own: a turn a crash left in flight).
        Should the process die mid-turn, whoever resumes the session
        compares the tree with it (:meth:`changes_since_held`). One program,
        which also keeps the record when it moved on unkept (a refresh's
        whole read, ``refresh(keep=False)``; a workspace's first turn has no
        whole index yet). Raises when it cannot be kept (the turn must not
        be dispatched then)."""
        async with self._lock:
            if not self._primed:
                raise FileStateError("the file-state record was never brought up to date: call refresh() before holding it")
            ops: list[Operation] = []
            saved: Callable[[ProgramResult, int], None] | None = None
            base, since = self._index_base, self._since_index
            if self._keep_at_hold or base is None:
                # The record's save goes first in the marker's own program,
                # and must land: a marker naming a whole index that is not
                # there could never be read back.
                self._keep_at_hold, self._unsaved = False, True
                ops, saved = await self._save_ops(required=True)
                if ops and ops[1].path == self._index:
                    base, since = index_checksum(ops[1].data), set()
            if base is None:
                raise FileStateError("the record of the workspace's files could not be kept, so the turn's changes would not survive a crash")
            data = self._encoded(base, since)
            at = len(ops)
            # Flushed (unlike the index and blobs): after a power loss the
            # marker still says a turn ran, so what cannot be read back is
            # named lost, never taken for a turn that changed nothing.
            ops += [MakeDirs(self._turns, optional=True), Replace(marker, data), ListDir(self._turns)]
            result = await self._target.run(ControlProgram(ops))
            if saved is not None:
                saved(result, 0)
                if at and not result[1].ok:
                    raise FileStateError("the record of the workspace's files could not be kept, so the turn's changes "
                                         f"would not survive a crash: {result[1].reason or result[1].status.value}")
            raise_for_result(ops[at + 1], result[at + 1])
            listed = result[at + 2].value if result[at + 2].ok else ()
            self._holds = {f"{self._turns}/{name}" for name in listed if not name.startswith(".") and not name.endswith(".written")} | {marker}

    def written_ops(self, marker: str, path: str) -> list[Operation]:
        """Operations to run ahead of the agent's first write of ``path``
        (target-relative) in the turn of ``marker``, in the write's own
        program: when the baseline cannot say what was there (a path no
        walk looks at -- inside a directory a ``.gitignore`` ignores, or
        ``.git/`` --) its name is kept beside the baseline, so a recovery
        names it as a gap rather than missing it. None otherwise."""
        own = self._own(path)
        if own is not None and self._table.facts_of(own) is not None:
            return []
        if own is not None and not any(part in SKIP_NAMES for part in own.split("/")) and self._below(own, self._unwalked) is None:
            return []
        name = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        journal = f"{marker}.written"
        self._journaled.setdefault(marker, set()).add(name)
        return [MakeDirs(journal, optional=True), Replace(f"{journal}/{name}", path.encode("utf-8", "surrogateescape"))]

    def _let_go(self, marker: str, names: set[str] | None = None) -> list[Operation]:
        """The removals of a turn's baseline: its written names (``names``:
        as listed; default: those this record wrote), their directory, the
        marker."""
        journal = f"{marker}.written"
        names = self._journaled.get(marker, set()) if names is None else names
        return [*(Remove(f"{journal}/{name}", optional=True) for name in sorted(names)),
                Remove(journal, optional=True), Remove(marker, optional=True)]

    async def written_since_held(self, marker: str) -> list[str]:
        """The paths the written names beside ``marker`` hold
        (:meth:`written_ops`); a recovery's record then lets them go with
        the marker (:meth:`release`)."""
        journal = f"{marker}.written"
        listed = (await self._target.run(ControlProgram([ListDir(journal, optional=True)])))[0]
        if not listed.ok or not listed.value:
            return []
        names = [name for name in listed.value if not name.startswith(".")]
        self._journaled[marker] = set(names)
        reads = [Read(f"{journal}/{name}", optional=True) for name in names]
        found = await self._target.run(ControlProgram(reads))
        return sorted(result.value.decode("utf-8", "surrogateescape") for result in found.results if result.ok)

    def held_by_others(self, own: str) -> list[tuple[str, str, str]]:
        """The baselines held beside ``own`` as the last :meth:`hold` found
        them: ``(marker, session id, turn id)`` each (a turn another
        session runs, or one a stopped process left in flight)."""
        found = []
        for marker in sorted(self._holds - {own}):
            session_id, _, turn_id = marker.rpartition("/")[2].rpartition(".")
            if session_id and turn_id:
                found.append((marker, session_id, turn_id))
        return found

    async def release(self, marker: str) -> None:
        """The turn of ``marker`` settled (its changes are in the session's
        checkpoint): its baseline is no longer held. Nothing to run when the
        settlement's program removed it already (:meth:`keep_ops`)."""
        if marker not in self._holds:
            return
        ops = self._let_go(marker)
        result = await self._target.run(ControlProgram(ops))
        if len(result.results) == len(ops) and result[len(ops) - 1].status in (Status.OK, Status.ABSENT):
            self._holds.discard(marker)
            self._journaled.pop(marker, None)

    async def changes_since_held(self, marker: str) -> list[FileChange] | None:
        """What changed since the baseline ``marker`` holds, for a turn a
        stopped process left in flight: every path created, modified or
        deleted since, with its state then (its bytes read back from the
        blobs), as :meth:`changes` reports a command's. None when no such
        baseline is held (the turn's agent was never dispatched: nothing of
        it to recover). Raises :class:`FileStateError` when the baseline is
        held but cannot be read whole (the whole index it applies to was
        replaced or is damaged). For a record of its own, never refreshed,
        which reads and snapshots but removes and keeps nothing."""
        async with self._lock:
            if self._primed:
                raise FileStateError("a held baseline is compared by a record of its own")
            held = Read(marker, optional=True)
            found = (await self._target.run(ControlProgram([held])))[0]
            if found.status is Status.ABSENT:
                return None
            raise_for_result(held, found)
            self._holds = {marker}  # removes nothing, replaces nothing
            index = (await self._target.run(ControlProgram([Read(self._index, optional=True)])))[0]
            self._preloaded = (index, found)
            found_changes = await self._sync(report=True)
            if not (self._from_index and self._delta_applied):
                raise FileStateError("the record of the workspace's files before the turn was replaced or damaged since")
            return found_changes

    async def _save(self) -> None:
        """Keep the record for the next process now, in a program of its own
        (a whole read is worth keeping at once)."""
        ops, done = await self._save_ops()
        if not ops:
            return
        try:
            result = await self._target.run(ControlProgram(ops))
        except Exception:  # noqa: BLE001 -- the record in memory is whole; the next save tries again
            return
        done(result, 0)

    def _encoded(self, base: bytes | None, since: set[str]) -> bytes:
        """The record as it stands, encoded: a whole index (``base`` None)
        or a delta of the paths ``since`` against the whole index whose
        checksum is ``base``."""
        table = self._table
        changed: list[str] | None = None
        removed: set[str] = set()
        if base is not None:
            changed = sorted(path for path in since if path in table)
            removed = {path for path in since if path not in table}
        # A whole index in the order of the walk the record is (when it is
        # one, of every recorded path): the next process's walk lines up.
        order = self._walk_paths() if base is None and self._same_as is not None else None
        if order is not None and (len(order) != len(table) or not all(map(table.__contains__, order))):
            order = None
        state = RecordState(table, self._unreadable, self._links, self._racy, self._unwalked, self._pack_size,
                            base or b"", removed, holding=self._holding, tracked=self._tracked, known=self._known,
                            changed=changed, order=order)
        with gc_paused():
            return encode_index(state, max_file_bytes=self._max, blob_dir=self._blob_dir)

    async def _save_ops(self, releasing: frozenset[str] = frozenset(), *,
                        required: bool = False) -> tuple[list[Operation], Callable[[ProgramResult, int], None]]:
        """The operations that keep the record as it stands for the next
        process (see :mod:`.file_state_index`), when it moved on since the
        last save: a sync runs them at the head of its own program, so a
        save costs no round trip (the record a sync leaves is kept by the
        next one; a process that ends first leaves the next one a few more
        files to read). Best effort, all optional, and never flushed (like
        the packs): an index lost or torn in a crash fails its checksum.
        With them, the callback that takes their outcome from a result
        (the first of them at the given position). ``required``: the index's
        write stops the program when it fails (what follows depends on it)."""
        if not self._unsaved:
            return [], _nothing
        held = self._holds - releasing
        if len(self._table.pack_rows) > MAX_PACKS and not held:
            try:
                await self._merge_packs()
            except Exception:  # noqa: BLE001 -- the packs stay as they were; the next save tries again
                pass
        table = self._table
        whole = self._index_base is None or len(self._since_index) > max(DELTA_PATHS, len(table) // 8)
        if whole and held and self._index_base is not None:
            return [], _nothing  # a held baseline's delta names the whole index: kept by a later save
        data = self._encoded(None if whole else self._index_base, self._since_index)
        # A whole index first, then its delta goes: a delta never applies
        # to a whole index it was not made for (it names its checksum).
        ops: list[Operation] = [
            MakeDirs(self._blob_dir, optional=True),
            Replace(self._index if whole else self._delta, data, optional=not required, deferred=True),
        ]
        if whole:
            ops.append(Remove(self._delta, optional=True, deferred=True))
        retiring = set(self._retiring)

        def done(result: ProgramResult, at: int) -> None:
            if not result[at + 1].ok:
                return
            self._unsaved = False
            if whole:
                self._index_base = index_checksum(data)
                self._since_index = set()
                self._orphans |= retiring
                self._retiring -= retiring

        return ops, done

    async def _merge_packs(self) -> None:
        """Copy the live blobs of the smaller packs (all of them, when they
        fit :data:`MERGE_BYTES`) into one new pack; the old ones go with the
        orphans once the index names the new one. A blob whose bytes no
        longer match its digest is dropped (its change becomes a gap, as a
        damaged blob's is)."""
        table = self._table
        packs = sorted(table.live_packs(), key=lambda pack: self._pack_size.get(pack, 0))
        chosen: list[str] = []
        total = 0
        for pack in packs:
            size = self._pack_size.get(pack, 0)
            if total + size > MERGE_BYTES:
                break
            chosen.append(pack)
            total += size
        if len(chosen) < 2:
            return
        reads = [Read(f"{self._store}/{pack}", optional=True) for pack in chosen]
        result = await self._target.run(ControlProgram(reads))
        content = {pack: outcome.value for pack, outcome in zip(chosen, result.results) if outcome.ok}
        located = {digest: (pack, start, _size(table.facts_of(path))) for path, digest, pack, start in table.located() if pack in content}
        merged = f"pack-{secrets.token_hex(16)}"
        parts: list[bytes] = []
        moved: dict[str, int] = {}
        offset = 0
        for digest, (pack, start, size) in located.items():
            data = content[pack][start : start + size]
            if hashlib.sha256(data).hexdigest() != digest:
                continue
            parts.append(data)
            moved[digest] = offset
            offset += size
        done = await self._target.run(ControlProgram([CreateExclusive(f"{self._store}/{merged}", b"".join(parts), deferred=True)]))
        if done.stopped_at is not None:
            return
        # A damaged one is read back as missing.
        table.relocate({digest: (merged, moved[digest]) if digest in moved else None for digest in located})
        for pack in content:
            self._pack_size.pop(pack, None)
            self._retiring.add(pack)  # removed once a whole index no longer names it
        if moved:
            self._pack_size[merged] = offset
        else:
            self._orphans.add(merged)
        self._index_base = None  # blobs moved under unchanged paths: a delta would not say so

    def _load(self, state: RecordState) -> None:
        """Start from ``state``, the record an earlier process kept: its
        facts and digests stand for every file whose facts still match."""
        self._table = state.table
        self._unreadable = state.unreadable
        self._links = state.links
        self._racy = state.racy
        self._unwalked = state.unwalked
        self._pack_size = state.pack_sizes
        if state.holding is not None and state.tracked is not None and state.known is not None:
            # Kept with the index (derived from the facts when it was saved).
            self._holding, self._tracked, self._known = state.holding, state.tracked, state.known
            return
        self._count_entries()

    def _adopt(self, scan: FileScan, pack: str) -> None:
        """Start from what the record's first walk read as it went (a
        capturing scan): every entry it recorded, each captured file with
        its digest and its place in ``pack``, as a kept index would give
        them (a file whose facts still match holds those bytes). The
        entries it left to be read (links, files that changed while read)
        are left out: the walk finds them new, and the sync reads them as
        it reads any."""
        records = list(_CAPTURE.iter_unpack(scan.captures))  # type: ignore[arg-type]
        statuses = bytes(map(_FIRST, records))
        paths = scan.paths()
        facts: bytes = scan.facts
        joined: str | None = scan.names[:-1]
        if CAPTURE_LEFT in statuses:
            keep = statuses.translate(_NOT_LEFT)
            paths = list(itertools.compress(paths, keep))
            records = list(itertools.compress(records, keep))
            facts = b"".join(itertools.compress(scan.packed_facts(), keep))
            statuses = bytes(map(_FIRST, records))
            joined = None
        captured = statuses.translate(_IS_CAPTURED)
        self._table = RecordTable(
            paths, facts, b"".join(map(_SECOND, records)), captured, array("I", list(captured)), array("Q", map(_THIRD, records)),
            [pack], joined=joined,
        )
        if scan.pack_bytes:
            self._pack_size[pack] = scan.pack_bytes
        self._count_entries()

    def _count_entries(self) -> None:
        """Which directories hold (and track) entries, and the paths known
        only to the record, derived from the table's facts."""
        table = self._table
        # Iterated in C (map, compress, Counter): a loop in Python over
        # 100,000 entries is most of the load's time. Entries per parent
        # directory first, then up the ancestors: a handful of directories
        # hold most files.
        parents = list(map(_PARENT, map(_SPLIT_PARENT, table.rows)))
        kinds = list(map(_KIND_BITS, map(table.facts.__getitem__, table.rows.values())))
        holding = Counter(parents)
        tracked = holding.copy()
        tracked.subtract(itertools.compress(parents, map(_UNTRACKED.__and__, kinds)))
        self._known = set(itertools.compress(table.rows, map(_KNOWN.__and__, kinds)))
        holding.pop("", None)
        tracked.pop("", None)
        self._holding = _with_ancestors(holding)
        self._tracked = _with_ancestors({directory: count for directory, count in tracked.items() if count})

    # -- one walk ------------------------------------------------------------

    async def _sync(self, *, report: bool) -> list[FileChange]:
        first = not self._primed
        self._early = {}  # a failed sync's, taken before this walk
        watch = self._watching()
        plan: list[str] | None = None
        if watch is not None and not self._walk_all:
            self._pending |= watch.drain()
            if watch.lost is None:
                plan = _outermost(self._pending | self._racy | self._shared)
                if not plan and not self._known and not self._remembered_inside():
                    return []  # no event, nothing racy: nothing to look at
        if plan is None:
            self._captured = None
            scan, stored = await self._walk(first, watch)
            captured, self._captured = self._captured, None
            if captured is not None:
                self._adopt(*captured)
                if captured[0] is scan:
                    scan = msgspec.structs.replace(scan, captures=None)  # not kept with the walk the record is
            if self._same_as is not None and scan.facts == self._same_as.facts and scan.names == self._same_as.names:
                if scan.unwalked == self._same_as.unwalked and not self._racy and not self._known and not self._remembered:
                    self._moved_on(scan, watch)
                    return []  # the very same answer as the walk the record is
            unwalked = dict(scan.unwalked)
            # current: the walked facts of every path to look at (new,
            # changed, or racy); deleted: recorded paths the walk no longer meets.
            with gc_paused():
                current, candidates, deleted, paths = self._diff(scan, unwalked)
        else:
            scan, stored = await self._look(plan, watch)
            unwalked, current, candidates, deleted = self._diff_within(scan, plan)
            paths = []
        silent = await self._look_at_known(unwalked, current, candidates, deleted) if self._known or self._remembered else set()
        old = self._recorded_facts((*current, *deleted))
        rechecks = [path for path in self._racy if path in current and old.get(path) == current[path]]
        recheck_set = set(rechecks)
        captures = [path for path in (*candidates, *rechecks) if self._capturable(current[path])]
        links = [path for path in candidates if current[path][0] & (SCAN_LINK | SCAN_IGNORED) == SCAN_LINK]
        # Snapshots taken already (the walk's program's, the agent's
        # writes') stand where the walk found the facts they were taken with.
        early, by_write = self._taken_before(captures, current)
        rest = [path for path in captures if path not in early]
        # The blobs of files whose facts changed are read along with the
        # snapshots (most of them did change), the rest after the verdicts.
        digest_of = self._table.digest_of
        guessed = [path for path in (*candidates, *deleted) if digest_of(path) is not None] if report and (rest or links) else []
        taken, before, targets = await self._snapshots(rest, guessed, links)
        taken.update(early)
        # A file the agent wrote was checkpointed by its write.
        silent |= by_write

        consistent = True
        for path in captures:
            outcome = taken[path]
            if outcome is None:  # vanished since the walk
                del current[path]
                consistent = False
                if path in old:
                    deleted.append(path)
            elif isinstance(outcome, Snapshot) and _facts_of(current[path], outcome) != current[path]:
                current[path] = _facts_of(current[path], outcome)
                consistent = False

        # Verdicts first, against the record as it stands; the record moves
        # on only once everything is read, so a failure leaves it as it was.
        #: (path, digest of its recorded content, or the gap when none).
        wanted: list[tuple[str, str | None, str | None, ScanFacts]] = []
        changes: list[FileChange] = []
        updates: list[tuple[str, ScanFacts, str | None, str | None]] = []
        for path in (*candidates, *rechecks):
            if path not in current:
                continue
            facts = current[path]
            outcome = taken.get(path)
            digest = outcome.digest if isinstance(outcome, Snapshot) else None
            if report:
                previous = old.get(path)
                if path in silent:
                    pass  # the agent's fs write, which checkpointed it
                elif previous is None:
                    changes.append(self._created(path, facts))
                elif self._changed(path, previous, facts, digest, path in recheck_set):
                    wanted.append(self._recorded(path, previous))
            updates.append((path, facts, digest, outcome if isinstance(outcome, str) else None))
        if report:
            wanted.extend(self._recorded(path, old[path]) for path in deleted)
        if wanted:
            missing = {digest: was[1] for path, digest, _, was in wanted if digest is not None and path not in before}
            blobs = await self._read_blobs(missing) if missing else {}
            for path, digest, gap, was in wanted:
                mode = was[5]
                if gap is not None:
                    changes.append(FileChange(path, None, gap))
                elif was[0] & SCAN_DIR:
                    changes.append(FileChange(path, Entry.directory(mode)))
                elif was[0] & SCAN_LINK:
                    target = self._links.get(path)
                    changes.append(FileChange(path, Entry.symlink(target)) if target else FileChange(path, None, LINK_GAP))
                elif digest is None:
                    # Over the size limit: its bytes were never kept (the
                    # checkpoint seam makes it a gap).
                    changes.append(FileChange(path, Entry(Entry.FILE, mode, None, was[1])))
                else:
                    data = before[path] if path in before else blobs.get(digest)
                    changes.append(FileChange(path, Entry.file(data, mode)) if data is not None else FileChange(path, None, LOST_BLOB_GAP))

        if updates or deleted or targets or first or self._racy or unwalked != self._unwalked:
            self._unsaved = True
        for update in updates:
            self._set(*update)
        for path, target in targets.items():
            if target is None:
                self._links.pop(path, None)
            else:
                self._links[path] = target
        for path in deleted:
            self._drop(path)
        floor = scan.started_ns - RACY_NS
        self._racy = {path for path in scan.racy if digest_of(path) is not None}
        self._racy.update(path for path in captures if digest_of(path) is not None and max(current[path][2], current[path][3]) >= floor)
        # Snapshotted before the walk began: a change after the snapshot, in
        # its timestamp's tick, would not show in the facts whatever their age.
        self._racy.update(path for path in by_write if digest_of(path) is not None)
        self._unwalked = unwalked
        # Committed together: a later walk of the same names is compared
        # with this one by index.
        self._same_as, self._paths = (scan, paths) if consistent and plan is None else (None, [])
        self._primed = True
        if plan is None:
            self._shared = set(scan.shared)
        else:
            self._shared = {path for path in self._shared if not _within(path, plan)} | set(scan.shared)
        self._moved_on(scan, watch)
        self._orphans.update(self._unnamed(stored))
        self._landed.clear()
        self._sweep_packs()
        changes.sort(key=lambda change: change.path)
        if self._base:
            changes = [dataclasses.replace(change, path=self._at(change.path)) for change in changes]
        return changes

    def _taken_before(self, captures: list[str], current: dict[str, ScanFacts]) -> tuple[dict[str, Snapshot], set[str]]:
        """The snapshots taken before this point -- by the walk's program
        after its scan, or by the agent's writes just after writing
        (``by_write``, the second) -- of those of ``captures`` the walk
        found with the very facts the snapshot read the file with. Every
        pack they appended to is the record's now (swept unless named)."""
        early, self._early = self._early, {}
        taking, self._written = self._written, []
        written: dict[str, Snapshot] = {}
        for path, snapshot, pack in taking:
            written[path] = snapshot  # the last write of a path
            if snapshot.offset is not None:
                self._land(snapshot, pack)
        taken: dict[str, Snapshot] = {}
        by_write: set[str] = set()
        for path in captures:
            facts = current[path]
            found = early.get(path)
            if self._fits(found, facts):
                taken[path] = found  # type: ignore[assignment]
            elif self._fits(written.get(path), facts):
                taken[path] = written[path]
                by_write.add(path)
        return taken, by_write

    def _fits(self, snapshot: object, facts: ScanFacts) -> bool:
        """Whether ``snapshot`` read the file the walk found with ``facts``
        and its bytes are kept (appended, or known kept already)."""
        return (
            isinstance(snapshot, Snapshot) and snapshot.digest is not None and _facts_of(facts, snapshot) == facts
            and (snapshot.offset is not None or snapshot.digest in self._landed or self._table.digest_location(snapshot.digest) is not None)
        )

    def _at(self, path: str) -> str:
        """The target-relative path of a recorded (base-relative) path."""
        return f"{self._base}/{path}" if self._base else path

    def _walk_paths(self) -> list[str]:
        """The paths of the walk the record is (``_same_as``), in its order:
        split from its names when first asked (a new process's first walk
        that finds nothing changed never asks: 100,000 strings unmade)."""
        if self._paths is None:
            self._paths = self._same_as.paths() if self._same_as is not None else []
        return self._paths

    def _diff(self, scan: FileScan, unwalked: dict[str, str]) -> tuple[dict[str, ScanFacts], list[str], list[str], list[str] | None]:
        """``(current, candidates, deleted, paths)`` of ``scan`` against the
        record: the walked facts of the paths new or changed
        (``candidates``) and of the racy ones, the recorded paths gone, and
        the scan's paths in order (empty when they do not line up with its
        facts; None when they do but were not needed: split when asked,
        :meth:`_walk_paths`). Changes nothing."""
        table = self._table
        rows, facts_of = table.rows, table.facts_of
        last = self._same_as
        if last is not None and scan.names == last.names and scan.unwalked == last.unwalked and (self._paths is None or len(self._paths) == len(scan)):
            # The same names as the walk the record is: compare the packed
            # facts (a command that edits files in place, the usual case).
            changed = scan.changed_since(last)
            paths = self._walk_paths() if changed else self._paths
            current = {paths[index]: scan.facts_at(index) for index in changed}  # type: ignore[index]
            candidates = list(current)
            current.update((path, _FACTS.unpack(facts_of(path))) for path in self._racy if path not in current)
            return current, candidates, [], paths
        recorded = table.walk_facts(scan.names)
        if recorded is not None:
            # Every recorded path met, each once, in the record's order
            # (but for those added since the load): compared in C.
            changed = differing_records(scan.facts, recorded)
            paths = scan.paths() if changed else None
            current = {paths[index]: scan.facts_at(index) for index in changed}  # type: ignore[index]
            candidates = list(current)
            current.update((path, _FACTS.unpack(facts_of(path))) for path in self._racy if path in rows and path not in current)
            return current, candidates, [], paths
        paths = scan.paths()
        found = list(map(rows.get, paths, itertools.repeat(0)))
        # The record's facts of each walked path in the walk's order (a
        # path not recorded is row 0, whose facts match no walk's), joined
        # and compared with the walk's in C, with no dict of the walk and
        # no object per entry (the most of a diff's time at 100,000 files):
        # the indices that differ.
        changed = differing_records(scan.facts, b"".join(map(table.facts.__getitem__, found)))
        current = {paths[index]: scan.facts_at(index) for index in changed}
        candidates = list(current)
        met = set(found)
        met.discard(0)
        new = [paths[index] for index in changed if not found[index]]
        # A path twice (a well-formed walk has none): indices would not line up.
        once = len(met) == len(paths) - len(new) and len(set(new)) == len(new)
        # A directory not walked this time, and what is below it, is kept
        # as recorded (it is there, unlisted); otherwise a recorded path
        # the walk did not meet is gone. None is when the walk met every
        # recorded path, each once.
        if once and len(met) == len(rows):
            deleted = []
        else:
            deleted = [path for path, row in rows.items() if row not in met and path not in unwalked and self._below(path, unwalked) is None]
        # A racy path not among them was walked with its recorded facts.
        current.update((path, _FACTS.unpack(facts_of(path))) for path in self._racy if rows.get(path) in met and path not in current)
        return current, candidates, deleted, paths if once else []

    def _remembered_inside(self) -> bool:
        """Whether a path remembered since the last sync lies inside a
        directory the record leaves out as ignored (else it is forgotten:
        the walk, and the events, see it)."""
        if any(self._below(path, self._unwalked) == SCAN_IGNORED_REASON for path in self._remembered):
            return True
        self._remembered = set()
        return False

    async def _look_at_known(
        self, unwalked: dict[str, str], current: dict[str, ScanFacts], candidates: list[str], deleted: list[str]
    ) -> set[str]:
        """Look at the known paths (and those remembered since the last
        sync) that lie inside a directory the walk left out as ignored: one
        :class:`~mevedel_server.targets.ScanPaths` program that ``lstat``-s
        each through its parents' descriptors (never following a link) and
        lists nothing -- the ignored directories are not walked. What
        changed joins ``current`` and ``candidates``, what is gone
        ``deleted``, as the walk's own would. The remembered paths it
        records for the first time (the agent's own writes, which
        checkpointed them: not a change to report)."""
        remembered = self._remembered
        # Elsewhere the walk met them (or found them gone) itself.
        inside = sorted(path for path in self._known | remembered if self._below(path, unwalked) == SCAN_IGNORED_REASON)
        if not inside:
            self._remembered = set()
            return set()
        # Named as the scanning target names them (a scanner is rooted at the base).
        named = {path if self._scanner is not None else self._at(path): path for path in inside}
        op = ScanPaths(
            ".", paths=tuple(named), skip_names=SKIP_NAMES, skip_paths=() if self._base else (self._blob_dir, *self._skip),
            descend=tuple(sorted({directory for name in named for directory in _ancestors(name)})),
            limit=SCAN_LIMIT, racy_ns=RACY_NS,
        )
        result = await self._run_scan([op])
        raise_for_result(op, result[-1])
        scan: FileScan = result[-1].value
        entries = scan.entries()
        found = dict(scan.unwalked)
        self._remembered = set()
        silent: set[str] = set()
        # (A racy path may be in ``current`` already, with its recorded facts.)
        listed = set(candidates)
        for name, path in named.items():
            facts = entries.get(name)
            previous = self._table.facts_of(path)
            if facts is None:
                # Gone -- unless a directory above it could not be opened
                # (then it is kept as recorded, as a walk keeps it).
                if previous is not None and path in self._known and self._below(name, found) is None:
                    current.pop(path, None)  # racy, it was there with its recorded facts
                    if path not in deleted:
                        deleted.append(path)
                continue
            facts = ((facts[0] & ~SCAN_IGNORED) | _KNOWN, *facts[1:])
            if path in remembered:
                silent.add(path)
                if path not in self._known:
                    # A process ends with its last sync's state not kept:
                    # this one is kept at once, or the next process would
                    # not know to look at it.
                    self._keep_known = True
            if previous != _packed(facts):
                if path not in listed:
                    candidates.append(path)
                current[path] = facts
            elif path in self._racy:
                current[path] = facts
        return silent

    def _diff_within(
        self, scan: FileScan, plan: list[str]
    ) -> tuple[dict[str, str], dict[str, ScanFacts], list[str], list[str]]:
        """``(unwalked, current, candidates, deleted)`` of ``scan``, which
        looked only at ``plan`` and below, against the record: as
        :meth:`_diff`, with everything elsewhere as the record has it."""
        old = self._table.rows
        facts_of = self._table.facts_of
        entries = scan.entries()
        found = dict(scan.unwalked)
        unwalked = {path: reason for path, reason in self._unwalked.items() if not _within(path, plan)}
        unwalked.update(found)
        # The recorded paths the scan answered for: the plan's own, and all
        # below those that held recorded entries.
        looked = {path for path in plan if path in old}
        directories = {path for path in plan if path in self._holding or not path}
        if "" in directories:
            looked = set(old)
        elif directories:
            looked.update(path for path in old if _within(path, directories))
        deleted = [path for path in looked if path not in entries and path not in found and self._below(path, found) is None]
        candidates = [path for path, facts in entries.items() if facts_of(path) != _packed(facts)]
        current = {path: entries[path] for path in candidates}
        current.update((path, entries[path]) for path in self._racy if path in entries and path not in current)
        return unwalked, current, candidates, deleted

    def _watching(self) -> TreeWatch | None:
        """The watch of the tree, made on first use; None: walk."""
        if self._watch is None and self.unwatched is None and self._local is not None:
            reason = unwatchable(os.path.realpath(self._local.root))
            if reason is not None:
                self.unwatched = reason
                return None
            try:
                self._watch = TreeWatch(self._local)
            except WatchUnavailable as exc:
                self.unwatched = str(exc)
            self._walk_all = True
        return self._watch

    def _unwatch(self, reason: str) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self.unwatched = reason
        self._walk_all = True

    def _moved_on(self, scan: FileScan, watch: TreeWatch | None) -> None:
        """The record is ``scan``'s state: what events named is seen."""
        if watch is not None and watch is self._watch:
            self._pending.clear()
            self._walk_all = watch.lost is not None

    async def _watched_scan(self, op: ScanPaths, watch: TreeWatch, ops: list[Operation]) -> tuple[FileScan, object]:
        """Run ``ops`` (ending with ``op``), watch the directories it
        listed, and run ``op`` again while that found unwatched ones (what
        changed in them before their watch began is in the last answer):
        ``(scan, the program's result)``. A capturing ``op`` captures once:
        its scan is kept to be adopted, the walks after it only look (what
        changed since it read is a change between the two)."""
        result = await self._run_scan(ops)
        if op.capture_pack is not None:
            self._keep_captured(op, result[-1])
            op = msgspec.structs.replace(op, capture_store=None, capture_bytes=0, capture_pack=None)
        for _pass in range(WATCH_PASSES):
            raise_for_result(op, result[-1])
            scan: FileScan = result[-1].value
            if scan.truncated:
                break
            try:
                added = await asyncio.to_thread(watch.watch, scan.directories)
            except WatchUnavailable as exc:
                self._unwatch(str(exc))
                return scan, result
            if not added:
                return scan, result
            again = await self._run_scan([op])
            result = again if len(ops) == 1 else _replace_last(result, again[0])
        else:
            raise_for_result(op, result[-1])
            watch.lost = "directories kept appearing while they were being watched"
        return result[-1].value, result

    async def _look(self, plan: list[str], watch: TreeWatch) -> tuple[FileScan, tuple[str, ...]]:
        """A scan of ``plan`` only (and of the directories in it)."""
        op = self._scan_op(plan)
        self._keep_live()
        removes = self._removes()
        saves, saved = await self._save_ops()
        scan, result = await self._watched_scan(op, watch, [*removes, *saves, op])
        self._removed(removes, result)
        if saves:
            saved(result, len(removes))
        _refuse_truncated(scan)
        return scan, ()

    def _scan_op(self, plan: list[str] | None, *, capture: bool = False) -> ScanTree:
        options = dict(
            skip_names=SKIP_NAMES, skip_paths=() if self._base else (self._blob_dir, *self._skip), descend=tuple(self._tracked),
            limit=SCAN_LIMIT, racy_ns=RACY_NS, directories_too=True,
        )
        if capture:
            options.update(capture_store=self._store, capture_bytes=self._max, capture_pack=f"pack-{secrets.token_hex(16)}")
        if plan is None:
            return ScanTree("." if self._scanner is not None else self._base or ".", **options)
        return ScanPaths(".", paths=tuple(plan), **options)

    def _capturing(self) -> bool:
        """Whether the first walk reads the files as it goes: the record
        holds nothing (no index was kept) and knows it before the walk's
        program is built, and the walk is the target's own (a scanner's
        root is not the blob store's)."""
        return not self._primed and not len(self._table) and not self._from_index and self._scanner is None

    def _keep_captured(self, op: ScanTree, outcome: OpResult) -> None:
        scan = outcome.value if outcome.ok else None
        if isinstance(scan, FileScan) and scan.captures is not None and not scan.truncated:
            self._captured = (scan, op.capture_pack)  # type: ignore[assignment]

    async def _run_scan(self, ops: list[Operation]) -> ProgramResult:
        """Run ``ops``, the scan last: one program, or with a scanner the
        blob store's operations on the target and the scan on the scanner."""
        if self._scanner is None:
            return await self._target.run(ControlProgram(ops))
        *store, scan = ops
        first = await self._target.run(ControlProgram(store)) if store else ProgramResult(())
        second = await self._scanner.run(ControlProgram([scan]))
        return ProgramResult((*first.results, *second.results), first.stopped_at)

    async def _carried(self, ops: list[Operation]) -> ProgramResult:
        """:meth:`_run_scan`, by the refresh's carrier when it has one (once:
        the walk's program; what follows it runs on its own) and it carried
        every operation."""
        carrier, self._carrier = self._carrier, None
        if carrier is not None and self._scanner is None:
            results = await carrier(ops)
            if results is not None and len(results) == len(ops) and not any(r.status is Status.SKIPPED for r in results):
                return ProgramResult(tuple(results))
        return await self._run_scan(ops)

    def _keep_live(self) -> None:
        """Take back from the orphans what the record names again."""
        if self._orphans:
            # The few orphans looked up (a set minus a dict's keys iterates
            # all 100,000 of them).
            self._orphans = set(self._unnamed(self._orphans))

    def _kept(self, path: str) -> str | None:
        """The digest recorded for ``path`` when its bytes are kept in a
        pack: a snapshot that finds them again appends nothing."""
        return self._table.digest_of(path) if self._table.location_of(path) is not None else None

    def _blob_read(self, digest: str, size: int, where: tuple[str, int] | None) -> Operation:
        """The operation that reads the blob of ``digest`` (``size`` bytes),
        which lies ``where`` in a pack (None: loose)."""
        if where is None:
            return Read(f"{self._store}/{digest}", optional=True)
        return ReadSlice(f"{self._store}/{where[0]}", offset=where[1], size=size, optional=True)

    def _removes(self) -> list[Remove]:
        if self._holds:
            return []  # a held baseline may name them (removed once released)
        return [Remove(f"{self._store}/{name}", optional=True, deferred=True) for name in sorted(self._orphans)]

    def _removed(self, removes: list[Remove], result) -> None:
        for op, outcome in zip(removes, result.results):
            if outcome.ok or outcome.status is Status.ABSENT:
                self._orphans.discard(op.path.rsplit("/", 1)[1])

    async def _walk(self, first: bool, watch: TreeWatch | None = None) -> tuple[FileScan, tuple[str, ...]]:
        """The scan, and on the first walk the blob store's names (and the
        record the last process kept, loaded)."""
        if watch is not None:
            # Events from before this walk say nothing it will not see.
            try:
                watch.reset()
            except WatchUnavailable as exc:
                self._unwatch(str(exc))
                watch = None
            self._pending.clear()
        scan_op = self._scan_op(None if watch is None else [""])
        # Blobs the record stopped naming at the last walk go in this one's
        # program: no round trip of their own.
        self._keep_live()
        removes = self._removes()
        saves, saved = await self._save_ops()
        ops: list[Operation] = [*removes, *saves, scan_op]
        stored: tuple[str, ...] = ()
        preloaded, self._preloaded = self._preloaded, None
        # The blob store's listing (and the kept index) read in the walk's program.
        reads_start = False
        if first:
            removes, saves = [], []
            start: list[Operation] = [MakeDirs(self._store, optional=True), ListDir(self._store, optional=True)]
            if preloaded is not None:
                # Read before (a resume's program): loaded now, the walk is
                # built knowing what it tracks and which files are racy.
                self._take_index(*preloaded)
                scan_op = self._scan_op(None if watch is None else [""], capture=self._capturing())
            else:
                start += self.kept_reads()
            if watch is None:
                ops = [*start, scan_op]
                reads_start = True
            else:
                ops = [scan_op]
                # Watched: the directories the kept record knows are watched
                # before the walk, so that it need not walk again for them
                # (a directory watched only after the walk is walked twice).
                result = await self._target.run(ControlProgram(start))
                stored = self._stored(result[1])
                if preloaded is None:
                    self._take_index(result[2], result[3])
                if self._from_index:
                    try:
                        await asyncio.to_thread(watch.watch, self._known_directories())
                    except WatchUnavailable as exc:
                        self._unwatch(str(exc))
                        watch = None
                # Built once the kept record is loaded: its entries below
                # a directory a .gitignore came to ignore are walked.
                scan_op = self._scan_op([""] if watch is not None else None, capture=self._capturing())
                ops = [scan_op]
        if watch is not None:
            scan, result = await self._watched_scan(scan_op, watch, ops)  # type: ignore[arg-type]
        else:
            riders = list(self.riders)
            # Before the scan, which stays last (with a scanner, they run
            # with the blob store's operations on the target).
            ops[-1:-1] = [rider.ride_op() for rider in riders]
            # After the scan (a scanner's program is the scan alone).
            passengers, self._passengers = self._passengers if self._scanner is None else None, None
            at = len(ops)
            if passengers is not None:
                ops += passengers.ops
            rechecks = self._early_ops() if self._scanner is None else []
            early = len(ops)
            ops += [op for _, op in rechecks]
            result = await self._carried(ops)
            for rider, landed in zip(riders, result.results[at - 1 - len(riders) : at - 1]):
                rider.landed(landed)
            if passengers is not None:
                passengers.results = tuple(result.results[at : at + len(passengers.ops)])
            raise_for_result(scan_op, result[at - 1])
            scan = result[at - 1].value
            if scan_op.capture_pack is not None:
                self._keep_captured(scan_op, result[at - 1])
            self._early = self._taken_early(rechecks, result.results[early:])
        self._removed(removes, result)
        if saves:
            saved(result, len(removes))
        _refuse_truncated(scan)
        if reads_start:
            stored = self._stored(result[1])
            if preloaded is None:
                self._take_index(result[2], result[3])
            if preloaded is None and self._descend_missed(scan):
                # Read in the walk's own program (one round trip), the kept
                # record was not loaded when the walk was built: it tracks
                # entries below a directory a .gitignore came to ignore,
                # which this walk left out, so the walk is made again with
                # them (rare: once such a directory's entries are walked,
                # they are recorded ignored and no longer descended).
                scan_op = self._scan_op(None)
                result = await self._run_scan([scan_op])
                raise_for_result(scan_op, result[-1])
                scan = result[-1].value
                _refuse_truncated(scan)
        return scan, stored

    def _early_ops(self) -> list[tuple[str, Operation]]:
        """The snapshots of the racy paths (those the walk will find with
        their recorded facts are read again whatever: git's racily clean
        entries) for the walk's own program, after its scan: taken after
        the walk began, they are as good as a program of their own after
        it answered, one round trip sooner."""
        facts_of = self._table.facts_of
        racy = sorted(path for path in self._racy if (facts := facts_of(path)) is not None and self._capturable(_FACTS.unpack(facts)))
        if not racy:
            return []
        pack = f"pack-{secrets.token_hex(16)}"
        ops: list[tuple[str, Operation]] = [("", MakeDirs(self._store, optional=True))]
        ops += [
            (path, SnapshotFile(self._at(path), store=self._store, max_bytes=self._max, pack=pack, known=self._kept(path), optional=True))
            for path in racy[:OPS_PER_PROGRAM]
        ]
        return ops

    def _taken_early(self, ops: list[tuple[str, Operation]], results) -> dict[str, Snapshot | str | None]:
        """What the walk's program's snapshots (:meth:`_early_ops`) took;
        their pack is the record's (swept unless a path comes to name it)."""
        taken: dict[str, Snapshot | str | None] = {}
        for (path, op), outcome in zip(ops, results):
            if not isinstance(op, SnapshotFile) or outcome.status is Status.SKIPPED:
                continue
            taken[path] = found = _snapshot_outcome(outcome)
            if isinstance(found, Snapshot) and found.offset is not None:
                self._land(found, op.pack)
        return taken

    def _land(self, snapshot: Snapshot, pack: str | None) -> None:
        """``snapshot``'s bytes were appended to ``pack`` (a sync's)."""
        assert pack is not None and snapshot.offset is not None and snapshot.digest is not None
        self._landed[snapshot.digest] = (pack, snapshot.offset)
        self._pack_size[pack] = max(self._pack_size.get(pack, 0), snapshot.offset + snapshot.size)

    def _descend_missed(self, scan: FileScan) -> bool:
        """Whether ``scan`` left out, as ignored, a directory the record
        tracks entries below (a walk built before the record was loaded)."""
        tracked = self._tracked
        return any(reason == SCAN_IGNORED_REASON and path in tracked for path, reason in scan.unwalked)

    def _unnamed(self, names) -> list[str]:
        """Those of the blob store's ``names`` no recorded path names (a
        pack, or a loose blob of an earlier version)."""
        table = self._table
        packs = [name for name in names if name.startswith("pack-")]
        loose = [name for name in names if not name.startswith("pack-")]
        if len(loose) > SEARCHES:
            # Many loose blobs (an earlier version's store): one set of the
            # record's digests rather than a search for each.
            named = set(map(table.digest_of, table.captured_paths()))
            unnamed = [name for name in loose if name not in named]
        else:
            unnamed = [name for name in loose if not _is_digest(name) or not table.names(name)]
        return [*(pack for pack in packs if not table.pack_live(pack)), *unnamed]

    @staticmethod
    def _stored(listing: OpResult) -> tuple[str, ...]:
        """The blob store's names, from its listing."""
        return tuple(listing.value) if listing.ok else ()

    def _take_index(self, index: OpResult, delta_read: OpResult) -> None:
        """Load the record kept on disk from the reads of the index and its
        delta (:meth:`kept_reads`)."""
        if not index.ok:
            return
        with gc_paused():
            kept = decode_index(index.value, max_file_bytes=self._max, blob_dir=self._blob_dir)
            if kept is not None and not kept.base:
                checksum = index_checksum(index.value)
                delta = decode_index(delta_read.value, max_file_bytes=self._max, blob_dir=self._blob_dir) if delta_read.ok else None
                state = apply_delta(kept, checksum, delta)
                self._delta_applied = state is not kept
                self._load(state)
                self._from_index = True
                self._index_base = checksum
                if state is not kept:
                    self._since_index = set(delta.table.rows) | delta.removed

    def _known_directories(self) -> list[str]:
        """The root and every recorded directory a walk enters."""
        # In C, on the facts joined in the rows dict's order: their flags
        # bytes, each made 1 for a walked directory, select the paths.
        table = self._table
        flags = table.joined_facts()[:: _FACTS.size]
        return ["", *itertools.compress(table.rows, flags.translate(_WALKED_DIRECTORY))]

    def _recorded_facts(self, paths) -> dict[str, ScanFacts]:
        """The recorded facts of those of ``paths`` the record holds,
        unpacked (the few a sync looks at)."""
        facts_of = self._table.facts_of
        return {path: _FACTS.unpack(facts) for path in paths if (facts := facts_of(path)) is not None}

    def _capturable(self, facts: ScanFacts) -> bool:
        return not facts[0] & ~_KNOWN and facts[1] <= self._max

    @staticmethod
    def _below(path: str, directories: dict[str, str]) -> str | None:
        """The reason of the first of ``directories`` above ``path``."""
        if directories:
            for directory in _ancestors(path):
                if directory in directories:
                    return directories[directory]
        return None

    async def _snapshots(
        self, captures: list[str], guessed: list[str], links: list[str] = ()
    ) -> tuple[dict[str, Snapshot | str | None], dict[str, bytes | None], dict[str, bytes | None]]:
        """Snapshot ``captures`` (path -> a Snapshot, why it could not be
        read, or None when it vanished), read back the recorded content of
        ``guessed`` (path -> verified bytes, or None) and the targets of
        ``links`` (path -> target, None when it is no link any more)."""
        taken: dict[str, Snapshot | str | None] = {}
        before: dict[str, bytes | None] = {}
        targets: dict[str, bytes | None] = {}
        ops: list[tuple[str, Operation, int]] = []
        for path in links:
            ops.append((path, ReadEntry(self._at(path), max_bytes=0, optional=True), 0))
        table = self._table
        for path in guessed:
            size = _size(table.facts_of(path))
            ops.append((path, self._blob_read(table.digest_of(path), size, table.location_of(path)), size))
        for path in captures:
            ops.append((path, SnapshotFile(self._at(path), store=self._store, max_bytes=self._max, optional=True), 0))
        for batch in _batches(ops):
            # The store may have been removed since: ensure it (one mkdir).
            # The program's new blobs go to one pack of its own.
            pack = f"pack-{secrets.token_hex(16)}"
            snapping = any(isinstance(op, SnapshotFile) for _, op, _ in batch)
            ensure = [MakeDirs(self._store, optional=True)] if snapping else []
            plain = [
                SnapshotFile(op.path, store=op.store, max_bytes=op.max_bytes, pack=pack, known=self._kept(path), optional=True)
                if isinstance(op, SnapshotFile) else op
                for path, op, _ in batch
            ]
            result = await self._target.run(ControlProgram([*ensure, *plain]))
            for (path, op, _), outcome in zip(batch, result.results[len(ensure) :]):
                if isinstance(op, (Read, ReadSlice)):
                    before[path] = _verified(outcome, table.digest_of(path))
                elif isinstance(op, ReadEntry):
                    found = outcome.value if outcome.ok else None
                    targets[path] = found.data if found is not None and found.kind == Entry.SYMLINK else None
                else:
                    taken[path] = found = _snapshot_outcome(outcome)
                    if isinstance(found, Snapshot) and found.offset is not None:
                        self._landed[found.digest] = (pack, found.offset)
                        self._pack_size[pack] = max(self._pack_size.get(pack, 0), found.offset + found.size)
        return taken, before, targets

    async def _read_blobs(self, digests: dict[str, int]) -> dict[str, bytes | None]:
        """digest -> its blob's bytes, verified (None: missing or damaged)."""
        where = self._table.digest_location
        ops = [(digest, self._blob_read(digest, size, where(digest)), size) for digest, size in sorted(digests.items())]
        found: dict[str, bytes | None] = {}
        for batch in _batches(ops):
            result = await self._target.run(ControlProgram([op for _, op, _ in batch]))
            for (digest, _, _), outcome in zip(batch, result.results):
                found[digest] = _verified(outcome, digest)
        return found

    # -- what changed ----------------------------------------------------------

    def _created(self, path: str, facts: ScanFacts) -> FileChange:
        """The change of ``path``, unrecorded until now."""
        reason = self._below(path, self._unwalked)
        if reason is not None:
            # In a directory the last walk did not enter: what was there
            # before is unknown.
            gap = IGNORED_GAP if reason == SCAN_IGNORED_REASON else f"in a directory that could not be read ({reason})"
            return FileChange(path, None, gap)
        if facts[0] & SCAN_IGNORED:
            return FileChange(path, None, IGNORED_GAP)
        # Nothing was there: Rewind removes what the command made (a file
        # whatever its size, a link, a directory).
        return FileChange(path, None, made_directory=bool(facts[0] & SCAN_DIR))

    def _changed(self, path: str, previous: ScanFacts, facts: ScanFacts, digest: str | None, recheck: bool) -> bool:
        """Whether recorded ``path``, walked now with ``facts`` (and read
        now as ``digest``), changed content."""
        recorded = self._table.digest_of(path)
        if recorded is not None and digest == recorded and previous[5] == facts[5]:
            return False
        if recheck:
            return True
        if _content(previous) != _content(facts):
            return True
        # The same facts, but the .gitignore's verdict changed: the content
        # is as recorded (newly captured, or no longer kept).
        return False

    def _recorded(self, path: str, previous: ScanFacts) -> tuple[str, str | None, str | None, ScanFacts]:
        """What the record holds of ``path``: its digest (None for a link,
        a directory or a file over the limit), why it has nothing to give
        (or None), and its facts."""
        digest = self._table.digest_of(path)
        return (path, digest, None, previous) if digest is not None else (path, None, self._gap(path, previous), previous)

    def _gap(self, path: str, facts: ScanFacts) -> str | None:
        """Why the recorded ``path``'s earlier state cannot be given (None:
        it can, as a link, a directory, or a file over the size limit whose
        mode and size are known)."""
        if facts[0] & SCAN_IGNORED:
            return IGNORED_GAP
        if path in self._unreadable:
            return self._unreadable[path]
        return None

    # -- the record ------------------------------------------------------------

    def _set(self, path: str, facts: ScanFacts, digest: str | None, unreadable: str | None) -> None:
        previous = self._table.facts_of(path)
        if previous is None:
            for directory in _ancestors(path):
                self._holding[directory] = self._holding.get(directory, 0) + 1
        if previous is None or bool(previous[0] & _UNTRACKED) != bool(facts[0] & _UNTRACKED):
            if previous is not None:
                self._untrack(path, previous)
            if not facts[0] & _UNTRACKED:
                for directory in _ancestors(path):
                    self._tracked[directory] = self._tracked.get(directory, 0) + 1
        if facts[0] & _KNOWN:
            self._known.add(path)
        elif self._known:
            self._known.discard(path)
        self._since_index.add(path)
        # A digest already recorded keeps its blob (the same bytes read
        # again are not appended again; a copy a snapshot appended goes
        # with its pack); a new one lies where this sync put it.
        self._unnamed_blob(self._table.set(path, _packed(facts), digest, self._landed.get(digest) if digest is not None else None))
        if unreadable is not None:
            self._unreadable[path] = unreadable
        else:
            self._unreadable.pop(path, None)

    def _drop(self, path: str) -> None:
        facts = self._table.facts_of(path)
        self._unnamed_blob(self._table.drop(path))
        self._since_index.add(path)
        self._untrack(path, facts)
        for directory in _ancestors(path):
            count = self._holding[directory] - 1
            if count:
                self._holding[directory] = count
            else:
                del self._holding[directory]
        self._shared.discard(path)
        self._known.discard(path)
        self._unreadable.pop(path, None)
        self._links.pop(path, None)
        self._racy.discard(path)

    def _untrack(self, path: str, facts: ScanFacts) -> None:
        if facts[0] & _UNTRACKED:
            return
        for directory in _ancestors(path):
            count = self._tracked[directory] - 1
            if count:
                self._tracked[directory] = count
            else:
                del self._tracked[directory]

    def _unnamed_blob(self, name: str | None) -> None:
        """A blob (a pack, or a loose blob's digest) no recorded path names
        any more goes with the orphans."""
        if name is not None:
            self._pack_size.pop(name, None)
            self._orphans.add(name)

    def _sweep_packs(self) -> None:
        """Packs no recorded digest lives in (every blob of a program was a
        copy of one kept already, or the sync failed) go with the orphans."""
        for pack in [pack for pack in self._pack_size if not self._table.pack_live(pack)]:
            del self._pack_size[pack]
            self._orphans.add(pack)


def _nothing(_result: ProgramResult, _at: int) -> None:
    pass


def _is_digest(name: str) -> bool:
    """Whether a blob store's ``name`` is a loose blob's (a sha256 in hex)."""
    return len(name) == 64 and all(char in "0123456789abcdef" for char in name)


def _with_ancestors(counts: dict[str, int]) -> dict[str, int]:
    """``counts`` of entries directly in each directory, made counts of
    the entries below each directory at any depth."""
    total = dict(counts)
    for directory, count in counts.items():
        for ancestor in _ancestors(directory):
            total[ancestor] = total.get(ancestor, 0) + count
    return total


def _within(path: str, roots) -> bool:
    """Whether ``path`` is one of ``roots`` or below one (``""``: all)."""
    if path in roots or "" in roots:
        return True
    return any(directory in roots for directory in _ancestors(path))


def _outermost(paths: set[str]) -> list[str]:
    """``paths`` without those below another of them, sorted."""
    if "" in paths:
        return [""]
    return sorted(path for path in paths if not any(directory in paths for directory in _ancestors(path)))


def _replace_last(result, outcome):
    """``result`` with its last operation's outcome replaced."""
    return ProgramResult((*result.results[:-1], outcome), result.stopped_at)


def _batches(ops: list[tuple[str, Operation, int]]) -> Iterator[list[tuple[str, Operation, int]]]:
    batch: list[tuple[str, Operation, int]] = []
    size = 0
    for item in ops:
        if batch and (len(batch) >= OPS_PER_PROGRAM or size + item[2] > READ_BYTES_PER_PROGRAM):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item[2]
    if batch:
        yield batch


def _verified(result: OpResult, digest: str) -> bytes | None:
    if not result.ok or hashlib.sha256(result.value).hexdigest() != digest:
        return None
    return result.value


def _snapshot_outcome(result: OpResult) -> Snapshot | str | None:
    if result.ok:
        return result.value
    if result.status is Status.ABSENT:
        return None
    return f"could not be read: {result.reason or result.status.value}"
