"""The lifecycle transactions: Rewind, Redo, Fork, Worktree Fork, Save As
and recovery (``mevedel/rewind/*``, ``mevedel/redo/*``, ``mevedel/fork/*``,
``mevedel/worktreeFork/*``, ``mevedel/saveAs/*``).

Each is two-phase: ``.../prepare`` returns the impact and an opaque
``token``; ``.../commit`` takes the token, rechecks everything the prepare
saw and commits (a moved state is a ``stale-head`` error).
"""

from __future__ import annotations

from typing import Literal, Optional

import attrs

from .session import SessionState

Boundary = Literal["after", "before"]


@attrs.define
class TurnLabel:
    """A turn as the pickers name it."""

    turn: int
    segment: int
    turn_id: str
    preview: str


@attrs.define
class FileRestore:
    """A captured path and the checkpoint a commit restores it to."""

    path: str
    #: What the checkpoint holds there: a regular file (``present``),
    #: nothing, a directory or a symbolic link.
    state: Literal["present", "absent", "directory", "symlink"]
    checkpoint: str
    turn: int
    changes: bool
    sha256: Optional[str] = None
    size: Optional[int] = None
    #: What the commit does to it: ``delete``, ``restore``, ``create
    #: directory``, ``remove directory``, ``chmod 755`` (the octal bits it
    #: gets), ``relink`` or ``unchanged``.
    action: str = attrs.field(kw_only=True)
    #: The permission bits it gets (None: a link, or a checkpoint that
    #: recorded none: the file keeps its mode).
    mode: Optional[int] = None
    #: A link's target text.
    link_target: Optional[str] = None
    #: The retained sub-agents (their paths) that changed it in the turns
    #: the Rewind discards (``Agent`` tool; empty: none did).
    agents: list[str] = attrs.Factory(list)


@attrs.define
class KnownGap:
    """A file a turn could change without a capture: not restored."""

    path: str
    turn: int
    reason: str


@attrs.define
class ExternalChange:
    """A captured file changed outside the session since a turn recorded it."""

    path: str
    recorded_turn: int


@attrs.define
class GitCheck:
    """Whether the restore disagrees with the Git index."""

    status: Literal["checked", "no-repository", "unavailable", "not-local"]
    divergent: list[str]
    detail: Optional[str] = None


@attrs.define
class RewindPrepareParams:
    """Rewind to just after a turn's response (``after``) or to just before
    its prompt (``before``)."""

    turn: int
    boundary: Boundary = "after"
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class RewindImpact:
    session_id: str
    boundary: Boundary
    turn: int
    kept_turns: int
    discarded: list[TurnLabel]
    transcript_changes: bool
    restores: list[FileRestore]
    gaps: list[KnownGap]
    externally_modified: list[ExternalChange]
    git: GitCheck
    empty: bool
    token: str
    #: What happens to the agent's own history of the conversation
    #: (absent: the session retains none).
    agent_history: Optional[str] = None


@attrs.define
class CommitParams:
    """Commit a prepared transaction."""

    token: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class InPlaceResult:
    """What a Rewind or Redo committed on the open session."""

    session_id: str
    committed: bool
    settled_turns: int
    written: list[str]
    warning: Optional[str] = None


@attrs.define
class RedoState:
    """A committed head of the session (one per distinct turn state)."""

    publication_id: str
    turn_count: int
    updated_at: int
    last_turn: Optional[TurnLabel] = None


@attrs.define
class SkippedHead:
    publication_id: str
    reason: str


@attrs.define
class RedoListResult:
    session_id: str
    states: list[RedoState]
    skipped: list[SkippedHead]
    current_head: Optional[str] = None


@attrs.define
class RedoPrepareParams:
    """Return the session to an earlier committed head."""

    publication_id: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class RedoImpact:
    session_id: str
    publication_id: str
    common_turns: int
    restored: list[TurnLabel]
    discarded: list[TurnLabel]
    restores: list[FileRestore]
    gaps: list[KnownGap]
    externally_modified: list[ExternalChange]
    git: GitCheck
    token: str
    #: What happens to the agent's own history of the conversation
    #: (absent: the session retains none).
    agent_history: Optional[str] = None


@attrs.define
class ForkPrepareParams:
    """Fork the session after a turn's response."""

    turn: int
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ForkImpact:
    session_id: str
    response: TurnLabel
    fork_point_id: str
    turns: int
    attached_artifacts: list[str]
    local_files: list[str]
    plans_note: str
    token: str
    #: What happens to the agent's own history of the conversation
    #: (absent: the session retains none).
    agent_history: Optional[str] = None


@attrs.define
class ChildResult:
    """The new session a Fork or Save As created, open here and current."""

    session: SessionState
    source_id: str
    warning: Optional[str] = None


@attrs.define
class ForkVariant:
    session_id: str
    role: str
    display_name: str
    created_at: int
    is_current: bool
    latest_preview: Optional[str] = None
    worktree_branch: Optional[str] = None
    worktree_directory: Optional[str] = None


@attrs.define
class ForkVariantsResult:
    """The sessions that share a fork point: its source and direct forks."""

    source_id: str
    fork_point_id: str
    turn: int
    forks: list[ForkVariant]
    source: Optional[ForkVariant] = None


@attrs.define
class WorktreePlace:
    """The linked Git worktree a Worktree Fork creates."""

    name: str
    branch: str
    directory: str
    base_commit: str
    source_checkout: str


@attrs.define
class UnrestoredFile:
    path: str
    reason: str


@attrs.define
class WorktreeForkPrepareParams:
    """Fork after a turn's response into a new linked worktree (name and
    branch allocated when omitted)."""

    turn: int
    name: Optional[str] = None
    branch: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class WorktreeForkImpact:
    session_id: str
    response: TurnLabel
    fork_point_id: str
    turns: int
    worktree: WorktreePlace
    restores: list[str]
    unrestored: list[UnrestoredFile]
    shared: list[str]
    local_files: list[str]
    plans_note: str
    token: str
    #: What happens to the agent's own history of the conversation
    #: (absent: the session retains none).
    agent_history: Optional[str] = None


@attrs.define
class WorktreeForkResult:
    session: SessionState
    source_id: str
    worktree: WorktreePlace
    restored: list[str]
    unrestored: list[UnrestoredFile]
    warning: Optional[str] = None


@attrs.define
class SaveAsPrepareParams:
    """Copy the whole session into a new, named one."""

    name: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class SaveAsImpact:
    session_id: str
    name: str
    turns: int
    segments: int
    chats: int
    artifacts: int
    size: int
    token: str
    #: What happens to the agent's own history of the conversation
    #: (absent: the session retains none).
    agent_history: Optional[str] = None


@attrs.define
class RecoveryResult:
    session_id: str
    recovery_id: str
    resolution: Literal["rolled-back", "completed", "abandoned"]
    written: list[str]
    #: Project files changed outside the session since the transaction was
    #: interrupted: a retry leaves them as they are.
    left: list[str] = attrs.Factory(list)
    #: What a client tells the person of ``left`` (a warning): one sentence
    #: for every client; absent when nothing was left.
    left_note: Optional[str] = None
