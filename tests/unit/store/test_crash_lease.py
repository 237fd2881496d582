"""Crash at every write of the lease transactions (claim, takeover, renewal,
release): no torn record, the committed publication is untouched, at most one
client can own the session afterwards, and the crashed client recovers."""

from __future__ import annotations

import os

import pytest

from mevedel_server.store import (
    ClientIdentity,
    LeaseHeld,
    LeaseRecord,
    LeaseStanding,
    Publisher,
    acquire_lease,
    encode_record,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

SID = "2026-07-19T09-47-bf87b5dd793a"
ALICE = ClientIdentity("alice", "alice-host")
BOB = ClientIdentity("bob", "bob-host")
CAROL = ClientIdentity("carol", "carol-host")
STATE = {"session.meta.json": b"{}", "segment-0001.chat.jsonl": b"turn\n"}


async def _bob_published(root) -> LocalTarget:
    root.mkdir()
    plain = LocalTarget(root)
    await materialize_session(plain, SID)
    bob = await acquire_lease(plain, SID, BOB, duration_seconds=600)
    await Publisher(bob).publish(STATE)
    return plain, bob


async def claim_after_release(root):
    plain, bob = await _bob_published(root)
    await bob.release()
    target = FaultInjectingTarget(plain)

    async def transaction():
        await acquire_lease(target, SID, ALICE, duration_seconds=600)

    return target, transaction


async def takeover_of_expired(root):
    plain, bob = await _bob_published(root)
    # Bob's machine went away: his newest generation expired long ago.
    expired = LeaseRecord(**{**{f: getattr(bob.record, f) for f in bob.record.__struct_fields__},
                             "generation": bob.generation + 1, "renewed_at": 100, "expires_at": 160})
    path = os.path.join(root, ".mevedel", "sessions", SID, ".lease", f"generation-{expired.generation:020d}.json")
    with open(path, "xb") as handle:
        handle.write(encode_record(expired))
    target = FaultInjectingTarget(plain)

    async def transaction():
        await acquire_lease(target, SID, ALICE, duration_seconds=600, confirm_takeover=True)

    return target, transaction


async def _alice_holding(root):
    plain, bob = await _bob_published(root)
    await bob.release()
    target = FaultInjectingTarget(plain)
    alice = await acquire_lease(target, SID, ALICE, duration_seconds=600)
    target.arm(None)
    return target, alice


async def renewal(root):
    target, alice = await _alice_holding(root)
    return target, alice.renew


async def release(root):
    target, alice = await _alice_holding(root)
    return target, alice.release


TRANSACTIONS = {"claim": claim_after_release, "takeover": takeover_of_expired, "renewal": renewal, "release": release}


@pytest.mark.parametrize("name", sorted(TRANSACTIONS))
async def test_crash_at_every_lease_write(tmp_path, name):
    prepare = TRANSACTIONS[name]
    baseline, transaction = await prepare(tmp_path / "baseline")
    baseline.arm(None)
    await transaction()
    total = baseline.writes

    walked = 0
    heads = set()
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, transaction = await prepare(root)
        target.arm(point, "crash")
        try:
            await transaction()
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1
            break
        walked += 1
        fresh = LocalTarget(root)
        obs = await observe_lease(fresh, SID)  # never a torn or unreadable record
        heads.add((obs.record.client_id, obs.record.state.value))
        assert await (await read_committed(fresh, SID)).read_all() == STATE
        # The crashed client recovers on restart; afterwards nobody else can own it.
        alice = await acquire_lease(fresh, SID, ALICE, duration_seconds=600, confirm_takeover=True)
        assert (await observe_lease(fresh, SID)).standing is LeaseStanding.HELD
        with pytest.raises(LeaseHeld):
            await acquire_lease(fresh, SID, CAROL, confirm_takeover=True)
        await alice.release()
    print(f"\n{name}: {walked} crash points walked, heads seen after a crash: {sorted(heads)}")
    assert walked == total >= 2
