"""The Read projection of a transcript segment (``history://root``,
``history://saved/SESSION/SEGMENT``): concise Markdown for people and models.

Each turn gets a heading; its prompt, responses, tool calls, tool results and
mail are separate evidence items; reasoning and persistence scaffolding are
left out; a turn that did not complete says how it ended. Every record renders
on its own, after the lines of the records before it, so appending records
never moves an earlier line: a line number read once stays valid while the
conversation grows (:class:`Projection` extends a rendering in place). The
same records always give the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..authority.lease import describe_target_time
from .transcript import (
    AgentStep,
    AgentTask,
    Mail,
    Outcome,
    Permission,
    Plan,
    Prompt,
    Reasoning,
    Record,
    Response,
    SegmentClose,
    SegmentClosing,
    SegmentHeader,
    SegmentOpening,
    Settle,
    Summary,
    ToolCall,
    ToolResult,
    TurnBegin,
)

_HEADING_LIKE = re.compile(r"^( {0,3})(#)")
_BACKTICKS = re.compile(r"`{3,}")


def _when(at: int) -> str:
    try:
        return describe_target_time(at)
    except (ValueError, OverflowError, OSError):
        # Beyond the calendar datetime can show; still a valid record.
        return f"target second {at}"


def _inline(text: str) -> str:
    """A name inside a label line: one line, whatever the record held."""
    return " ".join(text.split())


def _quote(text: str) -> list[str]:
    return [f"> {line}" if line else ">" for line in (text.split("\n") if text else [""])]


def _markdown(text: str) -> list[str]:
    """Model Markdown, with heading-like lines escaped so they cannot pose
    as turn headings."""
    if not text:
        return ["(empty)"]
    return [_HEADING_LIKE.sub(r"\1\\\2", line) for line in text.split("\n")]


def _fenced(text: str) -> list[str]:
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=2)
    fence = "`" * max(3, longest + 1)
    body = text.split("\n") if text else []
    if body and body[-1] == "":
        body.pop()
    return [fence, *body, fence]


class Projection:
    """A rendering that grows with its segment."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._turn: int | None = None

    def extend(self, records: Iterable[Record]) -> Projection:
        for record in records:
            block = self._render(record)
            if block:
                if self.lines:
                    self.lines.append("")
                self.lines.extend(block)
        return self

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""

    def _render(self, record: Record) -> list[str]:
        if isinstance(record, SegmentHeader):
            suffix = {
                SegmentOpening.START: "",
                SegmentOpening.COMPACTION: f" (continues segment {record.segment - 1} after compaction)",
                SegmentOpening.CLEAR: " (a new chat after /clear)",
            }[record.opened_by]
            return [f"# Segment {record.segment}{suffix}"]
        if isinstance(record, Summary):
            return [f"## Summary of segment {record.summarized_segment}", "", *_quote(record.text)]
        if isinstance(record, TurnBegin):
            self._turn = record.turn
            return [f"## Turn {record.turn} · {_when(record.at)}"]
        if isinstance(record, Prompt):
            return ["**Prompt**", "", *_quote(record.text)]
        if isinstance(record, Response):
            return ["**Response**", "", *_markdown(record.text)]
        if isinstance(record, Reasoning):
            return []
        if isinstance(record, ToolCall):
            return [f"**Tool call** `{_inline(record.name)}` ({_inline(record.call_id)})", "", *_fenced(record.arguments)]
        if isinstance(record, ToolResult):
            label = "Tool error" if record.is_error else "Tool result"
            return [f"**{label}** ({_inline(record.call_id)})", "", *_fenced(record.output)]
        if isinstance(record, Mail):
            return [f"**Mail** from {_inline(record.sender)} ({_inline(record.mail_id)})", "", *_quote(record.text)]
        if isinstance(record, Plan):
            return ["**Plan**", "", *_markdown(record.text)]
        if isinstance(record, Permission):
            verdict = "allowed" if record.allowed else "refused"
            return [f"**Permission** ({_inline(record.call_id)}) {verdict}: {_inline(record.decision)}", "", *_quote(record.question)]
        if isinstance(record, AgentTask):
            how = "" if record.outcome is Outcome.COMPLETED else f" {record.outcome.value}"
            because = f": {' '.join(record.reason.split())}" if record.reason and how else ""
            return [f"**Agent** `{_inline(record.path)}` ({_inline(record.agent)}){how}{because} · history://root/{record.path}"]
        if isinstance(record, Settle):
            turn, self._turn = self._turn, None
            if record.outcome is Outcome.COMPLETED:
                return []
            because = f": {' '.join(record.reason.split())}" if record.reason else ""
            return [f"*Turn {turn} {record.outcome.value}{because}*"]
        if isinstance(record, SegmentClose):
            what = "compaction" if record.reason is SegmentClosing.COMPACTION else "/clear"
            return [f"*Segment closed by {what} · {_when(record.at)}*"]
        raise TypeError(f"no projection for {type(record).__name__}")


def _as_record(step: AgentStep, turn_id: str) -> Record | None:
    """A retained agent's step as the root record of the same kind (so
    both render alike)."""
    if step.kind == "response":
        return Response(turn_id=turn_id, text=step.text or "")
    if step.kind == "tool_call":
        return ToolCall(turn_id=turn_id, call_id=step.call_id or "tool", name=step.name or "tool", arguments=step.arguments or "")
    if step.kind == "tool_result":
        return ToolResult(turn_id=turn_id, call_id=step.call_id or "tool", output=step.output or "", is_error=step.is_error)
    if step.kind == "plan":
        return Plan(turn_id=turn_id, text=step.text or "")
    if step.kind == "permission":
        return Permission(turn_id=turn_id, call_id=step.call_id or "tool", question=step.text or "", decision=step.output or "",
                          allowed=not step.is_error)
    return None  # reasoning is left out, as the root's is


def retained_tasks(records: Iterable[Record], path: str, own: Iterable[AgentTask] = (), since: int = 1) -> list[tuple[int, AgentTask]]:
    """Retained agent ``path``'s tasks as ``(session turn, task)``, oldest
    first: those a session written before agent transcripts holds whole in
    ``records`` (its current segment), then ``own``, its own transcript's;
    only those of turn ``since`` (the turn that made the agent) on -- a
    Fork keeps the conversation of an agent whose identity it dropped, and
    an agent made later under the same name is another."""
    found: list[tuple[int, AgentTask]] = []
    turn = 0
    for record in records:
        if isinstance(record, TurnBegin):
            turn = record.turn
        elif isinstance(record, AgentTask) and record.path == path and record.task is None and record.turn is None:
            found.append((turn, record))
    found += [(task.turn or 0, task) for task in own]
    return [(turn, task) for turn, task in found if turn >= since]


def agent_lines(tasks: Iterable[tuple[int, AgentTask]], first: int = 1, *, ending: bool = True) -> list[str]:
    """The projection of a retained agent's conversation, its ``tasks``
    (``history://root/PATH``; numbered from ``first``), each under a
    heading naming the session turn it ran in, rendered as the root's
    records are; ``ending``: a task that did not complete ends with a line
    saying how and why (a turn's item carries those as fields instead)."""
    projection = Projection()
    lines = projection.lines
    for task, (turn, record) in enumerate(tasks, start=first):
        block = [f"## Task {task} · {record.path} ({_inline(record.agent)}) in turn {turn}", "", "**Prompt**", "", *_quote(record.prompt)]
        lines.extend(([""] if lines else []) + block)
        projection.extend(r for r in (_as_record(step, record.turn_id) for step in record.steps) if r is not None)
        if ending and record.outcome is not Outcome.COMPLETED:
            because = f": {' '.join(record.reason.split())}" if record.reason else ""
            lines.extend(["", f"*Task {task} {record.outcome.value}{because}*"])
    return lines


def project(records: Sequence[Record]) -> str:
    """The Markdown projection of one segment's records."""
    return Projection().extend(records).text
