"""Queued prompts and steering: what the person sends while a turn runs.

A prompt sent while the session's agent turn runs is *queued* (a
follow-up): shown as queued, editable and cancellable, and sent when the
running turn settles, one per turn, in order. *Steering* cancels the
running turn and sends its text at once (an ACP agent takes no input in the
middle of a turn, so the spec's same-turn steering is a cancel and the next
turn here). Every entry is kept durably beside the session
(:mod:`..store.transactions.pending_inputs`) before the person is told it
was queued, so it survives the server stopping:

- delivery writes one ``dispatching`` mark before the prompt is sent and
  removes the entry once the turn holding it is published;
- a restart reloads a ``dispatching`` entry, and undelivered steering, as
  needing review (it may or may not have reached the agent), and never
  sends anything on its own: queued follow-ups wait for the next turn the
  person starts to settle, or for "send now" (steering by the entry's id);
- automatic delivery waits while any entry needs review; a dispatch the
  engine refuses (the agent cannot start, the session's latch is set, an
  attachment is gone) goes back as needing review, its text kept.

The queue knows nothing of LSP: the engine's front end shows it
(``queue_changed``), and the front ends call these methods.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from ..store import (
    MAX_TEXT_BYTES,
    InputRecord,
    SessionChange,
    StoreError,
    add_foreign_input,
    input_listing,
    load_inputs,
    remove_input,
    write_inputs,
)
from ..targets import TargetError
from .errors import FAILED, AgentError

if TYPE_CHECKING:
    from .engine import AgentEngine

_log = logging.getLogger(__name__)

#: Why a reloaded entry needs review.
INTERRUPTED_DISPATCH = "it was being sent when the server stopped: it may have reached the agent (see the last turn) -- send it again, edit or cancel it"
UNDELIVERED_STEER = "steering that was not delivered before the server stopped -- send it now, edit or cancel it"


@dataclass(frozen=True)
class QueueEntry:
    """One entry as the front ends show it."""

    entry_id: str
    kind: str  # follow-up, steer
    state: str  # queued, sending, review
    text: str
    agent: str | None
    attachments: tuple[str, ...]
    queued_at: int
    host: str
    reason: str | None = None


@dataclass(frozen=True)
class QueueState:
    session_id: str
    entries: tuple[QueueEntry, ...]
    #: Automatic delivery waits: an entry needs review.
    paused: bool
    #: Entry files that cannot be used (named; left in place).
    problems: tuple[str, ...] = ()


class _Session:
    def __init__(self) -> None:
        self.records: list[InputRecord] = []
        #: Entries not written yet (the session has no lease before its first save).
        self.unsaved: set[str] = set()
        self.problems: list[str] = []
        self.loaded = False
        #: The entry being sent now, if any.
        self.sending: str | None = None
        self.lock = asyncio.Lock()
        #: The lease whose head commits list the queue, and its rider (see
        #: ``_settled_listing``).
        self.listing: tuple[Any, Any] | None = None


def _refused(authored: str, reason: str, action: str | None = None) -> AgentError:
    return AgentError(FAILED, authored, reason, action)


class PromptQueue:
    """The pending input of one engine's sessions."""

    def __init__(self, engine: AgentEngine) -> None:
        self.engine = engine
        self.service = engine.service
        self._sessions: dict[str, _Session] = {}
        self._tasks: set[asyncio.Task] = set()
        #: The engine stops (the server exits): nothing more is sent.
        self.stopping = False
        engine.after_turn.append(self._turn_ended)
        self.service.on_change.append(self._session_changed)

    # Reading -----------------------------------------------------------------------

    async def state(self, session_id: str) -> QueueState:
        state = await self._loaded(session_id)
        return self._view(session_id, state)

    def _view(self, session_id: str, state: _Session) -> QueueState:
        entries = tuple(_entry(r) for r in state.records)
        return QueueState(session_id, entries, any(r.state == "review" for r in state.records), tuple(state.problems))

    # Changing ------------------------------------------------------------------------

    async def add(self, session_id: str, text: str, *, agent: str | None = None, attachments: Sequence[str] = ()) -> QueueEntry:
        """Queue ``text`` behind the running turn (sent at once when none
        runs and nothing waits for review)."""
        record = await self._new(session_id, "follow-up", text, agent, attachments)
        entry = _entry(record)
        self._kick(session_id)
        return entry

    async def steer(self, session_id: str, text: str | None = None, *, entry_id: str | None = None,
                    agent: str | None = None, attachments: Sequence[str] = ()) -> QueueEntry:
        """Send ``text`` (or the queued entry ``entry_id``) now: the running
        turn is cancelled and this goes first once it has settled."""
        if (text is None) == (entry_id is None):
            raise _refused("the steering", "names either a text or a queued entry, not both or neither")
        if entry_id is not None:
            state = await self._loaded(session_id)
            async with state.lock:
                record = self._find(session_id, state, entry_id)
                record = replace(record, kind="steer", state="queued", reason=None, order=self._front(state))
                await self._write(session_id, state, [record])
        else:
            record = await self._new(session_id, "steer", text, agent, attachments)
        entry = _entry(record)
        if self.engine.running_turn(session_id):
            await self.engine.cancel(session_id)
        self._kick(session_id)
        return entry

    async def edit(self, session_id: str, entry_id: str, text: str) -> QueueEntry:
        _check_text(text)
        state = await self._loaded(session_id)
        async with state.lock:
            record = self._find(session_id, state, entry_id)
            record = replace(record, text=text)
            await self._write(session_id, state, [record])
        return _entry(record)

    async def cancel(self, session_id: str, entry_id: str) -> QueueState:
        """Drop a queued entry (it is never sent)."""
        state = await self._loaded(session_id)
        async with state.lock:
            self._find(session_id, state, entry_id)
            await self._remove(session_id, state, entry_id)
        return self._view(session_id, state)

    # Delivery --------------------------------------------------------------------------

    def _turn_ended(self, session_id: str) -> None:
        if session_id in self._sessions or self.service.is_open(session_id):
            self._kick(session_id, reread=True)

    def _kick(self, session_id: str, *, reread: bool = False) -> None:
        task = asyncio.ensure_future(self._deliver(session_id, reread))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, session_id: str, reread: bool) -> None:
        """Send the next deliverable entry, if the session is idle: steering
        always, a follow-up only while nothing needs review."""
        try:
            if self.stopping or not self.service.is_open(session_id) or self.service.session(session_id).read_only is not None:
                return
            state = await self._loaded(session_id)
            async with state.lock:
                if reread:
                    await self._merge(session_id, state)
                if self.engine.running_turn(session_id) or state.sending is not None:
                    return
                paused = any(r.state == "review" for r in state.records)
                record = next((r for r in state.records if r.state == "queued" and (r.kind == "steer" or not paused)), None)
                if record is None:
                    return
                record = replace(record, state="dispatching")
                await self._write(session_id, state, [record])  # the one durable mark before dispatch
                state.sending = record.entry_id
            self._notify(session_id, state)
        except Exception as error:
            _log.warning("session %s: queued input is not delivered now: %s", session_id, getattr(error, "reason", error))
            return
        try:
            await self.engine.prompt(session_id, record.text, agent=record.agent, attachments=record.attachments,
                                     on_begun=lambda turn: self._delivered(session_id, record.entry_id))
        except AgentError as refusal:
            if self.engine.running_turn(session_id):
                # Another prompt took the session first: nothing was sent;
                # it waits again, for that turn to settle.
                await self._back_to_review(session_id, record.entry_id, None)
                return
            await self._back_to_review(session_id, record.entry_id, f"it was not sent: {refusal.message}" + (f"; {refusal.action}" if refusal.action else ""))
        except Exception as error:
            _log.exception("session %s: sending queued input failed", session_id)
            await self._back_to_review(session_id, record.entry_id, f"it was not sent: {getattr(error, 'reason', error)}")
        finally:
            if state.sending == record.entry_id:
                state.sending = None

    async def _delivered(self, session_id: str, entry_id: str) -> None:
        """The turn holding the entry is published: the transcript has it."""
        state = self._sessions.get(session_id)
        if state is None:
            return
        async with state.lock:
            await self._remove(session_id, state, entry_id)
            state.sending = None

    async def _back_to_review(self, session_id: str, entry_id: str, reason: str | None) -> None:
        """The entry was not sent: it needs review (``reason``), or, with
        no reason, it simply waits again."""
        state = self._sessions.get(session_id)
        if state is None:
            return
        async with state.lock:
            state.sending = None
            record = next((r for r in state.records if r.entry_id == entry_id), None)
            if record is None:
                return
            back = replace(record, state="queued", reason=None) if reason is None else replace(record, state="review", reason=reason[:4096])
            try:
                await self._write(session_id, state, [back])
            except Exception as error:  # kept in memory, marked; the next write tries again
                _log.warning("session %s: marking queued input for review failed: %s", session_id, getattr(error, "reason", error))
                self._replace(state, back)
                self._notify(session_id, state)

    # Sessions coming and going ---------------------------------------------------------

    def _session_changed(self, change: SessionChange) -> None:
        if change.reason == "closed" or change.access.value != "writable":
            self._sessions.pop(change.session_id, None)
        elif change.reason in ("resumed", "recovered"):
            self._sessions.pop(change.session_id, None)  # a fresh owner: loaded anew, with the restart's rules
        elif (state := self._sessions.get(change.session_id)) is not None and state.loaded and self.service.is_open(change.session_id):
            session = self.service.session(change.session_id)
            if session.read_only is None:
                self._list_on_commits(session, state)  # a session's first save claimed its lease

    # Internals ---------------------------------------------------------------------------

    async def _loaded(self, session_id: str) -> _Session:
        state = self._sessions.get(session_id)
        if state is None:
            state = _Session()
            self._sessions[session_id] = state
        if state.loaded:
            return state
        async with state.lock:
            if state.loaded:
                return state
            session = self.service.session(session_id)
            if session.materialized:
                records, problems = await load_inputs(self.service.target, session.paths, listed=session.take_inputs_listing())
            else:
                records, problems = [], []
            for problem in problems:
                _log.warning("%s", problem)
            # Loaded by a new owner: nothing sent before the restart is sent
            # again on its own (the spec's restart rules).
            changed = []
            for record in records:
                if record.state == "dispatching":
                    changed.append(replace(record, state="review", reason=INTERRUPTED_DISPATCH))
                elif record.kind == "steer" and record.state == "queued":
                    changed.append(replace(record, state="review", reason=UNDELIVERED_STEER))
            state.records = records
            state.problems = problems
            state.loaded = True
            if session.read_only is None:
                self._list_on_commits(session, state)
            if changed and session.read_only is None:
                try:
                    await self._write(session_id, state, changed, notify=False)
                except Exception as error:
                    _log.warning("session %s: marking reloaded input for review failed: %s", session_id, getattr(error, "reason", error))
                    for record in changed:
                        self._replace(state, record)
            else:
                for record in changed:
                    self._replace(state, record)
        return state

    def _list_on_commits(self, session: Any, state: _Session) -> None:
        """Have the session's head commits list the queue in their own
        program: the look after a turn (``_merge``) starts from the listing
        its settlement took, instead of a program of its own."""
        lease = session.lease
        if lease is None or (state.listing is not None and state.listing[0] is lease):
            return

        def delivered(_results: Any) -> bool:
            return session.conversation.open_turn is None  # a settlement (or a save between turns)

        state.listing = (lease, lease.ride([input_listing(session.paths)], every=True, delivered=delivered))

    def _settled_listing(self, session: Any, state: _Session) -> Any:
        """The queue's listing taken by the last commit with no turn in
        flight, once, when no lease generation was written since (nothing
        can have moved the settlement's moment on); else None."""
        lease = session.lease
        if lease is None or state.listing is None or state.listing[0] is not lease:
            return None
        taken = state.listing[1].take(lease)
        return taken[0] if taken is not None else None

    async def _merge(self, session_id: str, state: _Session) -> None:
        """Entries another process of this client queued meanwhile (``mevedel
        prompt --queue`` while this process's turn ran)."""
        session = self.service.session(session_id)
        if not session.materialized:
            return
        try:
            records, _problems = await load_inputs(self.service.target, session.paths, listed=self._settled_listing(session, state))
        except Exception as error:
            _log.warning("session %s: queued input could not be read again: %s", session_id, getattr(error, "reason", error))
            return
        known = {r.entry_id for r in state.records}
        added = [r for r in records if r.entry_id not in known]
        if added:
            state.records = sorted([*state.records, *added], key=lambda r: (r.order, r.queued_at, r.entry_id))
            self._notify(session_id, state)

    async def _new(self, session_id: str, kind: str, text: str | None, agent: str | None, attachments: Sequence[str]) -> InputRecord:
        _check_text(text)
        if not isinstance(attachments, (list, tuple)) or not all(isinstance(a, str) and a.strip() for a in attachments):
            raise _refused("the attachments", "must be addresses or workspace paths")
        session = self.service.session(session_id)
        session.require_writable()
        state = await self._loaded(session_id)
        async with state.lock:
            order = self._front(state) if kind == "steer" else max((r.order for r in state.records), default=0) + 1
            record = InputRecord(
                entry_id=secrets.token_hex(16), session_id=session_id, kind=kind, state="queued", order=order,
                text=text, agent=agent, attachments=tuple(attachments),
                client_id=self.service.client.client_id, host=self.service.client.host[:255], queued_at=session.time.now(),
            )
            await self._write(session_id, state, [record], new=True)
        return record

    @staticmethod
    def _front(state: _Session) -> int:
        return min((r.order for r in state.records), default=1) - 1

    def _find(self, session_id: str, state: _Session, entry_id: str) -> InputRecord:
        record = next((r for r in state.records if r.entry_id == entry_id), None)
        if record is None:
            raise _refused(f"queued entry {entry_id}", f"is not queued in session {session_id} (sent or cancelled already)")
        if record.entry_id == state.sending or record.state == "dispatching":
            raise _refused(f"queued entry {entry_id}", "is being sent now", "cancel the turn instead")
        return record

    @staticmethod
    def _replace(state: _Session, record: InputRecord) -> None:
        for index, known in enumerate(state.records):
            if known.entry_id == record.entry_id:
                state.records[index] = record
                break
        else:
            state.records.append(record)
        state.records.sort(key=lambda r: (r.order, r.queued_at, r.entry_id))

    async def _write(self, session_id: str, state: _Session, records: Sequence[InputRecord], *, new: bool = False,
                     notify: bool = True) -> None:
        """Durable first (the person is told only what is kept), then here."""
        session = self.service.session(session_id)
        session.require_writable()
        lease = session.lease
        if lease is None:
            # Not saved yet (no lease before a session's first save): kept
            # here and written with the next change once it has one.
            state.unsaved.update(r.entry_id for r in records)
        else:
            pending = [r for r in state.records if r.entry_id in state.unsaved and r.entry_id not in {x.entry_id for x in records}]
            created = {r.entry_id for r in records} if new else set()
            created |= state.unsaved
            try:
                await write_inputs(lease, [*pending, *records], new=created)
            except (StoreError, TargetError) as error:
                raise _refused(f"session {session_id}", f"the queued prompt could not be kept: {getattr(error, 'reason', error)}",
                               "nothing was queued or changed; try again") from None
            state.unsaved.clear()
        for record in records:
            self._replace(state, record)
        if notify:
            self._notify(session_id, state)

    async def _remove(self, session_id: str, state: _Session, entry_id: str) -> None:
        session = self.service.session(session_id)
        if entry_id in state.unsaved or session.lease is None:
            state.unsaved.discard(entry_id)
        else:
            try:
                await remove_input(session.lease, entry_id)
            except (StoreError, TargetError) as error:
                raise _refused(f"queued entry {entry_id}", f"could not be removed: {getattr(error, 'reason', error)}", "try again") from None
        state.records = [r for r in state.records if r.entry_id != entry_id]
        self._notify(session_id, state)

    def _notify(self, session_id: str, state: _Session) -> None:
        show = getattr(self.engine.front, "queue_changed", None)
        if show is None:
            return
        try:
            show(self._view(session_id, state))
        except Exception:  # a lost notification must not lose the entry
            _log.exception("could not show the queue of %s", session_id)

    async def drained(self) -> None:
        """Until nothing is being sent or waits to be sent here (each send
        runs its whole turn; its end may start the next)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _entry(record: InputRecord) -> QueueEntry:
    return QueueEntry(
        record.entry_id, record.kind, "sending" if record.state == "dispatching" else record.state,
        record.text, record.agent, tuple(record.attachments), record.queued_at, record.host, record.reason,
    )


def _check_text(text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise _refused("the prompt", "is blank; write what the agent should do")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise _refused("the prompt", f"is longer than {MAX_TEXT_BYTES} bytes; attach the text as a file instead")


__all__ = ["PromptQueue", "QueueEntry", "QueueState", "add_foreign_input"]
