"""A lease whose holder process is proven dead on this machine counts as
expired at once for every other client: Take over is offered, and taking
over is the ordinary takeover (confirmation, generation election, the turn
left in flight settled as interrupted). A live holder still fences; a
record from another boot or host, or one written without a holder (an
older server), waits for its expiry. The holder is a real process that
claims its session and is then killed."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from holder_process import HOLDER_CLIENT, HOLDER_HOST, holding_process, kill
from mevedel_server.store import (
    ClientIdentity,
    LeaseHeld,
    LeaseStanding,
    LeaseState,
    TakeoverNeedsConfirmation,
    acquire_lease,
    encode_record,
    observe_lease,
)
from mevedel_server.store.service import SessionService
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    Status,
    this_process,
)

HOLDER = ClientIdentity(HOLDER_CLIENT, HOLDER_HOST)
ME = ClientIdentity("client-me", "workstation")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def holder(root: Path):
    """The holding process and its session."""
    with holding_process(root) as held:
        yield held


async def write_next_generation(root: Path, sid: str, **changes) -> None:
    """What a writer of the head's client does: the next generation, by
    exclusive creation, with ``changes`` to the head's fields (``holder``
    absent from the bytes when ``drop_holder``)."""
    target = LocalTarget(root)
    head = await observe_lease(target, sid)
    assert head.record is not None
    drop = changes.pop("drop_holder", False)
    record = msgspec.structs.replace(head.record, generation=head.generation + 1, **changes)
    raw = encode_record(record)
    if drop:
        raw = msgspec.json.encode({k: v for k, v in msgspec.json.decode(raw).items() if k != "holder"})
    path = f".mevedel/sessions/{sid}/.lease/generation-{record.generation:020d}.json"
    result = await target.run(ControlProgram([CreateExclusive(path, raw)]))
    assert result[0].status is Status.OK


async def test_a_live_holder_is_joined_and_refused(root, holder):
    process, sid = holder
    observed = await observe_lease(LocalTarget(root), sid)
    assert observed.record is not None and observed.record.holder is not None
    assert observed.record.holder.pid == process.pid
    assert observed.standing is LeaseStanding.HELD and not observed.holder_ended
    me = SessionService(LocalTarget(root), ME)
    rows = {row.session_id: row for row in (await me.sessions.list()).rows}
    assert rows[sid].action.value == "Join" and not rows[sid].holder_ended
    with pytest.raises(LeaseHeld):
        await me.sessions.open(sid, "resume")
    assert (await me.sessions.open(sid)).action == "join"


async def test_a_killed_holder_is_taken_over_at_once_and_its_turn_interrupted(root, holder):
    process, sid = holder
    kill(process)
    observed = await observe_lease(LocalTarget(root), sid)
    assert observed.record is not None and observed.now < observed.record.expires_at  # minutes before its expiry
    assert observed.holder_ended and observed.standing is LeaseStanding.EXPIRED
    me = SessionService(LocalTarget(root), ME)
    rows = {row.session_id: row for row in (await me.sessions.list()).rows}
    assert rows[sid].action.value == "Take over" and rows[sid].holder_ended
    with pytest.raises(TakeoverNeedsConfirmation) as asked:
        await me.sessions.open(sid)
    assert asked.value.holder_ended and f"(pid {process.pid}) has ended" in str(asked.value)
    taken = await me.sessions.open(sid, confirm_takeover=True)
    assert taken.action == "takeover" and taken.interrupted_turn == 1
    after = await observe_lease(LocalTarget(root), sid)
    assert after.record is not None and after.record.client_id == ME.client_id
    assert after.generation > observed.generation and after.record.holder is not None
    await me.sessions.close(sid)


async def test_a_claim_from_a_stale_view_of_the_dead_holder_loses_to_its_successor(root, holder):
    """Two clients see the same dead holder: the generation election lets one
    of them take over, and the other is refused."""
    process, sid = holder
    kill(process)
    target = LocalTarget(root)
    seen = await observe_lease(target, sid)
    first = await acquire_lease(target, sid, ME, confirm_takeover=True, observation=seen)
    # The second claim's observation is stale: it is refused, judged afresh,
    # and meets the successor, which is alive (this process).
    with pytest.raises(LeaseHeld):
        await acquire_lease(target, sid, ClientIdentity("third", "elsewhere"), confirm_takeover=True, observation=seen)
    assert (await observe_lease(target, sid)).record.client_id == ME.client_id
    await first.release()


async def test_a_holder_seen_live_that_released_and_ended_since_is_claimed_without_asking(root, holder):
    """A claim made from an observation in which the holder was live, after
    the holder released the lease and its process ended: the claim judges
    the head as it is now (released: free), not the old head against the
    holder's death -- which asked for a takeover's confirmation of a
    session nobody held (a CI failure of the eight-process race)."""
    process, sid = holder
    target = LocalTarget(root)
    seen = await observe_lease(target, sid)
    await write_next_generation(root, sid, state=LeaseState.RELEASED)
    kill(process)
    claimed = await acquire_lease(target, sid, ME, observation=seen)
    assert claimed.record.client_id == ME.client_id and claimed.record.state is LeaseState.ACTIVE
    assert claimed.generation > seen.generation + 1


async def test_a_live_pid_of_another_process_is_a_dead_holder(root, holder):
    """The recorded PID now runs another process (this test's: alive, but
    started at another time): the holder is dead all the same."""
    process, sid = holder
    kill(process)
    recorded = (await observe_lease(LocalTarget(root), sid)).record.holder
    await write_next_generation(root, sid, holder=msgspec.structs.replace(recorded, pid=os.getpid()))
    observed = await observe_lease(LocalTarget(root), sid)
    mine = this_process()
    assert mine is not None and observed.record.holder.pid == mine.pid
    assert observed.record.holder.start_ticks != mine.start_ticks
    assert observed.standing is LeaseStanding.EXPIRED


@pytest.mark.parametrize(
    "elsewhere",
    [{"boot_id": "00000000-0000-4000-8000-000000000000"}, {"hostname": "another-machine"}],
    ids=["another boot", "another host"],
)
async def test_a_dead_holder_of_another_boot_or_host_waits_for_expiry(root, holder, elsewhere):
    process, sid = holder
    kill(process)
    recorded = (await observe_lease(LocalTarget(root), sid)).record.holder
    await write_next_generation(root, sid, holder=msgspec.structs.replace(recorded, **elsewhere))
    observed = await observe_lease(LocalTarget(root), sid)
    assert observed.standing is LeaseStanding.HELD and not observed.holder_ended
    me = SessionService(LocalTarget(root), ME)
    with pytest.raises(LeaseHeld):
        await me.sessions.open(sid, "resume")
    # Once it expires, it is the ordinary expired lease.
    await write_next_generation(root, sid, renewed_at=100, expires_at=160)
    with pytest.raises(TakeoverNeedsConfirmation) as asked:
        await me.sessions.open(sid)
    assert not asked.value.holder_ended and "whose lease expired" in str(asked.value)


async def test_a_lease_written_without_a_holder_is_read_and_waits_for_expiry(root, holder):
    """A generation an older server wrote (no ``holder`` in its bytes)."""
    process, sid = holder
    kill(process)
    await write_next_generation(root, sid, drop_holder=True)
    raw = sorted((root / ".mevedel" / "sessions" / sid / ".lease").glob("generation-*.json"))[-1].read_bytes()
    assert b'"holder"' not in raw
    observed = await observe_lease(LocalTarget(root), sid)
    assert observed.record.holder is None and observed.standing is LeaseStanding.HELD
    with pytest.raises(LeaseHeld):
        await SessionService(LocalTarget(root), ME).sessions.open(sid, "resume")


async def test_the_holders_own_client_adopts_its_record_whichever_process_wrote_it(root, holder):
    """Its own client does not take its record over: it adopts it (a CLI
    command after the one that was killed), and the adoption names the
    adopting process."""
    process, sid = holder
    kill(process)
    own = await acquire_lease(LocalTarget(root), sid, HOLDER)
    assert own.record.holder == this_process()
    await own.release()
