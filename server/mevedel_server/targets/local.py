"""``LocalTarget``: a target root on this machine's filesystem.

Every operation opens the root and then each parent component in turn with
``O_DIRECTORY | O_NOFOLLOW`` (a chain of directory descriptors), so what it
touches is proven to be the requested physical entry: a symlinked root,
parent or leaf fails closed instead of being followed. The root's identity
(device and inode) is pinned when the target is constructed and re-proved by
every operation, so a root swapped for another directory is refused too.

Writes are whole or absent: ``CreateExclusive`` writes a temporary file in the
same directory, fsyncs it and hard-links it into place (``link`` fails if the
name exists, which is the exclusive election), ``Replace`` renames a fsynced
temporary over the old file; both fsync the directory afterwards. A crash can
leave only a dot-prefixed ``*.tmp`` file behind, never a torn record under its
real name. Filesystems without hard links fall back to ``O_EXCL`` creation.

A program runs in one worker thread (``asyncio.to_thread``): one thread hop
per program, however many operations it carries.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import secrets
import stat as stat_mode
from collections.abc import Iterator
from contextlib import contextmanager

from .clock import Clock, probe_filesystem_clock
from .errors import PathAbsentError, TargetOperationError, UnsafePathError
from .paths import split_target_path
from .program import (
    ControlProgram,
    CreateExclusive,
    FileStat,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    ProgramResult,
    Read,
    Remove,
    Replace,
    Stat,
    Status,
    Verify,
    execute_operations,
)
from .target import ProgramTarget

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o600
_DIR_MODE = 0o700
# link(2) is unavailable on some filesystems (vfat, some FUSE mounts).
_NO_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


class _Refused(Exception):
    """An operation ends with a non-ok status (carried to ``OpResult``)."""

    def __init__(self, status: Status, reason: str, unsafe: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.unsafe = unsafe


def _label(parts: tuple[str, ...], upto: int) -> str:
    return "/".join(parts[:upto]) or "."


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat_mode.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_subdir(dir_fd: int, name: str, label: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _Refused(Status.ABSENT, f"'{label}' does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            if _is_symlink(name, dir_fd):
                raise _Refused(Status.FAILED, f"'{label}' is a symbolic link", unsafe=True) from None
            if exc.errno == errno.ENOTDIR:
                raise _Refused(Status.FAILED, f"'{label}' is not a directory") from None
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


class LocalTarget(ProgramTarget):
    """A target rooted at an existing, non-symlinked local directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = os.path.abspath(os.fspath(root))
        try:
            fd = os.open(self._root, _DIR_FLAGS)
        except FileNotFoundError:
            raise PathAbsentError(".", "the target root does not exist") from None
        except OSError as exc:
            if os.path.islink(self._root):
                raise UnsafePathError(".", "the target root is a symbolic link") from None
            if exc.errno == errno.ENOTDIR:
                raise TargetOperationError(".", "the target root is not a directory") from None
            raise TargetOperationError(".", os.strerror(exc.errno or 0)) from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self._identity = (st.st_dev, st.st_ino)

    @property
    def root(self) -> str:
        """Backing location of the root. Internal: never show it to a user."""
        return self._root

    def __repr__(self) -> str:
        return "LocalTarget(<root>)"

    async def run(self, program: ControlProgram) -> ProgramResult:
        return await asyncio.to_thread(self._run_program, program)

    # -- program execution (worker thread) ---------------------------------

    def _run_program(self, program: ControlProgram) -> ProgramResult:
        if program.lock is None:
            return execute_operations(program.operations, self._perform)
        lock_fd = self._lock_descriptor(program.lock)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:
                return execute_operations(program.operations, self._perform)
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(lock_fd)

    def _lock_descriptor(self, lock: str) -> int:
        try:
            return self._open_directory(split_target_path(lock))
        except _Refused as refusal:
            if refusal.status is Status.ABSENT:
                raise PathAbsentError(lock, f"lock directory: {refusal.reason}") from None
            if refusal.unsafe:
                raise UnsafePathError(lock, f"lock directory: {refusal.reason}") from None
            raise TargetOperationError(lock, f"lock directory: {refusal.reason}") from None
        except OSError as exc:
            raise TargetOperationError(lock, f"lock directory: {os.strerror(exc.errno or 0)}") from None

    def _perform(self, op: Operation) -> OpResult:
        handler = _HANDLERS.get(type(op))
        if handler is None:
            return OpResult(Status.FAILED, reason=f"unsupported operation {type(op).__name__}")
        try:
            return handler(self, op)
        except _Refused as refusal:
            return OpResult(refusal.status, reason=refusal.reason, unsafe=refusal.unsafe)
        except OSError as exc:
            return OpResult(Status.FAILED, reason=os.strerror(exc.errno) if exc.errno else str(exc))

    # -- descriptor chain --------------------------------------------------

    def _open_root(self) -> int:
        try:
            fd = os.open(self._root, _DIR_FLAGS)
        except FileNotFoundError:
            raise _Refused(Status.FAILED, "the target root no longer exists") from None
        except OSError:
            if os.path.islink(self._root):
                raise _Refused(Status.FAILED, "the target root is a symbolic link", unsafe=True) from None
            raise
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._identity:
            os.close(fd)
            raise _Refused(Status.FAILED, "the target root was replaced", unsafe=True)
        return fd

    def _open_directory(self, parts: tuple[str, ...]) -> int:
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

    @contextmanager
    def _parent(self, path: str) -> Iterator[tuple[int, str, str]]:
        parts = split_target_path(path)
        fd = self._open_directory(parts[:-1])
        try:
            yield fd, parts[-1], path
        finally:
            os.close(fd)

    @staticmethod
    def _open_leaf(dir_fd: int, leaf: str, label: str) -> int:
        try:
            # O_NONBLOCK: opening a FIFO must not hang the program.
            return os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise _Refused(Status.ABSENT, f"'{label}' does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP and _is_symlink(leaf, dir_fd):
                raise _Refused(Status.FAILED, f"'{label}' is a symbolic link", unsafe=True) from None
            raise

    @classmethod
    def _read_regular(cls, dir_fd: int, leaf: str, label: str) -> bytes:
        fd = cls._open_leaf(dir_fd, leaf, label)
        with open(fd, "rb", closefd=True) as handle:
            if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
                raise _Refused(Status.FAILED, f"'{label}' is not a regular file")
            return handle.read()

    @staticmethod
    def _lstat(dir_fd: int, leaf: str) -> os.stat_result | None:
        try:
            return os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    @staticmethod
    def _write_temp(dir_fd: int, leaf: str, data: bytes) -> str:
        name = f".{leaf[:80]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE, dir_fd=dir_fd)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(name, dir_fd)
            raise
        os.close(fd)
        return name

    # -- operations --------------------------------------------------------

    def _read(self, op: Read) -> OpResult:
        with self._parent(op.path) as (pfd, leaf, label):
            return OpResult(Status.OK, self._read_regular(pfd, leaf, label))

    def _verify(self, op: Verify) -> OpResult:
        actual: bytes | None
        try:
            with self._parent(op.path) as (pfd, leaf, label):
                actual = self._read_regular(pfd, leaf, label)
        except _Refused as refusal:
            # A missing parent proves absence just as a missing leaf does.
            if refusal.status is not Status.ABSENT:
                raise
            actual = None
        if actual == op.expected:
            return OpResult(Status.OK, actual)
        if op.expected is None:
            reason = f"'{op.path}' exists"
        elif actual is None:
            reason = f"'{op.path}' does not exist"
        else:
            reason = f"'{op.path}' has different content"
        return OpResult(Status.MISMATCH, actual, reason=reason)

    def _stat(self, op: Stat) -> OpResult:
        parts = split_target_path(op.path)
        if not parts:
            fd = self._open_root()
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        else:
            with self._parent(op.path) as (pfd, leaf, label):
                found = self._lstat(pfd, leaf)
                if found is None:
                    raise _Refused(Status.ABSENT, f"'{label}' does not exist")
                if stat_mode.S_ISLNK(found.st_mode):
                    raise _Refused(Status.FAILED, f"'{label}' is a symbolic link", unsafe=True)
                st = found
        if stat_mode.S_ISREG(st.st_mode):
            kind = "file"
        elif stat_mode.S_ISDIR(st.st_mode):
            kind = "directory"
        else:
            kind = "other"
        return OpResult(Status.OK, FileStat(kind, st.st_size, st.st_mtime_ns // 1_000_000_000))

    def _list(self, op: ListDir) -> OpResult:
        fd = self._open_directory(split_target_path(op.path))
        try:
            return OpResult(Status.OK, tuple(sorted(os.listdir(fd))))
        finally:
            os.close(fd)

    def _create_exclusive(self, op: CreateExclusive) -> OpResult:
        with self._parent(op.path) as (pfd, leaf, label):
            if self._lstat(pfd, leaf) is not None:
                return OpResult(Status.CONFLICT, reason=f"'{label}' already exists")
            temp = self._write_temp(pfd, leaf, op.data)
            try:
                os.link(temp, leaf, src_dir_fd=pfd, dst_dir_fd=pfd, follow_symlinks=False)
            except FileExistsError:
                return OpResult(Status.CONFLICT, reason=f"'{label}' already exists")
            except OSError as exc:
                if exc.errno not in _NO_LINK_ERRNOS:
                    raise
                return self._create_in_place(pfd, leaf, label, op.data)
            finally:
                _unlink_quietly(temp, pfd)
            os.fsync(pfd)
            return OpResult(Status.OK)

    def _create_in_place(self, pfd: int, leaf: str, label: str, data: bytes) -> OpResult:
        try:
            fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE, dir_fd=pfd)
        except FileExistsError:
            return OpResult(Status.CONFLICT, reason=f"'{label}' already exists")
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(pfd)
        return OpResult(Status.OK)

    def _replace(self, op: Replace) -> OpResult:
        with self._parent(op.path) as (pfd, leaf, label):
            found = self._lstat(pfd, leaf)
            if found is not None and stat_mode.S_ISLNK(found.st_mode):
                raise _Refused(Status.FAILED, f"'{label}' is a symbolic link", unsafe=True)
            if found is not None and stat_mode.S_ISDIR(found.st_mode):
                raise _Refused(Status.FAILED, f"'{label}' is a directory")
            temp = self._write_temp(pfd, leaf, op.data)
            try:
                os.replace(temp, leaf, src_dir_fd=pfd, dst_dir_fd=pfd)
            except BaseException:
                _unlink_quietly(temp, pfd)
                raise
            os.fsync(pfd)
            return OpResult(Status.OK)

    def _remove(self, op: Remove) -> OpResult:
        with self._parent(op.path) as (pfd, leaf, label):
            found = self._lstat(pfd, leaf)
            if found is None:
                raise _Refused(Status.ABSENT, f"'{label}' does not exist")
            if stat_mode.S_ISLNK(found.st_mode):
                raise _Refused(Status.FAILED, f"'{label}' is a symbolic link", unsafe=True)
            if stat_mode.S_ISDIR(found.st_mode):
                try:
                    os.rmdir(leaf, dir_fd=pfd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise _Refused(Status.FAILED, f"'{label}' is a directory that is not empty") from None
                    raise
            else:
                os.unlink(leaf, dir_fd=pfd)
            os.fsync(pfd)
            return OpResult(Status.OK)

    def _make_dirs(self, op: MakeDirs) -> OpResult:
        parts = split_target_path(op.path)
        fd = self._open_root()
        created = False
        try:
            for index, name in enumerate(parts):
                try:
                    os.mkdir(name, _DIR_MODE, dir_fd=fd)
                    os.fsync(fd)
                    created = True
                except FileExistsError:
                    created = False
                next_fd = _open_subdir(fd, name, _label(parts, index + 1))
                os.close(fd)
                fd = next_fd
        finally:
            os.close(fd)
        if created:
            return OpResult(Status.OK)
        return OpResult(Status.CONFLICT, reason=f"'{op.path}' already exists")

    def _clock(self, op: Clock) -> OpResult:
        fd = self._open_directory(split_target_path(op.path))
        try:
            return OpResult(Status.OK, probe_filesystem_clock(fd))
        finally:
            os.close(fd)


_HANDLERS = {
    Read: LocalTarget._read,
    Verify: LocalTarget._verify,
    Stat: LocalTarget._stat,
    ListDir: LocalTarget._list,
    CreateExclusive: LocalTarget._create_exclusive,
    Replace: LocalTarget._replace,
    Remove: LocalTarget._remove,
    MakeDirs: LocalTarget._make_dirs,
    Clock: LocalTarget._clock,
}
