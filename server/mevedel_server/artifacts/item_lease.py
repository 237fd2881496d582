"""Item leases: which server process commits a live item (a document or a
whiteboard).

Every generation is an immutable record ``generation-N.json`` below the
item's lease directory, as a session lease's generations are, with its times
read from the target clock inside the writing operation. Unlike a session
lease, every transition and every fenced write of an item holds the store's
mutation lock (``flock`` on ``.mevedel/leases/artifacts``), so a transition
is simply: under the lock, the head is still exactly the generation this
process saw (``Verify`` of its bytes) and no generation above it exists;
then write ``N+1``. A whole-item write carries the same proof and writes its
own ``N+1`` (a renewal) ahead of the item's files in that one locked
program, so a late write from a holder whose lease was taken over fails
before anything of the item is touched.

Standing, judged by the target clock read with the head:

- no generation, or a ``released`` head: free, the next write takes it;
- an ``active`` head of this process: ours (even once expired: renewal or
  the next write reclaims it, nobody having taken it meanwhile);
- another process's ``active`` head before ``expires_at``: held there, the
  item is read-only here; ``request_handover`` asks for it;
- another process's ``active`` head at or past ``expires_at``: expired, the
  next write takes it over without a question (an item has no unsettled
  mutations and every write is whole and fenced);
- another process's ``active`` head before ``expires_at`` whose writer
  (its ``process``) is proven, from this machine, to have ended: expired
  too, at once. Every generation names the process that wrote it, since an
  item lease dies with its process (a server and a CLI command both release
  theirs when they end well, and renew nothing after). The proof is
  :func:`~mevedel_server.targets.process_has_ended`, the one a session
  lease's holder is judged by: only on the writer's machine, boot and
  namespaces; a generation without ``process`` (an older writer's), a
  writer elsewhere, or any doubt leaves the expiry to decide. A dead
  writer renews nothing, so the takeover's ``Verify`` of its head under the
  store lock still elects one successor.

A holder renews every third of the duration. At a renewal it hands the
item over (writes ``released``) when another process asked for it and the
item has had no write here for ``idle_seconds`` (10): saves arrive one at a
time while someone edits, so an empty queue alone is no sign of an idle
item.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgspec

from ..store import ClientIdentity, stamped_record
from ..targets import (
    Clock,
    ControlProgram,
    MakeDirs,
    Operation,
    Read,
    ReadNewest,
    Remove,
    Replace,
    StampedCreate,
    Status,
    Target,
    Verify,
    process_has_ended,
    raise_for_result,
    this_process,
)
from .errors import ArtifactError
from .layout import GENERATION_FAMILY, LEASES_ROOT, LOCK_DIR, ItemPaths
from .records import (
    HandoverRequest,
    ItemLeaseRecord,
    ItemLeaseState,
    RecordRefused,
    decode_record,
    encode,
)

_log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60
HANDOVER_IDLE_SECONDS = 10.0


class LeaseView(msgspec.Struct, frozen=True):
    """An item lease's head and the target clock, read together."""

    item_id: str
    generation: int
    record: ItemLeaseRecord | None
    raw: bytes | None
    now: int
    handover: HandoverRequest | None = None
    #: The head is live by the clock, and the process that wrote it was
    #: proven, from this machine, to have ended when it was read.
    writer_ended: bool = False

    def standing(self, client_id: str) -> str:
        """``free``, ``mine``, ``held`` or ``expired`` (by the clock, or at
        once when its writer process ended)."""
        rec = self.record
        if rec is None or rec.state is ItemLeaseState.RELEASED:
            return "free"
        if rec.client_id == client_id:
            return "mine"
        return "expired" if self.now >= rec.expires_at or self.writer_ended else "held"

    @property
    def holder_host(self) -> str | None:
        return self.record.host if self.record is not None else None

    @property
    def holder_phrase(self) -> str:
        """``on HOST`` (``on HOST, EDITOR,``) for a sentence naming the holder."""
        rec = self.record
        host = rec.host if rec is not None and rec.host else "another machine"
        return f"on {host}, {rec.holder}," if rec is not None and rec.holder else f"on {host}"

    @property
    def holder_text(self) -> str | None:
        """Who holds it, for people: the editor or process and its host."""
        rec = self.record
        if rec is None:
            return None
        return f"{rec.holder} on {rec.host}" if rec.holder else rec.host


class _Held(msgspec.Struct):
    generation: int
    raw: bytes
    #: ``time.monotonic()`` of the last write here (hand-over waits for idle).
    last_edit: float


def _prune(paths: ItemPaths, head: int) -> list[Operation]:
    """Once ``head + 1`` is written, ``head - 1`` goes (never generation 1)."""
    return [Remove(paths.generation(head - 1), optional=True)] if head > 2 else []


def _generation_of(name: str) -> int:
    return int(name[len(GENERATION_FAMILY[0]) : -len(GENERATION_FAMILY[2])])


def lease_view(item_id: str, newest: tuple[str, bytes], now: int, handover: HandoverRequest | None = None) -> LeaseView:
    """The view of a lease head read as ``(name, bytes)`` by ``ReadNewest``
    with the target clock reading ``now``; ``unreadable`` when the record
    cannot be trusted."""
    name, raw = newest
    generation = _generation_of(name)
    try:
        record = decode_record(ItemLeaseRecord, raw, f"lease generation {generation} of {item_id}")
    except RecordRefused as exc:
        raise ArtifactError("unreadable", item_id, f"its lease record cannot be trusted ({exc.reason}); nothing was written") from None
    if record.generation != generation:
        raise ArtifactError("unreadable", item_id, f"lease generation {generation} records generation {record.generation}")
    # Judged once, with the head it is about: the proof only ever says
    # "ended", and an ended process never comes back.
    ended = (
        record.state is ItemLeaseState.ACTIVE and now < record.expires_at
        and record.process is not None and process_has_ended(record.process)
    )
    return LeaseView(item_id, generation, record, raw, now, handover, ended)


class ItemLeases:
    """The item leases this process holds on one workspace's store."""

    def __init__(
        self,
        target: Target,
        client: ClientIdentity,
        *,
        duration_seconds: int = DEFAULT_LEASE_SECONDS,
        idle_seconds: float = HANDOVER_IDLE_SECONDS,
        renew_every: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if duration_seconds < 3:
            raise ValueError("an item lease lasts at least 3 seconds")
        self.target = target
        self.client = client
        self.duration = duration_seconds
        self.idle_seconds = idle_seconds
        self.renew_every = renew_every if renew_every is not None else duration_seconds / 3
        self._monotonic = monotonic
        #: The editor or process this is (``Neovim 0.12 (pid 4242)``),
        #: written into each generation so people can tell two editors on
        #: one machine apart.
        self.label: str | None = None
        self._held: dict[str, _Held] = {}
        #: One queue per item in this process: its writes, renewals and
        #: release run one at a time, so a proof this process took is never
        #: overtaken by this process's own next generation.
        self._queues: dict[str, asyncio.Lock] = {}
        self._renewal: asyncio.Task | None = None
        #: Called with (item id, reason) when this process hands an item over
        #: (``handed-over``) or finds it lost (``fenced``).
        self.on_change: list[Callable[[str, str], None]] = []

    def queue(self, item_id: str) -> asyncio.Lock:
        lock = self._queues.get(item_id)
        if lock is None:
            lock = self._queues[item_id] = asyncio.Lock()
        return lock

    def holds(self, item_id: str) -> bool:
        return item_id in self._held

    # Observing -------------------------------------------------------------

    async def observe(self, item_id: str) -> LeaseView:
        ops = self.observe_ops(item_id)
        return self.observed(item_id, ops, await self.target.run(ControlProgram(ops)))

    def observe_ops(self, item_id: str) -> list[Operation]:
        """The operations of :meth:`observe`, to end another program that
        reads the item (its answers, the last four, go to :meth:`observed`)."""
        paths = ItemPaths(item_id)
        newest = ReadNewest(paths.lease_dir, *GENERATION_FAMILY, optional=True)
        return [MakeDirs(LEASES_ROOT, optional=True), newest, Read(paths.handover, optional=True), Clock(LEASES_ROOT)]

    def observed(self, item_id: str, ops: list[Operation], results) -> LeaseView:
        """The view the operations ``ops`` of :meth:`observe_ops` read:
        ``results`` ends with their answers."""
        result = list(results)[-4:]
        newest, clock = ops[1], ops[3]
        raise_for_result(clock, result[3])
        now = int(result[3].value)
        request = None
        if result[2].ok:
            try:
                request = decode_record(HandoverRequest, result[2].value, f"{item_id} hand-over request")
            except RecordRefused:
                request = None  # a torn request asks for nothing
        if result[1].status is Status.ABSENT:
            return LeaseView(item_id, 0, None, None, now, request)
        raise_for_result(newest, result[1])
        return lease_view(item_id, result[1].value, now, request)

    def holder(self, view: LeaseView) -> str | None:
        """The host of another process holding the item live (None: free,
        expired, or this process's own)."""
        return (view.holder_host or "another machine") if view.standing(self.client.client_id) == "held" else None

    def holder_text(self, view: LeaseView) -> str | None:
        """That holder for people: its editor or process and its host."""
        return (view.holder_text or "another machine") if view.standing(self.client.client_id) == "held" else None

    def _record(self, generation: int, state: ItemLeaseState) -> ItemLeaseRecord:
        label = self.label[:200] if self.label else None
        return ItemLeaseRecord(
            generation=generation,
            state=state,
            client_id=self.client.client_id,
            host=self.client.host,
            renewed_at=0,
            expires_at=0,
            holder=label,
            process=this_process(),
        )

    # Fencing ----------------------------------------------------------------

    def fence(self, view: LeaseView) -> tuple[list[Operation], StampedCreate]:
        """The operations that, at the head of a program holding the store
        lock, prove ``view``'s head is still the latest generation and write
        this process's next active generation. Refuses a live foreign
        holder (``item-held``) before anything is run."""
        standing = view.standing(self.client.client_id)
        if standing == "held" and view.item_id in self._held:
            self._lose(view.item_id)
            raise ArtifactError(
                "item-lease-lost",
                view.item_id,
                f"another mevedel process {view.holder_phrase} took the item over; "
                "this write was refused and nothing was written; reload it",
            )
        if standing == "held":
            raise ArtifactError(
                "item-held",
                view.item_id,
                f"another mevedel process {view.holder_phrase} is editing it; it is read-only here "
                "until that process hands it over (ask with requestHandover; an idle item is handed over after 10 seconds)",
            )
        paths = ItemPaths(view.item_id)
        n = view.generation
        ops: list[Operation] = [MakeDirs(paths.lease_dir, optional=True)]
        # Generation 1 is never pruned (only deleting the item removes it),
        # so its absence under the lock proves there is no generation at all.
        ops.append(Verify(paths.generation(n), view.raw) if n else Verify(paths.generation(1), None))
        if n:
            ops.append(Verify(paths.generation(n + 1), None))
        record = self._record(n + 1, ItemLeaseState.ACTIVE)
        create = StampedCreate(paths.generation(n + 1), stamped_record(record, self.duration))
        ops.append(create)
        ops += _prune(paths, n)
        return ops, create

    async def take(self, item_id: str) -> None:
        """Hold the item (take it when free or expired, renew it when ours)
        before a write that does not go through the store's own fenced
        write: an ApplyPatch of the item's files. Refuses a live foreign
        holder (``item-held``, naming its host); the caller holds
        :meth:`queue`."""
        view = await self.observe(item_id)
        ops, create = self.fence(view)
        result = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        if not result.completed:
            stop = result.stopped_at
            if result[stop].status in (Status.MISMATCH, Status.CONFLICT):
                raise self.refused(view)
            raise_for_result(ops[stop], result[stop])
        self.fenced(item_id, create, result[ops.index(create)])

    def fenced(self, item_id: str, create: StampedCreate, result) -> None:
        """Record the generation a program that ran :meth:`fence` wrote."""
        raw = create.content(int(result.value))
        generation = decode_record(ItemLeaseRecord, raw, item_id).generation
        self._held[item_id] = _Held(generation, raw, self._monotonic())
        self._ensure_renewal()

    def refused(self, view: LeaseView) -> ArtifactError:
        """The error for a fence that did not hold (another process wrote a
        generation after ``view`` was read)."""
        if view.standing(self.client.client_id) == "mine":
            self._lose(view.item_id)
            return ArtifactError(
                "item-lease-lost",
                view.item_id,
                "another mevedel process took the item over; this write was refused and nothing was written; reload it",
            )
        return ArtifactError("item-held", view.item_id, "another mevedel process took the item at the same moment; it is read-only here now")

    def forget(self, item_id: str) -> None:
        self._held.pop(item_id, None)

    def _lose(self, item_id: str) -> None:
        if self._held.pop(item_id, None) is not None:
            self._notify(item_id, "fenced")

    # Hand-over ---------------------------------------------------------------

    async def request_handover(self, item_id: str) -> None:
        request = HandoverRequest(client_id=self.client.client_id, host=self.client.host)
        paths = ItemPaths(item_id)
        program = ControlProgram(
            [MakeDirs(paths.lease_dir, optional=True), Replace(paths.handover, encode(request))], lock=LOCK_DIR
        )
        result = await self.target.run(program)
        if not result.completed:
            raise_for_result(program.operations[result.stopped_at], result[result.stopped_at])

    async def handover_wait(self, item_id: str) -> float | None:
        """For an item held here that another process asked for: the
        seconds until it has been idle long enough to hand over (0 or less:
        now). None when it is not held here or nobody else asks."""
        held = self._held.get(item_id)
        if held is None:
            return None
        view = await self.observe(item_id)
        if view.handover is None or view.handover.client_id == self.client.client_id:
            return None
        return self.idle_seconds - (self._monotonic() - held.last_edit)

    # Renewal -----------------------------------------------------------------

    def _ensure_renewal(self) -> None:
        if self._renewal is None or self._renewal.done():
            self._renewal = asyncio.get_running_loop().create_task(self._renew_loop(), name="item-lease-renewal")

    async def _renew_loop(self) -> None:
        while self._held:
            await asyncio.sleep(self.renew_every)
            for item_id in list(self._held):
                try:
                    await self.renew(item_id)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    _log.exception("renewing the lease of item %s failed", item_id)

    async def renew(self, item_id: str) -> None:
        """Renew the held item, or hand it over when asked and idle."""
        async with self.queue(item_id):
            await self._renew(item_id)

    async def _renew(self, item_id: str) -> None:
        held = self._held.get(item_id)
        if held is None:
            return
        view = await self.observe(item_id)
        own = view.standing(self.client.client_id) == "mine"
        if own and view.generation > held.generation:
            # This process's own newer generation: a write whose answer was
            # lost (a dropped connection) had landed. Still ours.
            assert view.raw is not None
            held = self._held[item_id] = _Held(view.generation, view.raw, held.last_edit)
        if view.generation != held.generation or view.raw != held.raw:
            self._lose(item_id)
            return
        idle = self._monotonic() - held.last_edit >= self.idle_seconds
        asked = view.handover is not None and view.handover.client_id != self.client.client_id
        if asked and idle:
            await self._write_state(item_id, held, ItemLeaseState.RELEASED, remove_request=True)
            self._held.pop(item_id, None)
            self._notify(item_id, "handed-over")
            return
        await self._write_state(item_id, held, ItemLeaseState.ACTIVE, remove_request=False)

    async def release(self, item_id: str) -> None:
        async with self.queue(item_id):
            held = self._held.pop(item_id, None)
            if held is not None:
                await self._write_state(item_id, held, ItemLeaseState.RELEASED, remove_request=False)

    async def close(self) -> None:
        """Release every held item (at exit) and stop renewing."""
        task, self._renewal = self._renewal, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for item_id in list(self._held):
            try:
                await self.release(item_id)
            except Exception:
                _log.warning("releasing the lease of item %s failed", item_id, exc_info=True)

    async def _write_state(self, item_id: str, held: _Held, state: ItemLeaseState, *, remove_request: bool) -> None:
        paths = ItemPaths(item_id)
        n = held.generation
        record = self._record(n + 1, state)
        create = StampedCreate(paths.generation(n + 1), stamped_record(record, self.duration))
        ops: list[Operation] = [Verify(paths.generation(n), held.raw), Verify(paths.generation(n + 1), None), create]
        if remove_request:
            ops.append(Remove(paths.handover, optional=True))
        ops += _prune(paths, n)
        result = await self.target.run(ControlProgram(ops, lock=LOCK_DIR))
        if result.stopped_at is not None and result.stopped_at < 2:
            self._lose(item_id)
            return
        if not result.completed:
            raise_for_result(ops[result.stopped_at], result[result.stopped_at])
        if state is ItemLeaseState.ACTIVE and item_id in self._held:
            self._held[item_id] = _Held(n + 1, create.content(int(result[2].value)), held.last_edit)

    def _notify(self, item_id: str, reason: str) -> None:
        for listener in list(self.on_change):
            try:
                listener(item_id, reason)
            except Exception:
                _log.exception("item lease listener failed")
