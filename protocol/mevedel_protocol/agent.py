"""Prompting an agent: ``mevedel/turn/prompt``, ``mevedel/turn/cancel``,
``mevedel/agent/list`` and the live ``mevedel/turn/didUpdate``.

The server drives any agent that speaks the Agent Client Protocol (ACP);
a prompt is one turn, recorded as it happens. ``docs/protocol.md`` documents
every field.
"""

from typing import Literal, Optional

import attrs

from .session import Outcome

#: Refusals of a prompt before anything was recorded, and failures of the
#: agent during a turn (the ``error`` of a failed turn carries one).
AGENT_ERROR_KINDS = frozenset(
    {
        "agent-not-configured",
        "agent-not-installed",
        "agent-needs-login",
        "agent-failed",
        "attachment-refused",
        "agent-option-refused",
        "prompt-aborted",
    }
)

TurnPhase = Literal["starting", "running", "cancelling", "settled"]
EventKind = Literal["response", "reasoning", "tool_call", "plan", "permission"]


@attrs.define
class TurnPromptParams:
    """Send ``text`` to an agent as the next turn of a session.

    ``agent`` names an entry of the ``agents`` setting (default: the
    session's agent, else ``defaultAgent``, else the only one configured).
    ``attachments`` are addresses or workspace paths whose content goes with
    the prompt. Without ``sessionId`` the folder's current session is used,
    and one is created when there is none."""

    text: str
    agent: Optional[str] = None
    attachments: list[str] = attrs.Factory(list)
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnError:
    """Why a turn failed, and what to do about it."""

    kind: str
    message: str
    action: Optional[str] = None


@attrs.define
class TurnPromptResult:
    """The settled turn. ``stopReason`` is the agent's (``end_turn``,
    ``max_tokens``, ``max_turn_requests``, ``refusal``, ``cancelled``), null
    when the turn ended without one (the agent failed); ``error`` says why
    then."""

    session_id: str
    turn: int
    turn_id: str
    agent: str
    outcome: Outcome
    stop_reason: Optional[str] = None
    error: Optional[TurnError] = None


@attrs.define
class TurnCancelParams:
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class TurnCancelResult:
    """``cancelled`` is false when no agent turn was running."""

    cancelled: bool


@attrs.define
class AgentListParams:
    workspace_folder: Optional[str] = None


@attrs.define
class AgentEntry:
    """A configured agent; ``found`` is false when its program is not on
    the ``PATH`` (a prompt would fail with ``agent-not-installed``)."""

    name: str
    command: list[str]
    found: bool
    default: bool


@attrs.define
class AgentListResult:
    agents: list[AgentEntry]
    default_agent: Optional[str] = None


@attrs.define
class ToolDiff:
    path: str
    new_text: str
    old_text: Optional[str] = None


@attrs.define
class TurnEvent:
    """One change of the turn in flight.

    - ``response`` / ``reasoning``: ``text`` is the next piece of the text.
    - ``tool_call``: a call started or changed; ``callId``, and whatever the
      agent reported: ``title``, ``toolKind``, ``status`` (``pending``,
      ``in_progress``, ``completed``, ``failed``), ``output`` (its text so
      far) and ``diffs``.
    - ``plan``: ``text`` is the whole current plan (a Markdown checklist).
    - ``permission``: ``callId``, ``text`` (the question), ``decision``
      (the option chosen, or why it was refused) and ``allowed``.
    """

    kind: EventKind
    text: Optional[str] = None
    call_id: Optional[str] = None
    title: Optional[str] = None
    tool_kind: Optional[str] = None
    status: Optional[str] = None
    output: Optional[str] = None
    diffs: Optional[list[ToolDiff]] = None
    decision: Optional[str] = None
    allowed: Optional[bool] = None


@attrs.define
class TurnDidUpdateParams:
    """The owner's live view of the turn in flight, coalesced: ``events``
    are what happened since the previous notification of this turn, in
    order. ``starting`` (the agent is being started; no turn yet) comes
    first, then ``running``, ``cancelling`` after a cancel, and ``settled``
    once, last, with ``outcome`` and ``stopReason`` (or only ``error`` when
    the prompt was refused before a turn began).

    A retained sub-agent's activity (the ``Agent`` tool) is sent with
    ``agentPath`` (its path, ``helper`` or ``helper/reviewer``) and, when
    the server can tell, ``parentCallId``: the ``callId`` of its caller's
    tool event that started it (the root turn's, or the calling
    sub-agent's). ``turn``/``turnId`` are the root turn's; its phases are
    its own task's, never the root turn's.

    ``reason``, with ``settled``: why the turn was interrupted or errored,
    as its settlement records it (``mevedel/turn/list``'s ``reason``):
    ``aborted`` (or the abort's own words), ``cancelled by the user``,
    ``the agent cancelled the turn``, why the agent was ended or failed,
    what of the turn's changes could not be recovered. A prompt aborted
    while its agent started (no turn) settles ``interrupted`` with the
    abort's reason and ``error`` of kind ``prompt-aborted``."""

    workspace_folder: str
    session_id: str
    agent: str
    phase: TurnPhase
    turn: Optional[int] = None
    turn_id: Optional[str] = None
    events: list[TurnEvent] = attrs.Factory(list)
    outcome: Optional[Outcome] = None
    stop_reason: Optional[str] = None
    error: Optional[TurnError] = None
    agent_path: Optional[str] = None
    parent_call_id: Optional[str] = None
    reason: Optional[str] = None
