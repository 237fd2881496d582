"""The owner's live view of a turn in flight: events, coalesced and
rate-bounded.

Everything an agent reports becomes a :class:`LiveEvent`; a
:class:`LiveFeed` batches them and hands each batch to its sink, at most
once per :data:`MIN_INTERVAL`. A batch goes out on the next turn of the
event loop when the feed has been quiet, so a lone chunk is not delayed;
under a flood, consecutive text pieces merge and a tool call's updates fold
into one event, so an editor gets at most 1/MIN_INTERVAL notifications a
second however fast the agent talks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .errors import AgentError

#: Seconds between two batches of one turn (at most 1,000 a second): a chunk
#: waits at most this long, which keeps the latency the live view adds
#: under 2 ms (bench/bench_agent_turns.py).
MIN_INTERVAL = 0.001


@dataclass(frozen=True)
class Diff:
    path: str
    new_text: str
    old_text: str | None = None


@dataclass(frozen=True)
class LiveEvent:
    """One change of the turn in flight (``docs/protocol.md``,
    ``TurnEvent``)."""

    kind: str  # response, reasoning, tool_call, plan, permission
    text: str | None = None
    call_id: str | None = None
    title: str | None = None
    tool_kind: str | None = None
    status: str | None = None
    output: str | None = None
    diffs: tuple[Diff, ...] | None = None
    decision: str | None = None
    allowed: bool | None = None


def _merge(last: LiveEvent, new: LiveEvent) -> LiveEvent | None:
    """``new`` folded into ``last`` when the batch may carry them as one."""
    if last.kind != new.kind:
        return None
    if new.kind in ("response", "reasoning"):
        return replace(last, text=(last.text or "") + (new.text or ""))
    if new.kind == "tool_call" and new.call_id == last.call_id:
        return LiveEvent(
            "tool_call",
            call_id=new.call_id,
            title=new.title or last.title,
            tool_kind=new.tool_kind or last.tool_kind,
            status=new.status or last.status,
            output=new.output if new.output is not None else last.output,
            diffs=new.diffs if new.diffs is not None else last.diffs,
        )
    if new.kind == "plan":
        return new
    return None


class LiveFeed:
    def __init__(self, sink: Callable[[list[LiveEvent]], None], *, interval: float = MIN_INTERVAL) -> None:
        self._sink = sink
        self._interval = interval
        self._batch: list[LiveEvent] = []
        self._handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._last = 0.0
        self._closed = False

    def push(self, event: LiveEvent) -> None:
        if self._closed:
            return
        if self._batch and (merged := _merge(self._batch[-1], event)) is not None:
            self._batch[-1] = merged
        else:
            self._batch.append(event)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            wait = self._last + self._interval - time.monotonic()
            self._handle = loop.call_soon(self.flush) if wait <= 0 else loop.call_later(wait, self.flush)

    def flush(self) -> None:
        """Send what is pending now (the turn is about to end, or a batch is due)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        self._last = time.monotonic()
        self._sink(batch)

    def close(self) -> None:
        self.flush()
        self._closed = True


@dataclass(frozen=True)
class TurnUpdate:
    """What the owner's editor is told (``mevedel/turn/didUpdate``)."""

    session_id: str
    agent: str
    phase: str  # starting, running, cancelling, settled
    turn: int | None = None
    turn_id: str | None = None
    events: Sequence[LiveEvent] = ()
    outcome: str | None = None
    stop_reason: str | None = None
    error: AgentError | None = None
    #: A retained sub-agent's activity (its path): nested under the turn's
    #: ``Agent`` tool call, never the turn's own phase.
    agent_path: str | None = None
    #: With ``agent_path``: the native call id of its caller's tool call
    #: that started it (a call of the root agent's turn, or of the calling
    #: sub-agent's), when it is known.
    parent_call_id: str | None = None
    #: With ``settled``: why the turn was interrupted or errored, as its
    #: settlement records it ("aborted", "cancelled by the user"...).
    reason: str | None = None
