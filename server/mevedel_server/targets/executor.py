"""What every target operation does on the filesystem that holds the root.

This module is the single implementation of the operation semantics: the
local target runs it in a worker thread, and the SSH target sends this very
source to the remote machine, where the remote program runs it. So it imports
nothing of ours, only the standard library, and keeps to Python 3.7 syntax
and library calls (the oldest ``python3`` we expect to find on a target).

It speaks a plain form rather than the dataclasses of ``program.py``:

- an operation is ``(kind, path, optional, argument, deferred)`` (the last
  may be left out: not deferred) where ``kind`` is the
  operation class name (``"Read"``, ``"Verify"``...), ``path`` is a
  ``/``-separated target-relative path and ``argument`` is the payload of
  ``CreateExclusive``/``CreateInPlace``/``Replace``, ``(bytes, source path)`` of
  ``CreateLinked``, the expectation of ``Verify`` or the
  parts of ``StampedCreate``/``StampedCreateInPlace`` (bytes, and integers
  standing for the clock reading plus that many seconds) or the ``(prefix,
  digits, suffix)`` of ``ReadNewest`` (and the most bytes to read of the
  member, when it reads at most that many), the ``(prefix, digits, suffix,
  name or None)`` of ``NewestIs``, ``(prefix, digits, suffix, hops)`` of
  ``ReadChain`` (each hop a ``(key path, base directory)``), the ``(entry limit, depth or
  None)`` of ``WalkTree``, the ``(entry limit, depth or None, directories
  to resume from)`` of ``ListTree``, the ``(file paths, size limit,
  budget)`` of ``ReadFiles``, the ``(skip names, skip paths, descend paths,
  entry limit, racy window in ns)`` of ``ScanTree``, the same and the paths
  to look at of ``ScanPaths`` (either followed by whether directories are
  entries too and, for a capturing scan, ``[store, size limit, pack]``), the ``(blob store directory, size limit)``
  of ``SnapshotFile`` (and the pack to append to, when it packs, and the
  digest whose bytes the caller keeps already: not appended again), or the
  ``(offset, size)`` of ``ReadSlice``;
- a result is ``(status, value, reason, unsafe)``; a ``Stat`` value is
  ``(kind, size, mtime_seconds)``, a ``ListDir`` value a sorted tuple, a
  ``StampedCreate`` or ``StampedCreateInPlace`` value the clock reading it
  wrote, a ``ReadNewest`` value ``(name, bytes)``, a ``NewestIs`` value the
  newest member's name (None: no member; so on a mismatch), a ``ReadChain``
  value ``(names, links)`` (see :meth:`Executor._read_chain`), a ``CreateLinked`` value whether it linked,
  a ``WalkTree`` value ``(entries, truncated)`` (see :meth:`Executor._walk`),
  a ``ListTree`` value ``(records, pending)`` (see
  :meth:`Executor._list_tree`), a ``ReadFiles`` value one ``(status, bytes,
  reason, unsafe, size)`` per file read (see :meth:`Executor._read_files`),
  a ``ScanTree`` value ``(names, facts, unwalked, racy, truncated,
  started_ns)`` (see :meth:`Executor._scan`), a ``ScanPaths`` value the
  same and ``(directories, shared)`` (see :meth:`Executor._scan_paths`),
  either followed, when it captures, by ``(pack bytes, records)`` -- one
  ``CAPTURE_RECORD`` per entry -- or None when its pack could not be
  written (see ``_Capture``), a
  ``SnapshotFile`` value
  ``(sha256 hex or None, size, mtime_ns, ctime_ns, inode, written)`` (and
  the offset in its pack when it packs: None when it did not append), a
  ``ProcessGroup`` value ``(machine id, boot id, exists)`` (its argument
  ``(pgid, kill, boot id)``: see :meth:`Executor._process_group`).

Every operation opens the root, proves its device and inode are the pinned
identity, and then opens each parent component with ``O_DIRECTORY |
O_NOFOLLOW``: a symlinked root, parent or leaf fails closed. Writes are whole
or absent (fsynced temporary file, then ``link`` for exclusive creation or
``rename`` for replacement, then fsync of the directory); a crash leaves at
most a dot-prefixed ``*.tmp`` file, never a torn record under its real name
-- but for ``CreateInPlace`` and ``StampedCreateInPlace``, which write a new
file under its name for a caller that names it only after a barrier, or
whose readers pass over a torn file (a failed write removes it; a crash may
leave it).

A *deferred* write skips those fsyncs: its bytes and names reach the disk at
the next ``Barrier`` of the same program, which flushes all deferred writes
before it at once -- an fsync of every written file and changed directory
when they are few (:data:`_FSYNC_AT_MOST`) or libc has no ``syncfs``, else
``syncfs(2)`` on each filesystem they touched. Until
then a power loss may leave a deferred file torn or missing under its real
name, so only a write that no reader can reach before a later commit point
(a publication's files, read only through a head written after the barrier)
or whose loss is harmless (a best-effort prune, which no barrier follows)
may be deferred. That one flush instead of two fsyncs per file is what makes
a many-file program cheap on a disk whose every flush costs milliseconds.
"""

from __future__ import annotations

# _thread, not threading: the remote program starts an interpreter per
# program, and threading's import (collections, functools) was half of
# what the remote program cost above the interpreter's own start. Its
# threads are daemons by nature.
import _thread
import errno
import fcntl
import os
import stat as stat_mode
import struct
import time

OK = "ok"
CONFLICT = "conflict"
ABSENT = "absent"
MISMATCH = "mismatch"
FAILED = "failed"
SKIPPED = "skipped"

CLOCK_PROBE_PREFIX = ".clock-probe-"

# Random names come from os.urandom: importing ``secrets`` would cost the
# remote program tens of milliseconds of start-up on every round trip.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Operations that change no directory: a program of only these opens each
#: directory once (through the same pinned chain) and keeps it for the rest
#: of the program, instead of walking from the root for every operation (a
#: listing of 32 sessions made about 1,000 opens of the same few directories).
_READ_ONLY_KINDS = frozenset(
    ("Read", "ReadNewest", "ReadChain", "SurveyDirs", "Verify", "NewestIs", "Stat", "ListDir", "Clock", "ReadEntry")
)
#: Operations a program may carry and still open each directory of its
#: chains once (``_open_kept_directory``): none renames a directory, and the
#: one that can remove one (``Remove``) forgets what it removed. A
#: publication's eight operations reopened the same five-directory chain
#: for each, about forty opens and closes of its own work.
_KEEPING_KINDS = _READ_ONLY_KINDS | frozenset(
    (
        "CreateExclusive", "CreateInPlace", "StampedCreate", "StampedCreateInPlace", "Replace",
        "MakeDirs", "Remove", "Barrier",
    )
)
#: At most this many directories stay open in one program.
_DIRECTORY_CACHE_LIMIT = 256
_FILE_MODE = 0o600


def _is_pack_name(name):
    """Whether ``name`` is ``pack-`` and 1 to 64 lowercase hex digits."""
    return (isinstance(name, str) and name.startswith("pack-") and 5 < len(name) <= 69
            and not name[5:].strip("0123456789abcdef"))
#: A project file a tool creates (WriteProject): a person's file, not ours.
_PROJECT_FILE_MODE = 0o644
_DIR_MODE = 0o700
# link(2) is unavailable on some filesystems (vfat, some FUSE mounts).
_NO_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}
_NEWEST_ATTEMPTS = 8
# The fsync fallback keeps every deferred file open until the barrier; past
# this many it flushes early rather than run out of descriptors.
_MAX_OPEN_DEFERRED = 64
#: A barrier after writes that touched at most this many files and
#: directories may fsync exactly those; past it, one ``syncfs`` flushes them all.
_FSYNC_AT_MOST = 4
#: Dirty and in-writeback page cache (KiB) below which the machine counts as
#: quiet: a ``syncfs`` then flushes little beyond the program's own writes.
_QUIET_DIRTY_KIB = 2048


class Refused(Exception):
    """An operation ends with a non-ok status (carried to its result)."""

    def __init__(self, status, reason, unsafe=False, under_file=False):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.unsafe = unsafe
        #: A component of the path is neither a directory nor a link: nothing
        #: can exist below it (absence, to a reader of a whole state).
        self.under_file = under_file


class ProgramRefused(Exception):
    """The program as a whole could not start: its root or lock directory is
    absent (``kind="absent"``), a symlink or replaced (``"unsafe"``) or
    unusable (``"failed"``). ``path`` is target-relative (``"."``: the root)."""

    def __init__(self, kind, path, reason):
        super().__init__(reason)
        self.kind = kind
        self.path = path
        self.reason = reason


def _strerror(exc):
    return os.strerror(exc.errno) if exc.errno else str(exc)


def split_components(path):
    """Components of an already validated target path; re-checked here
    because the remote side must not trust its request."""
    if path in ("", "."):
        return ()
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", "..") or "\x00" in part:
            raise Refused(FAILED, "'%s' is not a plain relative path" % path.replace("\x00", "\\0"))
    return parts


def _label(parts, upto):
    return "/".join(parts[:upto]) or "."


def _is_symlink(name, dir_fd):
    try:
        return stat_mode.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_subdir(dir_fd, name, label):
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise Refused(ABSENT, "'%s' does not exist" % label) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            if _is_symlink(name, dir_fd):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True) from None
            if exc.errno == errno.ENOTDIR:
                raise Refused(FAILED, "'%s' is not a directory" % label, under_file=True) from None
        raise


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


#: A file opened to be read: ``O_NONBLOCK``, so that opening a FIFO does not
#: hang the program.
_LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _leaf_refusal(exc, dir_fd, leaf, label):
    """What an ``OSError`` opening file ``leaf`` of ``dir_fd`` to read it
    means: absence, a symbolic link (unsafe), or the error itself."""
    if isinstance(exc, FileNotFoundError):
        return Refused(ABSENT, "'%s' does not exist" % label)
    if exc.errno == errno.ELOOP and _is_symlink(leaf, dir_fd):
        return Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
    return exc


def _unlink_quietly(name, dir_fd):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


_UNRESOLVED = object()
_syncfs = _UNRESOLVED


def _libc_syncfs():
    """libc's ``syncfs``, or None where there is none (not Linux, no
    ctypes). Resolved on first use: importing ctypes costs the remote
    program milliseconds, and only programs with deferred writes need it."""
    global _syncfs
    if _syncfs is _UNRESOLVED:
        try:
            import ctypes

            function = ctypes.CDLL(None, use_errno=True).syncfs
            function.argtypes = [ctypes.c_int]
            function.restype = ctypes.c_int
            _syncfs = function
        except (ImportError, OSError, AttributeError):
            _syncfs = None
    return _syncfs


def sync_filesystem(fd):
    """Flush every dirty page and inode of the filesystem holding ``fd``
    (``syncfs(2)``); False where libc has no such call."""
    global _syncfs
    function = _libc_syncfs()
    if function is None:
        return False
    if function(fd) != 0:
        import ctypes

        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
        # The kernel lacks it after all. The files written so far were not
        # kept open for the fsync fallback, so flush everything this once.
        _syncfs = None
        os.sync()
    return True


#: ``machine_is_quiet``'s last answer and when (monotonic seconds) it was
#: read: a barrier a moment after another asks the same question, and
#: reading ``/proc/meminfo`` cost a fast disk's publication a tenth of its
#: durable write. Either answer flushes everything; only the cost differs.
_quiet_reading = [None, 0.0]
_QUIET_READING_SECONDS = 0.5


def machine_is_quiet():
    """Whether the machine's page cache holds little data waiting to be
    written (``Dirty`` + ``Writeback`` of ``/proc/meminfo``, read at most
    every half second); False where that cannot be read."""
    now = time.monotonic()
    answer, read_at = _quiet_reading
    if answer is None or now - read_at >= _QUIET_READING_SECONDS:
        answer = _quiet_reading[0] = _read_quiet()
        _quiet_reading[1] = now
    return answer


def _read_quiet():
    try:
        fd = os.open("/proc/meminfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        text = os.read(fd, 65536)
    except OSError:
        return False
    finally:
        os.close(fd)
    waiting = []
    for line in text.split(b"\n"):
        if line.startswith((b"Dirty:", b"Writeback:")):
            try:
                waiting.append(int(line.split()[1]))
            except (IndexError, ValueError):
                return False
    return len(waiting) == 2 and sum(waiting) <= _QUIET_DIRTY_KIB


class _Deferred:
    """The deferred writes of one program since its last barrier.

    What a barrier must make durable is exactly what was deferred: each
    written file's bytes and inode, and each changed directory's entries
    (the names those files were given, removals, new directories). Two
    flushes give that guarantee: an fsync of each file, then of each
    directory that names them; or one ``syncfs``, which also writes every
    other process's dirty data on the filesystem. So a few writes are
    flushed by ``syncfs`` only while the machine is quiet (then it is one
    flush instead of one per file and directory) and by their own fsyncs
    while others have data waiting (which a ``syncfs`` would wait for: a
    one-blob publication cost 3-4 durable writes in a loaded run). Many
    writes (a Fork's hundreds of files) take one ``syncfs`` either way;
    where libc has no ``syncfs``, every barrier fsyncs. The fsyncs of one
    barrier run at once, each on its own thread: a journalling filesystem
    commits them together, where one after another each waited for a
    commit of its own."""

    def __init__(self):
        #: (device, inode) -> an open descriptor of each directory changed.
        self.directories = {}
        #: Open descriptors of the files written, while they are few or
        #: there is no syncfs.
        self.files = []
        #: More were written than are worth an fsync each: syncfs instead.
        self.whole = False
        self.count = 0

    def wrote(self, dir_fd, file_fd=None, take=False):
        """Record a deferred change of ``dir_fd`` and of the file open as
        ``file_fd``; the descriptors stay the caller's, but for ``file_fd``
        with ``take``: then it is this record's from the call on, even when
        it raises (no duplicate and two closes for a file written for the
        barrier: a tenth of a small publication's system calls)."""
        if file_fd is not None:
            self._keep_file(file_fd, take)
        self.count += 1
        st = os.fstat(dir_fd)
        key = (st.st_dev, st.st_ino)
        if key not in self.directories:
            self.directories[key] = os.dup(dir_fd)
        if _libc_syncfs() is None:
            if len(self.files) >= _MAX_OPEN_DEFERRED:
                self._flush_writes()
                self.count = 0  # the barrier reports what it covered itself
        elif not self.whole and len(self.files) + len(self.directories) > _FSYNC_AT_MOST:
            self.whole = True
            for fd in self.files:
                os.close(fd)
            self.files = []

    def _keep_file(self, file_fd, take):
        """Keep ``file_fd`` (or, unless ``take``, a duplicate) for the
        barrier's fsync; none is needed once a ``syncfs`` will flush all."""
        if self.whole:
            if take:
                os.close(file_fd)
        else:
            self.files.append(file_fd if take else os.dup(file_fd))

    def flush(self):
        """Make every recorded write durable; returns how many writes there
        were."""
        count = self.count
        try:
            self._flush_writes()
        finally:
            self.close()
        return count

    def _flush_writes(self):
        """Make every recorded write durable."""
        synced = not (self.directories or self.files or self.whole)  # nothing deferred
        if not synced and (self.whole or (_libc_syncfs() is not None and machine_is_quiet())):
            by_device = {}
            for (device, _inode), fd in self.directories.items():
                by_device.setdefault(device, fd)
            # False only where libc or the kernel lacks syncfs (then
            # sync_filesystem may have flushed everything itself).
            synced = all([sync_filesystem(fd) for fd in by_device.values()])
        if not synced:
            _fsync_at_once(self.files + list(self.directories.values()))
        for fd in self.files + list(self.directories.values()):
            os.close(fd)
        self.directories, self.files, self.whole = {}, [], False

    def close(self):
        for fd in self.files + list(self.directories.values()):
            os.close(fd)
        self.directories, self.files, self.count, self.whole = {}, [], 0, False


def _fsync_at_once(fds):
    """fsync every descriptor of ``fds`` at once: the first on this thread,
    each other on a thread of ``_FLUSHERS``; raise the first failure once
    all are done."""
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    waits = [_FLUSHERS.fsync(fd) for fd in fds[1:]]
    failure = None
    try:
        os.fsync(fds[0])
    except OSError as exc:
        failure = exc
    for wait in waits:
        raised = wait()
        failure = failure or raised
    if failure is not None:
        raise failure


class _Flushers:
    """Threads kept for the fsyncs a barrier issues at once (starting a
    thread per fsync cost a fast disk's flush again). Made on first use:
    a program with nothing to flush at once starts none."""

    #: Threads kept; a barrier past that many waits for one to be free.
    KEPT = 3

    def __init__(self):
        self._lock = _thread.allocate_lock()
        self._requests = None
        self._started = 0

    def fsync(self, fd):
        """fsync ``fd`` on a kept thread; returns a call that waits for it
        and answers its ``OSError`` (None when it flushed)."""
        with self._lock:
            if self._requests is None:
                import _queue

                self._requests = _queue.SimpleQueue()
            if self._started < self.KEPT:
                self._started += 1
                _thread.start_new_thread(self._serve, ())
        done = _thread.allocate_lock()
        done.acquire()
        outcome = []
        self._requests.put((fd, done, outcome))

        def wait():
            done.acquire()
            return outcome[0]

        return wait

    def _serve(self):
        while True:
            fd, done, outcome = self._requests.get()
            error = None
            try:
                os.fsync(fd)
            except OSError as exc:
                error = exc
            outcome.append(error)
            done.release()


_FLUSHERS = _Flushers()


def probe_filesystem_clock(dir_fd):
    """Create, stat and remove a probe file under ``dir_fd``; return its
    modification time (stamped by the target's kernel) in whole seconds."""
    name = CLOCK_PROBE_PREFIX + os.urandom(8).hex()
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        stamp_ns = os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)
    return stamp_ns // 1000000000


def stamped_content(parts, reading):
    """The bytes of a stamped creation: ``parts`` joined, each integer part
    (an offset in seconds) replaced by ``reading + offset`` in decimal."""
    return b"".join(part if isinstance(part, bytes) else b"%d" % (reading + part) for part in _checked_parts(parts))


def _checked_parts(parts):
    """``parts`` of a stamped creation, refused unless a list of bytes and
    integer offsets (checked before any file is made for them)."""
    if not isinstance(parts, (list, tuple)):
        raise Refused(FAILED, "stamped content is a list of parts")
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, (bytes, int)):
            raise Refused(FAILED, "stamped content is bytes and integer offsets")
    return parts


def _family_members(names, prefix, digits, suffix):
    """The names that are ``prefix`` + ``digits`` ASCII digits + ``suffix``
    (all of one width, so they sort by number), sorted."""
    width = len(prefix) + digits + len(suffix)
    start, end = len(prefix), len(prefix) + digits
    return sorted([
        name for name in names
        if len(name) == width and name.startswith(prefix) and name.endswith(suffix)
        and not name[start:end].strip("0123456789")
    ])


def is_family_member(name, prefix, digits, suffix):
    """Whether ``name`` is ``prefix`` + ``digits`` ASCII digits + ``suffix``."""
    return isinstance(name, str) and bool(_family_members((name,), prefix, digits, suffix))


def _family(argument):
    """``(prefix, digits, suffix)`` of a numbered family, checked."""
    try:
        prefix, digits, suffix = argument
    except (TypeError, ValueError):
        prefix = digits = suffix = None
    if not (isinstance(prefix, str) and isinstance(suffix, str) and type(digits) is int and digits > 0):
        raise Refused(FAILED, "a numbered family is a prefix, a digit count and a suffix")
    return prefix, digits, suffix


def pin_root(root):
    """Open ``root`` as a non-symlinked directory and return its
    ``(device, inode)``, the identity every later program re-proves."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise ProgramRefused("absent", ".", "the target root does not exist") from None
    except OSError as exc:
        if os.path.islink(root):
            raise ProgramRefused("unsafe", ".", "the target root is a symbolic link") from None
        if exc.errno == errno.ENOTDIR:
            raise ProgramRefused("failed", ".", "the target root is not a directory") from None
        raise ProgramRefused("failed", ".", _strerror(exc)) from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino)


class Executor:
    """Runs plain-form programs below one pinned root."""

    def __init__(self, root, identity, parse_json=None):
        self.root = root
        self.identity = tuple(identity)
        #: How a chain reads the JSON it follows (see ``_parse_json``, the
        #: default): the local target passes a faster reader of the same
        #: JSON. Whatever it answers, a chain's next file is only a request,
        #: and the caller verifies every link against the record it decodes.
        self.parse_json = parse_json or _parse_json
        # A LocalTarget runs programs in worker threads: each program's
        # directories are its own thread's.
        self._program = _thread._local()
        # Pack files open for appending, by (store, pack): a pack is one
        # program's own, so its descriptor stays open until that program
        # ends (thousands of snapshots, one open).
        self._packs = {}

    # -- programs ------------------------------------------------------------

    def run(self, operations, lock=None):
        """Run ``operations`` in order, stopping at the first non-optional
        one that does not succeed; return ``(results, stopped_at)``."""
        if all(operation[0] in _KEEPING_KINDS for operation in operations):
            # The lock's directory chain is the operations' too (the root
            # and the state directory, opened once).
            self._program.directories = {}
            self._program.kept = set()
        try:
            if lock is None:
                return self._run_all(operations)
            lock_fd = self._lock_descriptor(lock)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                try:
                    return self._run_all(operations)
                finally:
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(lock_fd)
        finally:
            directories = getattr(self._program, "directories", None)
            self._program.directories = self._program.kept = None
            for fd in (directories or {}).values():
                os.close(fd)

    def _run_all(self, operations):
        results = []
        stopped_at = None
        deferred = _Deferred()
        try:
            for index, operation in enumerate(operations):
                kind, path, optional, argument = operation[:4]
                if stopped_at is not None:
                    results.append((SKIPPED, None, None, False))
                    continue
                later = len(operation) > 4 and bool(operation[4])
                result = self.perform(kind, path, argument, deferred if later or kind == "Barrier" else None)
                results.append(result)
                if result[0] != OK and not optional:
                    stopped_at = index
        finally:
            # Deferred writes no barrier followed stay as the kernel has them.
            deferred.close()
            if self._packs:
                self._close_packs(operations)
        return results, stopped_at

    def _close_packs(self, operations):
        """Close the packs ``operations`` appended to."""
        for operation in operations:
            argument = operation[3] if operation[0] == "SnapshotFile" else None
            if isinstance(argument, (list, tuple)) and len(argument) > 2:
                fd = self._packs.pop((argument[0], argument[2]), None)
                if fd is not None:
                    os.close(fd)

    def _lock_descriptor(self, lock):
        """The lock directory, opened for this program alone (never one of
        its kept descriptors: an operation removing a directory closes
        those), through the kept chain of its parents."""
        parts = split_components(lock)
        try:
            if not parts:
                return self._open_root()
            parent = self._open_directory(parts[:-1])
            try:
                return _open_subdir(parent, parts[-1], _label(parts, len(parts)))
            finally:
                self._close_directory(parent)
        except Refused as refusal:
            kind = "absent" if refusal.status == ABSENT else "unsafe" if refusal.unsafe else "failed"
            raise ProgramRefused(kind, lock, "lock directory: " + refusal.reason) from None
        except OSError as exc:
            raise ProgramRefused("failed", lock, "lock directory: " + _strerror(exc)) from None

    def perform(self, kind, path, argument, deferred=None):
        """One operation; ``deferred``: the program's pending deferred
        writes, which this one joins instead of syncing itself."""
        handler = _HANDLERS.get(kind)
        if handler is None:
            return (FAILED, None, "unsupported operation %s" % kind, False)
        try:
            return handler(self, path, argument, deferred)
        except Refused as refusal:
            return (refusal.status, None, refusal.reason, refusal.unsafe)
        except OSError as exc:
            return (FAILED, None, _strerror(exc), False)

    # -- descriptor chain ----------------------------------------------------

    def _open_root(self):
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except FileNotFoundError:
            raise Refused(FAILED, "the target root no longer exists") from None
        except OSError:
            if os.path.islink(self.root):
                raise Refused(FAILED, "the target root is a symbolic link", unsafe=True) from None
            raise
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.identity:
            os.close(fd)
            raise Refused(
                FAILED,
                "the target root was replaced since the target pinned it (deleted and made again, or "
                "another directory moved to its place); nothing was done: open the location anew",
                unsafe=True,
            )
        return fd

    def _open_directory(self, parts):
        directories = getattr(self._program, "directories", None)
        if directories is not None:
            return self._open_kept_directory(directories, parts)
        fd = self._open_root()
        try:
            for index, name in enumerate(parts):
                next_fd = _open_subdir(fd, name, _label(parts, index + 1))
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_kept_directory(self, directories, parts):
        """``_open_directory`` in a read-only program: each directory of the
        chain is opened once, from its kept parent, with the same checks.
        The caller releases what it gets with ``_close_directory``, which
        leaves a kept descriptor open (no duplicate is made: a listing's
        four operations per session made eight more system calls)."""
        fd = directories.get(parts)
        if fd is not None:
            return fd  # kept already: most operations of a program name a directory another did
        kept_fds = self._program.kept
        fd = directories.get(())
        if fd is None:
            fd = directories[()] = self._open_root()
            kept_fds.add(fd)
        owned = False  # fd is not kept: close it once past it
        try:
            for index, name in enumerate(parts):
                key = parts[: index + 1]
                kept = directories.get(key)
                if kept is None:
                    kept = _open_subdir(fd, name, _label(parts, index + 1))
                    if len(directories) < _DIRECTORY_CACHE_LIMIT:
                        directories[key] = kept
                        kept_fds.add(kept)
                        if owned:
                            os.close(fd)
                        owned = False
                    else:
                        if owned:
                            os.close(fd)
                        owned = True
                elif owned:
                    os.close(fd)
                    owned = False
                fd = kept
        except BaseException:
            if owned:
                os.close(fd)
            raise
        return fd

    def _deepest_kept(self, parts):
        """``(depth, fd)`` of the deepest directory of ``parts`` (itself
        included) this program keeps open; ``(0, None)``: none."""
        directories = getattr(self._program, "directories", None)
        if directories:
            for depth in range(len(parts), -1, -1):
                fd = directories.get(parts[:depth])
                if fd is not None:
                    return depth, fd
        return 0, None

    def _forget_directory(self, parts):
        """Drop a removed directory from the program's kept ones, so a later
        operation naming it again opens the chain afresh (and finds it
        absent, or what took its place) instead of writing into a
        directory no name reaches."""
        directories = getattr(self._program, "directories", None)
        for key in [key for key in directories or () if key[: len(parts)] == parts]:
            fd = directories.pop(key)
            self._program.kept.discard(fd)
            os.close(fd)

    def _close_directory(self, fd):
        """Close a descriptor ``_open_directory`` or ``_open_parent`` gave,
        unless the program keeps it."""
        kept = getattr(self._program, "kept", None)
        if not kept or fd not in kept:
            os.close(fd)

    def _open_parent(self, path):
        """``(parent_fd, leaf, label)``; the caller closes ``parent_fd``."""
        parts = split_components(path)
        if not parts:
            raise Refused(FAILED, "the operation needs an entry, not the target root")
        return self._open_directory(parts[:-1]), parts[-1], path

    def _open_file(self, path):
        """``(fd, label)`` of ``path`` opened for reading as ``_open_leaf``
        opens it; the caller closes ``fd``."""
        pfd, leaf, label = self._open_parent(path)
        try:
            return self._open_leaf(pfd, leaf, label), label
        finally:
            self._close_directory(pfd)

    @staticmethod
    def _open_leaf(dir_fd, leaf, label):
        try:
            return os.open(leaf, _LEAF_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _leaf_refusal(exc, dir_fd, leaf, label) from None

    @staticmethod
    def _read_regular(dir_fd, leaf, label, max_bytes=None):
        """The bytes of regular file ``leaf``: all of them, or the first
        ``max_bytes`` (fewer where it ends first)."""
        # _open_leaf inline: a listing reads three files a session, and
        # each call saved counts there. A read of a regular file answers
        # short only at its end, so a file whose size held costs one.
        try:
            fd = os.open(leaf, _LEAF_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _leaf_refusal(exc, dir_fd, leaf, label) from None
        try:
            st = os.fstat(fd)
            if not stat_mode.S_ISREG(st.st_mode):
                raise Refused(FAILED, "'%s' is not a regular file" % label)
            if max_bytes is not None:
                return _read_at_most(fd, max_bytes)
            size = st.st_size
            first = os.read(fd, size + 1)
            return first if len(first) <= size else _read_rest(fd, first)
        finally:
            os.close(fd)

    @staticmethod
    def _lstat(dir_fd, leaf):
        try:
            return os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    @staticmethod
    def _write_temp(dir_fd, leaf, data, deferred, mode=None):
        """Write a temporary file beside ``leaf`` and return its name."""
        name = ".%s.%s.tmp" % (leaf[:80], os.urandom(6).hex())
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, _FILE_MODE, dir_fd=dir_fd)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            _write_all(fd, data)
            if deferred is None:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(name, dir_fd)
            raise
        if deferred is None:
            os.close(fd)
            return name
        try:  # the record owns fd from here
            deferred.wrote(dir_fd, fd, take=True)
        except BaseException:
            _unlink_quietly(name, dir_fd)
            raise
        return name

    # -- operations ----------------------------------------------------------

    def _read(self, path, _argument, _deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            return (OK, self._read_regular(pfd, leaf, label), None, False)
        finally:
            self._close_directory(pfd)

    def _verify(self, path, expected, _deferred):
        try:
            pfd, leaf, label = self._open_parent(path)
            try:
                actual = self._read_regular(pfd, leaf, label)
            finally:
                self._close_directory(pfd)
        except Refused as refusal:
            # A missing parent proves absence just as a missing leaf does.
            if refusal.status != ABSENT:
                raise
            actual = None
        if actual == expected:
            return (OK, actual, None, False)
        if expected is None:
            reason = "'%s' exists" % path
        elif actual is None:
            reason = "'%s' does not exist" % path
        else:
            reason = "'%s' has different content" % path
        return (MISMATCH, actual, reason, False)

    def _stat(self, path, _argument, _deferred):
        if not split_components(path):
            fd = self._open_root()
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        else:
            pfd, leaf, label = self._open_parent(path)
            try:
                st = self._lstat(pfd, leaf)
            finally:
                self._close_directory(pfd)
            if st is None:
                raise Refused(ABSENT, "'%s' does not exist" % label)
            if stat_mode.S_ISLNK(st.st_mode):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
        return (OK, _stat_facts(st), None, False)

    def _list(self, path, _argument, _deferred):
        fd = self._open_directory(split_components(path))
        try:
            return (OK, tuple(sorted(os.listdir(fd))), None, False)
        finally:
            self._close_directory(fd)

    def _newest(self, path, family, max_bytes=None):
        """``(names, link)``: the members of the numbered ``family`` in
        directory ``path``, sorted, and the ``(path, status, bytes or
        reason, unsafe)`` of reading the newest (None without members; at
        most ``max_bytes`` of it, None: whole)."""
        parts = split_components(path)
        names, link, _listed = _newest_in(
            lambda: self._open_directory(parts), self._close_directory, path if parts else "", family, max_bytes
        )
        return names, link

    def _read_newest(self, path, argument, _deferred):
        # (prefix, digits, suffix) reads the member whole; a fourth part
        # is the most bytes to read of it.
        max_bytes = None
        if isinstance(argument, (list, tuple)) and len(argument) == 4:
            argument, max_bytes = argument[:3], argument[3]
            if type(max_bytes) is not int or max_bytes < 0:
                raise Refused(FAILED, "a read's size limit is a whole, non-negative number")
        prefix, digits, suffix = family = _family(argument)
        names, link = self._newest(path, family, max_bytes)
        if link is None:
            raise Refused(ABSENT, "'%s' holds no '%s%s%s' file" % (path, prefix, "N" * digits, suffix))
        _label, status, payload, unsafe = link
        if status != OK:
            raise Refused(status, payload, unsafe)
        return (OK, (names[-1], payload), None, False)

    def _newest_is(self, path, argument, _deferred):
        """Whether the newest member of a numbered family in directory
        ``path`` is the name expected (None: that there is none): only the
        directory is listed. ``mismatch`` carries the newest member's name,
        or None."""
        try:
            *family, expected = argument
        except (TypeError, ValueError):
            family, expected = None, None
        prefix, digits, suffix = _family(family)
        if expected is not None and not isinstance(expected, str):
            raise Refused(FAILED, "the newest member expected is a name or None")
        try:
            fd = self._open_directory(split_components(path))
        except Refused as refusal:
            # A missing directory holds no member, as a missing parent
            # proves a file absent to Verify.
            if refusal.status != ABSENT:
                raise
            names = []
        else:
            try:
                names = _family_members(os.listdir(fd), prefix, digits, suffix)
            finally:
                self._close_directory(fd)
        actual = names[-1] if names else None
        if actual == expected:
            return (OK, actual, None, False)
        family_name = "'%s%s%s'" % (prefix, "N" * digits, suffix)
        if actual is None:
            reason = "'%s' holds no %s file, not '%s'" % (path, family_name, expected)
        elif expected is None:
            reason = "'%s' holds %s file '%s'" % (path, family_name, actual)
        else:
            reason = "the newest %s file in '%s' is '%s', not '%s'" % (family_name, path, actual, expected)
        return (MISMATCH, actual, reason, False)

    def _read_chain(self, path, argument, _deferred):
        """Read the newest member of a numbered family in directory ``path``
        (as ``_read_newest``), then follow ``hops``: each is ``(keys, base)``,
        and the string found at the JSON key path ``keys`` of the file read
        last, joined under the target-relative directory ``base``, names the
        next file to read. ``value`` is ``(names, links)``: the family's
        member names, sorted, and one ``(path, status, bytes or reason,
        unsafe)`` per file read. The chain ends quietly where the JSON does
        not parse or holds no string at ``keys``, and after a link that is
        not ``ok``. A dereferenced path is only a request like any other: it
        goes through the same component checks and descriptor chain, and the
        caller verifies every byte it gets back."""
        try:
            *family, hops = argument
        except (TypeError, ValueError):
            family, hops = None, None
        family = _family(family)
        hops = _chain_hops(hops)
        names, first = self._newest(path, family)
        if first is None:
            return (OK, (names, ()), None, False)
        return (OK, (names, _follow(first, hops, lambda target: _chain_link(target, lambda: self._read_path(target)), self.parse_json)), None, False)

    def _read_path(self, path):
        pfd, leaf, label = self._open_parent(path)
        try:
            return self._read_regular(pfd, leaf, label)
        finally:
            self._close_directory(pfd)

    def _survey_dirs(self, path, argument, _deferred):
        """Every directory entry of directory ``path`` and what the numbered
        families in it lead to, in one pass over one open descriptor of
        ``path``: each entry is opened from it (``O_NOFOLLOW``, as every
        directory is), stated with ``fstat`` and listed, and each chain is
        read below it as ``ReadChain`` reads, no descriptor chain walked
        from the root per entry.

        ``argument`` is ``(names, after, limit, budget, chains)``: the
        entries named in ``names``, in that order, or (None) every entry of
        ``path`` not named with a leading dot, sorted, after the name
        ``after`` (None: from the first); at most ``limit`` of them, and no
        more once the files read reach ``budget`` bytes (at least one entry
        is surveyed). Each chain is ``(directory, prefix, digits, suffix,
        hops)``: a numbered family in ``directory`` and hops as
        ``ReadChain``'s, both relative to the entry (a hop's base too).

        ``value`` is ``(entries, complete)``; ``complete`` says no entry was
        left for another survey. An entry is ``(name, stat, listing,
        chains)``, each an operation result of the entry's path (a
        ``Stat``, a ``ListDir``, and one ``ReadChain`` per chain, links
        named by their target paths), exactly as those operations would
        answer. A chain whose directory the listings show absent is not
        opened at all."""
        try:
            names, after, limit, budget, chains = argument
        except (TypeError, ValueError):
            names = after = limit = budget = chains = None
        if names is not None and not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
            raise Refused(FAILED, "a survey names its entries in a list of strings")
        if not (_whole(limit) and limit > 0 and _whole(budget) and (after is None or isinstance(after, str))):
            raise Refused(FAILED, "a survey needs a positive entry limit, a byte budget and a name to start after")
        specs = _survey_chains(chains)
        parts = split_components(path)
        for name in names or ():
            if len(split_components(name)) != 1:
                raise Refused(FAILED, "'%s' is not an entry name" % name)
        fd = self._open_directory(parts)
        try:
            if names is None:
                names = sorted(n for n in os.listdir(fd) if not n.startswith(".") and (after is None or n > after))
            entries = []
            spent = 0
            for name in names:
                if len(entries) == limit or (entries and spent >= budget):
                    return (OK, (entries, False), None, False)
                entry, read = _survey_entry(fd, "%s/%s" % (path, name) if parts else name, name, specs, self.parse_json)
                entries.append(entry)
                spent += read
            return (OK, (entries, True), None, False)
        finally:
            self._close_directory(fd)

    def _create_exclusive(self, path, data, deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            if self._lstat(pfd, leaf) is not None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            return self._create_new(pfd, leaf, label, data, deferred)
        finally:
            self._close_directory(pfd)

    def _create_in_place_op(self, path, data, deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            return self._create_in_place(pfd, leaf, label, data, deferred)
        finally:
            self._close_directory(pfd)

    def _create_stamped_in_place(self, path, parts, deferred):
        _checked_parts(parts)
        pfd, leaf, label = self._open_parent(path)
        try:
            return self._create_in_place(pfd, leaf, label, parts, deferred, stamped=True)
        finally:
            self._close_directory(pfd)

    def _create_stamped(self, path, parts, deferred):
        _checked_parts(parts)
        pfd, leaf, label = self._open_parent(path)
        try:
            if self._lstat(pfd, leaf) is not None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            # Read before writing, so a deadline derived from it errs early.
            reading = probe_filesystem_clock(pfd)
            status, _value, reason, unsafe = self._create_new(pfd, leaf, label, stamped_content(parts, reading), deferred)
            return (status, reading if status == OK else None, reason, unsafe)
        finally:
            self._close_directory(pfd)

    def _create_linked(self, path, argument, deferred):
        try:
            data, source = argument
        except (TypeError, ValueError):
            data = source = None
        if not isinstance(data, bytes) or not isinstance(source, str):
            raise Refused(FAILED, "a linked creation is bytes and a source path")
        pfd, leaf, label = self._open_parent(path)
        try:
            if self._lstat(pfd, leaf) is not None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            linked = self._link_if_same(pfd, leaf, source, data)
            if linked is None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            if not linked:
                status, _value, reason, unsafe = self._create_new(pfd, leaf, label, data, deferred)
                return (status, False if status == OK else None, reason, unsafe)
            if deferred is None:
                os.fsync(pfd)
            else:
                # The bytes were flushed when the source was written; only
                # the new name is pending.
                deferred.wrote(pfd)
            return (OK, True, None, False)
        finally:
            os.close(pfd)

    def _link_if_same(self, pfd, leaf, source, data):
        """Hard-link ``source`` as ``leaf`` when it is a regular file holding
        exactly ``data``: True when linked, False (nothing left behind) when
        not, None when ``leaf`` appeared meanwhile. What is checked is the
        new name itself, after linking, so the bytes it names are the bytes
        that were compared."""
        try:
            spfd, sleaf, _label = self._open_parent(source)
        except (Refused, OSError):
            return False
        try:
            os.link(sleaf, leaf, src_dir_fd=spfd, dst_dir_fd=pfd, follow_symlinks=False)
        except FileExistsError:
            return None
        except OSError:
            return False
        finally:
            os.close(spfd)
        try:
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=pfd)
            with open(fd, "rb", closefd=True) as handle:
                st = os.fstat(fd)
                same = stat_mode.S_ISREG(st.st_mode) and st.st_size == len(data) and handle.read() == data
        except OSError:
            same = False
        if not same:
            os.unlink(leaf, dir_fd=pfd)
        return same

    def _create_new(self, pfd, leaf, label, data, deferred):
        temp = self._write_temp(pfd, leaf, data, deferred)
        try:
            os.link(temp, leaf, src_dir_fd=pfd, dst_dir_fd=pfd, follow_symlinks=False)
        except FileExistsError:
            return (CONFLICT, None, "'%s' already exists" % label, False)
        except OSError as exc:
            if exc.errno not in _NO_LINK_ERRNOS:
                raise
            return self._create_in_place(pfd, leaf, label, data, deferred)
        finally:
            _unlink_quietly(temp, pfd)
        if deferred is None:
            os.fsync(pfd)
        return (OK, None, None, False)

    @staticmethod
    def _create_in_place(pfd, leaf, label, data, deferred, stamped=False):
        """Create ``leaf`` with ``data`` under its own name; or, ``stamped``,
        with the stamped parts ``data`` read against the new file's own
        modification time, answered as the value."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(leaf, flags, _FILE_MODE, dir_fd=pfd)
        except FileExistsError:
            return (CONFLICT, None, "'%s' already exists" % label, False)
        reading = None
        try:
            if stamped:
                # The probe's reading (probe_filesystem_clock) without a
                # probe: the file just made is one.
                created = os.fstat(fd)
                reading = created.st_mtime_ns // 1000000000
                _write_all(fd, stamped_content(data, reading))
                _keep_time(fd, created)
            else:
                _write_all(fd, data)
            if deferred is None:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(leaf, pfd)  # all of the bytes or no file
            raise
        if deferred is None:
            os.close(fd)
            os.fsync(pfd)
        else:
            deferred.wrote(pfd, fd, take=True)
        return (OK, reading, None, False)

    def _replaceable(self, pfd, leaf, label):
        """The ``lstat`` of ``leaf`` (None: absent), refused when a rename
        cannot replace it: a symbolic link or a directory."""
        found = self._lstat(pfd, leaf)
        if found is not None and stat_mode.S_ISLNK(found.st_mode):
            raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
        if found is not None and stat_mode.S_ISDIR(found.st_mode):
            raise Refused(FAILED, "'%s' is a directory" % label)
        return found

    def _write_project(self, path, data, deferred):
        return self._replace(path, data, deferred, project=True)

    def _replace(self, path, data, deferred, project=False):
        pfd, leaf, label = self._open_parent(path)
        try:
            found = self._replaceable(pfd, leaf, label)
            mode = None
            if project:
                mode = stat_mode.S_IMODE(found.st_mode) if found is not None else _PROJECT_FILE_MODE
            temp = self._write_temp(pfd, leaf, data, deferred, mode)
            try:
                os.replace(temp, leaf, src_dir_fd=pfd, dst_dir_fd=pfd)
            except BaseException:
                _unlink_quietly(temp, pfd)
                raise
            if deferred is None:
                os.fsync(pfd)
            return (OK, None, None, False)
        finally:
            self._close_directory(pfd)

    def _remove(self, path, _argument, deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            found = self._lstat(pfd, leaf)
            if found is None:
                raise Refused(ABSENT, "'%s' does not exist" % label)
            if stat_mode.S_ISLNK(found.st_mode):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
            if stat_mode.S_ISDIR(found.st_mode):
                try:
                    os.rmdir(leaf, dir_fd=pfd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise Refused(FAILED, "'%s' is a directory that is not empty" % label) from None
                    raise
                self._forget_directory(split_components(path))
            else:
                os.unlink(leaf, dir_fd=pfd)
            if deferred is None:
                os.fsync(pfd)
            else:
                deferred.wrote(pfd)
            return (OK, None, None, False)
        finally:
            self._close_directory(pfd)

    def _make_dirs(self, path, _argument, deferred):
        parts = split_components(path)
        # From the deepest directory of the path this program holds already
        # (each above it exists): a publication's versions directory is one
        # step below the item's, which its checks opened.
        start, fd = self._deepest_kept(parts)
        owned = fd is None
        if owned:
            fd = self._open_root()
        created = False
        # A program that keeps its directories keeps these too: the write
        # that follows a MakeDirs names the directory it made.
        directories = getattr(self._program, "directories", None)
        try:
            for index in range(start, len(parts)):
                name = parts[index]
                try:
                    os.mkdir(name, _DIR_MODE, dir_fd=fd)
                    if deferred is None:
                        os.fsync(fd)
                    else:
                        deferred.wrote(fd)
                    created = True
                except FileExistsError:
                    created = False
                next_fd = _open_subdir(fd, name, _label(parts, index + 1))
                if owned:
                    os.close(fd)
                fd, owned = next_fd, True
                if directories is not None and len(directories) < _DIRECTORY_CACHE_LIMIT:
                    directories[parts[: index + 1]] = fd
                    self._program.kept.add(fd)
                    owned = False
        finally:
            if owned:
                os.close(fd)
        if created:
            return (OK, None, None, False)
        return (CONFLICT, None, "'%s' already exists" % path, False)

    def _clock(self, path, _argument, _deferred):
        fd = self._open_directory(split_components(path))
        try:
            return (OK, probe_filesystem_clock(fd), None, False)
        finally:
            self._close_directory(fd)

    def _walk(self, path, bounds, _deferred):
        """Every entry below directory ``path``: ``(relative path, kind,
        size, mtime_seconds)`` in depth-first order with each directory's
        names sorted, a directory before its contents. Symbolic links are
        neither listed nor followed (the walk opens each directory with
        ``O_NOFOLLOW`` from its parent's descriptor, as every operation
        does); a subdirectory that cannot be opened or listed is skipped, as
        a local search skips it. At most ``limit`` entries, at most
        ``depth`` levels down (None: all): ``truncated`` says the walk left
        entries out because of the limit."""
        try:
            limit, depth = bounds
        except (TypeError, ValueError):
            limit = depth = -1
        if not all(_whole(n) for n in (limit, 1 if depth is None else depth)):
            raise Refused(FAILED, "a tree walk needs a whole entry limit and depth")
        entries = []
        fd = self._open_directory(split_components(path))
        try:
            truncated = _walk_directory(fd, "", entries, limit, depth)
        finally:
            os.close(fd)
        return (OK, (entries, truncated), None, False)

    def _list_tree(self, path, argument, _deferred):
        """The directories below directory ``path`` (the root too), listed in
        depth-first preorder: ``(records, pending)``.

        Each record is ``(relative directory, names)``: the directory's
        path relative to ``path`` (``""`` for ``path`` itself) and its
        entries' names, sorted and joined by NUL, a directory's name ending
        with ``/``. Only directories and regular files are entries: symbolic
        links are neither listed nor followed (every directory is opened
        with ``O_NOFOLLOW`` from its parent's descriptor), and FIFOs,
        sockets and devices are left out, so nothing listed can block a
        reader or lead outside ``path``. A directory below ``path`` that
        cannot be opened or listed (replaced by a link meanwhile,
        unreadable) is listed empty.

        ``argument`` is ``(limit, depth, resume)`` or ``(limit, depth,
        resume, read_first, max_bytes, budget)``. Directories are listed
        whole, until ``limit`` entries have been listed; ``pending`` names
        the directories still to list, in order, and a later listing given
        them as ``resume`` goes on where this one stopped. ``depth`` (None:
        all) bounds how many levels below ``path`` are listed.

        With ``read_first``, the value has a third member: the first
        ``read_first`` regular files of the listing in depth-first order of
        the sorted names (as far as the listed directories go), each read as
        ``ReadFiles`` reads (``(path, status, bytes, reason, unsafe, size)``),
        until their sizes reach ``budget``: a search that needs only a few
        files has them in the same program."""
        try:
            limit, depth, resume = argument[:3]
            read_first, max_bytes, budget = argument[3:] if len(argument) == 6 else (0, 0, 0)
        except (TypeError, ValueError):
            limit = depth = resume = read_first = max_bytes = budget = None
        if not (_whole(limit) and limit > 0 and (depth is None or (_whole(depth) and depth > 0))):
            raise Refused(FAILED, "a tree listing needs a positive entry limit and depth")
        if not (_whole(read_first) and _whole(max_bytes) and _whole(budget)):
            raise Refused(FAILED, "a tree listing reads a whole number of files, of bytes each and in all")
        if not isinstance(resume, (list, tuple)) or not all(isinstance(item, str) for item in resume):
            raise Refused(FAILED, "a tree listing resumes from a list of directories")
        for item in resume:
            split_components(item)
        chain = _DirChain(self._open_directory(split_components(path)))
        records = []
        stack = list(reversed(resume)) if resume else [""]
        listed = 0
        try:
            while stack and listed < limit:
                relative = stack.pop()
                parts = split_components(relative)
                try:
                    fd = chain.open(parts)
                    names, subdirs = _list_directory(fd)
                except (Refused, OSError):
                    # Gone, replaced by a link or unlistable: listed empty,
                    # so a reader waiting for it knows it was passed.
                    records.append((relative, ""))
                    continue
                listed += len(names)
                records.append((relative, "\0".join(names)))
                if depth is None or len(parts) + 1 < depth:
                    prefix = relative + "/" if relative else ""
                    stack.extend(prefix + name for name in reversed(subdirs))
            files = []
            spent = 0
            for name in _first_files(records, read_first):
                if files and spent >= budget:
                    break
                result = _read_one(chain, name, max_bytes)
                spent += len(result[1]) if result[1] is not None else 0
                files.append((name,) + result)
        finally:
            chain.close()
        if len(argument) == 6:
            return (OK, (records, list(reversed(stack)), files), None, False)
        return (OK, (records, list(reversed(stack))), None, False)

    def _read_files(self, path, argument, _deferred):
        """The bytes of many regular files below directory ``path``, in one
        pass that opens each directory once: ``argument`` is ``(names,
        max_bytes, budget)``, ``names`` their paths relative to ``path``.

        The value has one ``(status, bytes, reason, unsafe, size)`` per file
        read, in order. Each is found with ``lstat`` and opened with
        ``O_NOFOLLOW | O_NONBLOCK`` only when it is a regular file, and the
        open file must be the one found: a symbolic link fails closed
        (``unsafe``), and a FIFO, socket or device is refused without being
        opened. A file larger than ``max_bytes`` is not read: ``ok`` with
        bytes None and its size. Files are read until their sizes reach
        ``budget`` (at least one is read); the value is shorter than
        ``names`` then, and the rest are for another program."""
        try:
            names, max_bytes, budget = argument
        except (TypeError, ValueError):
            names = max_bytes = budget = None
        if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
            raise Refused(FAILED, "a batch read needs a list of file paths")
        if not (_whole(max_bytes) and _whole(budget)):
            raise Refused(FAILED, "a batch read needs a size limit and a budget")
        chain = _DirChain(self._open_directory(split_components(path)))
        results = []
        spent = 0
        try:
            for name in names:
                if results and spent >= budget:
                    break
                result = _read_one(chain, name, max_bytes)
                spent += len(result[1]) if result[1] is not None else 0
                results.append(result)
        finally:
            chain.close()
        return (OK, results, None, False)

    def _scan(self, path, argument, _deferred):
        """Every regular file and symbolic link below directory ``path``, with
        the facts that tell a change: ``(names, facts, unwalked, racy,
        truncated, started_ns)``.

        ``names`` is each entry's path relative to ``path`` followed by a NUL,
        ``facts`` the entries' ``SCAN_FACTS`` records in the same order (flags,
        size, ``st_mtime_ns``, ``st_ctime_ns``, inode; a link's own ``lstat``).
        Nothing is opened but directories and .gitignore files: symbolic links
        are recorded, never followed; FIFOs, sockets and devices are left out.
        Entries named in ``skip_names`` (at any depth) or whose path is in
        ``skip_paths`` are not visited at all.

        Each directory's ``.gitignore`` (a regular file; git's syntax) applies
        below it, deeper files first. An ignored file is flagged
        ``SCAN_IGNORED``; an ignored directory is not descended -- it is listed
        in ``unwalked`` as ``(path, SCAN_IGNORED_REASON)`` -- unless its path is
        in ``descend``, in which case everything found below it is flagged
        ignored (and only the directories below it that are in ``descend`` are
        descended). A directory that cannot be opened or listed is in
        ``unwalked`` with the reason. ``racy`` names the regular files not
        ignored whose modification or change time is at or after ``started_ns``
        (the target's clock when the walk began) minus ``racy_ns``: a change in
        the same timestamp tick could leave their facts as they are.

        At most ``limit`` entries (files, links and directories): past it
        ``truncated`` is True and the rest is left out. The order is the
        directories' own (not sorted), so an unchanged tree answers the very
        same ``names`` and ``facts``.

        A capturing scan (``argument``'s seventh part, ``[store, size limit,
        pack]``) also reads every regular file not ignored and within the
        limit while its directory is open, appends its bytes once per
        content to the new pack ``store/pack`` (never flushed) and answers,
        last, ``(pack bytes, records)``: per entry a ``CAPTURE_RECORD`` --
        ``CAPTURED`` with the digest and offset, ``CAPTURE_LEFT`` for a link
        or a file that could not be read whole with the facts the walk saw,
        ``CAPTURE_NONE`` for the rest -- or None when the pack could not be
        made or written (then nothing counts as read)."""
        try:
            skip_names, skip_paths, descend, limit, racy_ns = argument[:5]
            record_dirs = bool(argument[5]) if len(argument) > 5 else False
            capture_spec = argument[6] if len(argument) > 6 else None
        except (TypeError, ValueError):
            raise Refused(FAILED, "a tree scan needs skip names, skip paths, descend paths, a limit and a racy window") from None
        if not (_whole(limit) and _whole(racy_ns)):
            raise Refused(FAILED, "a tree scan's limit and racy window are whole numbers")
        started = time.time_ns()
        scan = _TreeScan(
            frozenset(_text_list(skip_names, "skip names")),
            frozenset(_text_list(skip_paths, "skip paths")),
            frozenset(_text_list(descend, "descend paths")),
            limit,
            started - racy_ns,
            record_dirs,
        )
        fd = self._open_directory(split_components(path))
        truncated = False
        try:
            scan.capture = self._capture(capture_spec)
            scan.directory(fd, "", None, False)
        except _ScanLimit:
            truncated = True
        except BaseException:
            if scan.capture is not None:
                scan.capture.close()
            raise
        finally:
            os.close(fd)
        names = "\0".join(scan.names) + "\0" if scan.names else ""
        value = (names, b"".join(scan.facts), [list(item) for item in scan.unwalked], scan.racy, truncated, started)
        if capture_spec is not None:
            value += (self._captured(scan),)
        return (OK, value, None, False)

    def _scan_paths(self, path, argument, _deferred):
        """What a ``ScanTree`` of the root would answer for the entries at
        ``paths`` and below them, walking nothing else: ``(names, facts,
        unwalked, racy, truncated, started_ns, directories, shared)``.

        ``argument`` is a ``ScanTree``'s and the paths (target-relative;
        ``""`` is the root, so ``[""]`` is a whole walk). Each path is
        ``lstat``-ed through the descriptor chain of its parents (every
        parent's .gitignore read on the way, so the flags are a whole walk's):
        a regular file or a link is recorded, a directory walked as
        ``ScanTree`` walks one, anything else -- absent, a FIFO, below a parent
        that is no directory any more -- answers nothing, so whatever was known
        there is gone. ``directories`` lists every directory listed (``""``
        the root), ``shared`` the regular files found with more than one link
        (a write through another of their names is a change too)."""
        try:
            skip_names, skip_paths, descend, limit, racy_ns, paths = argument[:6]
            record_dirs = bool(argument[6]) if len(argument) > 6 else False
            capture_spec = argument[7] if len(argument) > 7 else None
        except (TypeError, ValueError):
            raise Refused(FAILED, "a path scan needs skip names, skip paths, descend paths, a limit, a racy window and paths") from None
        if not (_whole(limit) and _whole(racy_ns)):
            raise Refused(FAILED, "a tree scan's limit and racy window are whole numbers")
        if split_components(path):
            raise Refused(FAILED, "a path scan starts at the target root, not '%s'" % path)
        # The paths as a tree of components: None marks a path to look at
        # (whatever is below it is looked at with it).
        plan = {}
        for text in _text_list(paths, "paths"):
            parts = split_components(text)
            if not parts:
                plan = None
                break
            node = plan
            for part in parts[:-1]:
                child = node.get(part, {})
                if child is None:
                    break
                node = node.setdefault(part, child)
            else:
                node[parts[-1]] = None
        started = time.time_ns()
        scan = _TreeScan(
            frozenset(_text_list(skip_names, "skip names")),
            frozenset(_text_list(skip_paths, "skip paths")),
            frozenset(_text_list(descend, "descend paths")),
            limit,
            started - racy_ns,
            record_dirs,
        )
        scan.directories = []
        scan.shared = []
        fd = self._open_root()
        truncated = False
        try:
            scan.capture = self._capture(capture_spec)
            if plan is None:
                scan.directory(fd, "", None, False)
            else:
                scan.planned(fd, "", None, False, plan)
        except _ScanLimit:
            truncated = True
        except BaseException:
            if scan.capture is not None:
                scan.capture.close()
            raise
        finally:
            os.close(fd)
        names = "\0".join(scan.names) + "\0" if scan.names else ""
        value = (
            names, b"".join(scan.facts), [list(item) for item in scan.unwalked], scan.racy, truncated, started,
            scan.directories, scan.shared,
        )
        if capture_spec is not None:
            value += (self._captured(scan),)
        return (OK, value, None, False)

    def _capture(self, spec):
        """The ``_Capture`` of a scan's ``[store, max_bytes, pack]`` (None:
        the scan reads no file), with its pack open; one that cannot be
        opened captures nothing (its answer says so)."""
        if spec is None:
            return None
        try:
            store, max_bytes, pack = spec
        except (TypeError, ValueError):
            raise Refused(FAILED, "a scan's capture is a store directory, a size limit and a pack") from None
        if not isinstance(store, str) or not _whole(max_bytes) or not _is_pack_name(pack):
            raise Refused(FAILED, "a scan's capture is a store directory, a size limit and a pack named pack-<hex>")
        capture = _Capture(max_bytes)
        try:
            fd = self._store_directory(store)
        except (Refused, OSError):
            capture.failed = True
            return capture
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            capture.out = os.open(pack, flags, _FILE_MODE, dir_fd=fd)
            capture.store, capture.pack = fd, pack
        except OSError:
            capture.failed = True
            os.close(fd)
        return capture

    @staticmethod
    def _captured(scan):
        """A capturing scan's last answer part: ``(pack bytes, records)``,
        one ``CAPTURE_RECORD`` per entry in the entries' order, or None
        when the pack could not be written (nothing is captured then)."""
        capture = scan.capture
        if capture is None:
            return None
        try:
            capture.close()
        finally:
            scan.capture = None
        if capture.failed:
            return None
        return (capture.end, b"".join(scan.captures))

    def _read_slice(self, path, argument, _deferred):
        """``argument`` is ``(offset, size)``: at most ``size`` bytes of regular
        file ``path`` from ``offset`` (fewer where the file ends first)."""
        try:
            offset, size = argument
        except (TypeError, ValueError):
            offset = size = None
        if not (_whole(offset) and _whole(size)):
            raise Refused(FAILED, "a slice is a whole offset and size")
        fd, label = self._open_file(path)
        try:
            if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
                raise Refused(FAILED, "'%s' is not a regular file" % label)
            os.lseek(fd, offset, os.SEEK_SET)
            return (OK, _read_at_most(fd, size), None, False)
        finally:
            os.close(fd)

    def _snapshot(self, path, argument, _deferred):
        """Keep the bytes of regular file ``path`` as a content-addressed blob:
        ``argument`` is ``(store directory, max_bytes)``. The value is
        ``(sha256 hex, size, mtime_ns, ctime_ns, inode, written)``: the file's
        ``fstat`` facts that held throughout the read, and whether the blob
        ``store/<sha256>`` was written (False: a file of that size was there).
        A file larger than ``max_bytes`` is not read: its digest is None.

        The file is opened like every read (``O_NOFOLLOW``, ``O_NONBLOCK``: a
        symbolic link fails closed, a FIFO neither blocks nor is read). The blob
        is never flushed: it is a cache whose loss in a crash is harmless (the
        record naming it lives in the caller's memory), so a reader must check
        a blob's bytes against its name before trusting them."""
        try:
            store, max_bytes, pack, known = (tuple(argument) + (None, None))[:4]
        except (TypeError, ValueError):
            store = max_bytes = pack = known = None
        if not isinstance(store, str) or not _whole(max_bytes):
            raise Refused(FAILED, "a snapshot needs a store directory and a size limit")
        if pack is not None and not _is_pack_name(pack):
            raise Refused(FAILED, "a snapshot pack is named pack-<hex>")
        if known is not None and not isinstance(known, str):
            raise Refused(FAILED, "a snapshot's known digest is text")
        fd, label = self._open_file(path)
        try:
            st, data = _read_stable(fd, label, max_bytes)
        finally:
            os.close(fd)
        facts = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        if data is None:
            return (OK, (None,) + facts + (False,), None, False)
        digest = _sha256_hex(data)
        if pack is not None:
            if digest == known:  # the caller keeps these bytes already
                return (OK, (digest,) + facts + (False, None), None, False)
            offset = self._append_blob(store, pack, data)
            return (OK, (digest,) + facts + (True, offset), None, False)
        written = self._store_blob(store, digest, data)
        return (OK, (digest,) + facts + (written,), None, False)

    def _append_blob(self, store, pack, data):
        """Append ``data`` to the pack file ``pack`` in directory ``store``
        (made on first use; one writer: the program that names it) and
        answer the offset it starts at. Never flushed, like a blob."""
        out = self._packs.get((store, pack))
        if out is None:
            fd = self._store_directory(store)
            try:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                try:
                    out = os.open(pack, flags, _FILE_MODE, dir_fd=fd)
                except OSError as exc:
                    raise Refused(FAILED, "the pack '%s/%s' cannot be written: %s" % (store, pack, _strerror(exc))) from None
            finally:
                os.close(fd)
            if not stat_mode.S_ISREG(os.fstat(out).st_mode):
                os.close(out)
                raise Refused(FAILED, "'%s/%s' is not a regular file" % (store, pack))
            self._packs[(store, pack)] = out
        offset = os.lseek(out, 0, os.SEEK_END)
        _write_all(out, data)
        return offset

    def _store_directory(self, store):
        try:
            return self._open_directory(split_components(store))
        except Refused as refusal:
            if refusal.status != ABSENT:
                raise
            # Not "absent": that would say the file snapshotted is gone.
            raise Refused(FAILED, "the blob store '%s' does not exist" % store) from None

    def _store_blob(self, store, digest, data):
        """Write ``data`` as the file ``digest`` in directory ``store`` unless a
        regular file of that size is there already; True when it wrote."""
        fd = self._store_directory(store)
        try:
            found = self._lstat(fd, digest)
            if found is not None and stat_mode.S_ISREG(found.st_mode) and found.st_size == len(data):
                return False
            if found is not None and stat_mode.S_ISDIR(found.st_mode):
                raise Refused(FAILED, "'%s/%s' is a directory" % (store, digest))
            name = ".%s.%s.tmp" % (digest, os.urandom(6).hex())
            temp = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE, dir_fd=fd)
            try:
                try:
                    _write_all(temp, data)
                finally:
                    os.close(temp)
                # rename, not link: a torn file of a crashed earlier writer
                # under this name is replaced; the name is never half-written.
                os.replace(name, digest, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                _unlink_quietly(name, fd)
                raise
            return True
        finally:
            os.close(fd)

    # -- whole path states (checkpoints and their restore) ------------------

    def _entry_at(self, pfd, leaf, label, max_bytes=None):
        """``[kind, mode, data, size]`` of ``leaf`` (never followed), or
        None when absent: a regular file's bytes (None past ``max_bytes``),
        a link's target, nothing for a directory."""
        st = self._lstat(pfd, leaf)
        if st is None:
            return None
        mode = stat_mode.S_IMODE(st.st_mode)
        if stat_mode.S_ISLNK(st.st_mode):
            target = os.readlink(leaf, dir_fd=pfd)
            return [ENTRY_SYMLINK, None, os.fsencode(target), len(os.fsencode(target))]
        if stat_mode.S_ISDIR(st.st_mode):
            return [ENTRY_DIRECTORY, mode, b"", 0]
        if not stat_mode.S_ISREG(st.st_mode):
            raise Refused(FAILED, "'%s' is not a regular file, directory or symbolic link" % label)
        fd = self._open_leaf(pfd, leaf, label)
        try:
            found, data = _read_stable(fd, label, (1 << 62) if max_bytes is None else max_bytes)
        finally:
            os.close(fd)
        return [ENTRY_FILE, stat_mode.S_IMODE(found.st_mode), data, found.st_size]

    def _read_entry(self, path, max_bytes, _deferred):
        try:
            pfd, leaf, label = self._open_parent(path)
        except Refused as refusal:
            # Below a missing directory, or below a file (a turn that turned
            # a directory into a file), nothing exists.
            if refusal.status == ABSENT or refusal.under_file:
                raise Refused(ABSENT, "'%s' does not exist" % path) from None
            raise
        try:
            found = self._entry_at(pfd, leaf, label, max_bytes)
        finally:
            self._close_directory(pfd)
        if found is None:
            raise Refused(ABSENT, "'%s' does not exist" % label)
        return (OK, found, None, False)

    def _put_entry(self, path, argument, deferred):
        """Give ``path`` the state ``wanted`` (``[kind, mode, data]`` or
        None: absent) if it holds ``expected`` now (the same; a None mode
        expects any): see ``PutEntry``."""
        expected, wanted = argument
        try:
            pfd, leaf, label = self._open_parent(path)
        except Refused as refusal:
            # A missing parent proves absence as a missing leaf does, and so
            # does a file where a parent would be (made a directory first
            # only by a step of its own: see ``ordered_steps``).
            if refusal.status != ABSENT and not (refusal.under_file and wanted is None):
                raise
            if expected is not None:
                return (MISMATCH, None, "'%s' does not exist" % path, False)
            if wanted is None:
                return (OK, None, None, False)
            # Parents no checkpoint names (one older than directories were
            # recorded): made with the default mode, never owner-only.
            self._make_parents(split_components(path)[:-1], deferred)
            pfd, leaf, label = self._open_parent(path)
        try:
            current = self._entry_at(pfd, leaf, label)
            if not _entry_matches(current, expected):
                if expected is None:
                    reason = "'%s' exists" % label
                elif current is None:
                    reason = "'%s' does not exist" % label
                else:
                    reason = "'%s' is not as it was read" % label
                return (MISMATCH, current, reason, False)
            if _entry_matches(current, wanted):
                return (OK, None, None, False)
            self._make_entry(pfd, leaf, label, current, wanted, deferred)
            if deferred is None:
                os.fsync(pfd)
            return (OK, None, None, False)
        finally:
            os.close(pfd)

    def _make_parents(self, parts, deferred):
        fd = self._open_root()
        try:
            for index, name in enumerate(parts):
                try:
                    os.mkdir(name, _default_mode(0o777), dir_fd=fd)
                    if deferred is None:
                        os.fsync(fd)
                    else:
                        deferred.wrote(fd)
                except FileExistsError:
                    pass
                next_fd = _open_subdir(fd, name, _label(parts, index + 1))
                os.close(fd)
                fd = next_fd
        finally:
            os.close(fd)

    def _make_entry(self, pfd, leaf, label, current, wanted, deferred):
        kind = None if current is None else current[0]
        if wanted is None:
            if kind == ENTRY_DIRECTORY:
                try:
                    os.rmdir(leaf, dir_fd=pfd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise Refused(FAILED, "'%s' is a directory that is not empty" % label) from None
                    raise
            elif kind is not None:
                os.unlink(leaf, dir_fd=pfd)
            if deferred is not None:
                deferred.wrote(pfd)
            return
        new_kind, mode, data = wanted[0], wanted[1], wanted[2]
        if new_kind == ENTRY_DIRECTORY:
            if kind is not None and kind != ENTRY_DIRECTORY:
                os.unlink(leaf, dir_fd=pfd)
            if kind != ENTRY_DIRECTORY:
                os.mkdir(leaf, _DIR_MODE, dir_fd=pfd)
            fd = _open_subdir(pfd, leaf, label)
            try:
                os.fchmod(fd, mode if mode is not None else _default_mode(0o777))
                if deferred is None:
                    os.fsync(fd)
                else:
                    deferred.wrote(pfd, fd)
            finally:
                os.close(fd)
            return
        if kind == ENTRY_DIRECTORY:
            try:
                os.rmdir(leaf, dir_fd=pfd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise Refused(FAILED, "'%s' is a directory that is not empty" % label) from None
                raise
        if new_kind == ENTRY_SYMLINK:
            name = ".%s.%s.tmp" % (leaf[:80], os.urandom(6).hex())
            os.symlink(os.fsdecode(data), name, dir_fd=pfd)
        elif new_kind == ENTRY_FILE:
            if mode is None:
                # No mode recorded (a checkpoint older than modes): the mode
                # the file has now, or a new file's default.
                mode = current[1] if kind == ENTRY_FILE else _default_mode(0o644)
            if kind == ENTRY_FILE and current[2] == data:
                fd = self._open_leaf(pfd, leaf, label)
                try:
                    os.fchmod(fd, mode)
                    if deferred is not None:
                        deferred.wrote(pfd, fd)
                finally:
                    os.close(fd)
                return
            name = self._write_temp(pfd, leaf, data, deferred, mode)
        else:
            raise Refused(FAILED, "'%s': unknown entry kind %r" % (label, new_kind))
        try:
            os.replace(name, leaf, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            _unlink_quietly(name, pfd)
            raise
        if deferred is not None:
            deferred.wrote(pfd)

    def _process_group(self, path, argument, _deferred):
        """Whether a process group exists on the machine that holds the
        root: ``argument`` is ``(pgid, kill, boot_id)``; with ``kill`` the
        group is first sent SIGKILL, but only while this machine's boot is
        ``boot_id`` (a number from another boot names someone else's
        processes). ``value`` is ``(machine_id, boot_id, exists)``, either
        id None where the machine does not say."""
        if split_components(path):
            raise Refused(FAILED, "a process group is asked of the target root, not '%s'" % path)
        try:
            pgid, kill, expected_boot = argument
        except (TypeError, ValueError):
            pgid = kill = expected_boot = None
        if not _whole(pgid) or pgid < 2 or type(kill) is not bool:
            raise Refused(FAILED, "a process group query needs a group id above 1 and a kill flag")
        machine, boot = process_identity()
        if kill and boot is not None and boot == expected_boot:
            try:
                os.killpg(pgid, 9)
            except OSError:
                pass
        return (OK, (machine, boot, _group_exists(pgid)), None, False)

    def _barrier(self, path, _argument, deferred):
        if split_components(path):
            raise Refused(FAILED, "a barrier names the target root, not '%s'" % path)
        return (OK, deferred.flush(), None, False)


_HANDLERS = {
    "Read": Executor._read,
    "ReadNewest": Executor._read_newest,
    "ReadChain": Executor._read_chain,
    "SurveyDirs": Executor._survey_dirs,
    "Verify": Executor._verify,
    "NewestIs": Executor._newest_is,
    "Stat": Executor._stat,
    "ListDir": Executor._list,
    "CreateExclusive": Executor._create_exclusive,
    "CreateInPlace": Executor._create_in_place_op,
    "StampedCreate": Executor._create_stamped,
    "StampedCreateInPlace": Executor._create_stamped_in_place,
    "CreateLinked": Executor._create_linked,
    "Replace": Executor._replace,
    "WriteProject": Executor._write_project,
    "Remove": Executor._remove,
    "MakeDirs": Executor._make_dirs,
    "Clock": Executor._clock,
    "Barrier": Executor._barrier,
    "ProcessGroup": Executor._process_group,
    "ReadEntry": Executor._read_entry,
    "PutEntry": Executor._put_entry,
    "WalkTree": Executor._walk,
    "ListTree": Executor._list_tree,
    "ReadFiles": Executor._read_files,
    "ScanTree": Executor._scan,
    "ScanPaths": Executor._scan_paths,
    "SnapshotFile": Executor._snapshot,
    "ReadSlice": Executor._read_slice,
}


def _keep_time(fd, created):
    """Give the file open as ``fd`` back the times ``created`` found: its
    writes moved them on (past a second, at times), and a stamped file
    carries the time it was made. Best effort: a filesystem or platform
    that cannot set them leaves the file's own, and the stamp stands."""
    try:
        os.utime(fd, ns=(created.st_atime_ns, created.st_mtime_ns))
    except (OSError, NotImplementedError):
        pass


def _stat_facts(st):
    """A ``Stat`` value: ``(kind, size, mtime_seconds, inode, mtime_ns)``."""
    mode = st.st_mode
    kind = "file" if stat_mode.S_ISREG(mode) else "directory" if stat_mode.S_ISDIR(mode) else "other"
    return (kind, st.st_size, st.st_mtime_ns // 1000000000, st.st_ino, st.st_mtime_ns)


def _failure(exc):
    """The operation result of a refusal or a failed system call."""
    if isinstance(exc, Refused):
        return (exc.status, None, exc.reason, exc.unsafe)
    return (FAILED, None, _strerror(exc), False)


def _newest_in(open_dir, release, where, family, max_bytes=None):
    """``(names, link, listed)``: the members of the numbered ``family`` in
    the directory ``open_dir()`` gives (``release`` takes it back, None:
    nothing to do), sorted, the ``(path, status, bytes or reason, unsafe)``
    of reading the newest (None without members; at most ``max_bytes`` of
    it, None: whole) and the directory's whole listing. ``where`` is the
    directory's target path."""
    prefix, digits, suffix = family
    # A member that vanishes between the listing and the read was
    # superseded and removed meanwhile: list again.
    for _ in range(_NEWEST_ATTEMPTS):
        fd = open_dir()
        try:
            listed = os.listdir(fd)
            names = tuple(_family_members(listed, prefix, digits, suffix))
            if not names:
                return names, None, listed
            label = "%s/%s" % (where, names[-1]) if where not in ("", ".") else names[-1]
            link = _read_link(fd, names[-1], label, max_bytes)
        finally:
            if release is not None:
                release(fd)
        if link[1] != ABSENT:
            return names, link, listed
    return names, (link[0], ABSENT, "the newest file in '%s' kept vanishing" % where, False), listed


def _survey_chains(chains):
    """A survey's chains as ``[(directory parts, directory, family, hops,
    steps)]``, refused unless each has that shape; ``steps`` are, for each
    component of the directory, the parts before it, the component and the
    path to it (made once a program, not once an entry)."""
    checked = []
    for chain in chains if isinstance(chains, (list, tuple)) else [None]:
        try:
            directory, prefix, digits, suffix, hops = chain
        except (TypeError, ValueError):
            directory = None
        if not isinstance(directory, str):
            raise Refused(FAILED, "a survey's chain is a directory, a numbered family and hops")
        parts = split_components(directory)
        steps = tuple((parts[:index], part, "/".join(parts[: index + 1])) for index, part in enumerate(parts))
        checked.append((parts, "/".join(parts), _family((prefix, digits, suffix)), _chain_hops(hops), steps))
    return checked


class _EntryDirs(object):
    """The directories below one survey entry opened so far, by their
    ``/``-joined path relative to it (``""``: the entry), each kept until
    the entry is done: a chain's hops mostly read files of one directory."""

    __slots__ = ("label", "opened")

    def __init__(self, label, fd):
        #: The entry's target path, which refusals name.
        self.label = label
        self.opened = {"": fd}

    def open(self, relative):
        """The directory ``relative`` (checked components); its parents are
        opened on the way as needed."""
        fd = self.opened.get(relative)
        if fd is None:
            parent, _slash, name = relative.rpartition("/")
            parent_fd = self.opened[""] if not parent else self.open(parent)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except OSError:
                # Again, to say why (its label is made only for a refusal).
                fd = _open_subdir(parent_fd, name, "%s/%s" % (self.label, relative))
            self.opened[relative] = fd
        return fd

    def close(self):
        for fd in self.opened.values():
            os.close(fd)

    def read(self, relative):
        """The ``_chain_link`` of reading regular file ``relative``."""
        path = "%s/%s" % (self.label, relative)
        try:
            try:
                parts = split_components(relative)
            except Refused:
                split_components(path)  # refused, naming the whole path
                raise
            if not parts:
                split_components(path)
            parent = relative.rpartition("/")[0]
            return _read_link(self.open(parent), parts[-1], path)
        except Refused as refusal:
            return (path, refusal.status, refusal.reason, refusal.unsafe)
        except OSError as exc:
            return (path, FAILED, _strerror(exc), False)


def _survey_entry(base_fd, label, name, specs, parse_json):
    """``(entry, bytes read)`` of one ``SurveyDirs`` entry, ``name`` in the
    open directory ``base_fd``; ``label`` is its target path."""
    try:
        fd = _open_subdir(base_fd, name, label)
    except (Refused, OSError) as exc:
        # What every operation below it would answer: absent, a symbolic
        # link, not a directory, or not to be opened.
        failure = _failure(exc)
        return (name, _lstat_result(base_fd, name, label), failure, [failure] * len(specs)), 0
    dirs = _EntryDirs(label, fd)
    spent = 0
    try:
        stat = (OK, _stat_facts(os.fstat(fd)), None, False)
        try:
            listed = os.listdir(fd)
        except OSError as exc:
            listing = _failure(exc)
            seen = {}
        else:
            listing = (OK, tuple(sorted(listed)), None, False)
            seen = {(): listed}
        reads = []
        for parts, directory, family, hops, steps in specs:
            result = _survey_chain(dirs, seen, parts, directory, family, hops, steps, parse_json)
            if result[0] == OK:
                for link in result[1][1]:
                    if link[1] == OK:
                        spent += len(link[2])
            reads.append(result)
    finally:
        dirs.close()
    return (name, stat, listing, reads), spent


def _lstat_result(dir_fd, name, label):
    """The ``Stat`` result of entry ``name`` of the open directory ``dir_fd``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return (ABSENT, None, "'%s' does not exist" % label, False)
    except OSError as exc:
        return _failure(exc)
    if stat_mode.S_ISLNK(st.st_mode):
        return (FAILED, None, "'%s' is a symbolic link" % label, True)
    return (OK, _stat_facts(st), None, False)


def _survey_chain(dirs, seen, parts, directory, family, hops, steps, parse_json):
    """The ``ReadChain`` result of one survey chain (its ``directory``, split
    as ``parts``) below the entry whose directories ``dirs`` holds.
    ``seen`` holds the listings made so far (by directory parts), which
    spare the opening of a directory they show absent, and gains this
    one's."""
    label = dirs.label
    for before, part, upto in steps:
        known = seen.get(before)
        if known is None:
            break
        if part not in known:
            return (ABSENT, None, "'%s/%s' does not exist" % (label, upto), False)
    try:
        names, first, listed = _newest_in(
            lambda: dirs.open(directory), None, "%s/%s" % (label, directory) if parts else label, family
        )
    except (Refused, OSError) as exc:
        return _failure(exc)
    seen[parts] = listed
    if first is None:
        return (OK, (names, ()), None, False)
    return (OK, (names, _follow(first, hops, dirs.read, parse_json)), None, False)


def _chain_hops(hops):
    """``hops`` as ``[(keys, base)]``, refused unless each names a key path
    of strings and a plain target-relative directory."""
    checked = []
    for hop in hops if isinstance(hops, (list, tuple)) else [None]:
        try:
            keys, base = hop
        except (TypeError, ValueError):
            keys = base = None
        if not (isinstance(keys, (list, tuple)) and keys and all(isinstance(k, str) for k in keys)):
            raise Refused(FAILED, "a chain hop is a key path of strings and a base directory")
        if not isinstance(base, str):
            raise Refused(FAILED, "a chain hop is a key path of strings and a base directory")
        split_components(base)
        checked.append((tuple(keys), base))
    return checked


def _follow(first, hops, link, parse_json):
    """The links of a chain whose newest member read as the link ``first``:
    each hop's path dereferenced from the link before it (its JSON read by
    ``parse_json``) and read by ``link(path)``, until a link is not ok or
    its file names nothing."""
    links = [first]
    for keys, base in hops:
        if links[-1][1] != OK:
            break
        target = _dereference(parse_json(links[-1][2]), keys, base)
        if target is None:
            break
        links.append(link(target))
    return tuple(links)


def _chain_link(path, read):
    """``(path, status, bytes or reason, unsafe)`` of reading ``path``."""
    try:
        return (path, OK, read(), False)
    except Refused as refusal:
        return (path, refusal.status, refusal.reason, refusal.unsafe)
    except OSError as exc:
        return (path, FAILED, _strerror(exc), False)


def _read_link(dir_fd, leaf, path, max_bytes=None):
    """The ``_chain_link`` of reading regular file ``leaf`` of ``dir_fd``
    (at most ``max_bytes`` of it; None: whole)."""
    try:
        return (path, OK, Executor._read_regular(dir_fd, leaf, path, max_bytes), False)
    except Refused as refusal:
        return (path, refusal.status, refusal.reason, refusal.unsafe)
    except OSError as exc:
        return (path, FAILED, _strerror(exc), False)


class _JsonContext(object):
    """What ``_json.make_scanner`` reads from a decoder: strict strings, plain
    containers, and no NaN or Infinity."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name):
        raise ValueError("%s is not a JSON number" % name)


_json_scanner = _UNRESOLVED


def _scan_json():
    """CPython's C JSON scanner, or None where there is none. ``json``
    itself imports ``re``, which costs a remote program about ten
    milliseconds of start-up; without a scanner a chain stops at its first
    file, and the caller reads the rest itself."""
    global _json_scanner
    if _json_scanner is _UNRESOLVED:
        try:
            import _json

            _json_scanner = _json.make_scanner(_JsonContext())
        except (ImportError, AttributeError, TypeError):
            _json_scanner = None
    return _json_scanner


def _parse_json(data):
    """The JSON value ``data`` holds, or ``_UNRESOLVED``."""
    scan = _json_scanner if _json_scanner is not _UNRESOLVED else _scan_json()
    if scan is None:
        return _UNRESOLVED
    try:
        text = data.decode("utf-8").strip(" \t\n\r")
        found, end = scan(text, 0)
    except (ValueError, RecursionError, StopIteration, SystemError):
        # Before 3.12 the scanner raises its syntax errors as
        # json.decoder.JSONDecodeError only when that module is already
        # loaded; otherwise the call fails as a SystemError.
        return _UNRESOLVED
    return found if end == len(text) else _UNRESOLVED


def _dereference(found, keys, base):
    """The target path the string at ``keys`` of the JSON value ``found``
    names under ``base``, or None where there is no such string."""
    for key in keys:
        if not isinstance(found, dict) or key not in found:
            return None
        found = found[key]
    if not isinstance(found, str):
        return None
    try:
        # A lone surrogate names no file and could not travel back as a path.
        if not found.isascii():
            os.fsencode(found)
    except UnicodeError:
        return None
    # ``base`` is checked with its hop (_chain_hops).
    return "%s/%s" % (base, found) if base not in ("", ".") else found


def _read_identity(path):
    try:
        with open(path, "rb") as handle:
            value = handle.read(200).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value or None


def process_identity():
    """This machine's id and its current boot's id (None where unknown):
    what tells a process group of this boot from any other."""
    return _read_identity("/etc/machine-id"), _read_identity("/proc/sys/kernel/random/boot_id")


def _group_exists(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, as another user's (EPERM)
    return True


def _whole(number):
    return type(number) is int and number >= 0


def _walk_directory(fd, prefix, entries, limit, depth):
    """Append the entries below the open directory ``fd`` (see
    ``Executor._walk``); True once ``limit`` entries left some out."""
    for name in sorted(os.listdir(fd)):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # vanished meanwhile
        mode = st.st_mode
        if stat_mode.S_ISLNK(mode):
            continue
        if len(entries) == limit:
            return True
        kind = "directory" if stat_mode.S_ISDIR(mode) else "file" if stat_mode.S_ISREG(mode) else "other"
        relative = prefix + name
        entries.append((relative, kind, st.st_size, st.st_mtime_ns // 1000000000))
        if kind != "directory" or depth == 1:
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue  # replaced by a link or unreadable: not descended
        try:
            if _walk_directory(child, relative + "/", entries, limit, None if depth is None else depth - 1):
                return True
        except OSError:
            pass  # unlistable: its entries stay unknown, as a local walk skips it
        finally:
            os.close(child)
    return False


class _DirChain(object):
    """Directory descriptors from a base directory down to the one last
    asked for, each opened with ``O_NOFOLLOW`` from its parent's, so that
    consecutive requests in one tree reopen only what differs."""

    def __init__(self, base_fd):
        self.parts = ()
        self.fds = [base_fd]

    def open(self, parts):
        """The descriptor of ``parts`` below the base (the chain's own: do
        not close it)."""
        keep = 0
        for mine, theirs in zip(self.parts, parts):
            if mine != theirs:
                break
            keep += 1
        while len(self.fds) > keep + 1:
            os.close(self.fds.pop())
        self.parts = parts[:keep]
        for index in range(keep, len(parts)):
            self.fds.append(_open_subdir(self.fds[-1], parts[index], _label(parts, index + 1)))
            self.parts = parts[: index + 1]
        return self.fds[-1]

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _first_files(records, count):
    """The first ``count`` regular files of listing ``records`` in
    depth-first order of the sorted names, as far as the listed
    directories go."""
    if not count or not records:
        return []
    listed = dict(records)
    found = []
    stack = [("", iter(listed[records[0][0]].split("\0") if listed[records[0][0]] else ()))]
    while stack:
        relative, names = stack[-1]
        for name in names:
            if name.endswith("/"):
                child = relative + "/" + name[:-1] if relative else name[:-1]
                if child not in listed:
                    return found  # not listed yet: what comes next is unknown
                stack.append((child, iter(listed[child].split("\0") if listed[child] else ())))
                break
            found.append(relative + "/" + name if relative else name)
            if len(found) == count:
                return found
        else:
            stack.pop()
    return found


def _list_directory(fd):
    """``(names, subdirectories)`` of the open directory ``fd``: regular
    files and directories only, sorted, a directory's name ending in ``/``."""
    files = {}
    with os.scandir(fd) as scan:
        for entry in scan:
            try:
                if entry.is_dir(follow_symlinks=False):
                    files[entry.name] = True
                elif entry.is_file(follow_symlinks=False):
                    files[entry.name] = False
            except OSError:
                continue  # vanished meanwhile
    names = []
    subdirs = []
    for name in sorted(files):
        if files[name]:
            names.append(name + "/")
            subdirs.append(name)
        else:
            names.append(name)
    return names, subdirs


def _read_one(chain, name, max_bytes):
    """One ``ReadFiles`` result: ``(status, bytes, reason, unsafe, size)``."""
    try:
        parts = split_components(name)
        if not parts:
            raise Refused(FAILED, "a batch read names files, not the directory")
        pfd = chain.open(parts[:-1])
        leaf = parts[-1]
        found = Executor._lstat(pfd, leaf)
        if found is None:
            raise Refused(ABSENT, "'%s' does not exist" % name)
        if stat_mode.S_ISLNK(found.st_mode):
            raise Refused(FAILED, "'%s' is a symbolic link" % name, unsafe=True)
        if not stat_mode.S_ISREG(found.st_mode):
            raise Refused(FAILED, "'%s' is not a regular file" % name)
        if found.st_size > max_bytes:
            return (OK, None, None, False, found.st_size)
        fd = Executor._open_leaf(pfd, leaf, name)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino) or not stat_mode.S_ISREG(opened.st_mode):
                raise Refused(FAILED, "'%s' was replaced while it was read" % name, unsafe=True)
            # One read takes a file whose size held; a shorter answer is its
            # end, and only a file that grew needs more reads.
            want = min(opened.st_size, max_bytes) + 1
            data = os.read(fd, want)
            if len(data) == want:
                data = _read_at_most(fd, max_bytes + 1, data)
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            return (OK, None, None, False, len(data))
        return (OK, data, None, False, len(data))
    except Refused as refusal:
        return (refusal.status, None, refusal.reason, refusal.unsafe, 0)
    except OSError as exc:
        return (FAILED, None, _strerror(exc), False, 0)


# -- file-state scans (ScanTree, SnapshotFile) ---------------------------------

#: One entry's facts in a ``ScanTree`` answer, packed: flags, size,
#: modification and status-change times in nanoseconds, inode.
SCAN_FACTS = "<BqqqQH"
#: Flag: the entry is a symbolic link (else a regular file).
SCAN_LINK = 1
#: Flag: a .gitignore pattern ignores the entry (or a directory above it).
SCAN_IGNORED = 2
#: Flag: the entry is a directory (recorded only when the scan asks for
#: directories; its size and times are zero, so what changes inside it
#: does not change its facts -- only its mode or inode do).
SCAN_DIR = 4
#: Why a directory was not walked because a .gitignore pattern ignores it.
SCAN_IGNORED_REASON = "ignored by .gitignore"

_scan_facts = struct.Struct(SCAN_FACTS)
_S_IFMT = 0o170000
_S_IFREG = stat_mode.S_IFREG
_S_IFLNK = stat_mode.S_IFLNK
_S_IFDIR = stat_mode.S_IFDIR
# A .gitignore past this size is not read (git itself stops at 100 MB).
_MAX_GITIGNORE = 8 * 1024 * 1024
# Compiled patterns and tests are kept across programs of one process (the
# local target's); past this many entries a cache starts over.
_CACHE_ENTRIES = 256
_gitignore_cache = {}
_test_cache = {}
_re = None


class _ScanLimit(Exception):
    """The scan met more entries than its limit."""


#: A capturing scan's record of each entry (see ``Executor._scan``):
#: status, the content's sha256 (raw) and where it lies in the pack.
CAPTURE_RECORD = "<B32sQ"
#: Statuses: facts only (a directory, an ignored entry, a file over the
#: limit); read into the pack; left to the caller to read (a link, or a
#: file that could not be read whole and unchanged).
CAPTURE_NONE = 0
CAPTURED = 1
CAPTURE_LEFT = 2
_capture_record = struct.Struct(CAPTURE_RECORD)
_CAPTURE_NONE = _capture_record.pack(CAPTURE_NONE, bytes(32), 0)
_CAPTURE_LEFT = _capture_record.pack(CAPTURE_LEFT, bytes(32), 0)
#: Bytes a capture holds before it appends them to its pack.
_CAPTURE_BUFFER = 4 * 1024 * 1024


class _Capture(object):
    """A scan's reading of the regular files it records: each one's bytes
    appended to one pack (once per content), its digest and offset
    answered -- a record's first walk, which would otherwise snapshot every
    file again by an operation of its own. Never flushed, like a
    snapshot's pack."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.store = self.out = self.pack = None
        self.failed = False
        self.parts = []
        self.buffered = 0
        #: Bytes in the pack, written and buffered; digest -> its offset.
        self.end = 0
        self.offsets = {}
        self.sha256 = _sha256_new()

    def take(self, dir_fd, name, st):
        """The capture record of the regular file ``name`` of ``dir_fd``,
        which the walk's ``lstat`` found as ``st``: read when it still has
        those facts after the read (a change within their timestamp's tick
        is the record's racy file, read again)."""
        if self.failed:
            return _CAPTURE_LEFT
        size = st.st_size
        try:
            fd = os.open(name, _LEAF_FLAGS, dir_fd=dir_fd)
        except OSError:
            return _CAPTURE_LEFT
        try:
            data = os.read(fd, size + 1) if size < _CAPTURE_BUFFER else _read_at_most(fd, size + 1)
            after = os.fstat(fd)
        except OSError:
            return _CAPTURE_LEFT
        finally:
            os.close(fd)
        if (
            len(data) != size or after.st_size != size or after.st_mtime_ns != st.st_mtime_ns
            or after.st_ctime_ns != st.st_ctime_ns or after.st_ino != st.st_ino
        ):
            return _CAPTURE_LEFT
        digest = self.sha256(data).digest()
        offset = self.offsets.get(digest)
        if offset is None:
            offset = self.offsets[digest] = self.end
            self.parts.append(data)
            self.end += size
            self.buffered += size
            if self.buffered >= _CAPTURE_BUFFER:
                self.flush()
        return _capture_record.pack(CAPTURED, digest, offset)

    def flush(self):
        try:
            _write_all(self.out, b"".join(self.parts))
        except OSError:
            self.failed = True
        self.parts = []
        self.buffered = 0

    def close(self):
        """Append what is buffered and close the pack (removed when the
        scan appended nothing to it)."""
        if self.out is None:
            return
        try:
            if self.parts and not self.failed:
                self.flush()
        finally:
            os.close(self.out)
            self.out = None
            try:
                if not self.end or self.failed:
                    _unlink_quietly(self.pack, self.store)
            finally:
                os.close(self.store)


def _on_first_use(name):
    """The module ``name``, loaded when an operation first needs it, by name
    rather than by an import statement: the remote program starts once per
    round trip, and its start-up must not pay for what only a scan or a
    snapshot uses (``re`` alone costs it 10-40 ms). The start-up guard reads
    the executor's import statements; tests/unit/targets/test_target_file_scan.py
    checks the property itself: a program without these operations loads
    neither ``re`` nor a hash module."""
    return __import__(name)


def _regex():
    """The ``re`` module; only a walk that meets a .gitignore needs it."""
    global _re
    if _re is None:
        _re = _on_first_use("re")
    return _re


_sha256_of = None


def _sha256_new():
    """The sha256 constructor of the interpreter's built-in module
    (``_sha256``, ``_sha2`` since 3.12: a fraction of a millisecond to load,
    where ``hashlib`` and its OpenSSL take several)."""
    global _sha256_of
    if _sha256_of is None:
        for name in ("_sha2", "_sha256", "hashlib"):
            try:
                _sha256_of = _on_first_use(name).sha256
                break
            except (ImportError, AttributeError):
                continue
    return _sha256_of


def _sha256_hex(data):
    """The sha256 of ``data`` in hex."""
    return _sha256_new()(data).hexdigest()


def _cached(cache, key, make):
    found = cache.get(key)
    if found is None:
        if len(cache) >= _CACHE_ENTRIES:
            cache.clear()
        found = cache[key] = make(key)
    return found


def _trim_trailing_spaces(line):
    """``line`` without its trailing spaces, except one escaped by a
    backslash (git's ``trim_trailing_spaces``)."""
    last_space = None
    index = 0
    while index < len(line):
        char = line[index]
        if char == " ":
            if last_space is None:
                last_space = index
        else:
            last_space = None
            if char == "\\":
                index += 1
                if index == len(line):
                    return line
        index += 1
    return line if last_space is None else line[:last_space]


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _class_char(char):
    return char if char.isalnum() else "\\" + char


def _bracket(text, index):
    """The regex of the bracket expression opening before ``text[index]``
    and the index after it, or None when it does not close (git's
    wildmatch then matches nothing)."""
    negated = False
    if index < len(text) and text[index] in "!^":
        negated = True
        index += 1
    items = []
    previous = None
    first = True
    while True:
        if index >= len(text):
            return None
        char = text[index]
        if char == "]" and not first:
            index += 1
            break
        first = False
        if char == "\\":
            index += 1
            if index >= len(text):
                return None
            char = text[index]
            items.append(_class_char(char))
            previous = char
        elif char == "-" and previous is not None and index + 1 < len(text) and text[index + 1] != "]":
            index += 1
            high = text[index]
            if high == "\\":
                index += 1
                if index >= len(text):
                    return None
                high = text[index]
            items.pop()
            if previous <= high:
                items.append("%s-%s" % (_class_char(previous), _class_char(high)))
            previous = None
        elif char == "[" and text.startswith(":", index + 1):
            end = text.find(":]", index + 2)
            if end < 0:
                items.append(_class_char(char))
                previous = char
            else:
                members = _POSIX_CLASSES.get(text[index + 2 : end])
                if members is None:
                    return None
                items.append(members)
                index = end + 1
                previous = None
        else:
            items.append(_class_char(char))
            previous = char
        index += 1
    if not items:
        return ("." if negated else "(?!)"), index
    return "[%s%s]" % ("^" if negated else "", "".join(items)), index


def _glob_source(segment):
    """The regex (for ``fullmatch`` with DOTALL) of one path component of a
    gitignore pattern: ``*`` any run, ``?`` one character, ``[...]`` a
    class, ``\\x`` the literal ``x``; None when it cannot match anything."""
    escape = _regex().escape
    out = []
    index = 0
    while index < len(segment):
        char = segment[index]
        index += 1
        if char == "*":
            while index < len(segment) and segment[index] == "*":
                index += 1
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "\\":
            if index == len(segment):
                return None
            out.append(escape(segment[index]))
            index += 1
        elif char == "[":
            found = _bracket(segment, index)
            if found is None:
                return None
            source, index = found
            out.append(source)
        else:
            out.append(escape(char))
    return "".join(out)


def _glob(segment):
    source = _glob_source(segment)
    if source is None:
        return None
    return (source, _regex().compile(source, _regex().DOTALL).fullmatch)


def _parse_gitignore(data):
    """The patterns of a .gitignore file, in order: ``(negate, dir_only,
    segments, floating)``. A floating pattern (no slash but a trailing one)
    matches a name at any depth: ``segments`` is its one glob. Otherwise
    ``segments`` are matched component by component from the .gitignore's
    directory: a glob ``(source, fullmatch)`` per component, or None for a
    ``**`` component (zero or more directories)."""
    text = os.fsdecode(data)
    if text.startswith("\ufeff"):
        text = text[1:]
    patterns = []
    for line in text.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.startswith("#"):
            continue
        line = _trim_trailing_spaces(line)
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]
        if not line:
            continue
        if "/" not in line:
            glob = _glob(line)
            if glob is not None:
                patterns.append((negate, dir_only, (glob,), True))
            continue
        parts = (line[1:] if line.startswith("/") else line).split("/")
        segments = []
        for part in parts:
            if part == "**":
                if not segments or segments[-1] is not None:
                    segments.append(None)
                continue
            glob = _glob(part) if part else None
            if glob is None:
                segments = None
                break
            segments.append(glob)
        if not segments:
            continue
        if segments[-1] is None and len(segments) > 1:
            # "dir/**" is everything inside dir: at least one more component.
            segments[-1:] = [(".*", _regex().compile(".*", _regex().DOTALL).fullmatch), None]
        patterns.append((negate, dir_only, tuple(segments), False))
    return tuple(patterns)


def _closure(segments, positions):
    """``positions`` with every position a ``**`` may skip to; the end
    (a complete match) left out."""
    out = set()
    for index in positions:
        while index < len(segments):
            out.add(index)
            if segments[index] is not None:
                break
            index += 1
    return frozenset(out)


def _advance(segments, states, name):
    """The positions a pattern can be at after one more component ``name``."""
    reached = []
    for index in states:
        segment = segments[index]
        if segment is None:
            reached.append(index)
        elif segment[1](name) is not None:
            reached.append(index + 1)
    return _closure(segments, reached)


def _final_source(segments, states):
    """The regex of the names that complete the pattern from ``states``, or
    None when no name does."""
    alternatives = []
    for index in sorted(states):
        segment = segments[index]
        rest_open = all(s is None for s in segments[index + 1 :])
        if not rest_open:
            continue
        if segment is None:
            return ".*"
        alternatives.append(segment[0])
    if not alternatives:
        return None
    return alternatives[0] if len(alternatives) == 1 else "(?:%s)" % "|".join(alternatives)


def _compile_test(source):
    return _regex().compile(source, _regex().DOTALL).fullmatch


def _test(alternatives, negates):
    """``(fullmatch, negates)`` of a name against the alternatives in
    precedence order; the group that matched indexes ``negates``."""
    if not alternatives:
        return None, ()
    source = "|".join("(%s)" % alternative for alternative in alternatives)
    return _cached(_test_cache, source, _compile_test), (None,) + tuple(negates)


class _Rules(object):
    """The .gitignore patterns in force for the entries of one directory.

    ``levels`` holds one tuple per .gitignore, the deepest first (its
    patterns take precedence), each pattern as ``(negate, dir_only,
    segments, states)``: ``states`` None for a floating pattern, else the
    positions in ``segments`` the path so far can have reached. A name's
    test is one regex: every pattern's last component as it stands here, in
    precedence order (the deepest file first, then its last pattern first)."""

    __slots__ = ("levels", "moving", "_tests")

    def __init__(self, levels):
        self.levels = levels
        self.moving = any(pattern[3] is not None for level in levels for pattern in level)
        self._tests = None

    @classmethod
    def below(cls, rules, patterns):
        """``rules`` with a .gitignore of ``patterns`` in this directory."""
        level = tuple(
            (negate, dir_only, segments, None if floating else _closure(segments, (0,)))
            for negate, dir_only, segments, floating in patterns
        )
        return cls((level,) + (rules.levels if rules is not None else ()))

    def child(self, name):
        """The rules for the entries of subdirectory ``name``."""
        if not self.moving:
            return self
        changed = False
        levels = []
        for level in self.levels:
            kept = []
            for pattern in level:
                negate, dir_only, segments, states = pattern
                if states is not None:
                    reached = _advance(segments, states, name)
                    if reached != states:
                        changed = True
                        if not reached:
                            continue
                        pattern = (negate, dir_only, segments, reached)
                kept.append(pattern)
            if kept:
                levels.append(tuple(kept))
        if not changed:
            return self
        return _Rules(tuple(levels)) if levels else None

    def tests(self):
        """``((file test, negates), (directory test, negates))``."""
        if self._tests is None:
            files, file_negates, dirs, dir_negates = [], [], [], []
            for level in self.levels:
                for negate, dir_only, segments, states in reversed(level):
                    source = segments[0][0] if states is None else _final_source(segments, states)
                    if source is None:
                        continue
                    dirs.append(source)
                    dir_negates.append(negate)
                    if not dir_only:
                        files.append(source)
                        file_negates.append(negate)
            self._tests = (_test(files, file_negates), _test(dirs, dir_negates))
        return self._tests


def gitignore_rules(data, rules=None):
    """The rules of a directory holding a .gitignore with ``data`` (below
    ``rules``, the ones in force there); None when it has no pattern."""
    patterns = _cached(_gitignore_cache, bytes(data), _parse_gitignore)
    return _Rules.below(rules, patterns) if patterns else rules


def gitignore_ignores(rules, name, is_dir):
    """Whether ``rules`` ignore the entry ``name`` of their directory."""
    if rules is None:
        return False
    test, negates = rules.tests()[1 if is_dir else 0]
    if test is None:
        return False
    found = test(name)
    return found is not None and not negates[found.lastindex]


def _read_gitignore(dir_fd):
    """The bytes of the regular file ``.gitignore`` in ``dir_fd``, or None
    (absent, a symbolic link -- git does not follow those either --, not a
    regular file, unreadable)."""
    try:
        fd = os.open(".gitignore", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        with open(fd, "rb", closefd=True) as handle:
            if not stat_mode.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            return handle.read(_MAX_GITIGNORE)
    except OSError:
        return None


class _TreeScan(object):
    """One ``ScanTree`` walk (see ``Executor._scan``)."""

    def __init__(self, skip_names, skip_paths, descend, limit, racy_floor, record_dirs=False):
        #: Directories are entries too (``SCAN_DIR``, with their mode).
        self.record_dirs = record_dirs
        self.skip_names = skip_names
        self.skip_paths = skip_paths
        #: The directories (as prefixes, ``"a/b/"``) holding a skipped
        #: path: only their entries are looked up among ``skip_paths``.
        self.skip_parents = frozenset(path[: path.rfind("/") + 1] for path in skip_paths)
        self.descend = descend
        self.limit = limit
        self.racy_floor = racy_floor
        #: The entries' paths in chunks, each one or more paths joined by
        #: NULs (a directory's files at a time); ``facts`` their packed
        #: records, in chunks of the same entries.
        self.names = []
        self.facts = []
        self.unwalked = []
        self.racy = []
        self.count = 0
        #: Lists kept only when asked for (``ScanPaths``): every directory
        #: listed, and the regular files with more than one link.
        self.directories = None
        self.shared = None
        #: A capturing scan's ``_Capture``, and its records in chunks of
        #: the same entries as ``facts``.
        self.capture = None
        self.captures = []

    def directory(self, fd, prefix, rules, ignored):
        """Record the entries of the open directory ``fd`` (whose path ends
        with ``prefix``), under ``rules``; ``ignored``: all of them are."""
        names = os.listdir(fd)
        self.count += len(names)
        if self.count > self.limit:
            raise _ScanLimit()
        if self.directories is not None:
            self.directories.append(prefix[:-1])
        shared = self.shared
        file_test = dir_test = None
        if not ignored:
            if ".gitignore" in names:
                data = _read_gitignore(fd)
                if data:
                    rules = gitignore_rules(data, rules)
            if rules is not None:
                (file_test, file_negates), (dir_test, dir_negates) = rules.tests()
        base_flags = SCAN_IGNORED if ignored else 0
        if not self.skip_names.isdisjoint(names):
            names = [name for name in names if name not in self.skip_names]
        if prefix in self.skip_parents:
            names = [name for name in names if prefix + name not in self.skip_paths]
        # The loop below runs once per file (100,000 in a large workspace):
        # what it looks up is bound once, and it builds nothing per file
        # but the stat and the packed facts -- the names recorded are
        # joined with their prefix in C, a directory at a time (a chunk
        # of ``names``, NUL-separated), and so are their facts (a chunk of
        # ``facts``: each file's packed record freed with its directory,
        # its memory reused by the next one's, not 100,000 of them held
        # to the end). ``os.stat`` by name from the directory's
        # descriptor costs less than a ``scandir`` entry's.
        kept = []
        add_kept = kept.append
        packed = []
        add_facts = packed.append
        taken = []
        add_taken = taken.append
        pack = _scan_facts.pack
        stat = os.stat
        racy_floor = self.racy_floor
        type_bits, regular, link, directory = _S_IFMT, _S_IFREG, _S_IFLNK, _S_IFDIR
        capture = self.capture
        take = capture.take if capture is not None else None
        max_bytes = capture.max_bytes if capture is not None else -1
        for name in names:
            try:
                st = stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # vanished meanwhile
            mode = st.st_mode
            kind = mode & type_bits
            if kind == regular:
                flags = base_flags
            elif kind == directory:
                hidden = ignored
                if dir_test is not None:
                    found = dir_test(name)
                    hidden = found is not None and not dir_negates[found.lastindex]
                if kept:
                    self._add_names(prefix, kept, packed, taken)
                    kept = []
                    add_kept = kept.append
                    packed = []
                    add_facts = packed.append
                    taken = []
                    add_taken = taken.append
                self.subdirectory(fd, name, prefix + name, rules, hidden)
                continue
            elif kind == link:
                flags = base_flags | SCAN_LINK
            else:
                continue  # FIFOs, sockets, devices: never recorded
            if file_test is not None:
                found = file_test(name)
                if found is not None and not file_negates[found.lastindex]:
                    flags |= SCAN_IGNORED
            mtime = st.st_mtime_ns
            ctime = st.st_ctime_ns
            try:
                add_facts(pack(flags, st.st_size, mtime, ctime, st.st_ino, mode & 0o7777))
            except struct.error:
                add_facts(pack(flags, st.st_size, clamp_ns(mtime), clamp_ns(ctime), st.st_ino, mode & 0o7777))
            add_kept(name)
            if take is not None:
                # Read while its directory is open and its lstat at hand:
                # a regular file not ignored and within the limit.
                if flags:
                    add_taken(_CAPTURE_LEFT if flags == SCAN_LINK else _CAPTURE_NONE)
                else:
                    add_taken(take(fd, name, st) if st.st_size <= max_bytes else _CAPTURE_NONE)
            if (ctime >= racy_floor or mtime >= racy_floor) and not flags:
                self.racy.append(prefix + name)
            if shared is not None and kind == regular and st.st_nlink > 1:
                shared.append(prefix + name)
        if kept:
            self._add_names(prefix, kept, packed, taken)

    def _add_names(self, prefix, names, packed, taken):
        """Record ``names`` (in directory ``prefix``), their ``packed``
        facts and (capturing) their capture records, each as one chunk."""
        self.names.append(prefix + ("\0" + prefix).join(names))
        self.facts.append(b"".join(packed))
        if taken:
            self.captures.append(b"".join(taken))

    def planned(self, fd, prefix, rules, ignored, plan):
        """Look at the entries ``plan`` names in the open directory ``fd``
        (whose path ends with ``prefix``; ``rules`` and ``ignored`` as for
        :meth:`directory`, before this directory's own .gitignore): a leaf
        is recorded or walked, an inner name is a directory to go through."""
        if not ignored:
            data = _read_gitignore(fd)
            if data:
                rules = gitignore_rules(data, rules)
        file_test = dir_test = None
        if not ignored and rules is not None:
            (file_test, file_negates), (dir_test, dir_negates) = rules.tests()
        for name in sorted(plan):
            if name in self.skip_names:
                continue
            path = prefix + name
            if path in self.skip_paths:
                continue
            below = plan[name]
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # absent (or unreachable): nothing there now
            kind = st.st_mode & _S_IFMT
            if kind == stat_mode.S_IFDIR:
                hidden = ignored
                if dir_test is not None:
                    found = dir_test(name)
                    hidden = found is not None and not dir_negates[found.lastindex]
                if below is None:
                    self.count += 1
                    if self.count > self.limit:
                        raise _ScanLimit()
                    self.subdirectory(fd, name, path, rules, hidden)
                    continue
                if hidden and path not in self.descend:
                    self.unwalked.append((path, SCAN_IGNORED_REASON))
                    continue  # not walked, as a whole walk would not
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                        self.unwalked.append((path, _strerror(exc)))
                    continue  # else gone, or no longer a directory: nothing below it
                try:
                    inner = None if hidden or rules is None else rules.child(name)
                    self.planned(child, path + "/", inner, hidden, below)
                except OSError as exc:
                    self.unwalked.append((path, _strerror(exc)))
                finally:
                    os.close(child)
                continue
            if below is not None:
                continue  # a directory no more: nothing below it
            if kind == _S_IFREG:
                flags = SCAN_IGNORED if ignored else 0
            elif kind == _S_IFLNK:
                flags = (SCAN_IGNORED if ignored else 0) | SCAN_LINK
            else:
                continue  # FIFOs, sockets, devices: never recorded
            self.count += 1
            if self.count > self.limit:
                raise _ScanLimit()
            if file_test is not None:
                found = file_test(name)
                if found is not None and not file_negates[found.lastindex]:
                    flags |= SCAN_IGNORED
            self.facts.append(
                _scan_facts.pack(flags, st.st_size, clamp_ns(st.st_mtime_ns), clamp_ns(st.st_ctime_ns), st.st_ino, st.st_mode & 0o7777)
            )
            self.names.append(path)
            if self.capture is not None:
                self.captures.append(_CAPTURE_NONE if flags & SCAN_IGNORED else _CAPTURE_LEFT)
            if not flags and (st.st_mtime_ns >= self.racy_floor or st.st_ctime_ns >= self.racy_floor):
                self.racy.append(path)
            if self.shared is not None and st.st_nlink > 1 and kind == _S_IFREG:
                self.shared.append(path)

    def subdirectory(self, fd, name, path, rules, ignored):
        if ignored and path not in self.descend:
            self.unwalked.append((path, SCAN_IGNORED_REASON))
            return
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                self.unwalked.append((path, _strerror(exc)))
            return  # else gone, or no longer a directory: nothing below it
        try:
            if self.record_dirs:
                st = os.fstat(child)
                self.facts.append(_scan_facts.pack(SCAN_DIR | (SCAN_IGNORED if ignored else 0), 0, 0, 0, st.st_ino, st.st_mode & 0o7777))
                self.names.append(path)
                if self.capture is not None:
                    self.captures.append(_CAPTURE_NONE)
            below = None if ignored or rules is None else rules.child(name)
            self.directory(child, path + "/", below, ignored)
        except OSError as exc:
            self.unwalked.append((path, _strerror(exc)))
        finally:
            os.close(child)


ENTRY_FILE = "file"
ENTRY_DIRECTORY = "directory"
ENTRY_SYMLINK = "symlink"


_UMASK = []


def _default_mode(full):
    """``full`` less the process's umask (read once: setting it back and
    forth races other threads' creations): a new entry's default mode."""
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return full & ~_UMASK[0]


def _entry_matches(current, wanted):
    """Whether ``current`` (an ``_entry_at`` answer) is the state
    ``wanted`` names; a None mode in ``wanted`` accepts any mode."""
    if current is None or wanted is None:
        return current is None and wanted is None
    if current[0] != wanted[0]:
        return False
    if wanted[1] is not None and current[0] != ENTRY_SYMLINK and current[1] != wanted[1]:
        return False
    return current[0] == ENTRY_DIRECTORY or current[2] == wanted[2]


def clamp_ns(nanoseconds):
    """A time in nanoseconds as a packed facts record holds it (a signed
    64-bit number: beyond the years 1677-2262 it stops there)."""
    return max(-(2**63), min(2**63 - 1, nanoseconds))


def _text_list(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise Refused(FAILED, "a tree scan's %s are a list of strings" % what)
    return value


def _read_at_most(fd, limit, first=b""):
    """``first`` and what follows it in the open file ``fd``, at most
    ``limit`` bytes in all."""
    chunks = [first] if first else []
    left = limit - len(first)
    while left > 0:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_rest(fd, first):
    """``first`` and the rest of the open file ``fd``, to its end."""
    chunks = [first]
    while True:
        chunk = os.read(fd, 1024 * 1024)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)

def _read_stable(fd, label, max_bytes):
    """``(stat, bytes)`` of the open regular file ``fd``: its bytes, read
    whole, and the ``fstat`` taken before that still holds after the read
    (``bytes`` None when the file is larger than ``max_bytes``)."""
    for _attempt in range(3):
        before = os.fstat(fd)
        if not stat_mode.S_ISREG(before.st_mode):
            raise Refused(FAILED, "'%s' is not a regular file" % label)
        if before.st_size > max_bytes:
            return before, None
        os.lseek(fd, 0, os.SEEK_SET)
        data = _read_at_most(fd, max_bytes + 1)
        after = os.fstat(fd)
        facts = (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_ino)
        if facts == (after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino):
            if len(data) == before.st_size:
                return before, data
    raise Refused(FAILED, "'%s' kept changing while it was read" % label)
