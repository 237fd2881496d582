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
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass

from ...targets import ControlProgram, ListDir, MakeDirs, Status, Target, TargetError, raise_for_result
from ..errors import LeaseLost, PublicationFailed, PublicationPending, SessionOccupied, StoreError
from ..layout import SessionPaths, generation_numbers
from ..authority.lease import ClientIdentity, LeaseHandle, acquire_lease
from ..authority.publication import Publisher
from ..content.turns import Conversation, SaveCandidate
from ..authority.workspace import materialize_session
from .clock import TargetTime
from .background import PublicationCollector, TurnCheckpoints
from .errors import NoPendingPublication, SessionReadOnly, TransferDraining
from .live_history import LiveHistory
from .renewal import LeaseRenewal


class Access(enum.Enum):
    WRITABLE = "writable"
    READ_ONLY = "read-only"


@dataclass(frozen=True)
class SaveResult:
    session_id: str
    #: A new publication committed.
    committed: bool
    #: The committed publication head after the save (None: nothing saved yet).
    head: str | None
    #: This save created the session directory and claimed its lease.
    materialized: bool = False
    #: Logical paths whose bytes this save wrote / pointed at earlier bytes.
    written: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    #: Why nothing was published, when nothing was.
    note: str | None = None


@dataclass(frozen=True)
class PendingSave:
    candidate: SaveCandidate
    force: bool
    reason: str


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
    ) -> None:
        self.target = target
        self.client = client
        self.conversation = conversation
        self.paths = SessionPaths(conversation.session_id)
        self.time = time
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.lease = lease
        self.publisher = Publisher(lease) if lease is not None else None
        self.materialized = materialized
        #: Why the session is read-only (None: writable).
        self.read_only = read_only
        self.holder_host = holder_host
        self.pending: PendingSave | None = None
        #: The recovery ID of an interrupted transaction's marker, as last seen.
        self.recovery: str | None = None
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
        self.collector = PublicationCollector(self, keep_recent=collect_keep_recent) if collect_keep_recent is not None else None
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

    async def save(self, candidate: SaveCandidate | None, *, force: bool = False) -> SaveResult:
        """Publish ``candidate`` (``None``: a conversation with nothing to
        save yet, which is never materialized)."""
        self.require_mutable()
        if candidate is None:
            return SaveResult(self.session_id, False, self.head, note="nothing to save: the conversation is empty")
        try:
            return await self._publish(candidate, force)
        except LeaseLost as lost:
            self.pending = PendingSave(candidate, force, lost.reason)
            self.lose(lost.reason)
            raise
        except PublicationFailed as failed:
            self.pending = PendingSave(candidate, force, failed.reason)
            raise
        except (StoreError, TargetError) as error:
            # Materialization or the claim failed: nothing was committed.
            self.pending = PendingSave(candidate, force, str(error))
            raise

    async def retry(self) -> SaveResult:
        """Publish the pending save again."""
        self.require_writable()
        pending = self.pending
        if pending is None:
            raise NoPendingPublication(self.session_id)
        try:
            if self.publisher is not None and self.publisher.pending is not None:
                outcome = await self.publisher.retry()
                self.conversation.mark_committed(pending.candidate)
                self.pending = None
                if outcome.committed:
                    self.schedule_collection()
                return SaveResult(self.session_id, outcome.committed, outcome.head, False, outcome.written, outcome.reused)
            result = await self._publish(pending.candidate, pending.force)
        except LeaseLost as lost:
            self.lose(lost.reason)
            raise
        except PublicationFailed as failed:
            self.pending = PendingSave(pending.candidate, pending.force, failed.reason)
            raise
        self.pending = None
        return result

    def abandon(self) -> PendingSave | None:
        """Drop the pending publication; the committed head stays as it is and
        the live conversation keeps what the pending save held."""
        pending, self.pending = self.pending, None
        if self.publisher is not None:
            self.publisher.abandon()
        return pending

    async def _publish(self, candidate: SaveCandidate, force: bool) -> SaveResult:
        materialized = False
        if not self.materialized:
            await self._materialize()
            materialized = True
        if self.lease is None:
            await self._claim()
            materialized = True
        assert self.publisher is not None
        outcome = await self.publisher.publish(candidate.changed, force=force)
        self.conversation.mark_committed(candidate)
        if outcome.committed:
            self.schedule_collection()
        note = None if outcome.committed else "nothing changed since the committed save"
        return SaveResult(self.session_id, outcome.committed, outcome.head, materialized, outcome.written, outcome.reused, note)

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

    async def _claim(self) -> None:
        lease = await acquire_lease(self.target, self.session_id, self.client, duration_seconds=self.lease_seconds)
        self.adopt_lease(lease)

    def adopt_lease(self, lease: LeaseHandle) -> None:
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


async def materialize_session_controls(target: Target, paths: SessionPaths) -> None:
    """The control directories of a session directory that already exists."""
    ops = [MakeDirs(paths.lease_dir, optional=True), MakeDirs(paths.publications_dir, optional=True)]
    result = await target.run(ControlProgram(ops))
    for op, op_result in zip(ops, result):
        if op_result.status not in (Status.OK, Status.CONFLICT):
            raise_for_result(op, op_result)
