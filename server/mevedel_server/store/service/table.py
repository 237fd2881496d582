"""``SessionTable``: what every capability of the session service shares --
the sessions open here, the client and target they belong to, the target
clock, the change listeners, and the one admission gate a mutation passes.

The capabilities (:mod:`.sessions`, :mod:`.turns`, :mod:`.lifecycle`,
:mod:`.agents`, :mod:`.following`) each receive the table when they are
built (:class:`~.front.SessionService` builds them); none holds a session of
its own, so a session opened by one is seen by every other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from ...targets import Clock, ControlProgram, Target, raise_for_result
from ..authority.lease import ClientIdentity, LeaseObservation
from ..authority.publication import CommittedSnapshot, read_committed
from ..authority.records import RecordError
from ..authority.workspace import check_session_id, read_workspace_id
from ..content.inspect import InspectRow, classify_sidecar
from ..content.sidecar import SIDECAR_PATH, SidecarErrorKind, shown_name
from ..layout import STATE_DIR
from ..transactions.recovery import RecoveryPending, find_recovery
from .clock import TargetTime
from .errors import (
    NoSessionOpen,
    SessionIncompatible,
    SessionNotOpen,
    TurnStateConflict,
    UnsettledMutation,
)
from .values import SessionChange, SessionInfo, SpoolNotice

# An open session's machinery (its conversation, background work, lease
# renewal) is imported where a session is opened: a listing opens none.
if TYPE_CHECKING:
    from ..content.turns import Conversation
    from ..transactions.pending_publication import PendingSpool
    from .open_session import OpenSession
    from .turns import StoppedFold

_log = logging.getLogger(__name__)


def _tell(listeners: list, event) -> None:
    """Call every listener with ``event``; one that fails is logged and
    keeps neither the others nor the change that happened from going on."""
    for listener in list(listeners):
        try:
            listener(event)
        except Exception:
            _log.exception("%s listener failed", type(event).__name__)


class SessionTable:
    def __init__(
        self,
        target: Target,
        client: ClientIdentity,
        *,
        lease_seconds: int,
        renew_every: float,
        publication_keep_recent: int | None,
        checkpoint_seconds: float | None,
        one_command: bool,
        pending_spool: PendingSpool | None = None,
        leases_outlive_process: bool = False,
    ) -> None:
        self.target = target
        #: This process leaves its leases to its client's next process when
        #: it ends (a CLI's): they name it as their holder only while an
        #: agent turn it runs is open (see :mod:`..authority.lease`).
        self.leases_outlive_process = leases_outlive_process
        #: Where a pending save the host could not record is kept (see
        #: :meth:`~.open_session.OpenSession.keep_pending`).
        self.pending_spool = pending_spool
        self.client = client
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        #: Newest publication generations kept by collection beyond the head
        #: and the settled-turn states (None: no collection).
        self.publication_keep_recent = publication_keep_recent
        #: A turn in flight is checkpointed this often (None or 0: never).
        self.checkpoint_seconds = checkpoint_seconds
        #: The service serves one CLI command (a process of its own): its
        #: collection runs once, when it detaches, instead of after every
        #: publication, and a session read that is not open here starts
        #: from what the command's listing just read of it (its committed
        #: head, manifest and recovery journal) instead of reading them again.
        self.one_command = one_command
        #: What this command's listing read of each session (``one_command``):
        #: the committed snapshot, the recovery journal's, the lease
        #: observation and the workspace identity the sidecar records.
        self.listed: dict[str, tuple[CommittedSnapshot, str | None, LeaseObservation, str | None]] = {}
        #: The sessions open here.
        self.sessions: dict[str, OpenSession] = {}
        #: Called with every :class:`SessionChange`.
        self.on_change: list[Callable[[SessionChange], None]] = []
        #: Called with every :class:`SpoolNotice`.
        self.on_spool: list[Callable[[SpoolNotice], None]] = []
        #: One mid-turn checkpoint of a session (the turn capability's,
        #: installed by the front that builds both).
        self.checkpoint_tick: Callable[[OpenSession], Awaitable[None]] | None = None
        #: Records in a turn a stopped process left in flight what it
        #: changed in the tree, before that turn is settled as interrupted
        #: (the turn capability's :meth:`~.turns.Turns.fold_stopped_turn`,
        #: installed by the front): the post-turn states, the callback to
        #: await once the settlement committed, and why changes are lost.
        self.fold_stopped_turn: Callable[[OpenSession], Awaitable[StoppedFold]] | None = None
        self._time: TargetTime | None = None

    # Looking sessions up ---------------------------------------------------------

    def get(self, session_id: str | None, action: str) -> OpenSession:
        """The open session; ``action`` (what the caller meant to do with
        it) words the refusal when it is not open here."""
        if session_id is None:
            raise NoSessionOpen(action)
        session = self.sessions.get(check_session_id(session_id))
        if session is None:
            raise SessionNotOpen(session_id, action)
        return session

    def mutable(self, session_id: str, action: str) -> OpenSession:
        session = self.get(session_id, action)
        session.require_mutable()
        session.track_operation()
        return session

    def info_of(self, session: OpenSession) -> SessionInfo:
        conversation = session.conversation
        sidecar = conversation.sidecar
        opened = conversation.open_turn
        return SessionInfo(
            session_id=session.session_id,
            display_name=shown_name(sidecar, session.session_id),
            named=sidecar.display_name is not None,
            access=session.access,
            read_only_reason=session.read_only,
            holder_host=session.holder_host,
            materialized=session.materialized,
            head=session.head,
            settled_turns=sidecar.total_turn_count,
            open_turn=opened.turn if opened else None,
            pending_publication=session.pending.reason if session.pending else None,
            reconciliation_pending=sidecar.reconciliation_pending,
            recovery_pending=session.recovery,
        )

    # Opening and changing ----------------------------------------------------------

    def new_open(self, conversation: Conversation, **kwargs) -> OpenSession:
        from .background import TurnCheckpoints
        from .open_session import OpenSession

        session = OpenSession(
            target=self.target,
            client=self.client,
            conversation=conversation,
            time=self.clock(),
            lease_seconds=self.lease_seconds,
            renew_every=self.renew_every,
            on_lost=self._lost,
            collect_keep_recent=self.publication_keep_recent,
            collect_deferred=self.one_command,
            spool=self.pending_spool,
            on_spool=self._spool_notice,
            names_holder=not self.leases_outlive_process,
            **kwargs,
        )
        session.checkpoints = TurnCheckpoints(
            session.session_id, lambda: self._checkpoint_tick(session), interval=self.checkpoint_seconds
        )
        if conversation.open_turn is not None and session.read_only is None and session.lease is not None:
            session.checkpoints.start()  # continuing a turn left in flight by this client
        return session

    async def _checkpoint_tick(self, session: OpenSession) -> None:
        if self.checkpoint_tick is not None:
            await self.checkpoint_tick(session)

    def adopt(self, session: OpenSession, conversation: Conversation) -> None:
        """The open session's live conversation is ``conversation`` now."""
        session.conversation = conversation
        session.history.rebind(conversation)

    def _lost(self, session: OpenSession, why: str) -> None:
        _log.warning("session %s is now read-only: %s", session.session_id, why)
        self.changed(session, "read-only")

    def _spool_notice(self, notice: SpoolNotice) -> None:
        _tell(self.on_spool, notice)

    def changed(self, session: OpenSession, reason: str) -> None:
        # What this command's listing read of it is no longer what a read sees.
        self.listed.pop(session.session_id, None)
        sidecar = session.conversation.sidecar
        change = SessionChange(
            session.session_id,
            reason,
            session.head,
            sidecar.total_turn_count,
            session.access,
            shown_name(sidecar, session.session_id),
        )
        _tell(self.on_change, change)

    async def conversation_of(
        self, snapshot: CommittedSnapshot, *, also: list | tuple = (), found: list | None = None
    ) -> Conversation:
        """The conversation a committed snapshot holds; an unpublished session
        is an empty one. ``also``: reads run in the program that reads the
        committed bytes (their results appended to ``found``; nothing
        appended when no such program ran whole)."""
        from ..content.turns import Conversation

        if snapshot.manifest is None:
            workspace_id = await read_workspace_id(self.target)
            if workspace_id is None:  # a session directory made by hand
                raise SessionIncompatible(
                    snapshot.session_id, InspectRow(SidecarErrorKind.MISSING, "the workspace has no identity")
                )
            return Conversation.new(session_id=snapshot.session_id, workspace_id=workspace_id, at=await self.now())
        # Everything in one program; the sidecar is judged first all the
        # same, so a session that does not load is told as one even when
        # other bytes are also bad (those are read again, alone, to say so).
        everything: dict[str, bytes] | None
        try:
            if also and found is not None:
                everything, riders = await snapshot.read_all_with(also)
                found.append(riders)
            else:
                everything = await snapshot.read_all()
        except RecordError:
            everything = None
        if everything is not None:
            return self.conversation_from(snapshot, everything)
        data = await snapshot.read(SIDECAR_PATH) if SIDECAR_PATH in snapshot.manifest.entries else None
        _check_sidecar(snapshot, data)
        return Conversation.restore(await snapshot.read_all())

    def conversation_from(self, snapshot: CommittedSnapshot, everything: Mapping[str, bytes]) -> Conversation:
        """The conversation of ``snapshot``'s verified bytes (read already)."""
        from ..content.turns import Conversation

        _check_sidecar(snapshot, everything.get(SIDECAR_PATH))
        return Conversation.restore(everything)

    # The admission gate -------------------------------------------------------------

    async def gated(self, session_id: str, action: str, *, turn_work: bool = False, commands: bool = False) -> OpenSession:
        """The open, mutable session, refused while a recovery is pending
        (and, while a hand-over drains it, unless ``turn_work`` for the turn
        in flight); with ``commands`` (what changes the workspace's files:
        a turn's begin, Rewind, Redo, a restore) also while a previous
        owner's command may still run (:meth:`require_commands_settled`)."""
        session = self.mutable(session_id, action)
        session.require_admission(turn_work=turn_work)
        await self.require_no_recovery(session)
        if commands:
            await self.require_commands_settled(session, action)
        return session

    async def require_commands_settled(self, session: OpenSession, action: str) -> None:
        """The unsettled-mutation latch, re-proven before it refuses: a
        recorded group proven gone clears it with no user action."""
        if session.lease is None or session.lease.lost or session.read_only is not None:
            return
        state = await session.latch.check(session.lease)
        if state.set:
            raise UnsettledMutation(session.session_id, action, state.message())

    async def require_no_recovery(self, session: OpenSession) -> None:
        if not session.materialized:  # nothing of it is written: no journal can exist
            return
        if session.recovery_clear and session.lease is not None:
            return  # looked since the lease was taken, and nothing wrote one since
        state = await find_recovery(self.target, session.session_id)
        session.recovery, session.recovery_remains = state.recovery_id, state
        session.recovery_clear = state.recovery_id is None and session.lease is not None
        if state.recovery_id is not None:
            raise RecoveryPending(session.session_id, state.recovery_id, state.problem)
        if session.outcome_unknown:
            await self.adopt_committed(session)
            self.changed(session, "recovered")

    async def adopt_committed(self, session: OpenSession) -> None:
        """The live conversation is the committed one again (a transaction
        that crashed or lost its answer here may have committed a head this
        process never adopted)."""
        session.outcome_unknown = False
        if session.conversation.open_turn is None:
            self.adopt(session, await self.conversation_of(await read_committed(self.target, session.session_id)))

    async def require_no_pending_input(self, session: OpenSession, action: str) -> None:
        """Refused while prompts wait in the session's queue
        (:mod:`..transactions.pending_inputs`): they were written against
        the conversation this would change, and would be sent into it."""
        if not session.materialized:
            return
        from ..transactions.pending_inputs import load_inputs

        records, problems = await load_inputs(self.target, session.paths)
        waiting = len(records) + len(problems)
        if waiting:
            raise TurnStateConflict(
                session.session_id,
                f"has {waiting} queued prompt{'s' if waiting != 1 else ''}: send or cancel "
                f"{'them' if waiting != 1 else 'it'} before you {action}",
            )

    # Time ---------------------------------------------------------------------

    def clock_from(self, reading: int | None) -> None:
        """Anchor the target clock on a reading the target just gave."""
        if reading is None:
            return
        if self._time is None:
            self._time = TargetTime(reading)
            for session in self.sessions.values():
                session.time = self._time
        else:
            self._time.anchor(reading)

    async def now(self) -> int:
        """Target seconds now (read from the target the first time)."""
        if self._time is None:
            op = Clock(STATE_DIR)
            result = (await self.target.run(ControlProgram([op])))[0]
            raise_for_result(op, result)
            self.clock_from(int(result.value))
        assert self._time is not None
        return self._time.now()

    def clock(self) -> TargetTime:
        if self._time is None:  # every path that opens a session read the clock first
            raise RuntimeError("the target clock was never read")
        return self._time

    @property
    def clock_read(self) -> bool:
        return self._time is not None

    def time_now(self) -> int:
        return self.clock().now()


def _check_sidecar(snapshot: CommittedSnapshot, data: bytes | None) -> None:
    """Refuse a sidecar that does not load here, or names another session."""
    sidecar = classify_sidecar(data)
    if isinstance(sidecar, InspectRow):
        raise SessionIncompatible(snapshot.session_id, sidecar)
    if sidecar.session_id != snapshot.session_id:
        row = InspectRow(SidecarErrorKind.INVALID_VALUE, f"the sidecar belongs to session {sidecar.session_id}")
        raise SessionIncompatible(snapshot.session_id, row)
