"""An agent's ``session/update`` stream, as the turn's records.

Message chunks become one ``response`` record per uninterrupted run of
text, thought chunks one ``reasoning`` record likewise; a ``tool_call``
becomes a tool call record (a native call id is admitted once per turn;
later starts with the same id are updates), and its first ``completed`` or
``failed`` status the tool result record; a plan update a ``plan`` record.
Permission decisions are recorded by whoever asked. Every update is also a
:class:`~.live.LiveEvent` for the owner's editor.

The recorder is synchronous: the SDK delivers each notification in its own
task, in arrival order, and a handler that never suspends keeps that order.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from acp import schema

from ..store import EvidenceInput
from .excerpt import UNFINISHED
from .live import Diff, LiveEvent, LiveFeed

_NAME_LIMIT = 256
#: Tool output kept in a record; the rest is cut with a note (the agent
#: reports the full output itself, a transcript need not hold megabytes).
OUTPUT_LIMIT = 64 * 1024


@dataclass
class _Call:
    record_id: str
    title: str
    kind: str | None
    status: str | None = None
    output: str = ""
    diffs: tuple[Diff, ...] = ()
    settled: bool = False
    #: The arguments the agent reported (ACP ``rawInput``), as given.
    raw_input: Any = None
    #: Whether a sub-agent's task was matched to this call already.
    delegated: bool = False


def displayable(text: str) -> str:
    """``text`` with every lone surrogate (JSON allows ``"\\udcff"``, UTF-8
    cannot hold it) replaced by U+FFFD: what an agent says is shown and
    recorded, never a reason to refuse the record."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _displayable(item: EvidenceInput) -> EvidenceInput:
    changed = {name: value for name, value in msgspec.structs.asdict(item).items() if isinstance(value, str)}
    changed = {name: displayable(value) for name, value in changed.items() if displayable(value) is not value}
    return msgspec.structs.replace(item, **changed) if changed else item


def _record_id(native: str) -> str:
    if 1 <= len(native) <= _NAME_LIMIT:
        return native
    return "sha256-" + hashlib.sha256(native.encode("utf-8", "surrogatepass")).hexdigest()


def _bounded(text: str, limit: int = _NAME_LIMIT) -> str:
    text = " ".join(text.split()) or "tool"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def block_text(block: Any) -> str:
    """A content block as text (what a transcript can hold of it)."""
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceContentBlock):
        return f"[{block.name}]({block.uri})"
    if isinstance(block, schema.EmbeddedResourceContentBlock):
        resource = block.resource
        text = getattr(resource, "text", None)
        return text if text is not None else f"[binary resource {resource.uri}]"
    if isinstance(block, schema.ImageContentBlock):
        return f"[image {block.mime_type}]"
    return f"[{getattr(block, 'type', 'content')}]"


def _contents(content: list | None) -> tuple[str, tuple[Diff, ...]]:
    texts: list[str] = []
    diffs: list[Diff] = []
    for item in content or ():
        if isinstance(item, schema.FileEditToolCallContent):
            diffs.append(Diff(item.path, item.new_text, item.old_text))
        elif isinstance(item, schema.ContentToolCallContent):
            texts.append(block_text(item.content))
        elif isinstance(item, schema.TerminalToolCallContent):
            texts.append(f"[terminal {item.terminal_id}]")
    return "\n".join(texts), tuple(diffs)


def plan_markdown(entries: list) -> str:
    marks = {"completed": "x", "in_progress": "~", "pending": " "}
    return "\n".join(f"- [{marks.get(e.status, ' ')}] {' '.join(e.content.split())}" for e in entries) or "(empty plan)"


def _result_text(call: _Call, raw_output: Any) -> str:
    parts = [call.output] if call.output else []
    for diff in call.diffs:
        parts.append(f"edited {diff.path}")
    if not parts and raw_output is not None:
        try:
            parts.append(json.dumps(raw_output, ensure_ascii=False))
        except (TypeError, ValueError):
            parts.append(str(raw_output))
    text = "\n".join(parts) or (call.status or "done")
    if len(text) > OUTPUT_LIMIT:
        text = text[:OUTPUT_LIMIT] + f"\n[... {len(text) - OUTPUT_LIMIT} more characters not recorded]"
    return text


def _asks_for(raw_input: Any, name: str, prompt: str) -> bool:
    if not isinstance(raw_input, dict):
        return False
    for arguments in (raw_input, raw_input.get("arguments"), raw_input.get("input")):
        if isinstance(arguments, dict) and arguments.get("name") == name and arguments.get("prompt") == prompt:
            return True
    return False


def _names_agent_tool(title: str) -> bool:
    """Whether a tool call's title names the ``Agent`` tool (``Agent``,
    ``mcp__mevedel__Agent``, ``mevedel.Agent``, ``mcp Agent``...)."""
    words = "".join(c if c.isalnum() else " " for c in title).split()
    return "Agent" in words


class TurnRecorder:
    def __init__(self, append: Callable[[EvidenceInput], None], feed: LiveFeed) -> None:
        self._append = lambda item: append(_displayable(item))
        self.feed = feed
        self._text_kind: str | None = None
        self._text = io.StringIO()
        self._calls: dict[str, _Call] = {}
        #: Updates that arrived, for a caller that checks the agent is alive.
        self.updates = 0

    # The stream ---------------------------------------------------------------

    def on_update(self, update: Any) -> None:
        self.updates += 1
        if isinstance(update, (schema.AgentMessageChunk, schema.AgentThoughtChunk)):
            kind = "response" if isinstance(update, schema.AgentMessageChunk) else "reasoning"
            text = displayable(block_text(update.content))
            if self._text_kind != kind:
                self.flush_text()
                self._text_kind = kind
            self._text.write(text)
            self.feed.push(LiveEvent(kind, text=text))
        elif isinstance(update, (schema.ToolCallStart, schema.ToolCallProgress)):
            self._tool(update)
        elif isinstance(update, schema.AgentPlanUpdate):
            self.flush_text()
            text = plan_markdown(update.entries)
            self._append(EvidenceInput("plan", text=text))
            self.feed.push(LiveEvent("plan", text=text))
        # Mode, command, usage and session-info updates change no record.

    def _tool(self, update: Any) -> None:
        self.flush_text()
        native = update.tool_call_id
        call = self._calls.get(native)
        output, diffs = _contents(update.content)
        if call is None:
            call = _Call(_record_id(native), _bounded(update.title or update.kind or "tool"), update.kind)
            self._calls[native] = call
            arguments = ""
            if update.raw_input is not None:
                try:
                    arguments = json.dumps(update.raw_input, ensure_ascii=False, sort_keys=True)
                except (TypeError, ValueError):
                    arguments = str(update.raw_input)
            self._append(EvidenceInput("tool_call", call_id=call.record_id, name=call.title, arguments=arguments, tool_kind=update.kind))
        if update.raw_input is not None:
            call.raw_input = update.raw_input
        if update.title:
            call.title = _bounded(update.title)
        if update.kind:
            call.kind = update.kind
        if update.status:
            call.status = update.status
        if update.content is not None:
            call.output, call.diffs = output, diffs
        if call.status in ("completed", "failed") and not call.settled:
            call.settled = True
            self._append(
                EvidenceInput("tool_result", call_id=call.record_id, output=_result_text(call, update.raw_output), is_error=call.status == "failed")
            )
        self.feed.push(
            LiveEvent(
                "tool_call",
                call_id=native,
                # An update names only what changed: the call keeps its title.
                title=call.title,
                tool_kind=call.kind,
                status=update.status,
                output=output if update.content is not None else None,
                diffs=diffs if update.content is not None else None,
            )
        )

    def delegating_call(self, name: str, prompt: str) -> tuple[str, str] | None:
        """This turn's open tool call that asked for the sub-agent task
        ``name``/``prompt`` (the ``Agent`` tool reached through MCP, a
        channel of its own), as its native id (the live events') and its
        record id (its ``tool_call`` record's), claimed so that a second
        task is not matched to it: the newest call whose reported
        arguments carry that name and prompt (at the top, or under
        ``arguments`` or ``input`` as some agents wrap an MCP call's), else
        the oldest unclaimed open call whose title names the ``Agent``
        tool (parallel calls reach the tool in the order they were made);
        None when none fits."""
        candidates = [(native, call) for native, call in self._calls.items() if not call.delegated and not call.settled]
        chosen = next((native for native, call in reversed(candidates) if _asks_for(call.raw_input, name, prompt)), None)
        if chosen is None:
            chosen = next((native for native, call in candidates if _names_agent_tool(call.title)), None)
        if chosen is None:
            return None
        self._calls[chosen].delegated = True
        return chosen, self._calls[chosen].record_id

    def record_permission(self, native_call_id: str, question: str, decision: str, allowed: bool) -> None:
        self.flush_text()
        call = self._calls.get(native_call_id)
        call_id = call.record_id if call is not None else _record_id(native_call_id)
        self._append(EvidenceInput("permission", call_id=call_id, text=question, output=decision, is_error=not allowed))
        self.feed.push(LiveEvent("permission", call_id=native_call_id, text=question, decision=decision, allowed=allowed))

    # The turn's end -------------------------------------------------------------

    def flush_text(self) -> None:
        """Record the text run in progress (before a checkpoint, or another
        kind of record)."""
        if self._text_kind is None:
            return
        text = self._text.getvalue()
        self._text = io.StringIO()
        kind, self._text_kind = self._text_kind, None
        if text:
            self._append(EvidenceInput(kind, text=text))

    def finish(self, why: str) -> None:
        """Record the text in progress, and a failed result for every call
        still open (``why`` says how the turn ended)."""
        self.flush_text()
        for call in self._calls.values():
            if not call.settled:
                call.settled = True
                self._append(EvidenceInput("tool_result", call_id=call.record_id, output=f"{UNFINISHED}{why}", is_error=True))
        self.feed.flush()
