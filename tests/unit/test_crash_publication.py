"""Crash at every write of the publish transaction: a fresh reader sees
exactly the old or the new committed state, and a retry succeeds."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from mevedel_server.store import (
    ClientIdentity,
    LeaseStanding,
    Publisher,
    TakeoverNeedsConfirmation,
    acquire_lease,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("writer-1", "workstation")
OTHER = ClientIdentity("writer-2", "laptop")

OLD = {
    "session.meta.json": b'{"turns": 1}',
    "segment-0001.chat.jsonl": b'{"type": "prompt", "text": "hi"}\n',
    "file-history/" + "a" * 64: b"pre-image of a tracked file",
}
CHANGES = {
    "session.meta.json": b'{"turns": 2}',
    "segment-0001.chat.jsonl": OLD["segment-0001.chat.jsonl"] + b'{"type": "response", "text": "hello"}\n',
    "file-history/" + "a" * 64: b"pre-image of a tracked file",
    "file-history/" + "b" * 64: b"pre-image of a tracked file",  # same bytes: reused
    "tool-results/run-1.log": b"x" * 4096,
}
NEW = {**OLD, **CHANGES}
REPLACEMENT = {"session.meta.json": b'{"turns": 1, "rewound": true}', "segment-0001.chat.jsonl": OLD["segment-0001.chat.jsonl"]}


async def prepared(root, duration=600):
    """A session with committed OLD and a few lease generations to prune."""
    root.mkdir()
    target = FaultInjectingTarget(LocalTarget(root))
    await materialize_session(target, SID)
    lease = await acquire_lease(target, SID, ME, duration_seconds=duration)
    for _ in range(3):
        await lease.renew()
    publisher = Publisher(lease)
    await publisher.publish(OLD)
    return target, publisher


async def fresh_state(root) -> dict[str, bytes]:
    return await (await read_committed(LocalTarget(root), SID)).read_all()


@pytest.mark.parametrize("replace", [False, True], ids=["overlay", "replace"])
async def test_crash_at_every_publish_write(tmp_path, replace):
    changes, expected_new = (REPLACEMENT, REPLACEMENT) if replace else (CHANGES, NEW)
    baseline, publisher = await prepared(tmp_path / "baseline")
    baseline.arm(None)
    await publisher.publish(changes, replace=replace)
    total = baseline.writes

    walked = 0
    seen: Counter[str] = Counter()
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, publisher = await prepared(root)
        target.arm(point, "crash")
        try:
            await publisher.publish(changes, replace=replace)
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1 and not target.fired
            assert await fresh_state(root) == expected_new
            break
        walked += 1
        del target, publisher  # the process is dead: nothing of it runs again
        state = await fresh_state(root)
        assert state in (OLD, expected_new), f"crash point {point}: a reader saw a mixed state"
        seen["old" if state == OLD else "new"] += 1
        # The restarted client recovers and completes the publication.
        lease = await acquire_lease(LocalTarget(root), SID, ME)
        outcome = await Publisher(lease).publish(changes, replace=replace)
        assert outcome.committed == (state == OLD)
        assert await fresh_state(root) == expected_new
    print(f"\npublish ({'replace' if replace else 'overlay'}): {walked} crash points walked, outcomes {dict(seen)}")
    assert walked == total >= 6
    assert seen["old"] >= 4 and seen["new"] >= 1  # crashes after the commit point see the new state


async def test_another_client_recovers_after_a_crash_before_the_commit(tmp_path):
    root = tmp_path / "s"
    target, publisher = await prepared(root, duration=1)
    # Writes: publications dir, publication dir, three new artifacts (one is
    # reused), then write 6, the manifest: the last byte before the commit.
    target.arm(6, "crash")
    with pytest.raises(SimulatedCrash) as info:
        await publisher.publish(CHANGES)
    assert info.value.operation.path.endswith("manifest.json")
    del target, publisher
    fresh = LocalTarget(root)
    assert await fresh_state(root) == OLD
    for _ in range(100):
        if (await observe_lease(fresh, SID)).standing is LeaseStanding.EXPIRED:
            break
        await asyncio.sleep(0.1)
    with pytest.raises(TakeoverNeedsConfirmation):
        await acquire_lease(fresh, SID, OTHER)
    lease = await acquire_lease(fresh, SID, OTHER, confirm_takeover=True)
    outcome = await Publisher(lease).publish({"session.meta.json": b'{"turns": 1, "owner": 2}'})
    assert outcome.committed
    assert await fresh_state(root) == {**OLD, "session.meta.json": b'{"turns": 1, "owner": 2}'}
