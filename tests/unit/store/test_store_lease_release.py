"""A lease write decides whether it won from proof that its generation was
written fresh, never from what later writers did. Other clients are run
*inside* one of our programs (between two of its operations) to pin the
interleavings a loaded machine produces only now and then:

- a claim right after a release, before the releasing program proves or
  lists anything, does not make the release fail;
- a head commit that a takeover follows at once is reported committed (it
  is: the successor carries it);
- a stale owner whose verify passed just before a successor pruned its
  generation re-creates a pruned name below the head: its renewal and its
  publication are refused, its release writes nothing that fences anyone,
  and the successor keeps the session and its committed publication.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import pytest

from mevedel_server.store import (
    ClientIdentity,
    LeaseLost,
    LeaseRecord,
    LeaseStanding,
    LeaseState,
    Publisher,
    acquire_lease,
    encode_record,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.store.authority.records import decode_record
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    Operation,
    ProgramResult,
    ProgramTarget,
    Verify,
)
from mevedel_server.targets.program import SKIPPED, StampedCreate

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("releasing", "desk")
NEXT = ClientIdentity("claiming", "laptop")


def _lease_file(root, generation: int) -> str:
    return os.path.join(root, ".mevedel", "sessions", SID, ".lease", f"generation-{generation:020d}.json")


def _is_lease_write(op: Operation) -> bool:
    return isinstance(op, (CreateExclusive, StampedCreate)) and "/.lease/generation-" in op.path


def _writes_released(op: Operation) -> bool:
    return isinstance(op, CreateExclusive) and _is_lease_write(op) and (
        decode_record(LeaseRecord, op.data, "test").state is LeaseState.RELEASED
    )


class Interleaved(ProgramTarget):
    """Runs ``action`` once, inside the first program that has an operation
    matching ``where``, right after the operation ``after`` places past it
    (0: right after the matching operation itself; -1: just before it)."""

    def __init__(self, inner: LocalTarget, where: Callable[[Operation], bool], after: int,
                 action: Callable[[], Awaitable[object]]) -> None:
        self.inner, self.where, self.after, self.action = inner, where, after, action
        self.done = False
        self.action_result: object = None

    async def run(self, program: ControlProgram) -> ProgramResult:
        ops = program.operations
        hit = None if self.done else next((i for i, op in enumerate(ops) if self.where(op)), None)
        if hit is None:
            return await self.inner.run(program)
        self.done = True
        cut = hit + self.after + 1
        head = await self.inner.run(ControlProgram(ops[:cut], lock=program.lock))
        if not head.completed:
            return ProgramResult(head.results + (SKIPPED,) * (len(ops) - cut), head.stopped_at)
        self.action_result = await self.action()
        tail = await self.inner.run(ControlProgram(ops[cut:], lock=program.lock))
        stopped = None if tail.stopped_at is None else tail.stopped_at + cut
        return ProgramResult(head.results + tail.results, stopped)


@pytest.fixture
async def inner(tmp_path):
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    return target


@pytest.mark.parametrize(
    "after, proof",
    [(0, "a successor pruned our predecessor before the releasing program proved anything"),
     (1, "our predecessor was proven in place before the successor claimed")],
)
async def test_a_claim_right_after_a_release_does_not_make_the_release_fail(inner, after, proof):
    racing = Interleaved(inner, _writes_released, after, lambda: acquire_lease(inner, SID, NEXT))
    lease = await acquire_lease(racing, SID, ME)
    await lease.release()
    assert racing.done, proof
    assert lease.released and not lease.lost
    claimed = racing.action_result
    assert claimed.generation > lease.generation
    observed = await observe_lease(inner, SID)
    assert observed.record.client_id == NEXT.client_id and observed.record.state is LeaseState.ACTIVE
    assert observed.standing is LeaseStanding.HELD


def _takeover_of_newest(root):
    """A client taking over straight after our newest generation, written
    straight to disk: its claim and activation, carrying our head."""

    async def act():
        lease_dir = os.path.dirname(_lease_file(root, 1))
        newest = max(int(name[11:31]) for name in os.listdir(lease_dir) if name.startswith("generation-"))
        with open(_lease_file(root, newest), "rb") as handle:
            ours = decode_record(LeaseRecord, handle.read(), "test")
        for generation, state in ((newest + 1, LeaseState.CLAIMING), (newest + 2, LeaseState.ACTIVE)):
            record = LeaseRecord(
                generation=generation, state=state, client_id=NEXT.client_id, host=NEXT.host,
                renewed_at=ours.renewed_at, expires_at=ours.expires_at + 10_000,
                publication_head=ours.publication_head, unsettled_mutation=False, transfer_generation=0,
            )
            with open(_lease_file(root, generation), "xb") as handle:
                handle.write(encode_record(record))
        return newest + 2

    return act


async def test_a_head_commit_followed_at_once_by_a_takeover_is_reported_committed(inner, tmp_path):
    lease = await acquire_lease(inner, SID, ME)
    publisher = Publisher(lease)
    await publisher.publish({"turn": b"one"})
    # The takeover lands after the commit's create and its proof, before its listing.
    lease.target = Interleaved(inner, _is_lease_write, 1, _takeover_of_newest(tmp_path))
    outcome = await publisher.publish({"turn": b"two"})
    assert lease.target.done and outcome.committed and publisher.pending is None
    assert await (await read_committed(inner, SID)).read_all() == {"turn": b"two"}
    with pytest.raises(LeaseLost):  # the next write learns of the takeover
        await lease.renew()


def _successor_prunes(root, stale_generation: int, raw_of_stale: bytes):
    """What a taking-over client and its rotations leave behind, written
    straight to disk: its claim and three rotations above the stale
    owner's generation, then the prune of everything below the newest
    three, in ascending order as every prune runs."""

    async def act():
        base = decode_record(LeaseRecord, raw_of_stale, "test")
        top = stale_generation + 5
        for generation in range(stale_generation + 1, top + 1):
            record = LeaseRecord(
                generation=generation,
                state=LeaseState.CLAIMING if generation == stale_generation + 1 else LeaseState.ACTIVE,
                client_id=NEXT.client_id,
                host=NEXT.host,
                renewed_at=base.renewed_at,
                expires_at=base.expires_at + 10_000,
                publication_head=base.publication_head,
                unsettled_mutation=False,
                transfer_generation=0,
            )
            with open(_lease_file(root, generation), "xb") as handle:
                handle.write(encode_record(record))
        for generation in range(1, top - 2):
            if os.path.exists(_lease_file(root, generation)):
                os.remove(_lease_file(root, generation))
        return top

    return act


def _stale_verify(lease):
    path = lease.paths.generation(lease.generation)
    return lambda op: isinstance(op, Verify) and op.path == path


async def _stale_owner(inner, tmp_path):
    """Our lease, and a target that lets a successor take over and prune
    right after our next program's verify of our generation passed."""
    lease = await acquire_lease(inner, SID, ME, duration_seconds=600)
    await Publisher(lease).publish({"turn": b"ours, committed"})
    racing = Interleaved(inner, _stale_verify(lease), 0, _successor_prunes(tmp_path, lease.generation, lease.raw))
    lease.target = racing
    return lease, racing


async def _the_successor_still_holds(inner, racing):
    observed = await observe_lease(inner, SID)
    assert observed.generation == racing.action_result
    assert observed.record.client_id == NEXT.client_id and observed.standing is LeaseStanding.HELD
    assert await (await read_committed(inner, SID)).read_all() == {"turn": b"ours, committed"}


async def test_a_stale_renewal_that_recreates_a_pruned_name_is_refused(inner, tmp_path):
    lease, racing = await _stale_owner(inner, tmp_path)
    recreated = lease.generation + 1
    with pytest.raises(LeaseLost):
        await lease.renew()
    assert racing.done and lease.lost
    # The create did land, under a name a prune had freed, below the head.
    assert os.path.exists(_lease_file(tmp_path, recreated))
    await _the_successor_still_holds(inner, racing)


async def test_a_stale_publication_that_recreates_a_pruned_name_is_not_committed(inner, tmp_path):
    lease, racing = await _stale_owner(inner, tmp_path)
    publisher = Publisher(lease)
    with pytest.raises(LeaseLost):
        await publisher.publish({"turn": b"stale, must not win"})
    assert racing.done and publisher.pending is not None
    await _the_successor_still_holds(inner, racing)


async def test_a_stale_release_writes_nothing_that_fences_anyone(inner, tmp_path):
    lease, racing = await _stale_owner(inner, tmp_path)
    await lease.release()
    assert racing.done and lease.released
    await _the_successor_still_holds(inner, racing)


async def test_a_rotation_that_is_not_a_release_is_still_lost_when_superseded(inner):
    lease = await acquire_lease(inner, SID, ME)
    again = await acquire_lease(inner, SID, ME)  # the same client rotates behind the first handle
    assert again.generation > lease.generation
    with pytest.raises(LeaseLost):
        await lease.renew()
    with pytest.raises(LeaseLost):
        await lease.release()
    assert (await observe_lease(inner, SID)).generation == again.generation
