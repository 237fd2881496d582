"""Rewind, Redo, Fork, Worktree Fork, Save As and recovery on open sessions.

Every transaction is a plan of the two-phase skeleton
(:mod:`..transactions.two_phase`): ``prepare_*`` returns the impact with a
token; ``commit_*`` rechecks with that token (a moved state refuses with
``stale-head``); ``rewind_now`` and ``redo_now`` (``--yes``) do both at
once. This module only gates the session (open, writable, no recovery, no
previous owner's command running) and says how the skeleton sees it
(:meth:`History._source`). In-place transactions (Rewind, Redo) replace the open
session's live conversation; child transactions (Fork, Worktree Fork, Save
As) open the new session here, writable, keeping the lease the child was
published under.

Each transaction's module (like the service's turn views, diffs and file
restores) is imported in the method that runs it, so a command that only
lists sessions (``mevedel session list``) loads none of them.

A session with an interrupted transaction's recovery marker refuses every
mutation until :meth:`History.retry_recovery` or
:meth:`History.abandon_recovery` resolves it. The service's front holds this
capability as ``service.history``; the gate is the table's
(:meth:`~.table.SessionTable.gated`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..authority.publication import Publisher
from ..authority.workspace import check_session_id
from ..errors import OutcomeUnknown
from ..layout import publication_id_of
from ..transactions.lifecycle_token import LifecycleRefused, StateToken
from ..transactions.recovery import (
    NothingToRecover,
    RecoveryOutcome,
    RecoveryPending,
    abandon_recovery,
    find_recovery,
    retry_recovery,
)
from .errors import InvalidSessionInput, TurnStateConflict
from .open_session import OpenSession
from .table import SessionTable

# Each transaction's module is imported by the methods that run it: a
# command that only lists or reads sessions (most CLI commands, a short
# process each) never loads Rewind, Redo, Fork, Save As or Worktree Fork.
if TYPE_CHECKING:
    from ..transactions.fork import ChildOptions, ChildSession, ForkImpact, ForkResult
    from ..transactions.in_place import InPlaceResult
    from ..transactions.redo import RedoImpact, RedoStates
    from ..transactions.rewind import RewindImpact
    from ..transactions.save_as import SaveAsImpact
    from ..transactions.snapshot_cut import Side
    from ..transactions.two_phase import Source
    from ..transactions.worktree_fork import WorktreeForkImpact, WorktreeForkResult
    from ..workspace_wide.fork_variants import VariantGroup


class History:
    """Rewind, Redo, Fork, Worktree Fork, Save As and recovery over the
    sessions of ``table``."""

    def __init__(self, table: SessionTable) -> None:
        self._table = table

    def open_sessions(self) -> list[str]:
        return list(self._table.sessions)

    # Recovery -----------------------------------------------------------------

    async def recovery_pending(self, session_id: str) -> str | None:
        """The recovery ID of an interrupted Rewind or Redo of the session;
        None when nothing waits."""
        table = self._table
        listed = table.listed.get(check_session_id(session_id))
        if listed is not None and session_id not in table.sessions:
            return listed[1]  # this command's listing read the journal a moment ago
        state = await find_recovery(self._table.target, check_session_id(session_id))
        session = table.sessions.get(session_id)
        if session is not None:
            session.recovery, session.recovery_remains = state.recovery_id, state
            session.recovery_clear = state.recovery_id is None and session.lease is not None
        return state.recovery_id

    def _source(self, session: OpenSession, *, queue: str | None = None) -> Source:
        """``session`` as the two-phase skeleton sees it: its live
        conversation, the lease held here, a recovery its gate has just
        looked for and, with ``queue`` (the action), refused while prompts
        wait in its queue (:mod:`..transactions.pending_inputs`): they were
        written against the conversation this would change, and would be
        sent into it."""
        sid = session.session_id

        def queued(waiting: int) -> Exception:
            return TurnStateConflict(
                sid,
                f"has {waiting} queued prompt{'s' if waiting != 1 else ''}: send or cancel "
                f"{'them' if waiting != 1 else 'it'} before you {queue}",
            )

        watch_queue = queue is not None and session.materialized
        return _phases().Source(
            self._table.target,
            sid,
            session.conversation,
            session.publisher,
            recovery_checked=True,
            queued=queued if watch_queue else None,
            # What the claim listed, when nothing can have changed it since.
            remains=session.recovery_remains if session.recovery_clear else None,
            queue_listed=session.take_inputs_listing() if watch_queue else None,
        )

    async def retry_recovery(self, session_id: str) -> RecoveryOutcome:
        """Finish the interrupted transaction in the direction its commit
        point decided; the live conversation follows the committed head."""
        session = self._writable_with_lease(session_id, "retry its recovery")
        try:
            outcome = await retry_recovery(session.lease)
        except NothingToRecover:
            # The answer to a transaction whose outcome the host could not
            # tell: what is committed, live here too.
            unsure = session.outcome_unknown
            await self._after_recovery(session)
            if unsure:
                self._table.changed(session, "recovered")
            if session.lease.needs_resync:
                await session.lease.resync()
            raise NothingToRecover(session.session_id, _holds(session)) from None
        await self._after_recovery(session)
        self._table.changed(session, "recovered")
        return outcome

    async def abandon_recovery(self, session_id: str) -> RecoveryOutcome:
        """Drop the recovery marker and leave the project files as they are."""
        session = self._writable_with_lease(session_id, "abandon its recovery")
        outcome = await abandon_recovery(session.lease)
        await self._after_recovery(session)
        self._table.changed(session, "recovered")
        return outcome

    def _writable_with_lease(self, session_id: str, action: str) -> OpenSession:
        session = self._table.get(session_id, action)
        session.require_writable()
        if session.lease is None:
            raise LifecycleRefused(session.session_id, "there is no recovery to resolve: nothing is saved yet", kind="missing-target")
        return session

    async def _after_recovery(self, session: OpenSession) -> None:
        session.recovery_clear = False
        session.recovery = (await find_recovery(self._table.target, session.session_id)).recovery_id
        await self._table.adopt_committed(session)

    # Rewind -------------------------------------------------------------------

    async def prepare_rewind(self, session_id: str, boundary_kind: str, turn: int) -> RewindImpact:
        from ..transactions.rewind import Rewind
        from ..transactions.snapshot_cut import Boundary

        session = await self._table.gated(session_id, "rewind it", commands=True)
        boundary = Boundary(_side(boundary_kind), _turn(turn))
        return await _phases().prepare(Rewind(boundary, self._table.time_now()), self._source(session, queue="rewind it"))

    async def commit_rewind(self, session_id: str, token: str | StateToken) -> InPlaceResult:
        from ..transactions.rewind import Rewind

        session = await self._table.gated(session_id, "rewind it", commands=True)
        parsed = _phases().parse_token(token, (Rewind.op,), session.session_id)
        self._publisher(session)
        return await self._in_place(session, Rewind, parsed, "rewound", queue="rewind it")

    # Redo ---------------------------------------------------------------------

    async def redo_states(self, session_id: str) -> RedoStates:
        from ..transactions.redo import redo_states

        session = self._table.get(session_id, "list its redo states")
        return await redo_states(self._table.target, session.session_id)

    async def prepare_redo(self, session_id: str, publication_id: str) -> RedoImpact:
        from ..transactions.redo import Redo

        session = await self._table.gated(session_id, "redo it", commands=True)
        if not isinstance(publication_id, str) or not publication_id:
            raise InvalidSessionInput("the redo state", "must name a publication ID")
        return await _phases().prepare(Redo(publication_id, self._table.time_now()), self._source(session, queue="redo it"))

    async def commit_redo(self, session_id: str, token: str | StateToken) -> InPlaceResult:
        from ..transactions.redo import Redo

        session = await self._table.gated(session_id, "redo it", commands=True)
        parsed = _phases().parse_token(token, (Redo.op,), session.session_id)
        self._publisher(session)
        return await self._in_place(session, Redo, parsed, "redone", queue="redo it")

    async def rewind_now(self, session_id: str, boundary_kind: str, turn: int) -> InPlaceResult:
        """Prepare and commit a Rewind at once, its impact shown to nobody
        (``mevedel rewind --yes``): the commit rechecks with what the
        prepare has just read."""
        from ..transactions.rewind import Rewind
        from ..transactions.snapshot_cut import Boundary

        session = await self._table.gated(session_id, "rewind it", commands=True)
        boundary = Boundary(_side(boundary_kind), _turn(turn))
        self._publisher(session)
        return await self._in_place(session, Rewind(boundary, self._table.time_now()), None, "rewound", queue="rewind it")

    async def redo_now(self, session_id: str, publication_id: str) -> InPlaceResult:
        """Prepare and commit a Redo at once (``mevedel redo ID --yes``)."""
        from ..transactions.redo import Redo

        session = await self._table.gated(session_id, "redo it", commands=True)
        if not isinstance(publication_id, str) or not publication_id:
            raise InvalidSessionInput("the redo state", "must name a publication ID")
        self._publisher(session)
        return await self._in_place(session, Redo(publication_id, self._table.time_now()), None, "redone", queue="redo it")

    async def _in_place(self, session: OpenSession, plan, token: StateToken | None, reason: str, *, queue: str | None = None) -> InPlaceResult:
        """Commit an in-place ``plan`` (a plan class and the ``token`` it
        was prepared with; or, without a token, a plan to prepare and
        commit at once). Its recheck looks for a recovery in its first
        program; the live conversation follows what it committed."""
        source = self._source(session, queue=queue)
        session.recovery_clear = False  # a transaction that fails midway may leave its marker
        try:
            result = await (_phases().commit(plan, source, token) if token is not None else _phases().prepare_and_commit(plan, source))
        except RecoveryPending as pending:
            session.recovery = pending.recovery_id
            raise
        except OutcomeUnknown:
            session.outcome_unknown = True
            raise
        return self._in_place_done(session, result, reason)

    # Fork ---------------------------------------------------------------------

    async def prepare_fork(self, session_id: str, turn: int) -> ForkImpact:
        from ..transactions.fork import Fork

        session = self._table.get(session_id, "fork it")
        _refuse_in_flight(session, "fork it")
        return await _phases().prepare(Fork(_turn(turn), self._table.time_now()), self._source(session))

    async def commit_fork(self, session_id: str, token: str | StateToken) -> ForkResult:
        from ..transactions.fork import Fork

        session = self._table.get(session_id, "fork it")
        parsed = _phases().parse_token(token, (Fork.op,), session.session_id)
        result = await _phases().commit(Fork, self._source(session), parsed, child=self._child_options())
        self._adopt_child(result.child)
        return result

    async def fork_variants(self, session_id: str, turn: int) -> VariantGroup:
        from ..workspace_wide.fork_variants import fork_variants

        session = self._table.get(session_id, "list its fork variants")
        return await fork_variants(self._table.target, session.session_id, _turn(turn))

    # Worktree Fork --------------------------------------------------------------

    async def prepare_worktree_fork(
        self, session_id: str, turn: int, name: str | None = None, branch: str | None = None
    ) -> WorktreeForkImpact:
        from ..transactions.worktree_fork import WorktreeFork

        session = self._table.get(session_id, "fork it into a worktree")
        _refuse_in_flight(session, "fork it into a worktree")
        return await _phases().prepare(WorktreeFork(_turn(turn), name, branch, self._table.time_now()), self._source(session))

    async def commit_worktree_fork(self, session_id: str, token: str | StateToken) -> WorktreeForkResult:
        from ..transactions.worktree_fork import WorktreeFork

        session = self._table.get(session_id, "fork it into a worktree")
        parsed = _phases().parse_token(token, (WorktreeFork.op,), session.session_id)
        result = await _phases().commit(WorktreeFork, self._source(session), parsed, child=self._child_options())
        self._adopt_child(result.child)
        return result

    # Save As ------------------------------------------------------------------

    async def prepare_save_as(self, session_id: str, name: str) -> SaveAsImpact:
        from ..transactions.save_as import SaveAs

        session = self._table.get(session_id, "save it as a new session")
        return await _phases().prepare(SaveAs(name, self._table.time_now()), self._source(session))

    async def commit_save_as(self, session_id: str, token: str | StateToken) -> ChildSession:
        from ..transactions.save_as import SaveAs

        session = self._table.get(session_id, "save it as a new session")
        parsed = _phases().parse_token(token, (SaveAs.op,), session.session_id)
        child = await _phases().commit(SaveAs, self._source(session), parsed, child=self._child_options())
        self._adopt_child(child)
        return child

    # Internals ------------------------------------------------------------------

    def _publisher(self, session: OpenSession) -> Publisher:
        if session.publisher is None:
            raise InvalidSessionInput(f"session {session.session_id}", "has nothing saved yet; settle a turn first")
        return session.publisher

    def _in_place_done(self, session: OpenSession, result: InPlaceResult, reason: str) -> InPlaceResult:
        if result.committed:
            self._table.adopt(session, result.conversation)
            session.schedule_collection()
            self._table.changed(session, reason)
        return result

    def _child_options(self) -> ChildOptions:
        from ..transactions.fork import ChildOptions

        return ChildOptions(self._table.client, self.open_sessions(), self._table.lease_seconds, keep_lease=True,
                            names_holder=not self._table.leases_outlive_process)

    def _adopt_child(self, child: ChildSession) -> None:
        opened = self._table.new_open(child.conversation, lease=child.lease)
        self._table.sessions[child.session_id] = opened
        self._table.changed(opened, "created")


def _phases():
    """The two-phase skeleton (:mod:`..transactions.two_phase`), imported
    by the methods that run it, as the transactions are."""
    from ..transactions import two_phase

    return two_phase


def _holds(session: OpenSession) -> str:
    turns = session.conversation.sidecar.total_turn_count
    head = session.lease.publication_head if session.lease is not None else None
    committed = f" (published as {publication_id_of(head)})" if head else ""
    return f"{turns} settled turn{'s' if turns != 1 else ''}{committed}"


def _side(kind: str) -> Side:
    from ..transactions.snapshot_cut import Side

    try:
        return Side(kind)
    except ValueError:
        raise InvalidSessionInput(f"boundary {kind!r}", "is not one of after, before") from None


def _turn(turn: int) -> int:
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise InvalidSessionInput("the turn number", f"must be a whole number, not {turn!r}")
    return turn


def _refuse_in_flight(session: OpenSession, action: str) -> None:
    opened = session.conversation.open_turn
    if opened is not None:
        raise LifecycleRefused(session.session_id, f"cannot {action}: turn {opened.turn} is in flight; settle or abort it first")
