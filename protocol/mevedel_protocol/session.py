"""Params and results of the ``mevedel/session/*`` and ``mevedel/turn/*``
requests, and of the ``mevedel/session/didChange`` notification.

Every request may name its workspace folder (``workspace_folder``, default:
the first folder); requests about one session may name it (``session_id``,
default: the folder's current session, the one this client created or opened
last). A session is written only when it has something to save: its first
settled turn, checkpoint or explicit save materializes it.
"""

from typing import Literal, Optional

import attrs

#: Stable ``data.kind`` values of session failures (beside the address kinds).
SESSION_ERROR_KINDS = frozenset(
    {
        "lease-held",
        "lease-lost",
        "read-only",
        "takeover-needs-confirmation",
        "takeover-declined",
        "publication-pending",
        "incompatible",
        "stale-head",
        "recovery-pending",
        "transfer-draining",
        "identity-needs-confirmation",
        "identity-declined",
        "beside-held-needs-confirmation",
        "beside-held-declined",
        "unsettled-mutation",
    }
)

OpenMode = Literal["auto", "resume", "join", "takeover"]
SessionAction = Literal["Switch", "Resume", "Join", "Take over"]
Access = Literal["writable", "read-only"]
Outcome = Literal["completed", "errored", "interrupted"]
#: What a client may append by hand (``mevedel/turn/append``).
AppendKind = Literal["response", "reasoning", "tool_call", "tool_result", "mail"]
#: What a turn holds: the appendable kinds, and what an agent's turn adds
#: (``plan``: ``text`` is a Markdown checklist; ``permission``: ``call_id``,
#: ``text`` the question, ``output`` the decision, ``is_error`` when refused).
RecordKind = Literal["response", "reasoning", "tool_call", "tool_result", "mail", "plan", "permission"]
#: What a turn's records may be (``agent_task``: a retained agent's task,
#: recorded by the engine only).
TurnItemKind = Literal["response", "reasoning", "tool_call", "tool_result", "mail", "plan", "permission", "agent_task"]


@attrs.define
class SessionState:
    """A session this client has open.

    ``access`` is ``read-only`` for a joined session (another client holds
    the lease; ``holder_host`` names its machine) and for one whose lease
    this client lost (``read_only_reason`` says which). ``materialized`` is
    false until the first save writes the session. ``pending_publication``
    is set while a save that failed before its commit point waits for a
    retry (mutations are refused until then). ``transcript_uri`` is the
    ``mevedel-resource:`` URI of the session's ``history://root``, ready to
    open with ``mevedel/resource/read``.
    """

    session_id: str
    display_name: str
    named: bool
    access: Access
    materialized: bool
    settled_turns: int
    reconciliation_pending: bool
    current: bool
    transcript_uri: str
    read_only_reason: Optional[str] = None
    holder_host: Optional[str] = None
    open_turn: Optional[int] = None
    pending_publication: Optional[str] = None
    recovery_pending: Optional[str] = None


@attrs.define
class SessionListParams:
    """List every session of the workspace folder."""

    workspace_folder: Optional[str] = None


@attrs.define
class SessionListEntry:
    """One saved (or here-created, unsaved) session and what opening it
    does: ``Switch`` (open here), ``Resume`` (free, or this client's own
    lease), ``Join`` (another client holds it: read-only), ``Take over``
    (another client's lease expired: needs confirmation)."""

    session_id: str
    display_name: str
    action: SessionAction
    turns: int
    updated_at: int
    lease: Literal["free", "held", "expired"]
    published: bool
    current: bool
    latest_prompt: Optional[str] = None
    holder_host: Optional[str] = None
    #: An interrupted Rewind or Redo waits for ``retryRecovery`` or
    #: ``abandonRecovery``: its recovery ID (mutations are refused until then).
    recovery_pending: Optional[str] = None


@attrs.define
class InspectEntry:
    """A session directory whose records cannot be trusted or whose sidecar
    is another format: shown for inspection only, never guessed."""

    name: str
    subject: Literal["directory", "lease", "manifest", "sidecar"]
    reason: str
    kind: Optional[str] = None


@attrs.define
class SessionListResult:
    sessions: list[SessionListEntry]
    inspect: list[InspectEntry]
    #: The session an editor offers to continue when none is current (after
    #: a restart): the most recently updated one this client opens writable
    #: without asking, with settled turns and no recovery pending.
    continuable: Optional[str] = None


@attrs.define
class SessionCreateParams:
    """Start a new session (current from now on); nothing is written until
    its first save."""

    name: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class SessionOpenParams:
    """Open a saved session and make it current. ``auto`` resumes a free or
    own lease, joins a live foreign one and asks (``window/showMessageRequest``)
    before taking over an expired one; ``confirm_takeover`` answers that
    question in advance. A session made in another workspace (a copied
    session directory) is bound to this one only after a second question,
    which ``confirm_identity`` answers in advance."""

    session_id: str
    mode: OpenMode = "auto"
    confirm_takeover: bool = False
    workspace_folder: Optional[str] = None
    confirm_identity: bool = False


@attrs.define
class SessionOpenResult:
    """``action`` is ``resume``, ``join``, ``takeover`` or ``switch``;
    ``interrupted_turn`` the turn a resume found in flight and settled as
    interrupted."""

    session: SessionState
    action: Literal["resume", "join", "takeover", "switch"]
    interrupted_turn: Optional[int] = None


@attrs.define
class SessionParams:
    """A request about one session (default: the folder's current one)."""

    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class SessionCloseResult:
    session_id: str
    saved: bool


@attrs.define
class SessionRenameParams:
    """Give the session an explicit display name (whitespace is normalized)."""

    name: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class SessionCompactParams:
    """Compact the session: close its live segment and open the next one,
    which starts with ``summary`` (the caller's summary of the closed one)."""

    summary: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class SegmentRotationResult:
    """A compaction or /clear committed: ``segment`` is the new live
    segment, ``previous_segment`` the one closed; ``chapter`` is the number
    of the chapter a /clear closed."""

    session_id: str
    segment: int
    previous_segment: int
    committed: bool
    chapter: Optional[int] = None


@attrs.define
class SaveResult:
    """``committed``: a new publication is the session's committed state;
    ``materialized``: this save wrote the session for the first time;
    ``note``: why nothing was published."""

    session_id: str
    committed: bool
    materialized: bool
    turn: Optional[int] = None
    note: Optional[str] = None


@attrs.define
class AbandonResult:
    """``abandoned``: a pending publication was dropped (the committed state
    stays as it was; the live session keeps its content for the next save)."""

    session_id: str
    abandoned: bool


@attrs.define
class AcknowledgeMutationResult:
    """``cleared``: the unsettled-mutation latch was set and is now cleared
    (the owner confirmed no command of a previous owner still runs)."""

    session_id: str
    cleared: bool


@attrs.define
class TurnBeginParams:
    """Begin a turn with the user's prompt (its identity is reserved now)."""

    prompt: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnBeginResult:
    """``reminder``: this turn's request must carry the reconciliation
    reminder (a previous turn was interrupted)."""

    session_id: str
    turn: int
    turn_id: str
    reminder: bool


@attrs.define
class TurnCaptureParams:
    """Record a tracked file (workspace-relative ``path``) before the turn
    first changes it; with ``gap``, record instead that it may change without
    a capture, and why."""

    path: str
    gap: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnCaptureResult:
    """``state``: ``present`` (content captured, ``size`` bytes),
    ``absent`` (the file did not exist) or ``gap``."""

    path: str
    state: Literal["present", "absent", "gap"]
    size: Optional[int] = None
    gap_reason: Optional[str] = None


@attrs.define
class TurnAppendParams:
    """Add one record to the turn in flight: ``response``/``reasoning``
    (``text``), ``tool_call`` (``call_id``, ``name``, ``arguments``),
    ``tool_result`` (``call_id``, ``output``, ``is_error``) or ``mail``
    (``mail_id``, ``sender``, ``text``)."""

    kind: AppendKind
    text: Optional[str] = None
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None
    is_error: bool = False
    mail_id: Optional[str] = None
    sender: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnAppendResult:
    session_id: str
    turn: int
    kind: AppendKind


@attrs.define
class TurnSettleParams:
    """End the turn in flight and save it (one publication)."""

    outcome: Outcome = "completed"
    reason: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnAbortParams:
    """Settle the turn in flight as interrupted and save it."""

    reason: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnSummary:
    """``state``: ``in-flight``, ``completed``, ``errored`` or ``interrupted``."""

    turn: int
    turn_id: str
    segment: int
    prompt: str
    state: Literal["in-flight", "completed", "errored", "interrupted"]
    began_at: int
    tool_calls: int
    reminder: bool
    settled_at: Optional[int] = None
    reason: Optional[str] = None
    #: The agent that answered the turn and its stop reason, as recorded.
    agent: Optional[str] = None
    stop_reason: Optional[str] = None


@attrs.define
class TurnListResult:
    session_id: str
    turns: list[TurnSummary]
    #: As in ``SessionListEntry``.
    recovery_pending: Optional[str] = None


@attrs.define
class TurnShowParams:
    """One turn of a session (open here, or else its committed state)."""

    turn: int
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnItem:
    """One record of a turn (fields as for ``TurnAppendParams``; an
    ``agent_task`` names the retained agent in ``name``, its agent in
    ``sender``, its task in ``text``, its conversation, as
    ``history://root/PATH`` renders it, in ``output``, how it ended in
    ``outcome``, why it was interrupted or failed in ``reason``, and the
    caller's ``Agent`` tool call that started it in ``parent_call_id``)."""

    kind: TurnItemKind
    text: Optional[str] = None
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None
    is_error: bool = False
    mail_id: Optional[str] = None
    sender: Optional[str] = None
    #: A tool call's kind (read, edit, execute...), as recorded.
    tool_kind: Optional[str] = None
    #: An agent task's outcome and its reason, as the task records them
    #: (none in a task recorded before tasks kept one).
    outcome: Optional[Outcome] = None
    reason: Optional[str] = None
    #: An agent task's caller's ``Agent`` tool call (the ``call_id`` of its
    #: ``tool_call`` item): where it nests, even among parallel calls
    #: (none: not known, or a task recorded before tasks kept it).
    parent_call_id: Optional[str] = None


@attrs.define
class TurnShowResult:
    """The turn, its full prompt, its records and its part of the history
    projection (Markdown)."""

    session_id: str
    summary: TurnSummary
    prompt: str
    items: list[TurnItem]
    markdown: str


@attrs.define
class TurnDiffParams:
    """What turns ``first..last`` changed in the tree (default: the latest
    turn; ``first`` alone runs to the latest); ``contents`` asks for the
    whole text of both sides of every text file, for a diff view."""

    first: Optional[int] = None
    last: Optional[int] = None
    contents: bool = False
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class DiffSide:
    """One side of a path's change: ``kind`` is ``absent``, ``file``,
    ``directory``, ``symlink`` or ``unknown`` (``why`` says why)."""

    kind: str
    mode: Optional[int] = None
    size: Optional[int] = None
    sha256: Optional[str] = None
    target: Optional[str] = None
    why: Optional[str] = None
    #: The whole text (asked with ``contents``; text files within the limit).
    text: Optional[str] = None


@attrs.define
class PathChange:
    """One path a range of turns changed."""

    path: str
    change: str
    description: str
    before: DiffSide
    after: DiffSide
    first_turn: int
    last_turn: int
    insertions: int = 0
    deletions: int = 0
    binary: bool = False
    renamed_from: Optional[str] = None
    no_text: Optional[str] = None
    diff: str = ""


@attrs.define
class TurnDiffResult:
    session_id: str
    first: int
    last: int
    files: list[PathChange]
    insertions: int
    deletions: int
    #: ``git diff --stat`` lines for a person.
    stat: list[str]


@attrs.define
class RestoreFileParams:
    """Put ``path`` back as it was before turn ``before_turn`` (content,
    mode, kind); without ``commit``, only say what that does."""

    path: str
    before_turn: int
    commit: bool = False
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class RestoreFileResult:
    session_id: str
    path: str
    before_turn: int
    #: The current state -> the wanted one (None: already as wanted).
    change: Optional[PathChange]
    #: The turn that recorded the restore (None: not done).
    turn: Optional[int] = None
    #: A file the turns moved to ``path`` goes back: its old path, from
    #: nothing to what it held (restored in the same turn).
    moved_back: Optional[PathChange] = None


@attrs.define
class SessionDidChangeParams:
    """The committed or access state of an open session changed: ``reason``
    is ``settled``, ``checkpoint``, ``saved``, ``renamed``, ``resumed``,
    ``retried``, ``read-only``, ``closed``, ``rewound``, ``redone``,
    ``created`` (a Fork or Save As child opened here), ``recovered``,
    ``acquired`` (control taken here), ``released`` (control released or
    handed over: read-only, following), ``compacted`` or ``cleared``;
    ``display_name`` is the name after the change (the ID while unnamed)."""

    workspace_folder: str
    session_id: str
    display_name: str
    reason: str
    settled_turns: int
    access: Access
