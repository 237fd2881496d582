"""Where a session's agent works: the session's working directory (the
spec's ``:working-directory``), and the file access and file-state record
that belong to it.

A session works in the workspace root, except a Worktree Fork, which works
in its own linked checkout (``sidecar.worktree.directory``, such as
``.worktrees/wt1``). That one directory decides everything the agent does:
the ``cwd`` its ACP session is opened with and the agent process runs in,
the root ``fs/*`` requests are contained in (links, races and FIFOs refused
below it as everywhere: the reads and writes are still the workspace
target's, with workspace-relative paths), the terminals' default and
allowed ``cwd``, the tree whose changes a shell command leaves are looked
for in (on this machine watched through a target rooted there, as the
root is; over SSH walked), and the plain paths of the tool server's tools. Checkpoints keep
naming files workspace-relative (``.worktrees/wt1/src/app.py``), so a
Rewind or Redo of the session restores them in its checkout, never in the
main one.

A root session's record leaves ``.worktrees/`` out: the checkouts there are
other sessions' trees (a shell command of the root session that creates
one is not its file change to undo).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from ..store import WORKTREES_DIR
from ..targets import ControlProgram, LocalTarget, Stat, Status, Target, TargetError
from .errors import FAILED, AgentError
from .file_state import FileStateRecord
from .terminals import local_root_of
from .workspace_files import WorkspaceFiles

#: Where a worktree session's file-state record keeps its blobs (one
#: directory per checkout: a record removes the blobs its store holds and
#: it does not name).
WORKTREE_BLOBS = ".mevedel/file-state/worktrees"


@dataclass(frozen=True)
class WorkingDirectory:
    #: Workspace-relative ("" for the workspace root).
    relative: str
    #: The workspace root as the agent sees it (on the workspace's machine).
    root: str

    @property
    def path(self) -> str:
        """The directory as the agent names it (absolute, target-native)."""
        return posixpath.join(self.root, self.relative) if self.relative else self.root

    def local(self, local_root: str | None) -> str | None:
        """The directory on this machine, when the workspace is here."""
        if local_root is None:
            return None
        return os.path.join(local_root, self.relative) if self.relative else local_root


class WorkingTrees:
    """The file access and file-state record of each working directory of
    one workspace (made on first use, shared by its sessions)."""

    def __init__(self, target: Target, root: str, *, max_file_bytes: int,
                 open_document: Callable[[str], str | None] | None = None) -> None:
        self.target = target
        self.root = posixpath.normpath(root)
        self._max = max_file_bytes
        self._open_document = open_document
        self._files: dict[str, WorkspaceFiles] = {}
        self._records: dict[str, FileStateRecord] = {}
        #: What rides in every record's walk (``FileStateRecord.riders``).
        self.riders: list = []

    def directory(self, relative: str) -> WorkingDirectory:
        return WorkingDirectory(relative, self.root)

    def files(self, relative: str) -> WorkspaceFiles:
        files = self._files.get(relative)
        if files is None:
            files = self._files[relative] = WorkspaceFiles(self.target, self.root, open_document=self._open_document, base=relative)
        return files

    def record(self, relative: str) -> FileStateRecord:
        record = self._records.get(relative)
        if record is None:
            record = working_record(self.target, relative, max_file_bytes=self._max)
            record.riders = self.riders
            self._records[relative] = record
        return record

    async def require(self, session_id: str, relative: str) -> None:
        """Refuse to start an agent whose working directory is gone (a
        worktree removed outside mevedel): it would otherwise work in the
        main checkout, the very isolation a Worktree Fork is for."""
        if not relative:
            return
        found = (await self.target.run(ControlProgram([Stat(relative, optional=True)])))[0]
        if found.ok and found.value.kind == "directory":
            return
        why = "does not exist" if found.status is Status.ABSENT else "is not a directory" if found.ok else (found.reason or "cannot be used")
        raise AgentError(
            FAILED, f"session {session_id}",
            f"its working directory {relative} (its Worktree Fork's checkout) {why}; the agent is not started in another tree",
            f"restore the worktree (git worktree add {relative} <its branch>), or fork the session again",
        )

    def close(self) -> None:
        for record in self._records.values():
            record.close()


def working_record(target: Target, relative: str, *, max_file_bytes: int, watch: bool | None = None) -> FileStateRecord:
    """A new file-state record of working directory ``relative`` (the
    workspace root: ""), kept where every record of it is kept
    (``watch=False``: walked, never watched -- a record that looks once)."""
    if relative:
        name = relative.replace("/", "_")
        return FileStateRecord(target, max_file_bytes=max_file_bytes, base=relative, blob_dir=f"{WORKTREE_BLOBS}/{name}",
                               scanner=_scanner(target, relative), watch=watch)
    return FileStateRecord(target, max_file_bytes=max_file_bytes, skip=(WORKTREES_DIR,), watch=watch)


def _scanner(target: Target, relative: str) -> LocalTarget | None:
    """A target rooted at a local working directory, so its record is
    kept current by inotify as the root's is; None (walked every
    time) over SSH, or when the directory is missing or reached
    through a symbolic link (which :meth:`WorkingTrees.require` then refuses)."""
    local = local_root_of(target)
    if local is None:
        return None
    path = os.path.join(local, relative)
    if os.path.realpath(path) != os.path.join(os.path.realpath(local), relative):
        return None
    try:
        return LocalTarget(path)
    except (TargetError, OSError):
        return None
