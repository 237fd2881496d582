"""Eight processes, each its own client, race through the session service to
resume one session, settle a turn and close it, repeatedly. No committed turn
is lost and turn numbers never collide: only one of them owns the session at
a time."""

from __future__ import annotations

import asyncio
import multiprocessing
import random

from mevedel_server.store import ClaimRaced, ClientIdentity, LeaseHeld, read_committed
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

PROCESSES = 8
ROUNDS = 3
_CTX = multiprocessing.get_context("spawn")


async def _race(root: str, index: int) -> None:
    service = SessionService(LocalTarget(root), ClientIdentity(f"racer-{index}", f"host-{index}"), renew_every=3600)
    (sid,) = [row.session_id for row in (await service.sessions.list()).rows]
    done = 0
    attempts = 0
    while done < ROUNDS:
        attempts += 1
        assert attempts < 5000, "never won the session"
        try:
            await service.sessions.open(sid, "resume")
        except (LeaseHeld, ClaimRaced):
            await asyncio.sleep(random.uniform(0.002, 0.02))
            continue
        await service.turns.begin_turn(sid, f"racer {index} round {done}")
        await service.turns.append(sid, EvidenceInput("response", text=f"from {index}"))
        await service.turns.settle(sid)
        await service.sessions.close(sid)
        done += 1


def _run(root: str, index: int) -> None:
    asyncio.run(_race(root, index))


async def test_eight_processes_race_for_one_session_and_no_turn_is_lost(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    seed = SessionService(LocalTarget(root), ClientIdentity("seed", "seed-host"))
    sid = (await seed.sessions.create("Raced")).session_id
    await seed.turns.begin_turn(sid, "seed turn")
    await seed.turns.settle(sid)
    await seed.sessions.close(sid)
    workers = [_CTX.Process(target=_run, args=(str(root), i)) for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    snapshot = await read_committed(LocalTarget(root), sid)
    conversation = Conversation.restore(await snapshot.read_all())
    prompts = [entry.preview for entry in conversation.prompt_index()]
    expected = {f"racer {i} round {r}" for i in range(PROCESSES) for r in range(ROUNDS)}
    assert conversation.sidecar.total_turn_count == 1 + PROCESSES * ROUNDS
    assert prompts[0] == "seed turn" and set(prompts[1:]) == expected and len(prompts) == len(set(prompts))
    assert [entry.turn for entry in conversation.prompt_index()] == list(range(1, 2 + PROCESSES * ROUNDS))
