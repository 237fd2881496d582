"""Crash at every write of the publish transaction: a fresh reader sees
exactly the old or the new committed state, and a retry succeeds."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from deadlines import ticks
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
from mevedel_server.store.layout import SessionPaths
from mevedel_server.targets import (
    Barrier,
    CreateExclusive,
    FaultInjectingTarget,
    LocalTarget,
    SimulatedCrash,
)

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


async def prepared(root, duration=600, power_loss=False):
    """A session with committed OLD and a few lease generations to prune."""
    root.mkdir()
    target = FaultInjectingTarget(LocalTarget(root), power_loss=power_loss)
    await materialize_session(target, SID)
    lease = await acquire_lease(target, SID, ME, duration_seconds=duration)
    for _ in range(3):
        await lease.renew()
    publisher = Publisher(lease)
    await publisher.publish(OLD)
    return target, publisher


async def fresh_state(root) -> dict[str, bytes]:
    return await (await read_committed(LocalTarget(root), SID)).read_all()


@pytest.mark.parametrize("power_loss", [False, True], ids=["process-death", "power-loss"])
@pytest.mark.parametrize("replace", [False, True], ids=["overlay", "replace"])
async def test_crash_at_every_publish_write(tmp_path, replace, power_loss):
    """With ``power_loss`` every write the crash caught before its barrier
    is torn, so a head committed ahead of its bytes' flush would show."""
    changes, expected_new = (REPLACEMENT, REPLACEMENT) if replace else (CHANGES, NEW)
    baseline, publisher = await prepared(tmp_path / "baseline")
    baseline.arm(None)
    await publisher.publish(changes, replace=replace)
    total = baseline.writes

    walked = 0
    seen: Counter[str] = Counter()
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, publisher = await prepared(root, power_loss=power_loss)
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
    for _ in ticks():
        if (await observe_lease(fresh, SID)).standing is LeaseStanding.EXPIRED:
            break
        await asyncio.sleep(0.1)
    with pytest.raises(TakeoverNeedsConfirmation):
        await acquire_lease(fresh, SID, OTHER)
    lease = await acquire_lease(fresh, SID, OTHER, confirm_takeover=True)
    outcome = await Publisher(lease).publish({"session.meta.json": b'{"turns": 1, "owner": 2}'})
    assert outcome.committed
    assert await fresh_state(root) == {**OLD, "session.meta.json": b'{"turns": 1, "owner": 2}'}


def _publication_files(root) -> dict[str, bytes]:
    base = root / SessionPaths(SID).inside(".publications")
    return {f"{d.name}/{f.name}": f.read_bytes() for d in base.iterdir() for f in d.iterdir()}


async def test_a_power_loss_between_the_data_writes_and_the_head_record_leaves_the_prior_head(tmp_path):
    root = tmp_path / "s"
    target, publisher = await prepared(root, power_loss=True)
    before = _publication_files(root)
    # Fault points: publications dir, publication dir, three new artifacts,
    # the manifest, then 7: the barrier that would flush them before the head.
    target.arm(7, "crash")
    with pytest.raises(SimulatedCrash) as info:
        await publisher.publish(CHANGES)
    assert isinstance(info.value.operation, Barrier)
    del target, publisher
    torn = {name: data for name, data in _publication_files(root).items() if name not in before}
    # The crash caught the new publication unflushed: its files are torn...
    data = [d for name, d in torn.items() if not name.endswith("manifest.json")]
    manifest = [d for name, d in torn.items() if name.endswith("manifest.json")]
    assert len(data) == 3 and len(manifest) == 1
    assert all(any(len(d) < len(v) and v.startswith(d) for v in CHANGES.values()) for d in data)
    with pytest.raises(ValueError):
        json.loads(manifest[0])
    # ...and nothing names it: the prior head is what every reader sees.
    assert await fresh_state(root) == OLD
    lease = await acquire_lease(LocalTarget(root), SID, ME)
    outcome = await Publisher(lease).publish(CHANGES)
    assert outcome.committed and await fresh_state(root) == NEW


async def test_a_crash_at_the_head_record_after_the_barrier_leaves_the_prior_head(tmp_path):
    root = tmp_path / "s"
    target, publisher = await prepared(root, power_loss=True)
    target.arm(8, "crash")
    with pytest.raises(SimulatedCrash) as info:
        await publisher.publish(CHANGES)
    assert isinstance(info.value.operation, CreateExclusive) and "/.lease/" in info.value.operation.path
    del target, publisher
    # The barrier ran: the unnamed publication is whole, and still inert.
    written = set(CHANGES.values())
    whole = [data for name, data in _publication_files(root).items() if data in written]
    assert len(whole) >= 3
    assert await fresh_state(root) == OLD
