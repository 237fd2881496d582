"""Lease generations: claim, renewal, release, reclaim, takeover with
confirmation, publishing window, carried fields, stale writers refused."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from deadlines import ticks
from mevedel_server.store import (
    ClaimRaced,
    ClientIdentity,
    LeaseHeld,
    LeaseLost,
    LeaseRecord,
    LeaseStanding,
    LeaseState,
    Publisher,
    RecordError,
    RecordErrorKind,
    SessionMissing,
    TakeoverNeedsConfirmation,
    acquire_lease,
    encode_record,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.store.authority.lease import claim_new_session
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    ProgramTarget,
    UnsafePathError,
)

SID = "2026-07-19T09-47-bf87b5dd793a"
HEAD = ".publications/" + "e" * 32 + "/manifest.json"
ALICE = ClientIdentity("alice-client", "alice-laptop")
BOB = ClientIdentity("bob-client", "bob-desktop")
CAROL = ClientIdentity("carol-client", "carol-vm")


@pytest.fixture
async def session(tmp_path):
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    return target


def lease_dir(target: LocalTarget):
    return os.path.join(target.root, ".mevedel", "sessions", SID, ".lease")


def generations(target: LocalTarget) -> list[str]:
    return sorted(n for n in os.listdir(lease_dir(target)) if n.startswith("generation-"))


def write_generation(target: LocalTarget, generation: int, **fields) -> bytes:
    values = dict(
        generation=generation,
        state=LeaseState.ACTIVE,
        client_id=ALICE.client_id,
        host=ALICE.host,
        renewed_at=100,
        expires_at=160,
        publication_head=None,
        unsettled_mutation=False,
        transfer_generation=0,
    )
    values.update(fields)
    data = encode_record(LeaseRecord(**values))
    path = os.path.join(lease_dir(target), f"generation-{generation:020d}.json")
    with open(path, "xb") as handle:
        handle.write(data)
    return data


async def wait_until_expired(target, session_id=SID):
    # The target clock is whole seconds; a 1-second lease expires within ~2 s.
    for _ in ticks():
        if (await observe_lease(target, session_id)).standing is LeaseStanding.EXPIRED:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the lease never expired on the target clock")


async def test_claim_creates_a_candidate_then_activates_it(session):
    handle = await acquire_lease(session, SID, ALICE, duration_seconds=30)
    assert handle.generation == 2 and handle.record.state is LeaseState.ACTIVE
    assert [n[-7:] for n in generations(session)] == ["01.json", "02.json"]
    obs = await observe_lease(session, SID)
    assert obs.generation == 2 and obs.standing is LeaseStanding.HELD
    assert obs.record.client_id == ALICE.client_id
    assert obs.record.expires_at == obs.record.renewed_at + 30
    assert obs.record.renewed_at <= obs.now


async def test_renewal_writes_a_new_generation_for_the_same_owner(session):
    handle = await acquire_lease(session, SID, ALICE, duration_seconds=30)
    before = handle.record
    await handle.renew()
    assert handle.generation == 3
    assert handle.record.client_id == ALICE.client_id
    assert handle.record.expires_at >= before.expires_at
    assert (await observe_lease(session, SID)).generation == 3


async def test_release_frees_the_session_for_anyone(session):
    handle = await acquire_lease(session, SID, ALICE)
    await handle.release()
    obs = await observe_lease(session, SID)
    assert obs.record.state is LeaseState.RELEASED and obs.standing is LeaseStanding.FREE
    with pytest.raises(LeaseLost):
        await handle.renew()
    bob = await acquire_lease(session, SID, BOB)  # no confirmation needed
    assert bob.record.client_id == BOB.client_id


async def test_a_live_foreign_lease_is_held(session):
    await acquire_lease(session, SID, ALICE, duration_seconds=300)
    with pytest.raises(LeaseHeld) as info:
        await acquire_lease(session, SID, BOB, confirm_takeover=True)
    err = info.value
    assert err.holder_host == "alice-laptop" and err.state == "active"
    assert err.expires_at > err.now
    assert "alice-laptop" in str(err) and SID in str(err)


async def test_own_expired_lease_is_reclaimed_without_asking(session):
    write_generation(session, 1, renewed_at=100, expires_at=160, publication_head=HEAD, unsettled_mutation=True)
    handle = await acquire_lease(session, SID, ALICE)
    assert handle.generation == 3
    assert handle.record.publication_head == HEAD and handle.record.unsettled_mutation


async def test_foreign_expired_lease_needs_confirmation(session):
    write_generation(session, 1, state=LeaseState.PUBLISHING, publication_head=HEAD, unsettled_mutation=True, transfer_generation=4)
    with pytest.raises(TakeoverNeedsConfirmation) as info:
        await acquire_lease(session, SID, BOB)
    assert info.value.holder_host == "alice-laptop" and info.value.expires_at == 160
    assert info.value.state == "publishing"
    assert len(generations(session)) == 1  # asking wrote nothing
    handle = await acquire_lease(session, SID, BOB, confirm_takeover=True)
    rec = handle.record
    assert (rec.client_id, rec.state) == (BOB.client_id, LeaseState.ACTIVE)
    assert (rec.publication_head, rec.unsettled_mutation, rec.transfer_generation) == (HEAD, True, 4)


async def test_carried_fields_survive_every_rotation(session):
    write_generation(session, 1, publication_head=HEAD, transfer_generation=2)
    handle = await acquire_lease(session, SID, ALICE)
    await handle.set_unsettled_mutation(True)
    await handle.renew()
    await handle.open_next_transfer_generation()
    await handle.begin_publishing()
    await handle.end_publishing()
    await handle.release()
    rec = (await observe_lease(session, SID)).record
    assert (rec.state, rec.publication_head, rec.unsettled_mutation, rec.transfer_generation) == (
        LeaseState.RELEASED,
        HEAD,
        True,
        3,
    )
    taken = await acquire_lease(session, SID, BOB)
    assert taken.record.unsettled_mutation and taken.record.transfer_generation == 3
    await taken.set_unsettled_mutation(False)
    assert not (await observe_lease(session, SID)).record.unsettled_mutation


async def test_publishing_window_fences_others_and_is_normalised_on_restart(session):
    handle = await acquire_lease(session, SID, ALICE, duration_seconds=300)
    await handle.begin_publishing()
    with pytest.raises(LeaseHeld) as info:
        await acquire_lease(session, SID, BOB)
    assert info.value.state == "publishing"
    # The same client restarting normalises its open window back to active.
    again = await acquire_lease(session, SID, ALICE)
    assert again.record.state is LeaseState.ACTIVE
    await again.begin_publishing()
    outcome = await Publisher(again).publish({"notes.md": b"x"})
    assert outcome.committed and again.record.state is LeaseState.ACTIVE


async def test_stale_owner_is_refused_after_takeover(session):
    alice = await acquire_lease(session, SID, ALICE, duration_seconds=1)
    alice_pub = Publisher(alice)
    await alice_pub.publish({"turn": b"alice 1"})
    await wait_until_expired(session)
    bob = await acquire_lease(session, SID, BOB, confirm_takeover=True)
    await Publisher(bob).publish({"turn": b"bob 1"})
    head_before = (await observe_lease(session, SID)).generation
    with pytest.raises(LeaseLost):
        await alice_pub.publish({"turn": b"alice 2 (stale)"})
    assert alice_pub.pending is not None and alice_pub.pending.artifacts == {"turn": b"alice 2 (stale)"}
    for stale in (alice.renew(), alice.release(), alice.set_unsettled_mutation(True)):
        with pytest.raises(LeaseLost):
            await stale
    obs = await observe_lease(session, SID)
    assert obs.generation == head_before and obs.record.client_id == BOB.client_id
    assert await (await read_committed(session, SID)).read_all() == {"turn": b"bob 1"}


async def test_stale_owner_is_refused_once_its_generation_was_pruned(session):
    alice = await acquire_lease(session, SID, ALICE, duration_seconds=1)
    await wait_until_expired(session)
    bob = await acquire_lease(session, SID, BOB, confirm_takeover=True)
    for _ in range(4):
        await bob.renew()
    assert f"generation-{alice.generation:020d}.json" not in generations(session)
    with pytest.raises(LeaseLost):
        await alice.renew()
    assert (await observe_lease(session, SID)).record.client_id == BOB.client_id


async def test_renewal_steps_over_a_claim_that_never_activated(session):
    alice = await acquire_lease(session, SID, ALICE, duration_seconds=300)
    # Carol crashed between her candidate and its activation.
    write_generation(session, alice.generation + 1, state=LeaseState.CLAIMING, client_id=CAROL.client_id, host=CAROL.host,
                     renewed_at=alice.record.renewed_at, expires_at=alice.record.expires_at)
    with pytest.raises(LeaseHeld) as info:
        await acquire_lease(session, SID, BOB)
    assert info.value.state == "claiming" and info.value.holder_host == "carol-vm"
    await alice.renew()
    obs = await observe_lease(session, SID)
    assert obs.generation == alice.generation == 4 and obs.record.client_id == ALICE.client_id


async def test_a_renewal_that_lost_to_an_active_claim_is_refused(session):
    alice = await acquire_lease(session, SID, ALICE, duration_seconds=300)
    write_generation(session, alice.generation + 1, client_id=CAROL.client_id, host=CAROL.host, renewed_at=1, expires_at=10**10)
    with pytest.raises(LeaseLost):
        await alice.renew()
    assert alice.lost


class _PrunesBeforeTheClaim(ProgramTarget):
    """Removes the observed head just before the claim program runs, as a
    racing client's prune could."""

    def __init__(self, inner: LocalTarget, victim: str) -> None:
        self.inner, self.victim, self.fired = inner, victim, False

    async def run(self, program: ControlProgram):
        if not self.fired and any(isinstance(op, CreateExclusive) and "/.lease/" in op.path for op in program.operations):
            self.fired = True
            os.remove(self.victim)
        return await self.inner.run(program)


async def test_a_claim_whose_predecessor_vanished_is_aborted(session):
    write_generation(session, 1, state=LeaseState.RELEASED)
    racing = _PrunesBeforeTheClaim(session, os.path.join(lease_dir(session), f"generation-{1:020d}.json"))
    with pytest.raises(ClaimRaced):
        await acquire_lease(racing, SID, BOB)
    obs = await observe_lease(session, SID)
    assert obs.record.state is LeaseState.ABORTED and obs.standing is LeaseStanding.FREE
    handle = await acquire_lease(session, SID, BOB)
    assert handle.record.state is LeaseState.ACTIVE


@pytest.mark.parametrize(("writer", "told"), [
    (BOB, "another command of this client claimed the lease"),
    (ALICE, "alice-laptop claimed the lease"),
    (None, "another claim of the lease was written"),
])
async def test_a_lost_claim_names_who_claimed_at_the_same_time(session, writer, told):
    # The generation the claim would have written was written first: by
    # this same client (another of its commands), another client, or bytes
    # that say nobody. The person is told which, never "another client"
    # for a claim of their own.
    if writer is None:
        with open(os.path.join(lease_dir(session), f"generation-{1:020d}.json"), "xb") as handle:
            handle.write(b"not a record")
    else:
        write_generation(session, 1, state=LeaseState.CLAIMING, client_id=writer.client_id, host=writer.host)
    with pytest.raises(ClaimRaced) as raced:
        await claim_new_session(session, SID, BOB, duration_seconds=60, now=100, lead=[])
    assert told in str(raced.value)
    if writer is not ALICE:
        assert "another client" not in str(raced.value) and "alice" not in str(raced.value)


async def test_simultaneous_claims_elect_exactly_one_owner(session):
    clients = [ClientIdentity(f"client-{i}", f"host-{i}") for i in range(8)]
    results = await asyncio.gather(*(acquire_lease(session, SID, c) for c in clients), return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, (ClaimRaced, LeaseHeld)) for r in results if isinstance(r, BaseException))
    assert (await observe_lease(session, SID)).record.client_id == winners[0].identity.client_id


async def test_client_wall_clock_does_not_expire_a_lease(session, monkeypatch):
    await acquire_lease(session, SID, ALICE, duration_seconds=300)
    monkeypatch.setattr(time, "time", lambda: 10.0**11)
    with pytest.raises(LeaseHeld):
        await acquire_lease(session, SID, BOB, confirm_takeover=True)


async def test_corrupt_head_is_refused_and_kept(session):
    write_generation(session, 1)
    path = os.path.join(lease_dir(session), f"generation-{2:020d}.json")
    with open(path, "wb") as handle:
        handle.write(b'{"format_version":1,"generation":2,"state":"active","renewed_at":NaN')
    for attempt in (observe_lease(session, SID), acquire_lease(session, SID, BOB, confirm_takeover=True)):
        with pytest.raises(RecordError) as info:
            await attempt
        assert info.value.kind is RecordErrorKind.TRUNCATED or info.value.kind is RecordErrorKind.NON_FINITE
        assert "generation-00000000000000000002.json" in str(info.value)
    assert len(generations(session)) == 2
    with open(path, "rb") as handle:
        assert handle.read().endswith(b"NaN")


async def test_a_record_under_another_generation_name_is_refused(session):
    data = write_generation(session, 1)
    with open(os.path.join(lease_dir(session), f"generation-{5:020d}.json"), "wb") as handle:
        handle.write(data)
    with pytest.raises(RecordError, match="under the name of generation 5"):
        await observe_lease(session, SID)


async def test_symlinked_lease_directory_fails_closed(session, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rmdir(lease_dir(session))
    os.symlink(elsewhere, lease_dir(session))
    with pytest.raises(UnsafePathError):
        await acquire_lease(session, SID, ALICE)
    assert list(elsewhere.iterdir()) == []


async def test_missing_session(tmp_path):
    with pytest.raises(SessionMissing):
        await acquire_lease(LocalTarget(tmp_path), SID, ALICE)


async def test_a_damaged_old_generation_is_reported_and_kept_never_pruned(session, caplog):
    import stat

    alice = await acquire_lease(session, SID, ALICE, duration_seconds=300)
    for _ in range(3):
        await alice.renew()
    await alice.release()
    # Two old generations below the head get damaged: one garbled, one a FIFO.
    garbled = os.path.join(lease_dir(session), f"generation-{alice.generation - 2:020d}.json")
    fifo = os.path.join(lease_dir(session), f"generation-{alice.generation - 1:020d}.json")
    with open(garbled, "wb") as handle:
        handle.write(b'{"format_version": 1, "generation": ')
    os.remove(fifo)
    os.mkfifo(fifo)
    # Opening the session claims it (its program prunes) and renewals prune again.
    bob = await acquire_lease(session, SID, BOB, duration_seconds=300)
    for _ in range(4):
        await bob.renew()
    with open(garbled, "rb") as handle:
        assert handle.read() == b'{"format_version": 1, "generation": '
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    reported = [r.getMessage() for r in caplog.records if "damaged and kept for inspection" in r.getMessage()]
    assert len(reported) == 2, reported  # each reported once, not at every prune
    # The sound generations below the head are pruned as before.
    kept = {int(n[len("generation-") : -len(".json")]) for n in generations(session)}
    assert kept == {alice.generation - 2, alice.generation - 1} | set(range(bob.generation - 2, bob.generation + 1))
