"""Eight processes race, repeatedly, for one session's lease. At most one
owner at any instant (by the target clock, by generation numbers and by an
exclusive marker only an owner writes), and no committed publication lost.

No lease expires during the race (600 s) and nobody confirms a takeover, so
every owner's renewal, publication and release must succeed: a claim that
lands right after a release is that release's successor, not a loss."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random

from mevedel_server.store import (
    ClaimRaced,
    ClientIdentity,
    LeaseHeld,
    Publisher,
    acquire_lease,
    materialize_session,
    read_committed,
)
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    Status,
    read_target_clock,
)

SID = "2026-07-19T09-47-bf87b5dd793a"
PROCESSES = 8
ROUNDS = 4
_CTX = multiprocessing.get_context("spawn")


async def _race(root: str, index: int, log_path: str) -> None:
    target = LocalTarget(root)
    me = ClientIdentity(f"racer-{index}", f"host-{index}")
    log = []
    attempts = 0
    raced = 0
    while len(log) < ROUNDS:
        attempts += 1
        assert attempts < 20000, "never won the lease"
        try:
            lease = await acquire_lease(target, SID, me, duration_seconds=600)
        except (LeaseHeld, ClaimRaced) as refusal:
            raced += isinstance(refusal, ClaimRaced)
            await asyncio.sleep(random.uniform(0.002, 0.02))
            continue
        entry = {"client": me.client_id, "start_generation": lease.generation, "start_clock": lease.now}
        marker = await target.run(ControlProgram([CreateExclusive("critical/owner", me.client_id.encode())]))
        entry["marker_conflict"] = marker[0].status is not Status.OK
        logical = f"log/{index}-{len(log)}"
        await Publisher(lease).publish({logical: f"{index} round {len(log)}".encode()})
        entry["logical"] = logical
        await lease.renew()
        if not entry["marker_conflict"]:
            await target.remove("critical/owner")
        entry["end_clock"] = await read_target_clock(target, "critical")
        await lease.release()
        entry["end_generation"] = lease.generation
        entry["lost_elections"] = raced
        log.append(entry)
    with open(log_path, "w") as handle:
        for entry in log:
            handle.write(json.dumps(entry) + "\n")


def _racer(root: str, index: int, log_path: str) -> None:
    asyncio.run(_race(root, index, log_path))


async def test_eight_processes_racing_for_one_lease(tmp_path):
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    await target.make_dirs("critical")
    logs = [tmp_path / f"racer-{i}.jsonl" for i in range(PROCESSES)]
    racers = [_CTX.Process(target=_racer, args=(str(tmp_path), i, str(logs[i]))) for i in range(PROCESSES)]
    for racer in racers:
        racer.start()
    for racer in racers:
        await asyncio.to_thread(racer.join, 110)
        assert racer.exitcode == 0

    holds = [json.loads(line) for path in logs for line in path.read_text().splitlines()]
    assert len(holds) == PROCESSES * ROUNDS
    assert not any(h["marker_conflict"] for h in holds), "two owners were inside at once"
    holds.sort(key=lambda h: h["start_generation"])
    for before, after in zip(holds, holds[1:]):
        # Ownership intervals in generation order never overlap...
        assert before["end_generation"] < after["start_generation"], (before, after)
        # ...and by the target clock the next owner observed the lease free
        # only after the previous one had finished.
        assert before["end_clock"] <= after["start_clock"], (before, after)
    committed = await (await read_committed(target, SID)).read_all()
    expected = {h["logical"]: f"{h['logical'][4:].split('-')[0]} round {h['logical'].split('-')[1]}".encode() for h in holds}
    assert committed == expected  # every owner's publication survived its successors
    elections_lost = sum(max(h["lost_elections"] for h in holds if h["client"] == c) for c in {h["client"] for h in holds})
    print(
        f"\n{len(holds)} holds by {PROCESSES} processes, {elections_lost} simultaneous claims lost, "
        f"final lease generation {holds[-1]['end_generation']}"
    )
