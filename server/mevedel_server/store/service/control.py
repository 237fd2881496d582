"""Control transfer between clients, on top of :class:`~.front.SessionService`.

``SessionControl`` is the one place a client decides who writes a session
it has open:

- :meth:`SessionControl.take` routes on the lease: free, own or released to
  this client: acquired directly; another client's expired lease: taken over
  (the caller confirms, :class:`~..errors.TakeoverNeedsConfirmation`
  otherwise); another client's live lease: a request
  (:mod:`..transfer`) and a *pending* state that a poll settles.
- :meth:`SessionControl.release` saves, publishes and releases in one
  program (the save's commit is the release) and keeps the session open
  read-only, following; a failed one releases nothing (:class:`ReleaseFailed`).
- Owner side: a poll of every writable session's mailbox finds a request
  addressed to this client, notes the target clock at that first sight and
  reports it (``asking``); :meth:`grant` or :meth:`keep` answers it, and an
  unanswered request is granted once ``prompt_timeout`` target seconds have
  passed since that first sight. A grant drains: new mutations are refused
  (``transfer-draining``) while the turn in flight, a mutation another task
  is running, a pending publication or a recovery is waited for, and the
  owner is told which; then the fenced release, whose commit is the final
  publication (the agent binding ended), and the session is read-only here.
  A release that fails is tried again at the next poll: a final publication
  it left pending is the drain's own, published again as the release (a
  restarted process knows its record by the grant's fence); only a
  publication pending from before the grant waits for a person.
- Requester side: the poll reads the decision and the lease head. A keep
  ends the pending state; the released successor fenced for this client is
  acquired, and the committed state is reloaded before the session is
  writable (a failed reload releases the new lease and leaves it read-only,
  as :meth:`Sessions.open <.sessions.Sessions.open>` does).

Neither side is privileged afterwards: the client that handed control over
is a non-owner like any other. Authority times are the target clock's; the
poll cadence (``poll_seconds``, and ``active_poll_seconds`` while a transfer
is in flight on either side) only decides when to look again.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ...targets import TargetError
from ..authority.lease import LeaseStanding, holder_has_ended, observe_lease
from ..authority.records import LeaseState, TransferRequest, TransferVerdict
from ..authority.transfer import (
    DEFAULT_FENCE_SECONDS,
    Release,
    decide_grant,
    decide_keep,
    fence_written,
    read_mailbox,
    read_requester_view,
    release_granted,
    request_control,
    write_fence,
)
from ..content.turns import ConversationError, SaveCandidate
from ..errors import (
    LeaseLost,
    PublicationFailed,
    PublicationUnknown,
    SessionRefusal,
    StoreError,
)
from ..watching.watch import SessionWatcher, Wake, WatchCadence
from .errors import SessionNotOpen
from .front import SessionService
from .open_session import OpenSession
from .values import Access, OpenMode, SaveResult, SessionInfo

_log = logging.getLogger(__name__)

DEFAULT_PROMPT_TIMEOUT = 30
#: How often the set of open sessions is compared with the watched ones
#: (in memory only; no target I/O).
_WATCH_SYNC_SECONDS = 1.0
#: Shortest wait before the target clock is read again for a deadline.
_DEADLINE_RETRY_SECONDS = 0.25

OWNER = "owner"
REQUESTER = "requester"
#: What a hand-over whose release failed waits for: the next attempt, at
#: the next poll.
RELEASE_AGAIN = "its release to be tried again"


@dataclass(frozen=True)
class ControlEvent:
    """Something a person on either side should see.

    Owner phases: ``asking`` (a request waits for Grant / Keep), ``draining``
    (granted; ``waiting_for`` names the blocker), ``released``, ``kept``.
    Requester phases: ``requested``, ``granted`` (the owner is draining),
    ``acquired``, ``rejected``, ``void`` (the owner changed or expired),
    ``failed`` (acquired but the reload failed: released again)."""

    session_id: str
    role: str
    phase: str
    message: str
    owner_host: str | None = None
    requester_host: str | None = None
    waiting_for: str | None = None
    #: ``asking``: target second at which an unanswered request is granted.
    deadline: int | None = None


@dataclass(frozen=True)
class ControlStatus:
    session_id: str
    #: ``owner``, ``requester`` or ``none``.
    role: str
    #: ``idle``, ``asking``, ``draining``, ``requested`` or ``granted``.
    phase: str
    owner_host: str | None = None
    requester_host: str | None = None
    waiting_for: str | None = None
    deadline: int | None = None
    #: ``draining``: why the last attempt at the release failed (it is
    #: tried again at the next poll; a CLI owner polls at its next command).
    failure: str | None = None


@dataclass(frozen=True)
class TakeResult:
    #: ``acquired``, ``took-over``, ``requested`` or ``already-owner``.
    outcome: str
    info: SessionInfo
    owner_host: str | None = None


@dataclass
class _Owning:
    request: TransferRequest
    deadline: int
    phase: str = "asking"
    waiting_for: str | None = None
    finishing: bool = False
    #: Local monotonic time at which to look at the target clock again for
    #: the deadline (only a wake-up; the target clock decides).
    look_at: float = float("inf")
    #: ``answered`` or ``timeout`` once granted.
    reason: str | None = None
    #: The drain's final publication, once its release was tried: left
    #: pending by a failure, it is the drain's own to try again (as the
    #: release), not a person's to decide on.
    final: SaveCandidate | None = None
    #: The same for a restarted process: the ID of the durable record the
    #: previous one's release left (see :meth:`SessionControl._adopt_own_record`).
    final_record: str | None = None
    #: Why the last attempt at the release failed (None: none failed since
    #: the last one that waited or began).
    failure: str | None = None
    #: The fence is known to be on disk (written after a failed release, or
    #: found by a restarted process): the release is tried without it.
    fenced: bool = False


@dataclass
class _Requesting:
    request: TransferRequest
    owner_host: str | None
    phase: str = "requested"


@dataclass
class _Cadence:
    prompt_timeout: int = DEFAULT_PROMPT_TIMEOUT
    fence_seconds: int = DEFAULT_FENCE_SECONDS
    #: ``idle_seconds`` / ``active_seconds``: the fallback poll of this
    #: module and the watchers' poll (non-local targets).
    watch: WatchCadence = field(default_factory=WatchCadence)


@dataclass
class SessionControl:
    service: SessionService
    cadence: _Cadence = field(default_factory=_Cadence)
    #: Called with every :class:`ControlEvent`.
    on_event: list[Callable[[ControlEvent], None]] = field(default_factory=list)
    #: ``watch(session_id, callback) -> unsubscribe``: a shared watcher of
    #: the session (the LSP server's); None: this object runs its own.
    watch: Callable[[str, Callable[[Wake], None]], Callable[[], None]] | None = None

    def __post_init__(self) -> None:
        self._owning: dict[str, _Owning] = {}
        self._requesting: dict[str, _Requesting] = {}
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._tick_lock = asyncio.Lock()
        #: Open session -> how to stop watching it.
        self._watchers: dict[str, Callable[[], Awaitable[None] | None]] = {}
        self._own: dict[str, SessionWatcher] = {}
        self.service.on_change.append(self._service_changed)
        self.service.transfer_in_flight = self.transfer_in_flight

    def configure(
        self,
        *,
        prompt_timeout: int | None = None,
        fence_seconds: int | None = None,
        watch: WatchCadence | None = None,
    ) -> None:
        c = self.cadence
        self.cadence = _Cadence(
            prompt_timeout if prompt_timeout is not None else c.prompt_timeout,
            fence_seconds if fence_seconds is not None else c.fence_seconds,
            watch if watch is not None else c.watch,
        )
        for watcher in self._own.values():
            watcher.cadence = self.cadence.watch
        self._wake.set()

    # Facts ------------------------------------------------------------------

    def transfer_in_flight(self, session_id: str | None = None) -> bool:
        """A request is outstanding on either side (for ``session_id``, or
        for any session): pollers use their active cadence meanwhile."""
        if session_id is None:
            return bool(self._owning or self._requesting)
        return session_id in self._owning or session_id in self._requesting

    def status(self, session_id: str) -> ControlStatus:
        owning = self._owning.get(session_id)
        if owning is not None:
            return ControlStatus(
                session_id, OWNER, owning.phase, None, owning.request.requester_host, owning.waiting_for, owning.deadline,
                owning.failure,
            )
        requesting = self._requesting.get(session_id)
        if requesting is not None:
            return ControlStatus(session_id, REQUESTER, requesting.phase, requesting.owner_host)
        return ControlStatus(session_id, "none", "idle")

    # Lifetime ---------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="control transfer poll")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        watchers, self._watchers = self._watchers, {}
        for stop in watchers.values():
            await _awaited(stop())

    async def _run(self) -> None:
        # The watchers wake this loop as soon as a mailbox or lease changes;
        # the cadence poll is the fallback, and the only clock an unanswered
        # request's deadline is checked by.
        last_poll = -float("inf")
        while True:
            try:
                await self._sync_watchers()
            except Exception:  # a watcher that cannot stop must not end the poll
                _log.exception("control transfer: syncing the session watchers failed")
            watch = self.cadence.watch
            delay = watch.active_seconds if self.transfer_in_flight() else watch.idle_seconds
            due = min((o.look_at for o in self._owning.values() if o.phase == "asking"), default=float("inf"))
            if due > last_poll:
                delay = min(delay, due - last_poll)
            if self._wake.is_set() or time.monotonic() - last_poll >= delay:
                self._wake.clear()
                try:
                    await self.poll()
                except Exception:  # one bad tick must not end the poll
                    _log.exception("control transfer poll failed")
                last_poll = time.monotonic()
            remaining = delay - (time.monotonic() - last_poll)
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(_WATCH_SYNC_SECONDS, remaining)))
            except asyncio.TimeoutError:
                pass

    async def _sync_watchers(self) -> None:
        """One watch per open session; none for a closed one."""
        open_now = set(self.service.open_sessions())
        for session_id in [sid for sid in self._watchers if sid not in open_now]:
            await _awaited(self._watchers.pop(session_id)())
        for session_id in open_now - set(self._watchers):
            self._watch_now(session_id)

    def _watch_now(self, session_id: str) -> None:
        try:
            self._watchers[session_id] = self._watch(session_id)
        except Exception:
            # Without a watcher the cadence poll still finds requests.
            _log.exception("session %s: cannot watch it; polling only", session_id)
            self._watchers[session_id] = lambda: None

    def _watch(self, session_id: str) -> Callable[[], Awaitable[None] | None]:
        if self.watch is not None:
            return self.watch(session_id, lambda _wake: self.wake())
        watcher = SessionWatcher(
            self.service.target,
            session_id,
            cadence=self.cadence.watch,
            active=lambda: self.transfer_in_flight(session_id),
        )
        watcher.subscribe(lambda _wake: self.wake())
        self._own[session_id] = watcher
        watcher.start()

        def stop() -> Awaitable[None]:
            self._own.pop(session_id, None)
            return watcher.stop()

        return stop

    def wake(self) -> None:
        """Poll now (a watcher saw the mailbox or the lease change)."""
        self._wake.set()

    # Requester side ---------------------------------------------------------

    async def take(self, session_id: str, *, confirm_takeover: bool = False) -> TakeResult:
        """The one "take control" action (see the module docstring)."""
        service = self.service
        if service.is_open(session_id) and service.session(session_id).access is Access.WRITABLE:
            return TakeResult("already-owner", service.info(session_id))
        observation = await observe_lease(service.target, session_id)
        rec = observation.record
        foreign_live = (
            rec is not None and rec.client_id != service.client.client_id and observation.standing is LeaseStanding.HELD
        )
        if foreign_live:
            if not service.is_open(session_id):
                await service.sessions.open(session_id, OpenMode.JOIN)
            request = await request_control(service.target, observation, service.client)
            self._requesting[session_id] = _Requesting(request, rec.host)
            self._emit(
                ControlEvent(
                    session_id, REQUESTER, "requested",
                    f"asked {rec.host or 'the owner'} for control of session {session_id}; waiting for an answer",
                    owner_host=rec.host,
                )
            )
            self.wake()
            return TakeResult("requested", service.info(session_id), rec.host)
        expired_foreign = rec is not None and rec.client_id != service.client.client_id and observation.standing is LeaseStanding.EXPIRED
        mode = OpenMode.TAKEOVER if expired_foreign else OpenMode.RESUME
        opened = await self._acquire(session_id, mode, confirm_takeover)
        self._requesting.pop(session_id, None)
        return TakeResult("took-over" if expired_foreign else "acquired", opened)

    async def _acquire(self, session_id: str, mode: OpenMode, confirm_takeover: bool) -> SessionInfo:
        """Open writable; a session that was open read-only here stays open
        read-only when that fails."""
        service = self.service
        # The read-only copy stays in place until the writable one is
        # complete, so a failed acquisition or reload leaves it as it was.
        following = service.table.sessions.get(session_id) if service.is_open(session_id) else None
        try:
            opened = await service.sessions.open(session_id, mode, confirm_takeover=confirm_takeover)
        except BaseException:
            if following is not None and not service.is_open(session_id):
                service.table.sessions[session_id] = following
            raise
        session = service.session(session_id)
        if session.lease is not None:
            await self._close_stale_mailbox(session)
        service.table.changed(session, "acquired")
        return opened.info

    async def _requester_tick(self, session_id: str, state: _Requesting) -> None:
        service = self.service
        request = state.request
        view = await read_requester_view(service.target, request, session_id)
        if view.released_to(request):
            self._requesting.pop(session_id, None)
            try:
                info = await self._acquire(session_id, OpenMode.RESUME, False)
            except (StoreError, TargetError) as error:
                self._emit(ControlEvent(session_id, REQUESTER, "failed", f"taking control of session {session_id} failed: {error}", state.owner_host))
                return
            self._emit(
                ControlEvent(session_id, REQUESTER, "acquired", f"you now control session {info.session_id}", state.owner_host)
            )
            return
        if view.decision is not None and view.decision.verdict is TransferVerdict.KEEP:
            self._requesting.pop(session_id, None)
            self._emit(
                ControlEvent(session_id, REQUESTER, "rejected", f"{state.owner_host or 'the owner'} kept control of session {session_id}", state.owner_host)
            )
            return
        if view.owner_still(request):
            if view.decision is not None and state.phase != "granted":
                state.phase = "granted"
                self._emit(
                    ControlEvent(
                        session_id, REQUESTER, "granted",
                        f"{state.owner_host or 'the owner'} granted control of session {session_id}; waiting for it to finish and release",
                        state.owner_host,
                    )
                )
            elif view.now is not None and view.head is not None and (view.now >= view.head.expires_at or holder_has_ended(view.head)):
                self._requesting.pop(session_id, None)
                owner = state.owner_host or "the owner"
                lapsed = f"the process of {owner} ended" if view.now < view.head.expires_at else f"the lease of {owner} expired"
                self._emit(
                    ControlEvent(
                        session_id, REQUESTER, "void",
                        f"{lapsed} before it answered; take control again to take it over",
                        state.owner_host,
                    )
                )
            return
        self._requesting.pop(session_id, None)
        head = view.head
        if head is None or head.state in (LeaseState.RELEASED, LeaseState.ABORTED):
            # Released without a hand-over: nobody to ask any more.
            try:
                info = await self._acquire(session_id, OpenMode.RESUME, False)
            except (StoreError, TargetError) as error:
                self._emit(ControlEvent(session_id, REQUESTER, "void", f"session {session_id} changed hands: {error}", state.owner_host))
                return
            self._emit(ControlEvent(session_id, REQUESTER, "acquired", f"you now control session {info.session_id}", state.owner_host))
            return
        self._emit(
            ControlEvent(
                session_id, REQUESTER, "void",
                f"session {session_id} is now held by {head.host or 'another client'}, not the owner that was asked; take control again",
                state.owner_host,
            )
        )

    # Releasing --------------------------------------------------------------

    async def release(self, session_id: str) -> tuple[SaveResult | None, SessionInfo]:
        """Save, publish, release; the session stays open read-only, following.

        Held here with a conversation to publish, the save is the release:
        one program whose released generation names the new head, so a
        reader sees this client's old state held or its new state released,
        never the old state released. A failed one leaves this client
        holding the session, renewing it again, with the publication
        pending as any failed save leaves it (:class:`ReleaseFailed`)."""
        service = self.service
        session = service.session(session_id)
        # A publication pending from before refuses the release, as it does
        # any save: publishing it, or a newer snapshot over it, as the
        # release would decide for the person whether it is retried or
        # abandoned (a grant's drain waits for that decision too).
        session.require_mutable()
        opened = session.conversation.open_turn
        if opened is not None:
            raise ConversationError(
                f"cannot release control of session {session_id}: turn {opened.turn} is in flight; settle or abort it first"
            )
        result: SaveResult | None = None
        if session.lease is not None or session.materialized:
            session.conversation.detach_engine(at=service.table.time_now())
            candidate = session.conversation.artifacts_for_save()
            if session.lease is not None and candidate is not None:
                result = await _release_with_save(session, candidate)
            else:
                # No lease yet (the save claims it) or nothing to publish:
                # the release is a program of its own.
                result = await session.save(candidate, force=True)
        await session.release()
        session.hand_over("released control; following the session read-only", None)
        self._owning.pop(session_id, None)
        service.table.changed(session, "released")
        return result, service.info(session_id)

    # Owner side -------------------------------------------------------------

    async def grant(self, session_id: str, reason: str = "answered") -> ControlStatus:
        owning = self._pending_decision(session_id, "grant control")
        session = self.service.session(session_id)
        owning.phase = "draining"
        owning.reason = reason
        try:
            decision = await decide_grant(session.lease, owning.request, reason)
        except BaseException:
            owning.phase = "asking"
            raise
        if decision.verdict is TransferVerdict.KEEP:  # decided elsewhere first
            self._owning.pop(session_id, None)
            return self.status(session_id)
        self._begin_drain(session, owning)
        await self._drain(session_id)
        return self.status(session_id)

    def _begin_drain(self, session: OpenSession, owning: _Owning) -> None:
        owning.phase = "draining"
        session.handing_over = owning.request.requester_host or "another client"
        if self.wake not in session.on_operation_done:
            session.on_operation_done.append(self.wake)

    async def keep(self, session_id: str) -> ControlStatus:
        owning = self._pending_decision(session_id, "keep control")
        session = self.service.session(session_id)
        owning.phase = "deciding"
        try:
            decision = await decide_keep(session.lease, owning.request)
        except BaseException:
            owning.phase = "asking"
            raise
        self._owning.pop(session_id, None)
        if decision.verdict is TransferVerdict.GRANT:  # a timeout got there first
            self._owning[session_id] = owning
            self._begin_drain(session, owning)
            await self._drain(session_id)
            return self.status(session_id)
        self._emit(
            ControlEvent(
                session_id, OWNER, "kept", f"kept control of session {session_id}",
                requester_host=owning.request.requester_host,
            )
        )
        return self.status(session_id)

    def _pending_decision(self, session_id: str, action: str) -> _Owning:
        owning = self._owning.get(session_id)
        if owning is None or owning.phase != "asking":
            raise ConversationError(f"cannot {action} of session {session_id}: no request for it is waiting for an answer")
        return owning

    def _blocker(self, session: OpenSession, owning: _Owning) -> str | None:
        opened = session.conversation.open_turn
        if opened is not None:
            return f"turn {opened.turn} to settle"
        if session.operations_running():
            return "the operation in progress to finish"
        if session.pending is not None and not _own_final(session, owning):
            return "the pending publication to be retried or abandoned"
        if session.recovery is not None:
            return "the interrupted transaction's recovery to be resolved"
        return None

    async def _drain(self, session_id: str) -> None:
        owning = self._owning.get(session_id)
        if owning is None or owning.phase != "draining" or owning.finishing:
            return
        service = self.service
        session = service.session(session_id)
        host = owning.request.requester_host or "another client"
        blocker = self._blocker(session, owning)
        if blocker is not None:
            owning.failure = None
            self._draining(owning, session_id, host, blocker, f"waiting for {blocker}")
            return
        owning.finishing = True
        try:
            final: Release | None
            if _own_final(session, owning):
                # This drain's own final publication, left pending by a
                # failed attempt: published again as the release, the same
                # one program (nobody decided on it but the grant).
                final = functools.partial(_retry_releasing, session)
            else:
                session.conversation.detach_engine(at=self.service.table.time_now())
                # The final publication -- what this owner did since its
                # last one, the detached engine included -- is the release
                # itself: the released generation names it, so the requester
                # never finds the lease free with an agent binding of this
                # process, and a crash before it leaves this owner holding
                # what it had. An unchanged snapshot is already committed:
                # released alone.
                candidate = owning.final = session.conversation.artifacts_for_save()
                final = None if candidate is None else functools.partial(_save_releasing, session, candidate)
            await session.stop_renewal()
            assert session.lease is not None
            await release_granted(session.lease, owning.request, self.cadence.fence_seconds, release=final, fenced=owning.fenced)
        except LeaseLost:
            self._owning.pop(session_id, None)
            return
        except (StoreError, TargetError) as error:
            owning.finishing = False
            _log.warning("session %s: the hand-over did not finish yet: %s", session_id, error)
            session.resume_renewal()
            owning.failure = str(error)
            await self._fence_own_final(session, owning)
            self._draining(owning, session_id, host, RELEASE_AGAIN, f"the release failed ({error}); it is tried again")
            return
        self._owning.pop(session_id, None)
        session.hand_over(f"handed control to {host}; following the session read-only", host)
        service.table.changed(session, "released")
        why = f" (nobody answered within {self.cadence.prompt_timeout} s)" if owning.reason == "timeout" else ""
        self._emit(
            ControlEvent(session_id, OWNER, "released", f"handed session {session_id} to {host}{why}", requester_host=host)
        )

    def _draining(self, owning: _Owning, session_id: str, host: str, waiting_for: str, why: str) -> None:
        """Tell the owner what the hand-over waits for, once per change."""
        if waiting_for == owning.waiting_for:
            return
        owning.waiting_for = waiting_for
        self._emit(
            ControlEvent(
                session_id, OWNER, "draining", f"handing session {session_id} to {host}: {why}",
                requester_host=host, waiting_for=waiting_for,
            )
        )

    async def _fence_own_final(self, session: OpenSession, owning: _Owning) -> None:
        """The release's own final publication is pending, journalled: the
        fence goes on disk too (the release's program may have stopped
        before it), by which a process that starts before the retry knows
        the record for the release's own (:meth:`_adopt_own_record`)."""
        if owning.fenced or not _own_final(session, owning) or session.lease is None:
            return
        try:
            await write_fence(session.lease, owning.request, self.cadence.fence_seconds)
        except (StoreError, TargetError) as error:
            _log.info("session %s: the fence waits for the release: %s", session.session_id, error)
            return
        owning.fenced = True

    async def _adopt_own_record(self, session: OpenSession, owning: _Owning) -> None:
        """A process that finds its client's grant standing and a pending
        publication restored from its record: the record is the release's
        own -- retried as the release, without asking anyone -- when this
        client journalled it and the grant's fence is written (nothing
        fences before the release is attempted, and a draining session
        takes no other save: a person's pending publication from before
        the grant would have stopped the drain short of its release)."""
        pending = session.pending
        if pending is None or pending.candidate is not None or pending.record is None or pending.stale is not None:
            return
        if pending.record.client_id != self.service.client.client_id:
            return
        if await fence_written(self.service.target, session.paths, owning.request.transfer_generation):
            owning.final_record, owning.fenced = pending.record.pending_id, True

    def _service_changed(self, change) -> None:
        if self._task is not None and change.session_id not in self._watchers and self.service.is_open(change.session_id):
            # Watched at once, not at the next sync: a request that arrives
            # in the second after the session opened here is seen as it lands.
            self._watch_now(change.session_id)
        owning = self._owning.get(change.session_id)
        if owning is not None and owning.phase == "draining":
            self.wake()

    async def _owner_tick(self, session: OpenSession) -> None:
        lease = session.lease
        assert lease is not None
        session_id = session.session_id
        owning = self._owning.get(session_id)
        if owning is not None:
            if owning.phase == "draining":
                await self._drain(session_id)
                return
            if owning.phase != "asking":
                return
            box = await read_mailbox(self.service.target, session.paths, owning.request.transfer_generation, with_clock=True)
            if box.decision is not None:
                return
            if box.now is not None and box.now >= owning.deadline:
                await self.grant(session_id, "timeout")
            elif box.now is not None:
                # Look again when the target clock should have got there.
                owning.look_at = time.monotonic() + max(_DEADLINE_RETRY_SECONDS, owning.deadline - box.now)
            return
        box = await read_mailbox(self.service.target, session.paths, lease.record.transfer_generation, clock_if_requested=True)
        request = box.request
        if request is None:
            return
        if request.owner_client != self.service.client.client_id:
            # Left over from an earlier ownership: it cannot cross to us,
            # and it must not block the next requester either.
            await lease.open_next_transfer_generation()
            return
        if box.decision is not None:
            if box.decision.verdict is TransferVerdict.KEEP:
                await lease.open_next_transfer_generation()
                return
            # Granted by an earlier process of this client (a CLI command):
            # the hand-over still owes its drain and release.
            owning = _Owning(request, 0)
            self._owning[session_id] = owning
            await self._adopt_own_record(session, owning)
            self._begin_drain(session, owning)
            await self._drain(session_id)
            return
        assert box.now is not None  # read with the request
        # The target clock reads whole seconds, truncated: first sight may
        # be late in the second ``box.now`` names, so a deadline of
        # ``now + timeout`` would withdraw the question up to a second early
        # (a 1 s prompt almost at once). One more second makes the whole
        # timeout pass before an unanswered request is granted.
        owning = _Owning(request, box.now + self.cadence.prompt_timeout + 1)
        owning.look_at = time.monotonic() + self.cadence.prompt_timeout
        self._owning[session_id] = owning
        host = request.requester_host or "another client"
        self._emit(
            ControlEvent(
                session_id, OWNER, "asking",
                f"{host} asks for control of session {session_id}",
                requester_host=host, deadline=owning.deadline,
            )
        )

    async def _close_stale_mailbox(self, session: OpenSession) -> None:
        """A new owner opens a fresh transfer generation when the current one
        holds a request meant for an earlier owner."""
        lease = session.lease
        assert lease is not None
        box = await read_mailbox(self.service.target, session.paths, lease.record.transfer_generation)
        if box.request is not None and box.request.owner_client != self.service.client.client_id:
            await lease.open_next_transfer_generation()

    # The poll ---------------------------------------------------------------

    async def poll(self) -> None:
        """One look at every open session: owners at their mailbox,
        requesters at their decision and the lease head."""
        async with self._tick_lock:
            service = self.service
            for session_id in service.open_sessions():
                try:
                    session = service.session(session_id)
                except SessionNotOpen:
                    continue
                try:
                    requesting = self._requesting.get(session_id)
                    if requesting is not None:
                        await self._requester_tick(session_id, requesting)
                    elif session.access is Access.WRITABLE and session.lease is not None and not session.lease.lost:
                        await self._owner_tick(session)
                except (StoreError, TargetError) as error:
                    _log.warning("session %s: control transfer poll: %s", session_id, error)
            # A transfer whose session closed here, or whose lease this client
            # lost, is no longer in flight (and must not keep the fast cadence).
            for session_id in list(self._owning):
                if not service.is_open(session_id) or service.session(session_id).access is not Access.WRITABLE:
                    self._owning.pop(session_id, None)
            for session_id in [sid for sid in self._requesting if not service.is_open(sid)]:
                self._requesting.pop(session_id, None)

    def _emit(self, event: ControlEvent) -> None:
        for listener in list(self.on_event):
            try:
                listener(event)
            except Exception:
                _log.exception("control event listener failed")


def _own_final(session: OpenSession, owning: _Owning) -> bool:
    """The publication pending in ``session`` is the one the drain's own
    release left (not a person's save from before the grant)."""
    pending = session.pending
    if pending is None:
        return False
    if pending.candidate is not None:
        return pending.candidate is owning.final
    return (
        owning.final_record is not None and pending.stale is None
        and pending.record is not None and pending.record.pending_id == owning.final_record
    )


async def _save_releasing(session: OpenSession, candidate: SaveCandidate, lead: list, changes: dict) -> None:
    await session.save(candidate, lead=lead, release=changes)


async def _release_with_save(session: OpenSession, candidate: SaveCandidate) -> SaveResult:
    """An explicit save (published even unchanged) whose commit releases the
    lease, with renewal and background work stopped first as
    :meth:`OpenSession.release` stops them. A failure that leaves the lease
    held renews it again (the LSP server keeps the session writable;
    collection resumes at its next commit)."""
    await session.stop_background()
    await session.stop_renewal()
    try:
        # The released generation differs from the head only in its state,
        # as :meth:`LeaseHandle.release` writes it, and in the head it names.
        return await session.save(candidate, force=True, release={})
    except PublicationFailed as failed:
        session.resume_renewal()
        raise ReleaseFailed(session.session_id, failed) from failed
    except BaseException:
        session.resume_renewal()
        raise


class ReleaseFailed(PublicationFailed):
    """A release-control whose releasing save failed: the publication is
    pending as that save's failure left it (journalled, spooled or in
    memory), and control was not released -- unless the host stopped
    answering, when whether it was is unknown like the publication."""

    def __init__(self, session_id: str, failed: PublicationFailed, then: str | None = None) -> None:
        if isinstance(failed, PublicationUnknown):
            state = "control may or may not have been released with the save"
        else:
            state = "control was not released: this client still holds the session"
        then = then or "retry the publication (or abandon it), then release control again"
        SessionRefusal.__init__(self, session_id, f"{state}; {failed.said}; {then}")
        self.reason = failed.reason
        self.recorded, self.spooled = failed.recorded, failed.spooled
        self.follow_up = getattr(failed, "follow_up", None)
        self.failed = failed


async def _retry_releasing(session: OpenSession, lead: list, changes: dict) -> None:
    await session.retry(lead=lead, release=changes)


async def _awaited(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result
