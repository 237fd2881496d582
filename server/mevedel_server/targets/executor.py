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
  ``CreateExclusive``/``Replace``, ``(bytes, source path)`` of
  ``CreateLinked``, the expectation of ``Verify`` or the
  parts of ``StampedCreate`` (bytes, and integers standing for the clock
  reading plus that many seconds) or the ``(prefix, digits, suffix)`` of
  ``ReadNewest``, ``(prefix, digits, suffix, hops)`` of ``ReadChain`` (each
  hop a ``(key path, base directory)``), or the ``(entry limit, depth or
  None)`` of ``WalkTree``;
- a result is ``(status, value, reason, unsafe)``; a ``Stat`` value is
  ``(kind, size, mtime_seconds)``, a ``ListDir`` value a sorted tuple, a
  ``StampedCreate`` value the clock reading it wrote, a ``ReadNewest``
  value ``(name, bytes)``, a ``ReadChain`` value ``(names, links)`` (see
  :meth:`Executor._read_chain`), a ``CreateLinked`` value whether it linked,
  a ``WalkTree`` value ``(entries, truncated)`` (see :meth:`Executor._walk`).

Every operation opens the root, proves its device and inode are the pinned
identity, and then opens each parent component with ``O_DIRECTORY |
O_NOFOLLOW``: a symlinked root, parent or leaf fails closed. Writes are whole
or absent (fsynced temporary file, then ``link`` for exclusive creation or
``rename`` for replacement, then fsync of the directory); a crash leaves at
most a dot-prefixed ``*.tmp`` file, never a torn record under its real name.

A *deferred* write skips those fsyncs: its bytes and names reach the disk at
the next ``Barrier`` of the same program, which flushes all deferred writes
before it at once -- ``syncfs(2)`` on each filesystem they touched, or, where
libc has no ``syncfs``, an fsync of every written file and directory. Until
then a power loss may leave a deferred file torn or missing under its real
name, so only a write that no reader can reach before a later commit point
(a publication's files, read only through a head written after the barrier)
or whose loss is harmless (a best-effort prune, which no barrier follows)
may be deferred. That one flush instead of two fsyncs per file is what makes
a many-file program cheap on a disk whose every flush costs milliseconds.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat as stat_mode

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
_FILE_MODE = 0o600
#: A project file a tool creates (WriteProject): a person's file, not ours.
_PROJECT_FILE_MODE = 0o644
_DIR_MODE = 0o700
# link(2) is unavailable on some filesystems (vfat, some FUSE mounts).
_NO_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}
_NEWEST_ATTEMPTS = 8
# The fsync fallback keeps every deferred file open until the barrier; past
# this many it flushes early rather than run out of descriptors.
_MAX_OPEN_DEFERRED = 64


class Refused(Exception):
    """An operation ends with a non-ok status (carried to its result)."""

    def __init__(self, status, reason, unsafe=False):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.unsafe = unsafe


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
                raise Refused(FAILED, "'%s' is not a directory" % label) from None
        raise


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


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


class _Deferred:
    """The deferred writes of one program since its last barrier."""

    def __init__(self):
        #: (device, inode) -> an open descriptor of each directory changed.
        self.directories = {}
        #: Open descriptors of the files written (for the fsync fallback).
        self.files = []
        self.count = 0

    def wrote(self, dir_fd, file_fd=None):
        """Record a deferred change of ``dir_fd`` (and of the file open as
        ``file_fd``); the descriptors stay the caller's."""
        self.count += 1
        st = os.fstat(dir_fd)
        key = (st.st_dev, st.st_ino)
        if key not in self.directories:
            self.directories[key] = os.dup(dir_fd)
        if file_fd is not None and _libc_syncfs() is None:
            self.files.append(os.dup(file_fd))
            if len(self.files) >= _MAX_OPEN_DEFERRED:
                self.flush()

    def flush(self):
        """Make every recorded write durable; returns how many there were."""
        count = self.count
        try:
            by_device = {}
            for (device, _inode), fd in self.directories.items():
                by_device.setdefault(device, fd)
            if not all([sync_filesystem(fd) for fd in by_device.values()]):
                # No syncfs here: fsync what was written, files before the
                # directories whose entries name them.
                for fd in self.files:
                    os.fsync(fd)
                for fd in self.directories.values():
                    os.fsync(fd)
        finally:
            self.close()
        return count

    def close(self):
        for fd in self.files + list(self.directories.values()):
            os.close(fd)
        self.directories, self.files, self.count = {}, [], 0


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
    out = []
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, (bytes, int)):
            raise Refused(FAILED, "stamped content is bytes and integer offsets")
        out.append(part if isinstance(part, bytes) else b"%d" % (reading + part))
    return b"".join(out)


def _family_members(names, prefix, digits, suffix):
    """The names that are ``prefix`` + ``digits`` ASCII digits + ``suffix``
    (all of one width, so they sort by number)."""
    width = len(prefix) + digits + len(suffix)
    for name in names:
        if len(name) == width and name.startswith(prefix) and name.endswith(suffix):
            if not name[len(prefix) : len(prefix) + digits].strip("0123456789"):
                yield name


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

    def __init__(self, root, identity):
        self.root = root
        self.identity = tuple(identity)

    # -- programs ------------------------------------------------------------

    def run(self, operations, lock=None):
        """Run ``operations`` in order, stopping at the first non-optional
        one that does not succeed; return ``(results, stopped_at)``."""
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
        return results, stopped_at

    def _lock_descriptor(self, lock):
        try:
            return self._open_directory(split_components(lock))
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
            raise Refused(FAILED, "the target root was replaced", unsafe=True)
        return fd

    def _open_directory(self, parts):
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

    def _open_parent(self, path):
        """``(parent_fd, leaf, label)``; the caller closes ``parent_fd``."""
        parts = split_components(path)
        if not parts:
            raise Refused(FAILED, "the operation needs an entry, not the target root")
        return self._open_directory(parts[:-1]), parts[-1], path

    @staticmethod
    def _open_leaf(dir_fd, leaf, label):
        try:
            # O_NONBLOCK: opening a FIFO must not hang the program.
            return os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise Refused(ABSENT, "'%s' does not exist" % label) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP and _is_symlink(leaf, dir_fd):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True) from None
            raise

    @classmethod
    def _read_regular(cls, dir_fd, leaf, label):
        fd = cls._open_leaf(dir_fd, leaf, label)
        with open(fd, "rb", closefd=True) as handle:
            if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
                raise Refused(FAILED, "'%s' is not a regular file" % label)
            return handle.read()

    @staticmethod
    def _lstat(dir_fd, leaf):
        try:
            return os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    @staticmethod
    def _write_temp(dir_fd, leaf, data, deferred, mode=None):
        name = ".%s.%s.tmp" % (leaf[:80], os.urandom(6).hex())
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, _FILE_MODE, dir_fd=dir_fd)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            _write_all(fd, data)
            if deferred is None:
                os.fsync(fd)
            else:
                deferred.wrote(dir_fd, fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(name, dir_fd)
            raise
        os.close(fd)
        return name

    # -- operations ----------------------------------------------------------

    def _read(self, path, _argument, _deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            return (OK, self._read_regular(pfd, leaf, label), None, False)
        finally:
            os.close(pfd)

    def _verify(self, path, expected, _deferred):
        try:
            pfd, leaf, label = self._open_parent(path)
            try:
                actual = self._read_regular(pfd, leaf, label)
            finally:
                os.close(pfd)
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
                os.close(pfd)
            if st is None:
                raise Refused(ABSENT, "'%s' does not exist" % label)
            if stat_mode.S_ISLNK(st.st_mode):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
        if stat_mode.S_ISREG(st.st_mode):
            kind = "file"
        elif stat_mode.S_ISDIR(st.st_mode):
            kind = "directory"
        else:
            kind = "other"
        return (OK, (kind, st.st_size, st.st_mtime_ns // 1000000000), None, False)

    def _list(self, path, _argument, _deferred):
        fd = self._open_directory(split_components(path))
        try:
            return (OK, tuple(sorted(os.listdir(fd))), None, False)
        finally:
            os.close(fd)

    def _newest(self, path, family):
        """``(names, link)``: the members of the numbered ``family`` in
        directory ``path``, sorted, and the ``(path, status, bytes or
        reason, unsafe)`` of reading the newest (None without members)."""
        prefix, digits, suffix = family
        parts = split_components(path)
        # A member that vanishes between the listing and the read was
        # superseded and removed meanwhile: list again.
        for _ in range(_NEWEST_ATTEMPTS):
            fd = self._open_directory(parts)
            try:
                names = tuple(sorted(_family_members(os.listdir(fd), prefix, digits, suffix)))
                if not names:
                    return names, None
                label = "%s/%s" % (path, names[-1]) if parts else names[-1]
                link = _chain_link(label, lambda: self._read_regular(fd, names[-1], label))
            finally:
                os.close(fd)
            if link[1] != ABSENT:
                return names, link
        return names, (link[0], ABSENT, "the newest file in '%s' kept vanishing" % path, False)

    def _read_newest(self, path, family, _deferred):
        prefix, digits, suffix = family = _family(family)
        names, link = self._newest(path, family)
        if link is None:
            raise Refused(ABSENT, "'%s' holds no '%s%s%s' file" % (path, prefix, "N" * digits, suffix))
        _label, status, payload, unsafe = link
        if status != OK:
            raise Refused(status, payload, unsafe)
        return (OK, (names[-1], payload), None, False)

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
        links = [first]
        for keys, base in hops:
            if links[-1][1] != OK:
                break
            target = _dereference(links[-1][2], keys, base)
            if target is None:
                break
            links.append(_chain_link(target, lambda: self._read_path(target)))
        return (OK, (names, tuple(links)), None, False)

    def _read_path(self, path):
        pfd, leaf, label = self._open_parent(path)
        try:
            return self._read_regular(pfd, leaf, label)
        finally:
            os.close(pfd)

    def _create_exclusive(self, path, data, deferred):
        pfd, leaf, label = self._open_parent(path)
        try:
            if self._lstat(pfd, leaf) is not None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            return self._create_new(pfd, leaf, label, data, deferred)
        finally:
            os.close(pfd)

    def _create_stamped(self, path, parts, deferred):
        if not isinstance(parts, (list, tuple)):
            raise Refused(FAILED, "stamped content is a list of parts")
        pfd, leaf, label = self._open_parent(path)
        try:
            if self._lstat(pfd, leaf) is not None:
                return (CONFLICT, None, "'%s' already exists" % label, False)
            # Read before writing, so a deadline derived from it errs early.
            reading = probe_filesystem_clock(pfd)
            status, _value, reason, unsafe = self._create_new(pfd, leaf, label, stamped_content(parts, reading), deferred)
            return (status, reading if status == OK else None, reason, unsafe)
        finally:
            os.close(pfd)

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
    def _create_in_place(pfd, leaf, label, data, deferred):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(leaf, flags, _FILE_MODE, dir_fd=pfd)
        except FileExistsError:
            return (CONFLICT, None, "'%s' already exists" % label, False)
        try:
            _write_all(fd, data)
            if deferred is None:
                os.fsync(fd)
            else:
                deferred.wrote(pfd, fd)
        finally:
            os.close(fd)
        if deferred is None:
            os.fsync(pfd)
        return (OK, None, None, False)

    def _write_project(self, path, data, deferred):
        return self._replace(path, data, deferred, project=True)

    def _replace(self, path, data, deferred, project=False):
        pfd, leaf, label = self._open_parent(path)
        try:
            found = self._lstat(pfd, leaf)
            if found is not None and stat_mode.S_ISLNK(found.st_mode):
                raise Refused(FAILED, "'%s' is a symbolic link" % label, unsafe=True)
            if found is not None and stat_mode.S_ISDIR(found.st_mode):
                raise Refused(FAILED, "'%s' is a directory" % label)
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
            os.close(pfd)

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
            else:
                os.unlink(leaf, dir_fd=pfd)
            if deferred is None:
                os.fsync(pfd)
            else:
                deferred.wrote(pfd)
            return (OK, None, None, False)
        finally:
            os.close(pfd)

    def _make_dirs(self, path, _argument, deferred):
        parts = split_components(path)
        fd = self._open_root()
        created = False
        try:
            for index, name in enumerate(parts):
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
                os.close(fd)
                fd = next_fd
        finally:
            os.close(fd)
        if created:
            return (OK, None, None, False)
        return (CONFLICT, None, "'%s' already exists" % path, False)

    def _clock(self, path, _argument, _deferred):
        fd = self._open_directory(split_components(path))
        try:
            return (OK, probe_filesystem_clock(fd), None, False)
        finally:
            os.close(fd)

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

    def _barrier(self, path, _argument, deferred):
        if split_components(path):
            raise Refused(FAILED, "a barrier names the target root, not '%s'" % path)
        return (OK, deferred.flush(), None, False)


_HANDLERS = {
    "Read": Executor._read,
    "ReadNewest": Executor._read_newest,
    "ReadChain": Executor._read_chain,
    "Verify": Executor._verify,
    "Stat": Executor._stat,
    "ListDir": Executor._list,
    "CreateExclusive": Executor._create_exclusive,
    "StampedCreate": Executor._create_stamped,
    "CreateLinked": Executor._create_linked,
    "Replace": Executor._replace,
    "WriteProject": Executor._write_project,
    "Remove": Executor._remove,
    "MakeDirs": Executor._make_dirs,
    "Clock": Executor._clock,
    "Barrier": Executor._barrier,
    "WalkTree": Executor._walk,
}


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


def _chain_link(path, read):
    """``(path, status, bytes or reason, unsafe)`` of reading ``path``."""
    try:
        return (path, OK, read(), False)
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
    scan = _scan_json()
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


def _dereference(data, keys, base):
    """The target path the string at ``keys`` of JSON ``data`` names under
    ``base``, or None where there is no such string."""
    found = _parse_json(data)
    for key in keys:
        if not isinstance(found, dict) or key not in found:
            return None
        found = found[key]
    if not isinstance(found, str):
        return None
    try:
        # A lone surrogate names no file and could not travel back as a path.
        os.fsencode(found)
    except UnicodeError:
        return None
    return "%s/%s" % (base, found) if split_components(base) else found


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
