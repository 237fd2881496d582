"""One session this client has open: its live conversation and, when it is
writable, the lease and publisher that make its saves durable.

Saving
------
Every save is one publication of the candidate the conversation builds:
only the artifacts that differ from the last committed candidate go out,
over the committed manifest, and the lease rotation that names the new
manifest is the commit point (:mod:`..publication`). A session created here
is *lazy*: nothing is written until its first save, which materializes the
session directory, claims the lease and publishes, in that order.

A save that fails before its commit point leaves the prior head authoritative
and the session *publication pending*: further mutations are refused until
:meth:`OpenSession.retry` succeeds or :meth:`OpenSession.abandon` drops the
pending publication (the live conversation keeps its content, so the next save
carries it again). A save refused because another client took the lease over
makes the session read-only.

The pending publication is also journalled in the session directory
(:mod:`..transactions.pending_publication`) as soon as the target takes the
write, so a process that stops before a retry loses nothing: the next owner
that resumes the session opens it publication pending again, with the
recorded artifacts to retry (:meth:`OpenSession.restore_pending`). A record
the host cannot be reached to take is kept in the spool of this machine
(when the workspace is on another), and moved into the session directory
when a client on this machine next resumes the session; each step is told
(``on_spool``: :class:`~.values.SpoolNotice`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

import msgspec

from ...targets import (
    ControlProgram,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    Stat,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
    raise_for_result,
)
from ..authority.lease import (
    ClientIdentity,
    LeadStopped,
    LeaseHandle,
    Rider,
    acquire_lease,
    claim_new_session,
)
from ..authority.publication import Publisher
from ..authority.workspace import (
    identity_proof,
    materialize_session,
    session_directory_ops,
)
from ..content.turns import Conversation, SaveCandidate
from ..errors import (
    ClaimRaced,
    LeaseLost,
    PublicationFailed,
    PublicationPending,
    SessionOccupied,
    StoreError,
)
from ..layout import SessionPaths, generation_numbers
from ..transactions.pending_publication import (
    PendingMarker,
    PendingSpool,
    Recorded,
    already_committed,
    drop_spooled,
    find_pending,
    new_record,
    read_pending,
    record_pending,
    removal_ops,
    remove_pending,
    spool_pending,
    unspool_pending,
)
from ..transactions.recovery import RecoveryState
from .background import PublicationCollector, TurnCheckpoints
from .clock import TargetTime
from .errors import NoPendingPublication, SessionReadOnly, TransferDraining
from .live_history import LiveHistory
from .mutation_latch import MutationLatch
from .renewal import LeaseRenewal
from .values import Access, SaveResult, SpoolNotice

_log = logging.getLogger(__name__)


class PendingSave(msgspec.Struct, frozen=True):
    #: None: restored from the durable record after a restart (the live
    #: conversation is the committed one; the record holds what was pending).
    candidate: SaveCandidate | None
    force: bool
    reason: str
    #: The durable record of this pending publication (None: kept only in
    #: memory so far, the target did not take the record).
    record: PendingMarker | None = None
    #: Why the recorded publication can no longer be retried (only abandoned).
    stale: str | None = None
    #: The record kept in the client's spool while the host could not be
    #: reached to take it.
    spooled: Recorded | None = None


class OpenSession:
    def __init__(
        self,
        *,
        target: Target,
        client: ClientIdentity,
        conversation: Conversation,
        time: TargetTime,
        lease_seconds: int,
        renew_every: float,
        on_lost: Callable[[OpenSession, str], None],
        lease: LeaseHandle | None = None,
        materialized: bool = True,
        read_only: str | None = None,
        holder_host: str | None = None,
        head: str | None = None,
        collect_keep_recent: int | None = None,
        collect_deferred: bool = False,
        spool: PendingSpool | None = None,
        on_spool: Callable[[SpoolNotice], None] | None = None,
        names_holder: bool = True,
        for_turns: bool = False,
    ) -> None:
        self.target = target
        #: The lease names this process as its holder outside agent turns
        #: too (see :meth:`agent_turn`).
        self.names_holder = names_holder
        #: This process opened the session to run agent turns in it: its
        #: lease names it until it hands the lease to its client as it ends
        #: (see :meth:`hand_to_client`).
        self._for_turns = for_turns
        self._agent_turn = False
        if lease is not None:
            lease.names_holder = self._naming
        #: Where this client keeps a pending record its host could not take
        #: (a directory on this machine; None: in memory only).
        self.spool = spool
        self._on_spool = on_spool
        self.client = client
        self.conversation = conversation
        self.paths = SessionPaths(conversation.session_id)
        self.time = time
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.lease = lease
        self.publisher = Publisher(lease) if lease is not None else None
        self.materialized = materialized
        #: A first save's combined program (:meth:`_materialize_claimed`)
        #: failed without an answer: whether it made the directory is
        #: unknown until looked at.
        self._fresh_claim_unsure = False
        #: What the lease's next head commit carries, waiting for the lease
        #: a new session's first save claims (see :meth:`ride_next_commit`).
        self._waiting_riders: list[Rider] = []
        #: Held while a save makes the session's directory and claims its
        #: lease: two saves at once (a turn's first publication and the
        #: checkpoint timer's tick) must not both claim, or this process
        #: races itself for the lease and one of them loses to the other.
        self._claiming = asyncio.Lock()
        #: Why the session is read-only (None: writable).
        self.read_only = read_only
        self.holder_host = holder_host
        self.pending: PendingSave | None = None
        #: A turn left in flight waits for a restored pending publication
        #: to be retried or abandoned before it is settled as interrupted.
        self.repair_due = False
        #: The unsettled-mutation latch around agents' commands.
        self.latch = MutationLatch(client)
        #: The recovery ID of an interrupted transaction's marker, as last seen.
        self.recovery: str | None = None
        #: No marker was found since this process took the lease and no
        #: in-place transaction ran since: the recovery gate need not look
        #: again. Only the holder's own in-place transactions write a marker
        #: (each behind the lease proof), and each clears this first.
        self.recovery_clear = False
        #: What the recovery journal's directory held when the claim listed
        #: it (its remains, no marker); meaningful while ``recovery_clear``.
        self.recovery_remains: RecoveryState | None = None
        #: An in-place transaction ended with the host out of reach
        #: (``OutcomeUnknown``): the live conversation may not be the
        #: committed one, so the next look for a recovery adopts that.
        self.outcome_unknown = False
        #: The listing of queued input the claim's program took (see
        #: ``pending_inputs.input_listing``), for the queue's first load
        #: alone (:meth:`take_inputs_listing`).
        self.inputs_listed: OpResult | None = None
        #: Set while a granted control transfer drains this session: new
        #: mutations are refused, the turn in flight may still finish.
        self.handing_over: str | None = None
        #: Tasks running a mutation of this session (a hand-over waits for them).
        self._operations: set[asyncio.Task] = set()
        #: Called whenever one of those tasks ends.
        self.on_operation_done: list[Callable[[], None]] = []
        self.history = LiveHistory(conversation)
        self._head = head
        self._on_lost = on_lost
        self._renewal: LeaseRenewal | None = None
        #: Publication collection after every commit and lease-acquiring
        #: open (None: this session is not collected).
        self.collector = PublicationCollector(self, keep_recent=collect_keep_recent, deferred=collect_deferred) if collect_keep_recent is not None else None
        #: The mid-turn checkpoint timer (the service installs it).
        self.checkpoints: TurnCheckpoints | None = None
        if lease is not None:
            self._start_renewal()
            self.schedule_collection()

    # Facts ----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.conversation.session_id

    @property
    def access(self) -> Access:
        return Access.READ_ONLY if self.read_only is not None else Access.WRITABLE

    @property
    def head(self) -> str | None:
        """The committed publication head this client knows."""
        # A read-only copy holds the head it adopted (joined, followed, or
        # the last one its lost or released lease named).
        if self.read_only is None and self.lease is not None and not self.lease.lost:
            return self.lease.publication_head
        return self._head

    @property
    def renewal(self) -> LeaseRenewal | None:
        return self._renewal

    # Guards ---------------------------------------------------------------

    def require_writable(self) -> None:
        if self.read_only is not None:
            raise SessionReadOnly(self.session_id, self.read_only)

    def require_mutable(self) -> None:
        """Writable and with no publication pending."""
        self.require_writable()
        if self.pending is not None:
            raise PublicationPending(self.session_id, self.pending.reason)

    def require_admission(self, *, turn_work: bool = False) -> None:
        """New work may start. While a granted transfer drains the session
        only the turn in flight goes on (``turn_work``: its settlement and
        checkpoints; its records are appended without this gate)."""
        if self.handing_over is None:
            return
        if turn_work and self.conversation.open_turn is not None:
            return
        raise TransferDraining(self.session_id, self.handing_over)

    def track_operation(self) -> None:
        """The current task mutates this session until it ends."""
        task = asyncio.current_task()
        if task is None or task in self._operations:
            return
        self._operations.add(task)
        task.add_done_callback(self._operation_done)

    def _operation_done(self, task: asyncio.Task) -> None:
        self._operations.discard(task)
        for callback in list(self.on_operation_done):
            callback()

    def operations_running(self) -> bool:
        """Another task is in the middle of a mutation of this session."""
        current = asyncio.current_task()
        return any(task is not current and not task.done() for task in self._operations)

    def hand_over(self, why: str, holder_host: str | None) -> None:
        """The lease was released (to a requester, or by the user): keep the
        conversation for reading and following only."""
        self.read_only = why
        self._head = self.lease.publication_head if self.lease is not None else self._head
        self.lease = None
        self.publisher = None
        self.handing_over = None
        self.holder_host = holder_host
        self._stop_background()

    def lose(self, why: str) -> None:
        """The lease is gone: keep the conversation for reading only."""
        if self.read_only is not None:
            return
        self.read_only = f"this client lost the lease ({why})"
        self._head = self.lease.publication_head if self.lease is not None else self._head
        if self._renewal is not None:
            renewal, self._renewal = self._renewal, None
            renewal.cancel()  # may run inside the renewal task: never await it here
        self._stop_background()
        self._on_lost(self, why)

    def take_inputs_listing(self) -> OpResult | None:
        """The claim's listing of queued input, once (later loads list again).
        Nothing can have joined the queue since the claim: entries are
        written behind this lease's proof by this process's queue (which
        loads first), or by another ``mevedel prompt --queue`` only while a
        runner record names a process running this session's turns."""
        listed, self.inputs_listed = self.inputs_listed, None
        return listed

    def schedule_collection(self) -> None:
        """Collect superseded publications in the background, soon."""
        if self.collector is not None and self.read_only is None:
            self.collector.schedule()

    def _stop_background(self) -> None:
        if self.collector is not None:
            self.collector.cancel()
        if self.checkpoints is not None:
            self.checkpoints.cancel()

    async def stop_background(self) -> None:
        """Stop collection and mid-turn checkpoints, each after the step it is in."""
        if self.checkpoints is not None:
            await self.checkpoints.stop()
        if self.collector is not None:
            await self.collector.stop()

    # Saving ---------------------------------------------------------------

    async def save(
        self, candidate: SaveCandidate | None, *, force: bool = False, lead: Sequence[Operation] = (),
        release: Mapping[str, object] | None = None,
    ) -> SaveResult:
        """Publish ``candidate`` (``None``: a conversation with nothing to
        save yet, which is never materialized). ``release``: this save is
        the lease's release too, one commit with these changes of the
        released generation after ``lead`` (a granted transfer's fence;
        :class:`~..authority.lease.LeadStopped` when it stops the program,
        nothing written), made even when nothing changed
        (:meth:`Publisher.publish <..authority.publication.Publisher.publish>`);
        the session is then publication pending only when a publication
        failed, not a release alone."""
        self.require_mutable()
        if release is not None and (self.lease is None or candidate is None):
            raise ValueError("a save releases only a lease this client holds, with a conversation to publish")
        if candidate is None:
            return SaveResult(self.session_id, False, self.head, note="nothing to save: the conversation is empty")
        try:
            return await self._publish(candidate, force, lead, release)
        except LeaseLost as lost:
            self.pending = PendingSave(candidate, force, lost.reason)
            self.lose(lost.reason)
            raise
        except PublicationFailed as failed:
            self.pending = PendingSave(candidate, force, failed.reason)
            await self.keep_pending()
            failed.recorded, failed.spooled = self.pending.record is not None, self.pending.spooled is not None
            raise
        except (StoreError, TargetError) as error:
            if release is not None:
                raise  # a release alone failed (a publication's failure is a PublicationFailed): nothing to publish again
            # Materialization or the claim failed: nothing was committed.
            self.pending = PendingSave(candidate, force, str(error))
            await self.keep_pending()
            raise

    async def retry(self, *, lead: Sequence[Operation] = (), release: Mapping[str, object] | None = None) -> SaveResult:
        """Publish the pending save again. ``lead``, ``release``: as
        :meth:`save`'s -- the retry of a release's own publication is that
        release again, and its program removes the durable record once the
        released generation is written (the lease is gone after it)."""
        self.require_writable()
        pending = self.pending
        if pending is None:
            raise NoPendingPublication(self.session_id)
        if release is not None and self.lease is None:
            raise ValueError("a retry releases only a lease this client holds")
        trailing = removal_ops(self.paths, pending.record.pending_id) if release is not None and pending.record else []
        if pending.candidate is None:
            return await self._retry_recorded(pending, lead, release, trailing)
        try:
            if self.publisher is not None and self.publisher.pending is not None:
                outcome = await self.publisher.retry(lead=lead, release=release, trailing=trailing)
                self.conversation.mark_committed(pending.candidate)
                self.pending = None
                if outcome.committed and release is None:
                    self.schedule_collection()
                await self._drop_record(pending, removed=release is not None)
                return SaveResult(self.session_id, outcome.committed, outcome.head, False, outcome.written, outcome.reused)
            result = await self._publish(pending.candidate, pending.force, lead, release, trailing)
        except LeaseLost as lost:
            self.lose(lost.reason)
            raise
        except PublicationFailed as failed:
            self.pending = PendingSave(pending.candidate, pending.force, failed.reason, pending.record, spooled=pending.spooled)
            await self.keep_pending()
            failed.recorded, failed.spooled = self.pending.record is not None, self.pending.spooled is not None
            raise
        self.pending = None
        await self._drop_record(pending, removed=release is not None)
        return result

    async def abandon(self) -> PendingSave | None:
        """Drop the pending publication and its durable record; the committed
        head stays as it is and the live conversation keeps what the pending
        save held (a restored one: the committed conversation)."""
        pending = self.pending
        if pending is not None and pending.record is not None:
            self.require_writable()
            # The record goes first: a failure here leaves the pending state
            # whole, on disk and in memory, to abandon again.
            await self._remove_record(pending.record.pending_id)
        if pending is not None and pending.spooled is not None and self.spool is not None:
            await drop_spooled(self.spool, pending.spooled.marker)
        self.pending = None
        if self.publisher is not None:
            self.publisher.abandon()
        return pending

    # The durable pending record ----------------------------------------------

    async def keep_pending(self) -> None:
        """Journal the pending publication in the session directory (best
        effort: a target that refuses this too leaves it in memory, and the
        next failure or :meth:`keep_pending` call tries again). A host that
        cannot be reached leaves it in the spool, when there is one."""
        pending = self.pending
        publisher = self.publisher
        if pending is None or pending.record is not None or pending.candidate is None:
            return
        if publisher is None or publisher.pending is None or self.lease is None or self.lease.lost:
            return  # nothing was planned under a lease: nothing to journal
        planned = publisher.pending
        # A spooled record keeps its ID: the host takes that same record.
        record = pending.spooled if pending.spooled is not None else new_record(
            self.session_id,
            self.client,
            artifacts=planned.artifacts,
            base_head=self.lease.publication_head,
            replace=planned.replace,
            force=planned.force,
            reason=pending.reason,
            at=self.time.now(),
        )
        try:
            await record_pending(self.lease, record)
        except TargetUnavailable as error:
            if pending.spooled is None and await self._spool(record, error):
                if self.pending is pending:
                    self.pending = msgspec.structs.replace(pending, spooled=record)
                self._tell_spool("kept", record.marker)
            return
        except (StoreError, TargetError) as error:
            _log.warning("session %s: the pending publication is kept only in memory: %s", self.session_id, error)
            return
        if self.pending is pending:
            self.pending = msgspec.structs.replace(pending, record=record.marker, spooled=None)
        if pending.spooled is not None:
            await self._drop_spooled(pending.spooled)
            self._tell_spool("recorded", record.marker)

    async def _spool(self, record: Recorded, unreachable: TargetUnavailable) -> bool:
        """Keep ``record`` on this machine (True: kept)."""
        if self.spool is None:
            _log.warning("session %s: the pending publication is kept only in memory: %s", self.session_id, unreachable)
            return False
        try:
            await spool_pending(self.spool, record)
        except TargetError as error:
            _log.warning(
                "session %s: the pending publication is kept only in memory: %s; nor could this machine keep it: %s",
                self.session_id, unreachable, error,
            )
            return False
        return True

    def _tell_spool(self, event: str, marker: PendingMarker) -> None:
        if self._on_spool is not None:
            self._on_spool(SpoolNotice(self.session_id, event, marker.recorded_at, marker.host))

    async def _drop_spooled(self, record: Recorded) -> None:
        """The host holds the record (or what it published) now; a failure
        is harmless: the next resume moves it again, and the head holding
        it, or the record there, makes the copy a no-op."""
        if self.spool is None:
            return
        try:
            await drop_spooled(self.spool, record.marker)
        except TargetError as error:
            _log.info("session %s: the spooled pending publication stays for now: %s", self.session_id, error)

    async def restore_pending(self, listed: OpResult | None = None) -> PendingSave | None:
        """Adopt the durable record a stopped process left (call right after
        the lease is claimed). A record whose publication the committed head
        already holds is removed; one planned over another head can only be
        abandoned. ``listed``: its directory's listing, already run."""
        if self.lease is None or self.pending is not None:
            return self.pending
        unspooled = await unspool_pending(self.spool, self.lease) if self.spool is not None else None
        moved = unspooled.recorded if unspooled is not None else None
        if unspooled is not None and unspooled.found:
            listed = None  # a record may have moved in after that listing
        found = await find_pending(self.target, self.paths, listed=listed)
        if found.pending_id is None:
            return None
        marker = found.marker
        if marker is not None and await already_committed(self.lease, marker):
            await self._remove_record(marker.pending_id)
            if moved is not None and moved.pending_id == marker.pending_id:
                self._tell_spool("published", moved)  # its answer was lost, not its publication
            return None
        if marker is None:
            marker = PendingMarker(
                pending_id=found.pending_id, session_id=self.session_id, client_id="unknown", host="unknown",
                recorded_at=0, base_head=None, replace=False, force=False, reason=found.problem or "", entries={},
            )
        stale = found.problem
        if stale is None and marker.base_head != self.lease.publication_head:
            stale = "the session moved on since (its committed head is not the one the publication was planned over)"
        who = f"{marker.host} ({marker.client_id[:8]})" if marker.client_id != self.client.client_id else "this client"
        reason = f"a save by {who} did not publish: {marker.reason}" if found.problem is None else "a save did not publish"
        if stale is not None:
            reason += f"; it can only be abandoned: {stale}"
        self.pending = PendingSave(None, marker.force, reason, marker, stale)
        if moved is not None and moved.pending_id == marker.pending_id:
            self._tell_spool("recorded", moved)
        return self.pending

    async def _retry_recorded(
        self, pending: PendingSave, lead: Sequence[Operation] = (), release: Mapping[str, object] | None = None,
        trailing: Sequence[Operation] = (),
    ) -> SaveResult:
        """Publish exactly the recorded artifacts over the head they were
        planned against, then drop the record (``release``: the release's
        program drops it)."""
        record = pending.record
        assert record is not None and self.publisher is not None and self.lease is not None
        if pending.stale is not None:
            raise PublicationFailed(self.session_id, f"the recorded publication cannot be retried: {pending.stale}; abandon it")
        if self.lease.publication_head != record.base_head:
            raise PublicationFailed(self.session_id, "the session moved on since the publication was recorded; abandon it")
        try:
            artifacts = await read_pending(self.target, self.paths, record)
        except ValueError as bad:
            raise PublicationFailed(self.session_id, f"the recorded publication cannot be retried: {bad}; abandon it") from None
        try:
            outcome = await self.publisher.publish(
                artifacts, replace=record.replace, force=record.force, lead=lead, release=release, trailing=trailing
            )
        except LeaseLost as lost:
            self.lose(lost.reason)
            raise
        except PublicationFailed as failed:
            self.publisher.abandon()  # the record still holds it
            self.pending = PendingSave(None, pending.force, failed.reason, record)
            failed.recorded = True
            raise
        self.pending = None
        if outcome.committed and release is None:
            self.schedule_collection()
        await self._drop_record(pending, removed=release is not None)
        return SaveResult(self.session_id, outcome.committed, outcome.head, False, outcome.written, outcome.reused)

    async def _drop_record(self, pending: PendingSave, *, removed: bool = False) -> None:
        """After the publication committed: its record is history (a failure
        is harmless, the next resume finds the head holds it and removes it).
        ``removed``: the committing program removed it already."""
        if pending.spooled is not None:
            await self._drop_spooled(pending.spooled)
            self._tell_spool("published", pending.spooled.marker)
        if pending.record is None or self.lease is None or removed:
            return
        try:
            await self._remove_record(pending.record.pending_id)
        except (StoreError, TargetError) as error:
            _log.info("session %s: the committed pending record stays for now: %s", self.session_id, error)

    async def _remove_record(self, pending_id: str) -> None:
        if self.lease is None:
            raise SessionReadOnly(self.session_id, "this client holds no lease on it")
        await remove_pending(self.lease, pending_id)

    async def _publish(
        self, candidate: SaveCandidate, force: bool, lead: Sequence[Operation] = (), release: Mapping[str, object] | None = None,
        trailing: Sequence[Operation] = (),
    ) -> SaveResult:
        async with self._claiming:
            materialized = await self._materialize_and_claim()
        assert self.publisher is not None
        outcome = await self.publisher.publish(candidate.changed, force=force, lead=lead, release=release, trailing=trailing)
        self.conversation.mark_committed(candidate)
        if outcome.committed and release is None:
            self.schedule_collection()
        note = None if outcome.committed else "nothing changed since the committed save"
        return SaveResult(self.session_id, outcome.committed, outcome.head, materialized, outcome.written, outcome.reused, note)

    async def _materialize_and_claim(self) -> bool:
        """The session's directory made and its lease claimed, unless a
        save before did both (call under ``_claiming``); whether this call
        wrote either."""
        materialized = False
        if self._fresh_claim_unsure:
            if await _directory_exists(self.target, self.paths):
                # Made by the failed program, perhaps not its control directories.
                await materialize_session_controls(self.target, self.paths)
                self.materialized = True
            self._fresh_claim_unsure = False
        elif not self.materialized and self.lease is None and await self._materialize_claimed():
            materialized = True
        if not self.materialized:
            await self._materialize()
            materialized = True
        if self.lease is None:
            await self._claim()
            materialized = True
        return materialized

    async def _materialize(self) -> None:
        try:
            await materialize_session(self.target, self.session_id)
        except SessionOccupied:
            # The directory may hold only this session's own work:// files
            # (written before the first save); anything with a lease
            # generation or a publication is somebody else's session.
            if await _has_store_records(self.target, self.paths):
                raise
            await materialize_session_controls(self.target, self.paths)
        self.materialized = True

    async def _materialize_claimed(self) -> bool:
        """A new session's first save: the identity proven unchanged, the
        directory made (exclusively) and the lease claimed in one program
        (a new directory has no lease to observe). False, with nothing
        written, when the identity is not the one the session records or
        the directory is occupied: :meth:`_materialize` judges those."""
        workspace_id = self.conversation.sidecar.workspace_id
        if not workspace_id:
            return False
        lead = [identity_proof(workspace_id), *session_directory_ops(self.paths)]
        try:
            lease = await claim_new_session(
                self.target, self.session_id, self.client, duration_seconds=self.lease_seconds, now=self.time.now(), lead=lead,
                names_holder=self._naming,
            )
        except LeadStopped:
            return False
        except ClaimRaced:
            self.materialized = True  # the directory was made; its lease is judged afresh
            raise
        except BaseException:
            self._fresh_claim_unsure = True
            raise
        self.materialized = True
        self.adopt_lease(lease)
        # The directory is this program's own: no recovery journal can be in it.
        self.recovery_clear, self.recovery_remains = True, RecoveryState(None, None, None)
        return True

    async def _claim(self) -> None:
        lease = await acquire_lease(
            self.target, self.session_id, self.client, duration_seconds=self.lease_seconds, names_holder=self._naming
        )
        self.adopt_lease(lease)

    def ride_next_commit(
        self, ops: Sequence[Operation], *, delivered: Callable[[tuple[OpResult, ...]], bool | None] | None = None,
        lock: str | None = None,
    ) -> Rider:
        """Have the lease's next head commit carry ``ops`` (see
        :meth:`LeaseHandle.ride`); before a new session's first save has
        claimed its lease, the commit that save makes right after its claim."""
        if self.lease is not None:
            return self.lease.ride(ops, delivered=delivered, lock=lock)
        rider = Rider(tuple(ops), delivered=delivered, lock=lock)
        self._waiting_riders.append(rider)
        return rider

    def withdraw(self, rider: Rider) -> bool:
        """Stop ``rider`` (:meth:`ride_next_commit`); False when no commit
        would have carried it any more."""
        if rider in self._waiting_riders:
            self._waiting_riders.remove(rider)
            return True
        return self.lease is not None and self.lease.withdraw(rider)

    @property
    def _naming(self) -> bool:
        """Whether the lease's generations name this process now: always
        (a server's), else while an agent turn it runs is open, or while it
        runs the session's turns (from the claim to its end)."""
        return self.names_holder or self._agent_turn or self._for_turns

    def agent_turn(self, running: bool) -> None:
        """An agent turn this process runs opens (or ends): while it is
        open, the lease's generations name this process even where they
        otherwise would not, since the turn dies with the process."""
        self._agent_turn = running
        if self.lease is not None:
            self.lease.names_holder = self._naming

    async def hand_to_client(self) -> None:
        """The process that opened the session to run agent turns in it
        ends well (its turns settled, or none began: refused, or failed
        before one): its lease, which outlives it for its client's next
        command, stops naming it -- one generation naming no process. Until
        then every generation named it, its settlements' too, so that killed
        at any point before -- its agent starting, mid-turn, or stopping its
        agent after its last settlement -- it is proven dead. A lease another
        process holds now (this client's next command took it meanwhile, or
        a takeover) is left alone: it is not this process's to hand. So is
        one whose last write failed mid-way (its host went away as it
        settled): its generation is unknown, the host likely out of reach,
        and the head it left names this process, as after a kill."""
        if not self._for_turns:
            return
        self._for_turns = False
        lease = self.lease
        if lease is None:
            return
        lease.names_holder = self._naming
        if lease.needs_resync:
            return
        if not lease.names_holder and lease.record.holder is not None and not (lease.lost or lease.released):
            try:
                await lease.renew()
            except LeaseLost:
                return

    def adopt_lease(self, lease: LeaseHandle) -> None:
        lease.names_holder = self._naming
        lease.riding.extend(self._waiting_riders)
        self._waiting_riders.clear()
        self.lease = lease
        self.publisher = Publisher(lease)
        self.time.anchor(lease.now)
        self._start_renewal()
        self.schedule_collection()

    # Lifetime -------------------------------------------------------------

    def _start_renewal(self) -> None:
        assert self.lease is not None
        self._renewal = LeaseRenewal(
            self.lease,
            interval=self.renew_every,
            on_renewed=self.time.anchor,
            on_lost=self.lose,
        )
        self._renewal.start()

    async def stop_renewal(self) -> None:
        if self._renewal is not None:
            renewal, self._renewal = self._renewal, None
            await renewal.stop()

    def resume_renewal(self) -> None:
        """Renew again after :meth:`stop_renewal` while the lease is still
        this client's to hold (a release whose program failed)."""
        lease = self.lease
        if lease is not None and not (lease.lost or lease.released) and self.read_only is None and self._renewal is None:
            self._start_renewal()

    async def release(self) -> None:
        """Stop renewing and release the lease (a lost lease is left alone)."""
        await self.stop_background()
        await self.stop_renewal()
        if self.lease is not None and not self.lease.lost and not self.lease.released and self.read_only is None:
            await self.lease.release()


async def _has_store_records(target: Target, paths: SessionPaths) -> bool:
    ops = [ListDir(paths.lease_dir, optional=True), ListDir(paths.publications_dir, optional=True)]
    result = await target.run(ControlProgram(ops))
    for op, op_result in zip(ops, result):
        if op_result.status is Status.ABSENT:
            continue
        raise_for_result(op, op_result)
        names = [name for name in op_result.value if not name.startswith(".")]
        if op is ops[0] and generation_numbers(names):
            return True
        if op is ops[1] and names:
            return True
    return False


async def _directory_exists(target: Target, paths: SessionPaths) -> bool:
    stat = Stat(paths.root, optional=True)
    found = (await target.run(ControlProgram([stat])))[0]
    if found.status is Status.ABSENT:
        return False
    raise_for_result(stat, found)
    return True


async def materialize_session_controls(target: Target, paths: SessionPaths) -> None:
    """The control directories of a session directory that already exists."""
    ops = [MakeDirs(paths.lease_dir, optional=True), MakeDirs(paths.publications_dir, optional=True)]
    result = await target.run(ControlProgram(ops))
    for op, op_result in zip(ops, result):
        if op_result.status not in (Status.OK, Status.CONFLICT):
            raise_for_result(op, op_result)
