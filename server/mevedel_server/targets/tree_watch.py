"""Linux inotify watches on directories below a :class:`LocalTarget`'s
pinned root: where something may have changed since the last look.

What it says are hints, never facts: a caller looks at the paths it names
through the target (:class:`~.program.ScanPaths`) and trusts only that
answer. It says either "these paths, and whatever is below those that are
directories, may have changed" or "events were lost" (:attr:`TreeWatch.lost`
is set): the queue overflowed, a watched directory was moved (every watch
below it now names a wrong path), the root was deleted, moved or unmounted,
one directory turned up at two paths, or a directory could not be watched
for a reason other than being gone. Then only a whole walk is to be trusted,
after :meth:`TreeWatch.reset`.

A directory is watched by a descriptor opened the way every operation opens
one (the pinned root, then ``O_DIRECTORY | O_NOFOLLOW`` per component) and
named to ``inotify_add_watch`` as ``/proc/self/fd/N``: the watch is on that
very directory, never on whatever a symbolic link would lead to. A
directory is watched *after* a walk listed it, so a caller walks what it
newly watched once more (what changed in between is in that second
answer; what changes later sends events).

Blind spots of inotify itself, which no watch closes: a write through a
shared writable ``mmap`` sends no event, nor does a write through a hard
link outside the watched tree (a caller re-stats files with more than one
link every time), nor a change made by another machine on a network
filesystem -- so :func:`unwatchable` refuses roots on filesystems whose
changes may come from elsewhere, and a directory on another device than the
root (a mount inside the workspace) makes the tree unwatchable too.

``inotify_available()``: Linux with inotify. One watch holds one inotify instance
(``fs.inotify.max_user_instances``) and a watch per directory
(``fs.inotify.max_user_watches``); :meth:`close` it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Iterable

from .executor import _DIR_FLAGS, Refused
from .inotify import (
    CHANGES,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVE_SELF,
    IN_Q_OVERFLOW,
    IN_UNMOUNT,
    events,
    inotify_available,
)
from .inotify import libc as inotify_libc
from .local import LocalTarget

# Not IN_DONT_FOLLOW: the name given is /proc/self/fd/N, whose (magic) link
# is exactly the directory the descriptor holds.
_MASK = CHANGES
#: Filesystems whose every change is made through this kernel (inotify sees
#: it). Anything else -- NFS, SMB, FUSE (sshfs...), 9p -- is walked instead.
LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "bcachefs", "jfs", "reiserfs", "nilfs2", "overlay"}
)

def unwatchable(root: str) -> str | None:
    """Why events cannot be trusted for directory ``root`` (None: they can):
    no inotify, or a filesystem another machine may change."""
    if not inotify_available():
        return "inotify is not available here"
    found, fstype = -1, None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mounts:
            for line in mounts:
                fields = line.split()
                if "-" not in fields:
                    continue
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                inside = root == point or root.startswith(point.rstrip("/") + "/")
                if inside and len(point) > found:
                    found, fstype = len(point), fields[fields.index("-") + 1]
    except OSError:
        return "the mount table cannot be read"
    if fstype not in LOCAL_FILESYSTEMS:
        return f"the workspace is on a {fstype or 'unknown'} filesystem, which other machines may change"
    return None


class WatchUnavailable(Exception):
    """The tree cannot be watched at all (the reason says why)."""


class TreeWatch:
    """Directories below ``target``'s root watched for changes; see the
    module docstring."""

    _fd = -1

    def __init__(self, target: LocalTarget) -> None:
        libc = inotify_libc()
        if libc is None:
            raise WatchUnavailable("inotify is not available here")
        self._libc = libc
        self._executor = target._executor
        self._fd = -1
        #: Why events were lost since the last reset (None: none were).
        self.lost: str | None = None
        self._paths: dict[int, str] = {}
        self._wds: dict[str, int] = {}
        self.reset()

    @property
    def watched(self) -> int:
        return len(self._wds)

    def reset(self) -> None:
        """Start over with no watch and nothing lost (a new instance: the
        old one's watches and queued events are dropped)."""
        self.close()
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise WatchUnavailable(f"inotify_init1 failed: {os.strerror(code)}")
        self._fd = fd
        self.lost = None
        self._paths.clear()
        self._wds.clear()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()

    # -- watching ----------------------------------------------------------------

    def watch(self, directories: Iterable[str]) -> int:
        """Watch each of ``directories`` (root-relative, ``""`` the root)
        not watched yet; how many new watches it made. One that is gone (or
        a link or a file now) is skipped: the event of its parent says so.
        Raises :class:`WatchUnavailable` when the watch limit is reached or
        ``/proc`` is missing."""
        added = 0
        # Depth-first through sorted paths: the descriptors of the current
        # chain stay open, each directory opened from its parent's.
        chain: list[tuple[str, int]] = []
        try:
            for path in sorted(set(directories), key=lambda text: text.split("/") if text else []):
                while chain and not (chain[-1][0] == "" or path.startswith(chain[-1][0] + "/")):
                    os.close(chain.pop()[1])
                fd = self._open(chain, path)
                if fd is None:
                    continue
                chain.append((path, fd))
                added += self._add(path, fd)
        finally:
            for _path, fd in chain:
                os.close(fd)
        return added

    def _open(self, chain: list[tuple[str, int]], path: str) -> int | None:
        """A descriptor of directory ``path``, from the nearest open
        ancestor on ``chain`` (or the pinned root); None when not there."""
        try:
            if not path:
                return self._executor._open_root()
            base, fd, rest = "", None, path
            if chain:
                base, fd = chain[-1]
                rest = path[len(base) + 1 :] if base else path
            opened = self._executor._open_root() if fd is None else os.dup(fd)
            for name in rest.split("/"):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=opened)
                finally:
                    os.close(opened)
                opened = child
            return opened
        except Refused as refusal:
            if not path:
                self.lost = f"the workspace root cannot be watched: {refusal.reason}"
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                return None
            self.lost = f"'{path}' cannot be watched: {os.strerror(exc.errno or 0)}"
            return None

    def _add(self, path: str, fd: int) -> int:
        if os.fstat(fd).st_dev != self._executor.identity[0]:
            # A mount inside the workspace: its filesystem is not the one
            # judged local (it may be a network one).
            raise WatchUnavailable(f"'{path}' is on another filesystem than the workspace root (a mount inside it)")
        wd = self._libc.inotify_add_watch(self._fd, b"/proc/self/fd/%d" % fd, _MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code == errno.ENOSPC:
                raise WatchUnavailable("the inotify watch limit (fs.inotify.max_user_watches) is reached")
            if code == errno.ENOENT:
                raise WatchUnavailable("/proc is not mounted")
            self.lost = f"'{path}' cannot be watched: {os.strerror(code)}"
            return 0
        known = self._paths.get(wd)
        if known == path:
            return 0
        if known is not None:
            self.lost = f"one directory is at '{known}' and at '{path}'"
            return 0
        stale = self._wds.get(path)
        if stale is not None:
            self._paths.pop(stale, None)  # replaced there; its own watch ends
        self._paths[wd] = path
        self._wds[path] = wd
        return 1

    # -- what happened -------------------------------------------------------------

    def drain(self) -> set[str]:
        """Read every queued event: the paths where something may have
        changed (a directory among them: anything below it too). Sets
        :attr:`lost` when events cannot be trusted."""
        dirty: set[str] = set()
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 256 * 1024)
            except BlockingIOError:
                break
            except OSError as exc:
                self.lost = f"the event queue cannot be read: {os.strerror(exc.errno or 0)}"
                break
            if not data:
                break
            for wd, mask, name in events(data):
                self._event(wd, mask, name, dirty)
        return dirty

    def _event(self, wd: int, mask: int, name: str, dirty: set[str]) -> None:
        if mask & IN_Q_OVERFLOW:
            self.lost = "the event queue overflowed"
            return
        path = self._paths.get(wd)
        if path is None:
            return  # a watch already ended
        if mask & IN_UNMOUNT:
            self.lost = f"the filesystem of '{path or '.'}' was unmounted"
            return
        if mask & IN_IGNORED:
            del self._paths[wd]
            if self._wds.get(path) == wd:
                del self._wds[path]
            if not path:
                self.lost = "the workspace root is no longer watched"
            dirty.add(path)
            return
        if mask & IN_MOVE_SELF:
            self.lost = f"the watched directory '{path or '.'}' was moved"
            return
        if mask & IN_DELETE_SELF:
            if not path:
                self.lost = "the workspace root was deleted"
            dirty.add(path)
            return
        if not name:
            dirty.add(path)  # the directory's own attributes: look at all of it
        elif name == ".gitignore":
            dirty.add(path)  # its rules changed: everything below
        else:
            dirty.add(f"{path}/{name}" if path else name)
