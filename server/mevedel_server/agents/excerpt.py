"""What a new native conversation is told of the session so far, and what
an uncertain one is told before it continues.

The agent keeps its own history; mevedel keeps the canonical transcript.
When the agent's history cannot be continued (another agent or machine, a
history detached by Rewind, Redo, Fork, Save As or a control transfer, an
agent that cannot load sessions), the next prompt starts a new native
conversation seeded with a labelled excerpt of the transcript's current
segment: the newest turns first to be kept, within a character budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..store import Prompt, Response, Settle, Summary, ToolCall, ToolResult, TurnBegin

#: Characters of transcript an excerpt carries at most.
EXCERPT_BUDGET = 12_000

#: What an agent is asked to do after a turn that did not finish cleanly.
RECONCILIATION_GUIDANCE = (
    "Its effects on the workspace may be partial. Before continuing, check the current state of the files you "
    "were working on. Do not replay earlier tool calls or repeat actions just because they appear in the history; "
    "prefer the newest user request."
)
RECONCILIATION = (
    "[mevedel] The previous turn did not finish cleanly (it was interrupted, failed, or its outcome is unknown). "
    + RECONCILIATION_GUIDANCE
)


#: How the result the recorder writes for a call still open when its turn
#: ended begins (the reconciliation notice names such calls: their end was
#: never seen).
UNFINISHED = "not finished: "
#: Paths and commands a reconciliation notice names at most (the rest counted).
NOTICE_NAMES = 20


def reconciliation_notice(records: Sequence[object], changed: Sequence[str] = ()) -> str:
    """The reconciliation notice: :data:`RECONCILIATION` led by what is
    known of the turn before (``records``: the conversation before the turn
    being prompted; ``changed``: the paths that turn's checkpoint recorded)
    -- its number and how it ended, the commands and tool calls it started
    that have no recorded end (a command may still run, or have run in
    part), and the files it changed or was about to change. Nothing here
    claims more than the records show: a turn with no settlement ended in
    an unknown way."""
    begin: TurnBegin | None = None
    for record in records:
        if isinstance(record, TurnBegin):
            begin = record
    if begin is None:
        return RECONCILIATION
    settle: Settle | None = None
    calls: dict[str, ToolCall] = {}
    for record in records:
        if getattr(record, "turn_id", None) != begin.turn_id:
            continue
        if isinstance(record, ToolCall):
            calls[record.call_id] = record
        elif isinstance(record, ToolResult) and not (record.is_error and record.output.startswith(UNFINISHED)):
            calls.pop(record.call_id, None)  # an end was seen (not the one the turn's end wrote for it)
        elif isinstance(record, Settle):
            settle = record
    if settle is not None and settle.outcome.value == "completed":
        lines = [f"[mevedel] This session was resumed after the process that held it stopped without closing it "
                 f"(its last turn, {begin.turn}, had completed); commands started then may still run."]
    else:
        how = ("its outcome is unknown: it never settled (the process running it stopped)" if settle is None
               else ("it failed" if settle.outcome.value == "errored" else f"it was {settle.outcome.value}")
               + (f" ({settle.reason})" if settle.reason else ""))
        lines = [f"[mevedel] Turn {begin.turn} did not finish cleanly: {how}."]
    commands = [call for call in calls.values() if call.tool_kind == "execute"]
    others = [call for call in calls.values() if call.tool_kind != "execute"]
    if commands:
        lines.append("Commands it started with no recorded end (they may still run, or may have run in part): "
                     + _named([_call_label(call) for call in commands]) + ".")
    if others:
        lines.append("Tool calls it started with no recorded result: " + _named([_call_label(call) for call in others]) + ".")
    if changed:
        lines.append("Files it changed or was about to change: " + _named(list(changed)) + ".")
    return " ".join(lines) + " " + RECONCILIATION_GUIDANCE


def _call_label(call: ToolCall) -> str:
    text = call.name if len(call.name) <= 200 else call.name[:200] + "..."
    return repr(text)


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NOTICE_NAMES])
    return shown if len(items) <= NOTICE_NAMES else f"{shown} and {len(items) - NOTICE_NAMES} more"


def forked_files_note(source_id: str, turn: int) -> str:
    """What a conversation fork's first prompt says of the files: a
    Conversation fork copies the transcript up to ``turn`` and leaves the
    files as the source session left them, later turns included."""
    return (
        f"This session was forked from session {source_id} after its turn {turn}. The fork did not change any file: "
        "the workspace is as that session left it, including the work of its later turns, which this excerpt does not "
        "show; so the files may not match what the excerpt says. Read a file before relying on its content."
    )


def newest_within(parts: Sequence[str], budget: int) -> list[str]:
    """The newest ``parts`` whose characters fit ``budget``, oldest first
    (the newest one's tail when even it alone does not fit)."""
    kept: list[str] = []
    used = 0
    for part in reversed(parts):
        if used + len(part) > budget:
            if not kept:
                kept.append(part[-budget:])
            break
        kept.append(part)
        used += len(part)
    kept.reverse()
    return kept


def transcript_excerpt(records: Sequence[object], budget: int = EXCERPT_BUDGET, files: str | None = None) -> str | None:
    """A labelled excerpt of the segment's settled conversation, or None
    when there is nothing to tell. ``files`` says what state the workspace
    files are in, when it is not simply the result of these turns (a
    Conversation fork)."""
    turns: list[str] = []
    current: list[str] = []
    summary: str | None = None
    for record in records:
        if isinstance(record, Summary):
            summary = record.text
        elif isinstance(record, TurnBegin):
            current = [f"## Turn {record.turn}"]
        elif isinstance(record, Prompt):
            current.append(f"User: {record.text}")
        elif isinstance(record, Response):
            current.append(f"Assistant: {record.text}")
        elif isinstance(record, ToolCall):
            current.append(f"(tool call: {record.name})")
        elif isinstance(record, Settle):
            if record.outcome.value != "completed":
                current.append(f"(this turn was {record.outcome.value}{': ' + record.reason if record.reason else ''})")
            turns.append("\n".join(current))
            current = []
    if not turns and summary is None:
        return None
    kept = newest_within(turns, budget)
    omitted = len(turns) - len(kept)
    parts = [
        "[mevedel] This conversation continues an earlier one whose history you do not have. "
        "Below is an excerpt of its transcript, for context only: do not repeat its actions; "
        + (files if files is not None else "the workspace already reflects them.")
    ]
    if summary is not None:
        parts.append(f"Summary of the conversation before this segment:\n{summary}")
    if omitted:
        parts.append(f"({omitted} earlier turn(s) omitted)")
    parts.extend(kept)
    parts.append("[mevedel] End of the excerpt. The user's new message follows.")
    return "\n\n".join(parts)
