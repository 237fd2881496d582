"""Control programs: a list of target operations carried to the target in one
round trip.

A program runs its operations in order and stops at the first one that does
not succeed; every later operation is reported ``skipped``. That is what lets a
caller state a precondition as a ``Verify`` whose guarded writes follow it in
the same program: the proof and the write share one target process. An
operation marked ``optional=True`` never stops the program, whatever it
reports (ensuring a directory that may already exist, best-effort pruning).

A write marked ``deferred=True`` skips its own fsyncs; a :class:`Barrier`
later in the same program makes every deferred write before it durable with
one flush (see :mod:`.executor`). The rule for callers: a reader must not be
able to reach a deferred write through a commit point written before its
barrier; a deferred write no barrier follows is never flushed on purpose, so
only a write whose loss is harmless (a best-effort prune) may end a program
unbarriered.

A program may name a lock directory. The target takes an exclusive ``flock``
on that directory's descriptor for the whole program, serialising it against
every other program (in any process) that names the same lock.

Per-operation statuses:

=========  ==============================================================
ok         did what was asked; ``value`` carries the read result if any
conflict   exclusive creation found the path present; ``MakeDirs`` found
           the directory already there
absent     the path or one of its parents does not exist
mismatch   a ``Verify`` found other content (``value``: the actual bytes, or
           ``None`` when the file is absent); a ``NewestIs`` found another
           newest member (``value``: its name, or ``None``: no member)
failed     refused or broken: symlink, wrong file type, I/O error
           (``reason`` says which; ``unsafe`` marks a symlink refusal)
skipped    not run because an earlier operation stopped the program
=========  ==============================================================
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import msgspec
from msgspec.structs import force_setattr

from .entry import Entry
from .errors import InvalidTargetPath
from .executor import CAPTURE_LEFT as CAPTURE_LEFT
from .executor import CAPTURE_NONE as CAPTURE_NONE
from .executor import CAPTURE_RECORD as CAPTURE_RECORD
from .executor import CAPTURED as CAPTURED
from .executor import SCAN_DIR as SCAN_DIR
from .executor import SCAN_FACTS, is_family_member, stamped_content
from .executor import SCAN_IGNORED as SCAN_IGNORED
from .executor import SCAN_IGNORED_REASON as SCAN_IGNORED_REASON
from .executor import SCAN_LINK as SCAN_LINK
from .paths import split_target_path

_SCAN_FACTS = struct.Struct(SCAN_FACTS)
#: One entry's packed facts as one bytes object, cut out in C (``iter_unpack``).
_SCAN_RECORD = struct.Struct(f"{_SCAN_FACTS.size}s")
_FIRST = operator.itemgetter(0)
#: Bytes of one entry's facts in a :class:`FileScan`.
FILE_SCAN_RECORD = _SCAN_FACTS.size



class Status(enum.Enum):
    OK = "ok"
    CONFLICT = "conflict"
    ABSENT = "absent"
    MISMATCH = "mismatch"
    FAILED = "failed"
    SKIPPED = "skipped"


class _OperationPath(msgspec.Struct, frozen=True):
    """The field every operation starts with (keyword-only options are
    declared on a class of their own: :class:`Operation`)."""

    path: str


class Operation(_OperationPath, frozen=True, kw_only=True):
    """One step of a control program. ``path`` is target-relative.

    Operations and their answers are frozen ``msgspec`` structs, not
    dataclasses: a dataclass compiles its methods as it is defined, and
    these forty were most of the module's import, paid by every command's
    start."""

    optional: bool = False
    #: A write that leaves its flush to the program's next :class:`Barrier`.
    deferred: bool = False

    #: True for operations that change the target (counted by fault injection).
    writes: ClassVar[bool] = False
    #: True when the operation may name the target root itself.
    accepts_root: ClassVar[bool] = False

    def __post_init__(self) -> None:
        parts = split_target_path(self.path)
        if not parts and not self.accepts_root:
            raise InvalidTargetPath(self.path, f"{type(self).__name__} needs an entry, not the root")
        if self.deferred and not self.writes:
            raise ValueError(f"{type(self).__name__} writes nothing, so it cannot be deferred")


class Read(Operation):
    """Read a regular file; ``value`` is its bytes."""


class Stat(Operation):
    """Describe an entry; ``value`` is a :class:`FileStat`."""

    accepts_root: ClassVar[bool] = True


class ListDir(Operation):
    """List a directory; ``value`` is a sorted tuple of entry names."""

    accepts_root: ClassVar[bool] = True


class ReadNewest(Operation):
    """Read the newest member of a numbered family of files in directory
    ``path``: of the entries named ``prefix``, then exactly ``digits``
    decimal digits, then ``suffix``, the one with the greatest number.
    ``value`` is ``(name, bytes)``; ``absent`` when the directory holds no
    member (or does not exist). Listing and reading in one operation is what
    lets a reader follow a head that only ever grows in one round trip.

    With ``max_bytes`` only the first ``max_bytes`` bytes of the member are
    read (fewer where it ends first): a listing that needs a version's
    header reads it without reading a large item whole."""

    prefix: str
    digits: int
    suffix: str
    max_bytes: int | None = None
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_family(self.prefix, self.digits, self.suffix)
        limit = self.max_bytes
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError("a read's size limit is a whole, non-negative number or None")


class NewestIs(Operation):
    """Precondition, as :class:`Verify` is: the member of the numbered
    family (``prefix``, ``digits``, ``suffix`` as :class:`ReadNewest`) with
    the greatest number in directory ``path`` is exactly ``name``; with
    ``name`` None, the directory holds no member (a missing directory holds
    none). ``mismatch`` otherwise, ``value`` the newest member's name (None:
    there is none). Only the directory is listed, no file read: a writer
    proves that no version was published since the one it saw, in the
    program that publishes the next."""

    prefix: str
    digits: int
    suffix: str
    name: str | None
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_family(self.prefix, self.digits, self.suffix)
        if self.name is not None and not is_family_member(self.name, self.prefix, self.digits, self.suffix):
            raise ValueError(f"{self.name!r} is not named {self.prefix}{'N' * self.digits}{self.suffix}")


def _check_family(prefix: str, digits: int, suffix: str) -> None:
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError("a numbered family has at least one digit")
    for text in (prefix, suffix):
        if not isinstance(text, str) or "/" in text or "\x00" in text:
            raise ValueError(f"{text!r} cannot be part of an entry name")


class ChainHop(msgspec.Struct, frozen=True):
    """One step of a :class:`ReadChain`: the string at JSON key path
    ``keys`` of the file read last names the next file, relative to the
    target-relative directory ``base``."""

    keys: tuple[str, ...]
    base: str

    def __post_init__(self) -> None:
        keys = tuple(self.keys) if isinstance(self.keys, (list, tuple)) else self.keys
        if not isinstance(keys, tuple) or not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError("a chain hop's key path is one or more strings")
        force_setattr(self, "keys", keys)
        split_target_path(self.base)


class ReadChain(Operation):
    """Read the newest member of a numbered family in directory ``path``
    (``prefix``, ``digits``, ``suffix`` as :class:`ReadNewest`), then follow
    ``hops``: each reads the file whose path the previous file names at a
    JSON key path. ``value`` is a :class:`Chain`; ``absent`` when the
    directory does not exist, ``ok`` with no links when it holds no member.

    The chain ends quietly where a file is not JSON, holds no string at the
    hop's key path, or could not be read (that link says why). The target
    only dereferences: every path it follows passes the same checks as any
    other operation path (no absolute path, no ``..``, no symbolic link),
    and the caller must decode each link and check that its path is the one
    the previous decoded record names before trusting it. This is what lets
    a reader follow a head through the records it names in one round trip,
    without the target knowing any record format."""

    prefix: str
    digits: int
    suffix: str
    hops: tuple[ChainHop, ...] = ()
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_family(self.prefix, self.digits, self.suffix)
        force_setattr(self, "hops", _chain_hops(self.hops))


def _chain_hops(hops: Iterable[ChainHop]) -> tuple[ChainHop, ...]:
    checked = tuple(hops)
    for hop in checked:
        if not isinstance(hop, ChainHop):
            raise TypeError(f"not a chain hop: {hop!r}")
    return checked


class ChainLink(msgspec.Struct, frozen=True, gc=False):
    """One file a :class:`ReadChain` read: ``data`` when ``status`` is ok,
    else ``reason``."""

    path: str
    status: Status
    data: bytes | None = None
    reason: str | None = None
    unsafe: bool = False

    def result(self) -> OpResult:
        """The link as the result a :class:`Read` of ``path`` reports."""
        return OpResult(self.status, self.data, self.reason, self.unsafe)


class Chain(msgspec.Struct, frozen=True, gc=False):
    #: Names of the family's members, ascending.
    names: tuple[str, ...]
    #: The newest member first, then one link per hop followed.
    links: tuple[ChainLink, ...]


class ChainSpec(msgspec.Struct, frozen=True):
    """A chain a :class:`SurveyDirs` reads below every entry: the numbered
    family in ``directory`` (``prefix``, ``digits``, ``suffix`` as
    :class:`ReadNewest`) and ``hops`` as :class:`ReadChain`'s, the
    directory and every hop's base relative to the entry."""

    directory: str
    prefix: str
    digits: int
    suffix: str
    hops: tuple[ChainHop, ...] = ()

    def __post_init__(self) -> None:
        split_target_path(self.directory)
        _check_family(self.prefix, self.digits, self.suffix)
        force_setattr(self, "hops", _chain_hops(self.hops))


class SurveyDirs(Operation):
    """Survey the entries of directory ``path``: each is opened from one
    descriptor of ``path``, stated, listed, and each of ``chains`` read
    below it as a :class:`ReadChain` would read it. ``value`` is a
    :class:`DirSurvey`. The entries are ``names`` in that order, or (None)
    every entry not named with a leading dot (temporary files), sorted,
    after the name ``after``; at most ``limit`` of them, and no more once
    the files read reach ``budget`` bytes (the survey's ``complete`` then
    says False: survey again after its last entry). What a listing of many
    session directories costs per directory is a few system calls, not the
    walk of a descriptor chain from the root for each of its reads."""

    chains: tuple[ChainSpec, ...] = ()
    names: tuple[str, ...] | None = None
    after: str | None = None
    limit: int = 1024
    budget: int = 4 * 1024 * 1024
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for chain in self.chains:
            if not isinstance(chain, ChainSpec):
                raise TypeError(f"not a survey chain: {chain!r}")
        force_setattr(self, "chains", tuple(self.chains))
        if self.names is not None:
            names = tuple(self.names)
            for name in names:
                if len(split_target_path(name)) != 1:
                    raise InvalidTargetPath(name, "a survey names entries of its directory, one component each")
            force_setattr(self, "names", names)
        for number in (self.limit, self.budget):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a survey's limit and budget are whole numbers")
        if self.limit < 1:
            raise ValueError("a survey takes at least one entry")


class SurveyedDir(msgspec.Struct, frozen=True, gc=False):
    """One entry of a :class:`SurveyDirs`: what a :class:`Stat` and a
    :class:`ListDir` of its path would answer, and one :class:`ReadChain`
    result (a :class:`Chain`) per chain of the survey, ``absent`` where the
    listings showed no directory for it."""

    name: str
    stat: OpResult
    listing: OpResult
    chains: tuple[OpResult, ...]


class DirSurvey(msgspec.Struct, frozen=True, gc=False):
    entries: tuple[SurveyedDir, ...]
    #: No entry was left for a survey after the last one.
    complete: bool


class WalkTree(Operation):
    """Walk directory ``path`` (the root too): ``value`` is a
    :class:`TreeWalk` of every entry below it (``depth`` levels down; None:
    all), at most ``limit`` of them. Symbolic links are neither listed nor
    followed; each directory's names are sorted, a directory comes before
    its contents. One operation answers
    what a per-directory ``ListDir`` + ``Stat`` walk would need a round trip
    per level for."""

    limit: int = 100_000
    depth: int | None = None
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for number in (self.limit, 1 if self.depth is None else self.depth):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a tree walk's limit and depth are whole, non-negative numbers")
        if self.depth == 0:
            raise ValueError("a tree walk goes at least one level down")


class WalkedEntry(msgspec.Struct, frozen=True):
    """One entry of a :class:`WalkTree` answer; ``path`` is relative to the
    walked directory (``/``-separated)."""

    path: str
    kind: str  # "file" | "directory" | "other"
    size: int
    mtime: int


class TreeWalk(msgspec.Struct, frozen=True):
    entries: tuple[WalkedEntry, ...]
    #: The walk met more than ``limit`` entries and stopped.
    truncated: bool


class ListTree(Operation):
    """List directory ``path`` (the root too) and the directories below
    it, in depth-first preorder: ``value`` is a :class:`TreeListing`. Only
    directories and regular files are entries: symbolic links are neither
    listed nor followed, FIFOs, sockets and devices are left out, so nothing
    a listing shows can block a reader or lead outside ``path``.

    Directories are listed whole until ``limit`` entries have been listed;
    the listing's ``pending`` directories, passed back as ``resume``, go on
    where it stopped. ``depth`` (None: all) bounds the levels listed.

    ``read_first`` files of the listing, the first in depth-first order of
    the sorted names, are read as :class:`ReadFiles` reads them (each at
    most ``read_max_bytes``, until their sizes reach ``read_budget``): a
    search that needs only a few files has them in the same program."""

    limit: int = 100_000
    depth: int | None = None
    resume: tuple[str, ...] = ()
    read_first: int = 0
    read_max_bytes: int = 64 * 1024 * 1024
    read_budget: int = 0
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for number in (self.limit, 1 if self.depth is None else self.depth):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise ValueError("a tree listing's limit and depth are positive whole numbers")
        for number in (self.read_first, self.read_max_bytes, self.read_budget):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a tree listing reads a whole, non-negative number of files and bytes")
        resume = tuple(self.resume)
        for directory in resume:
            if not isinstance(directory, str):
                raise TypeError("a tree listing resumes from directory paths")
            split_target_path(directory)
        force_setattr(self, "resume", resume)


class TreeListing(msgspec.Struct, frozen=True):
    """The answer of a :class:`ListTree`."""

    #: ``(directory, names)`` per directory listed, in preorder: the
    #: directory relative to the listed one (``""`` for itself), its
    #: entries' names sorted and joined by NUL, a directory's ending in ``/``.
    records: tuple[tuple[str, str], ...]
    #: Directories still to list, in order (resume from them).
    pending: tuple[str, ...]
    #: The files read with the listing (``read_first``): path and read.
    files: tuple[tuple[str, FileRead], ...] = ()


class ReadFiles(Operation):
    """Read many regular files below directory ``path`` in one pass:
    ``names`` are their paths relative to it. ``value`` is a tuple of
    :class:`FileRead`, one per file read, in order; files are read until
    their sizes reach ``budget`` (at least one), so the tuple may be
    shorter than ``names`` and the rest are for another program. A file is
    opened only when ``lstat`` shows a regular file, and must still be that
    file once open: a symbolic link fails closed, a FIFO, socket or device
    is refused unopened. A file over ``max_bytes`` is not read."""

    names: tuple[str, ...] = ()
    max_bytes: int = 64 * 1024 * 1024
    budget: int = 8 * 1024 * 1024
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        names = tuple(self.names)
        for name in names:
            # Only the shape here (a batch may name thousands of files): the
            # target checks every component of every name as it reads it.
            if not isinstance(name, str) or not name or name[0] == "/" or "\0" in name:
                raise InvalidTargetPath(repr(name), "a batch read names files below its directory")
        force_setattr(self, "names", names)
        for number in (self.max_bytes, self.budget):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a batch read's size limit and budget are whole, non-negative numbers")


class FileRead(msgspec.Struct, frozen=True):
    """One file of a :class:`ReadFiles`: ``data`` when ``status`` is ok and
    the file was within the size limit (None: over it, ``size`` says how
    big), else ``reason``."""

    status: Status
    data: bytes | None
    reason: str | None
    unsafe: bool
    size: int

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class ScanTree(Operation):
    """Walk directory ``path`` (the root too) for what tells a file's
    change: ``value`` is a :class:`FileScan` of every regular file and
    symbolic link below it, each with its own ``lstat`` facts (size,
    modification and change times in nanoseconds, inode). Links are
    recorded, never followed; FIFOs, sockets and devices are left out;
    only directories and ``.gitignore`` files are opened (and, capturing,
    the regular files read).

    Entries named ``skip_names`` (at any depth) or at ``skip_paths``
    (relative to ``path``) are not visited. Every directory's
    ``.gitignore`` applies below it (git's syntax and precedence): an
    ignored file is flagged, an ignored directory is not descended -- it is
    one of the scan's ``unwalked`` -- unless it is one of ``descend``, and
    then everything below it is flagged ignored. ``racy`` (see
    :class:`FileScan`) uses a window of ``racy_ns``. At most ``limit``
    entries, directories included."""

    skip_names: tuple[str, ...] = ()
    skip_paths: tuple[str, ...] = ()
    descend: tuple[str, ...] = ()
    limit: int = 1_000_000
    racy_ns: int = 0
    #: Record directories as entries too (:data:`SCAN_DIR`, with their mode).
    directories_too: bool = False
    #: Capture as the walk goes: every regular file not ignored and of at
    #: most ``capture_bytes`` is read, its bytes appended (once per
    #: content) to the new pack ``capture_store/<capture_pack>``
    #: (``pack-<hex>``, never flushed: a cache, as a
    #: :class:`SnapshotFile`'s), and the answer's :attr:`FileScan.captures`
    #: says for each entry whether it was read, its digest and where its
    #: bytes lie -- a first walk that would otherwise snapshot every file
    #: by an operation of its own, each opening its chain of directories
    #: again. A file read is one whose ``lstat`` facts still held after the
    #: read (else it is left to the caller, as links are).
    capture_store: str | None = None
    capture_bytes: int = 0
    capture_pack: str | None = None
    accepts_root: ClassVar[bool] = True

    @property
    def writes(self) -> bool:  # type: ignore[override]
        """A capturing scan writes its pack."""
        return self.capture_pack is not None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("skip_names", "skip_paths", "descend"):
            texts = tuple(getattr(self, name))
            if not all(isinstance(text, str) for text in texts):
                raise TypeError(f"a tree scan's {name} are strings")
            force_setattr(self, name, texts)
        for number in (self.limit, self.racy_ns, self.capture_bytes):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a tree scan's limit, racy window and capture size are whole, non-negative numbers")
        if (self.capture_pack is None) != (self.capture_store is None):
            raise ValueError("a capturing scan names its store and its pack")
        if self.capture_pack is not None:
            _check_pack(self.capture_pack)
            if not split_target_path(self.capture_store):  # type: ignore[arg-type]
                raise InvalidTargetPath(self.capture_store, "a blob store is a directory below the root")  # type: ignore[arg-type]


#: A :class:`ScanTree` entry's facts: flags (:data:`SCAN_LINK`,
#: :data:`SCAN_IGNORED`, :data:`SCAN_DIR`), size, ``st_mtime_ns``,
#: ``st_ctime_ns``, inode, permission bits.
ScanFacts = tuple[int, int, int, int, int, int]


class FileScan(msgspec.Struct, frozen=True):
    """The answer of a :class:`ScanTree`, kept packed as the target sent it
    (an unchanged tree answers the very same ``names`` and ``facts``, so
    comparing two scans costs two byte comparisons): ``names`` is every
    entry's path followed by a NUL, ``facts`` their :data:`SCAN_FACTS`
    records in the same order. :meth:`entries` unpacks them."""

    names: str
    facts: bytes
    #: Directories not walked: ``(path, reason)``; the reason is
    #: :data:`SCAN_IGNORED_REASON` for an ignored one.
    unwalked: tuple[tuple[str, str], ...]
    #: Regular files, not ignored, whose modification or change time falls
    #: within the racy window before ``started_ns``: a change in the same
    #: timestamp tick could leave their facts unchanged.
    racy: tuple[str, ...]
    #: The walk met more than ``limit`` entries and left the rest out.
    truncated: bool
    #: The target's clock (``time.time_ns``) when the walk began.
    started_ns: int
    #: Every directory listed (``""``: the root) and the regular files met
    #: with more than one link; a :class:`ScanPaths` answers them, a
    #: :class:`ScanTree` leaves them empty.
    directories: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    #: A capturing scan's (:attr:`ScanTree.capture_pack`): one
    #: :data:`CAPTURE_RECORD` per entry, in the entries' order (status
    #: :data:`CAPTURED`, :data:`CAPTURE_LEFT` or :data:`CAPTURE_NONE`, the
    #: raw sha256, the offset in the pack), and the pack's bytes; None when
    #: not asked, or when the pack could not be written (nothing read).
    captures: bytes | None = None
    pack_bytes: int = 0

    def __len__(self) -> int:
        return len(self.facts) // _SCAN_FACTS.size

    def paths(self) -> list[str]:
        """Every entry's path, in the scan's order."""
        paths = self.names.split("\0")
        paths.pop()
        return paths

    def entries(self) -> dict[str, ScanFacts]:
        """Every entry's path and facts."""
        return dict(zip(self.paths(), _SCAN_FACTS.iter_unpack(self.facts)))

    def packed_facts(self) -> list[bytes]:
        """Every entry's facts as packed, in the scan's order."""
        return list(map(_FIRST, _SCAN_RECORD.iter_unpack(self.facts)))

    def facts_at(self, index: int) -> ScanFacts:
        """The facts of the ``index``-th entry."""
        return _SCAN_FACTS.unpack_from(self.facts, index * _SCAN_FACTS.size)

    def changed_since(self, earlier: FileScan) -> list[int]:
        """The indices of the entries whose facts differ from ``earlier``'s,
        a scan of the very same names (compared block by block, so a few
        changes among many entries cost a few comparisons)."""
        if earlier.names != self.names:
            raise ValueError("only a scan of the same names compares entry by entry")
        return differing_records(self.facts, earlier.facts)


def differing_records(mine: bytes, theirs: bytes) -> list[int]:
    """The indices of the :data:`SCAN_FACTS` records that differ between
    ``mine`` and ``theirs``, as many records each (compared block by block,
    so a few changes among many records cost a few comparisons)."""
    size = _SCAN_FACTS.size
    block = size * 64
    changed = []
    if mine == theirs:
        return changed
    for start in range(0, len(mine), block):
        if mine[start : start + block] == theirs[start : start + block]:
            continue
        for offset in range(start, min(start + block, len(mine)), size):
            if mine[offset : offset + size] != theirs[offset : offset + size]:
                changed.append(offset // size)
    return changed


class ScanPaths(ScanTree):
    """A :class:`ScanTree` of the root that looks only at ``paths`` (``""``
    is the root itself: the whole walk) and what is below them: each is
    ``lstat``-ed through its parents' descriptors, every parent's
    ``.gitignore`` applied as a whole walk would; a file or link is
    recorded, a directory walked, anything else (absent, a FIFO, a parent
    that is no directory any more) answers nothing -- whatever was there is
    gone. ``value`` is a :class:`FileScan` with its ``directories`` (every
    directory listed) and ``shared`` (regular files with more than one
    link). For a caller that knows where changes can be (from events it
    treats as hints); ``path`` must be the root."""

    paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if split_target_path(self.path):
            raise InvalidTargetPath(self.path, "a path scan starts at the target root")
        texts = tuple(self.paths)
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("a path scan's paths are strings")
        for text in texts:
            split_target_path(text)  # refused unless a plain relative path
        force_setattr(self, "paths", texts)


def _check_pack(pack: object) -> None:
    if not (isinstance(pack, str) and pack.startswith("pack-") and 5 < len(pack) <= 69 and not pack[5:].strip("0123456789abcdef")):
        raise ValueError("a snapshot pack is named pack-<1 to 64 hex digits>")


class SnapshotFile(Operation):
    """Keep the bytes of regular file ``path`` as the blob
    ``store/<sha256 hex>`` (written unless a file of that size is already
    there): ``value`` is a :class:`Snapshot`. A file larger than
    ``max_bytes`` is not read (its digest is None). The file is opened as
    every read opens it (a symbolic link fails closed; a FIFO neither
    blocks nor is read), and its facts must hold through the read.

    The blob is never flushed, and cannot be deferred: it is a cache whose
    loss in a crash is harmless to a caller that keeps the record naming it
    in memory -- and that checks a blob's bytes against its name before
    trusting them."""

    store: str
    max_bytes: int
    #: Append the bytes to the pack file ``store/<pack>`` instead
    #: (``pack-<hex>``, one program's own: one writer), and answer where.
    pack: str | None = None
    #: With ``pack``: the digest of bytes the caller keeps already; a file
    #: that still holds them is not appended again (``offset`` None).
    known: str | None = None
    writes: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.deferred:
            raise ValueError("a snapshot blob is never flushed, so it cannot be deferred")
        if self.pack is not None:
            _check_pack(self.pack)
        if not split_target_path(self.store):
            raise InvalidTargetPath(self.store, "a blob store is a directory below the root")
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 0:
            raise ValueError("a snapshot's size limit is a whole, non-negative number")


class Snapshot(msgspec.Struct, frozen=True):
    """The answer of a :class:`SnapshotFile`: the file's facts as read."""

    #: sha256 of the bytes, hex; None when the file is over the size limit.
    digest: str | None
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    #: The blob was written (False: it was there already, or not read).
    written: bool
    #: Where in the pack the bytes begin (a :attr:`SnapshotFile.pack` only;
    #: None when they were not appended).
    offset: int | None = None


class ReadSlice(Operation):
    """At most ``size`` bytes of regular file ``path`` from ``offset``
    (fewer where the file ends first); ``value`` is the bytes."""

    offset: int
    size: int

    def __post_init__(self) -> None:
        super().__post_init__()
        for number in (self.offset, self.size):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError("a slice's offset and size are whole, non-negative numbers")


class CreateExclusive(Operation):
    """Create a file that must not exist yet, with all of ``data`` or nothing."""

    data: bytes
    writes: ClassVar[bool] = True


class CreateInPlace(CreateExclusive):
    """Create a file that must not exist yet, writing ``data`` under its own
    name rather than to a temporary file linked there: until a flush a
    reader may find it partial, and a crash may leave it torn (a failed
    write removes it). Only for a file nothing reads before something
    written after it names it -- a version's blob, named by its index once
    the barrier between them has flushed it -- where the temporary file's
    extra name, rename and random name buy nothing."""


class CreateLinked(CreateExclusive):
    """Create a file that must not exist yet with ``data``, as
    :class:`CreateExclusive`, but as a hard link to ``source`` when that is a
    regular file holding exactly ``data`` (compared through the new name);
    otherwise the bytes are written. ``value`` is True when it linked.

    For immutable bytes another file already holds (a child session's
    publication naming its source's published files): a link costs no data
    write, and on a loaded disk creating a file is what costs."""

    source: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not split_target_path(self.source):
            raise InvalidTargetPath(self.source, "a link source is an entry, not the root")


class ClockStamp(msgspec.Struct, frozen=True):
    """A placeholder in :class:`StampedCreate` content: the target clock
    reading plus ``offset`` seconds, written as a decimal integer."""

    offset: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise TypeError("a clock stamp offset is a whole number of seconds")


class StampedWrite(Operation):
    """A write whose content is ``parts`` joined with every
    :class:`ClockStamp` replaced by a target clock reading the operation
    takes just before it writes (in the file's own directory; see
    :mod:`.clock`). ``value`` is that reading, so the caller can rebuild the
    exact bytes with :meth:`content`.

    This is what lets a record carry times read in the same program that
    writes it, instead of from an earlier round trip."""

    parts: tuple[bytes | ClockStamp, ...]
    writes: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        parts = tuple(self.parts)
        for part in parts:
            if not isinstance(part, (bytes, ClockStamp)):
                raise TypeError(f"stamped content is bytes and clock stamps, not {type(part).__name__}")
        force_setattr(self, "parts", parts)

    def plain_parts(self) -> tuple[bytes | int, ...]:
        """The parts as the executor takes them (a stamp is its offset)."""
        return tuple(part.offset if isinstance(part, ClockStamp) else part for part in self.parts)

    def content(self, reading: int) -> bytes:
        """The bytes this operation wrote for clock ``reading``."""
        return stamped_content(self.plain_parts(), reading)


class StampedCreate(StampedWrite):
    """Create a file that must not exist yet, like :class:`CreateExclusive`,
    with stamped content (:class:`StampedWrite`): a record carrying
    deadlines read in the program that writes it."""


class StampedCreateInPlace(StampedWrite):
    """Create a file that must not exist yet with stamped content, written
    under its own name as :class:`CreateInPlace` writes (no temporary file:
    until a flush a reader may find it partial, a crash may leave it torn,
    a failed write removes it). The clock reading is the new file's own
    modification time, taken as it is created (no probe file), and the
    file keeps that time once written (where the filesystem can set it):
    a numbered version published as one file whose header carries its own
    time, whose readers pass over a torn newest member."""


class Replace(Operation):
    """Atomically replace (or create) a file: temporary file in the same
    directory, fsync, rename, fsync of the directory."""

    data: bytes
    writes: ClassVar[bool] = True


class WriteProject(Operation):
    """Atomically replace (or create) a project file as :class:`Replace`
    does, but as a person's file rather than mevedel's own state: an
    existing file keeps its permission bits (a script stays executable), a
    new one gets 0644."""

    data: bytes
    writes: ClassVar[bool] = True


class Remove(Operation):
    """Remove a file or an empty directory."""

    writes: ClassVar[bool] = True


class MakeDirs(Operation):
    """Create a directory and any missing parents; ``conflict`` when the
    directory already existed (mark it optional to merely ensure it)."""

    writes: ClassVar[bool] = True


class Barrier(Operation):
    """Make every deferred write of this program before it durable, in one
    flush of each filesystem they touched; ``value`` is how many writes it
    covered. Put it before the write that commits them, so that write can
    only become visible once everything it names is on disk. A failed flush
    fails the barrier, and the program stops before its commit."""

    path: str = "."
    accepts_root: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if split_target_path(self.path):
            raise InvalidTargetPath(self.path, "a barrier names the target root")


class Verify(Operation):
    """Precondition: the file's content equals ``expected``, or the file is
    absent when ``expected`` is ``None``."""

    expected: bytes | None


class ReadEntry(Operation):
    """Read a path's whole state without following it: ``value`` is an
    :class:`Entry` (a regular file's bytes left out past ``max_bytes``);
    ``absent`` when neither it nor its parent exists; ``failed`` for a
    FIFO, socket or device."""

    max_bytes: int | None = None


class PutEntry(Operation):
    """Give a path the state ``wanted`` (None: absent) if it holds
    ``expected`` now (``mismatch`` otherwise, with the state found): a file
    by atomic replace with exactly ``wanted.mode`` (None: the mode the file
    has, or the default for a new one), a link created under a temporary
    name and renamed over the path, a directory made (an empty one in the
    way removed) and given its mode; absent removes a file, a link or an
    empty directory. Links are never followed. Nothing is done when the path
    holds ``wanted`` already."""

    expected: Entry | None
    wanted: Entry | None
    writes: ClassVar[bool] = True


class FileStat(msgspec.Struct, frozen=True, gc=False):
    kind: str  # "file" | "directory" | "other"
    size: int
    #: Whole seconds of the target filesystem clock.
    mtime: int
    #: The inode and the nanosecond mtime: a file replaced within the same
    #: second by one of the same size still differs here (a poll compares
    #: them). 0 from an answer that did not carry them.
    ino: int = 0
    mtime_ns: int = 0


# Results, like records, are untracked by the garbage collector (gc=False):
# they hold values (bytes, names, tuples of them), never a cycle, and a
# listing makes several per session.
class OpResult(msgspec.Struct, frozen=True, gc=False):
    status: Status
    value: Any = None
    reason: str | None = None
    #: The failure is a fail-closed refusal of a symlinked or replaced path.
    unsafe: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


SKIPPED = OpResult(Status.SKIPPED)


class ControlProgram(msgspec.Struct, frozen=True, gc=False):
    """Given any iterable of operations: they are kept as a tuple."""

    operations: tuple[Operation, ...]
    #: Target-relative directory to ``flock`` for the program's duration.
    lock: str | None = None

    def __post_init__(self) -> None:
        ops = tuple(self.operations)
        for op in ops:
            if not isinstance(op, Operation):
                raise TypeError(f"not a target operation: {op!r}")
        if self.lock is not None:
            split_target_path(self.lock)
        force_setattr(self, "operations", ops)

    def __len__(self) -> int:
        return len(self.operations)


class ProgramResult(msgspec.Struct, frozen=True, gc=False):
    results: tuple[OpResult, ...]
    #: Index of the non-optional operation that stopped the program.
    stopped_at: int | None = None

    @property
    def completed(self) -> bool:
        """Every non-optional operation succeeded."""
        return self.stopped_at is None

    def __getitem__(self, index: int) -> OpResult:
        return self.results[index]

    def __iter__(self) -> Iterator[OpResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

