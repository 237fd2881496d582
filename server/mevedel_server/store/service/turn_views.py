"""What ``turns`` and ``turn N`` show: a summary per turn from the prompt
index and the transcript, and one turn's records with their projection.

Everything is derived from the conversation's records; nothing here is
stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..content.diff import TreeDiff, tree_diff
from ..content.projection import Projection, agent_lines
from ..content.sidecar import PromptEntry
from ..content.transcript import (
    AgentTask,
    Mail,
    Outcome,
    Permission,
    Plan,
    Prompt,
    Reasoning,
    Record,
    Response,
    Settle,
    ToolCall,
    ToolResult,
    TurnBegin,
)
from ..content.turns import Conversation
from .errors import InvalidSessionInput, NoSuchTurn

IN_FLIGHT = "in-flight"


@dataclass(frozen=True)
class TurnSummary:
    turn: int
    turn_id: str
    segment: int
    preview: str
    began_at: int
    #: ``in-flight``, ``completed``, ``errored`` or ``interrupted``.
    state: str
    settled_at: int | None
    reason: str | None
    tool_calls: int
    #: The reconciliation reminder went out with this turn.
    reminder: bool
    #: The agent that answered it and the stop reason it gave, as recorded.
    agent: str | None = None
    stop_reason: str | None = None


@dataclass(frozen=True)
class TurnItem:
    """One record of a turn, as a client shows it."""

    kind: str
    text: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    is_error: bool = False
    mail_id: str | None = None
    sender: str | None = None
    #: A tool call's kind (read, edit, execute...), as recorded.
    tool_kind: str | None = None
    #: An agent task's: the workspace paths it changed.
    paths: tuple[str, ...] = ()
    #: An agent task's: how it ended (``completed``, ``errored``,
    #: ``interrupted``) and why, as its task records it (no reason in a
    #: task recorded before tasks kept one).
    outcome: str | None = None
    reason: str | None = None
    #: An agent task's: the ``call_id`` of the caller's ``Agent`` tool call
    #: that started it (None: not known, or recorded before tasks kept it).
    parent_call_id: str | None = None


@dataclass(frozen=True)
class TurnDetail:
    summary: TurnSummary
    prompt: str
    items: tuple[TurnItem, ...]
    #: The turn's part of the history projection (Markdown).
    markdown: str


def _summaries_of_segment(
    records: Sequence[Record], segment: int, prompts: dict[str, PromptEntry], out: list[TurnSummary]
) -> None:
    begin: TurnBegin | None = None
    calls = 0
    for record in records:
        if isinstance(record, TurnBegin):
            begin, calls = record, 0
        elif isinstance(record, ToolCall):
            calls += 1
        elif isinstance(record, Settle) and begin is not None:
            out.append(_summary(begin, segment, prompts, record, calls))
            begin = None
    if begin is not None:
        out.append(_summary(begin, segment, prompts, None, calls))


def _summary(begin: TurnBegin, segment: int, prompts: dict[str, PromptEntry], settle: Settle | None, calls: int) -> TurnSummary:
    entry = prompts.get(begin.turn_id)
    return TurnSummary(
        turn=begin.turn,
        turn_id=begin.turn_id,
        segment=segment,
        preview=entry.preview if entry else "",
        began_at=begin.at,
        state=settle.outcome.value if settle else IN_FLIGHT,
        settled_at=settle.at if settle else None,
        reason=settle.reason if settle else None,
        tool_calls=calls,
        reminder=begin.reminder,
        agent=begin.agent,
        stop_reason=settle.stop_reason if settle else None,
    )


def turn_summaries(conversation: Conversation) -> list[TurnSummary]:
    """Every turn of the conversation, oldest first."""
    prompts = {entry.turn_id: entry for entry in conversation.prompt_index()}
    out: list[TurnSummary] = []
    for segment in range(1, conversation.current_segment + 1):
        _summaries_of_segment(conversation.records(segment), segment, prompts, out)
    return out


def turn_detail(conversation: Conversation, turn: int) -> TurnDetail:
    index = conversation.prompt_index()
    if not 1 <= turn <= len(index):
        raise NoSuchTurn(conversation.session_id, turn, len(index))
    entry = index[turn - 1]
    records = conversation.records(entry.segment)
    start = next(i for i, r in enumerate(records) if isinstance(r, TurnBegin) and r.turn_id == entry.turn_id)
    end = start + 1
    while end < len(records) and not isinstance(records[end], TurnBegin):
        end += 1
        if isinstance(records[end - 1], Settle):
            break
    own = records[start:end]
    summaries: list[TurnSummary] = []
    _summaries_of_segment(own, entry.segment, {entry.turn_id: entry}, summaries)
    prompt = next((r.text for r in own if isinstance(r, Prompt)), "")
    items = tuple(item for item in (_item(r, conversation) for r in own) if item is not None)
    return TurnDetail(summaries[0], prompt, items, Projection().extend(own).text)


def _item(record: Record, conversation: Conversation) -> TurnItem | None:
    if isinstance(record, Response):
        return TurnItem("response", text=record.text)
    if isinstance(record, Reasoning):
        return TurnItem("reasoning", text=record.text)
    if isinstance(record, ToolCall):
        return TurnItem("tool_call", call_id=record.call_id, name=record.name, arguments=record.arguments, tool_kind=record.tool_kind)
    if isinstance(record, ToolResult):
        return TurnItem("tool_result", call_id=record.call_id, output=record.output, is_error=record.is_error)
    if isinstance(record, Mail):
        return TurnItem("mail", mail_id=record.mail_id, sender=record.sender, text=record.text)
    if isinstance(record, Plan):
        return TurnItem("plan", text=record.text)
    if isinstance(record, Permission):
        return TurnItem("permission", call_id=record.call_id, text=record.question, output=record.decision, is_error=not record.allowed)
    if isinstance(record, AgentTask):
        # A retained agent's task: its path and agent, what it was asked,
        # and its own conversation as history://root/PATH renders it.
        # (The turn names its place in the agent's own transcript; a session
        # written before those holds the whole task here.)
        whole = record
        if record.task is not None:
            own = conversation.agent_tasks(record.path)
            whole = own[record.task - 1] if record.task <= len(own) else record
        # How it ended and why are the item's own fields, said once.
        shown = "\n".join(agent_lines([(0, whole)], ending=False)[1:]).strip("\n")
        return TurnItem("agent_task", name=record.path, sender=record.agent, text=record.prompt, output=shown,
                        is_error=record.outcome is not Outcome.COMPLETED, paths=tuple(record.paths),
                        outcome=record.outcome.value, reason=record.reason, parent_call_id=record.call_id)
    return None


def turn_diff(conversation: Conversation, first: int | None, last: int | None, *, contents: bool = False) -> TreeDiff:
    """What turns ``first..last`` did to the tree (default: the latest turn;
    ``first`` alone runs to the latest), from the turns' checkpoints."""
    count = len(conversation.prompt_index())
    if count == 0:
        raise NoSuchTurn(conversation.session_id, first or 1, 0)
    last = count if last is None else last
    first = last if first is None else first
    for turn in (first, last):
        if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= count:
            raise NoSuchTurn(conversation.session_id, turn, count)
    if first > last:
        raise InvalidSessionInput(f"the range {first}..{last}", "starts after it ends")
    return tree_diff(conversation.file_snapshots(), first, last, conversation.file_content, contents=contents)
