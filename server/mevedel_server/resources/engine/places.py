"""Where a family's files live: a directory on a :class:`Target`.

Every file-backed family reads and writes through a target, never the
filesystem directly, so the target's rules hold for all of them on this
machine and over SSH alike: each directory from the target's root down is
opened without following a symbolic link, the root's identity is pinned,
and only regular files are opened (non-blocking).

- The workspace's target is the session store's (``store_target``) when
  the context names one -- always on an SSH workspace -- else a
  :class:`LocalTarget` rooted at ``workspace_root``. ``work://``, the
  session's ``artifact://`` and any root configured inside the workspace (a
  session directory, a memory or skill root) are paths on it, so a link
  planted anywhere below the workspace (``.mevedel``, ``.mevedel/shared``,
  a session's ``local/``) is refused, not followed.
- A root configured outside the workspace (a global memory root, a skill
  root, the packaged documentation) gets a ``LocalTarget`` of its own,
  rooted at it as it is when the request is prepared (one already made for
  that very directory is reused): the root itself must not be a link (a
  skill's directory is the one exception: its real path is the skill's
  identity), and nothing below it is followed.

A local root that does not exist yet is a place with no target: reads find
nothing there, and an ApplyPatch creates it through the target of the
directory that holds it.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ...addresses import AddressError, ErrorKind
from ...targets import (
    LocalTarget,
    PathAbsentError,
    Target,
    TargetError,
    UnsafePathError,
)
from .context import ResolverContext

LINKED_ROOT = "its root is a symbolic link, which mevedel does not follow"
#: Where patches journal on a workspace, and on a target of its own.
WORKSPACE_JOURNAL = ".mevedel/patches"
OWN_JOURNAL = ".mevedel-patches"
STATE_DIR = ".mevedel"
SHARED_DIR = ".mevedel/shared"
SESSIONS_DIR = ".mevedel/sessions"


@dataclass(frozen=True)
class Place:
    """A directory (``root``, target-relative; ``""`` is the target's root)
    on ``target``. ``target`` is None when a local root did not exist when
    the request was prepared, or (``linked``) was a symbolic link."""

    target: Target | None
    root: str = ""
    linked: bool = False
    #: The directory (on ``target``) where an ApplyPatch journals its
    #: changes (:mod:`.patch.journal`).
    journal: str = OWN_JOURNAL
    #: For a local root absent when prepared: the same directory as a path
    #: below its nearest existing ancestor, where an ApplyPatch creates it.
    holder: Place | None = field(default=None, compare=False)

    def path(self, parts: tuple[str, ...] | list[str]) -> str:
        """The target-relative path of ``parts`` below the root."""
        if not parts:
            return self.root
        tail = "/".join(parts)
        return f"{self.root}/{tail}" if self.root else tail

    def below(self, relative: str) -> Place:
        """The place of a directory below this one (``relative`` is
        ``/``-separated)."""
        holder = None if self.holder is None else self.holder.below(relative)
        return Place(self.target, self.path(relative.split("/")), self.linked, self.journal, holder)

    def writable(self) -> Place | None:
        """Where an ApplyPatch writes: this place, or for a root absent
        when prepared, its holder (None: nowhere)."""
        return self if self.target is not None else self.holder

    def require(self, authored: str) -> None:
        """Refuse a root that is a symbolic link (validation)."""
        if self.linked:
            raise AddressError(ErrorKind.CONTAINMENT, authored, LINKED_ROOT)


def _inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (``/``-separated), when it lies lexically
    at or below it; the grammar's checks apply to every component."""
    try:
        relative = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        return None
    parts = relative.parts
    if any(part in ("", ".", "..") for part in parts):
        return None
    return "/".join(parts)


#: Local targets already pinned, by root path: a request whose root is
#: still the same directory (device and inode, by one ``lstat``) reuses one
#: instead of pinning another; the target re-proves it at every operation.
_PINNED: OrderedDict[str, LocalTarget] = OrderedDict()
_PINNED_CAPACITY = 64


def _pinned(where: str) -> LocalTarget:
    """The ``LocalTarget`` rooted at ``where`` now (raises as constructing one does)."""
    known = _PINNED.get(where)
    if known is not None:
        try:
            info = os.lstat(where)
        except OSError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) == known.identity:
            _PINNED.move_to_end(where)
            return known
        del _PINNED[where]
    target = _PINNED[where] = LocalTarget(where)
    while len(_PINNED) > _PINNED_CAPACITY:
        _PINNED.popitem(last=False)
    return target


def _local_target(path: Path, *, resolve: bool = False) -> Place:
    where = os.path.realpath(path) if resolve else os.path.abspath(path)
    try:
        return Place(_pinned(where))
    except PathAbsentError:
        return Place(None, holder=_holder(where))
    except UnsafePathError:
        return Place(None, linked=True)
    except TargetError:
        return Place(None)


def _holder(where: str) -> Place | None:
    """``where`` as a path below its nearest existing ancestor's target."""
    missing: list[str] = []
    current = where
    while True:
        parent, name = os.path.split(current)
        if parent == current or not name:
            return None
        missing.append(name)
        try:
            return Place(LocalTarget(parent), "/".join(reversed(missing)))
        except PathAbsentError:
            current = parent
        except TargetError:
            return None


class Places:
    """The places of one request, made once (each local target is pinned
    when it is first asked for, which is while the request is prepared)."""

    def __init__(self, context: ResolverContext) -> None:
        self.context = context
        self._workspace: Place | None | bool = False
        self._session: Place | None | bool = False
        self._own: dict[tuple[str, bool], Place] = {}

    @property
    def workspace(self) -> Place | None:
        """The workspace root; None when there is no workspace."""
        if self._workspace is False:
            context = self.context
            if context.remote_workspace:
                target = context.store_target
                self._workspace = Place(target, journal=WORKSPACE_JOURNAL) if target is not None else None
            elif context.workspace_root is None:
                self._workspace = None
            elif context.store_target is not None:
                self._workspace = Place(context.store_target, journal=WORKSPACE_JOURNAL)
            else:
                found = _local_target(context.workspace_root)
                self._workspace = Place(found.target, journal=WORKSPACE_JOURNAL) if found.target is not None else found
        return self._workspace  # type: ignore[return-value]

    @property
    def project(self) -> Place | None:
        """Where plain paths live: the session's working directory (the
        workspace root, or a Worktree Fork's checkout below it)."""
        workspace = self.workspace
        directory = self.context.working_directory
        return workspace if workspace is None or not directory else workspace.below(directory)

    @property
    def session(self) -> Place | None:
        """The open session's directory; None when no session is open."""
        if self._session is False:
            context = self.context
            if context.remote_workspace:
                workspace = self.workspace
                sid = context.remote_session
                self._session = None if sid is None or workspace is None else workspace.below(f"{SESSIONS_DIR}/{sid}")
            elif context.session_dir is None:
                self._session = None
            else:
                self._session = self.local(context.session_dir)
        return self._session  # type: ignore[return-value]

    def shared(self) -> Place | None:
        workspace = self.workspace
        return None if workspace is None else workspace.below(SHARED_DIR)

    def local(self, path: Path, *, resolve: bool = False) -> Place:
        """The place of a local directory: a path on the workspace's target
        when it lies inside the workspace, else a target of its own."""
        context = self.context
        root = context.workspace_root
        if root is not None and not context.remote_workspace:
            relative = _inside(path, root)
            workspace = self.workspace
            if relative is not None and workspace is not None:
                if workspace.target is None:
                    return Place(None, linked=workspace.linked)
                return workspace.below(relative) if relative else workspace
        key = (os.path.abspath(path), resolve)
        place = self._own.get(key)
        if place is None:
            place = self._own[key] = _local_target(path, resolve=resolve)
        return place
