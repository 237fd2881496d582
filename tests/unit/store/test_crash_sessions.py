"""Crash at every write of each session-service transaction (first
materialization, settle, rename, close, resume repair): a fresh reader sees
exactly the old or the new committed state, and the restarted client
recovers and carries on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.store import ClientIdentity, read_committed, saved_session_ids
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

ME = ClientIdentity("crash-client", "workstation")
WALKED: Counter[str] = Counter()


@dataclass(frozen=True)
class Committed:
    """What a fresh reader sees of one session (None: nothing committed)."""

    turns: int | None
    in_flight: bool = False
    name: str | None = None


async def fresh_reader(root: Path) -> dict[str, Committed]:
    target = LocalTarget(root)
    seen = {}
    for sid in await saved_session_ids(target):
        snapshot = await read_committed(target, sid)
        if snapshot.manifest is None:
            seen[sid] = Committed(None)
            continue
        conversation = Conversation.restore(await snapshot.read_all())
        sidecar = conversation.sidecar
        seen[sid] = Committed(sidecar.total_turn_count, sidecar.in_flight_turn is not None, sidecar.display_name)
    return seen


def kill(svc: SessionService) -> None:
    """The process died: its renewal timers do not run again either."""
    for sid in svc.open_sessions():
        renewal = svc.session(sid).renewal
        if renewal is not None:
            renewal.cancel()


async def turn(svc: SessionService, sid: str, prompt: str) -> None:
    await svc.turns.begin_turn(sid, prompt)
    await svc.turns.append(sid, EvidenceInput("response", text=f"answer: {prompt}"))
    await svc.turns.settle(sid)


@dataclass
class Scenario:
    #: Builds the state before the transaction; returns the session ID (or None).
    prepare: Callable[[SessionService, Path], Awaitable[str | None]]
    #: The transaction under test.
    act: Callable[[SessionService, str | None], Awaitable[object]]
    old: Callable[[str | None], dict[str, Committed]]
    new: Callable[[str | None, dict[str, Committed]], bool]


async def _nothing(svc: SessionService, root: Path) -> None:
    (root / "tracked.txt").write_text("before\n")
    return None


async def _first_materialization(svc: SessionService, sid: str | None) -> None:
    sid = (await svc.sessions.create("First")).session_id
    await svc.turns.begin_turn(sid, "make it")
    await svc.turns.capture_file(sid, "tracked.txt")
    await svc.turns.append(sid, EvidenceInput("response", text="made"))
    await svc.turns.settle(sid)


async def _one_committed_turn(svc: SessionService, root: Path) -> str:
    (root / "tracked.txt").write_text("before\n")
    sid = (await svc.sessions.create("Named")).session_id
    await turn(svc, sid, "first")
    return sid


async def _settle_second(svc: SessionService, sid: str | None) -> None:
    await svc.turns.begin_turn(sid, "second")
    await svc.turns.capture_file(sid, "tracked.txt")
    await svc.turns.append(sid, EvidenceInput("tool_call", call_id="c1", name="edit", arguments="{}"))
    await svc.turns.append(sid, EvidenceInput("tool_result", call_id="c1", output="edited"))
    await svc.turns.settle(sid)


async def _rename(svc: SessionService, sid: str | None) -> None:
    await svc.sessions.rename(sid, "Renamed")


async def _close_with_turn_in_flight(svc: SessionService, sid: str | None) -> None:
    await svc.turns.begin_turn(sid, "unfinished")
    await svc.turns.append(sid, EvidenceInput("response", text="partial"))
    await svc.sessions.close(sid)


async def _in_flight_then_released(svc: SessionService, root: Path) -> str:
    sid = await _one_committed_turn(svc, root)
    await svc.turns.begin_turn(sid, "interrupted one")
    await svc.sessions.close(sid)  # saved with the turn in flight, lease released
    return sid


async def _resume(svc: SessionService, sid: str | None) -> None:
    result = await svc.sessions.open(sid, "resume")
    assert result.interrupted_turn == 2


SCENARIOS = {
    "first-materialization": Scenario(
        _nothing,
        _first_materialization,
        old=lambda sid: {},
        new=lambda sid, seen: list(seen.values()) == [Committed(1, False, "First")],
    ),
    "settle": Scenario(
        _one_committed_turn,
        _settle_second,
        old=lambda sid: {sid: Committed(1, False, "Named")},
        new=lambda sid, seen: seen == {sid: Committed(2, False, "Named")},
    ),
    "rename": Scenario(
        _one_committed_turn,
        _rename,
        old=lambda sid: {sid: Committed(1, False, "Named")},
        new=lambda sid, seen: seen == {sid: Committed(1, False, "Renamed")},
    ),
    "close": Scenario(
        _one_committed_turn,
        _close_with_turn_in_flight,
        old=lambda sid: {sid: Committed(1, False, "Named")},
        new=lambda sid, seen: seen == {sid: Committed(1, True, "Named")},
    ),
    "resume-repair": Scenario(
        _in_flight_then_released,
        _resume,
        old=lambda sid: {sid: Committed(1, True, "Named")},
        new=lambda sid, seen: seen == {sid: Committed(2, False, "Named")},
    ),
}


async def _prepared(root: Path, scenario: Scenario) -> tuple[FaultInjectingTarget, SessionService, str | None]:
    root.mkdir()
    target = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(target, ME, renew_every=3600)
    sid = await scenario.prepare(svc, root)
    return target, svc, sid


async def _recover(root: Path, seen: dict[str, Committed]) -> None:
    """The restarted client (same identity) opens the session the crash
    left (committed or only materialized), or starts again when there is
    none, and completes a turn."""
    svc = SessionService(LocalTarget(root), ME, renew_every=3600)
    if not seen:
        sid = (await svc.sessions.create()).session_id
        await turn(svc, sid, "after the crash")
        assert (await fresh_reader(root))[sid] == Committed(1, False, None)
        await svc.sessions.close(sid)
        return
    (sid,) = seen
    before = seen[sid]
    opened = await svc.sessions.open(sid)
    assert opened.info.access.value == "writable"
    if opened.info.open_turn is not None:
        await svc.turns.settle(sid, "interrupted", reason="recovered after a crash")
    await turn(svc, sid, "after the crash")
    after = (await fresh_reader(root))[sid]
    expected = (before.turns or 0) + 1 + (1 if before.in_flight else 0)
    assert after.turns == expected and not after.in_flight
    await svc.sessions.close(sid)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_crash_at_every_write(tmp_path, name):
    scenario = SCENARIOS[name]
    target, svc, sid = await _prepared(tmp_path / "baseline", scenario)
    target.arm(None)
    await scenario.act(svc, sid)
    total = target.writes
    kill(svc)
    outcomes: Counter[str] = Counter()
    walked = 0
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, svc, sid = await _prepared(root, scenario)
        old = await fresh_reader(root)
        assert old == scenario.old(sid)
        target.arm(point, "crash")
        try:
            await scenario.act(svc, sid)
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1 and not target.fired
            assert scenario.new(sid, await fresh_reader(root))
            kill(svc)
            break
        kill(svc)
        walked += 1
        seen = await fresh_reader(root)
        is_old = {k: v for k, v in seen.items() if v.turns is not None} == old
        assert is_old or scenario.new(sid, seen), f"{name}, crash point {point}: a reader saw {seen}"
        outcomes["old" if is_old else "new"] += 1
        await _recover(root, seen)
    WALKED[name] = walked
    print(f"\n{name}: {walked} crash points walked, outcomes {dict(outcomes)}")
    # Crashes before the commit point leave the old state; the uninterrupted
    # run (point total + 1) reached the new one. Only writes after the
    # commit (pruning, release) can crash into the new state.
    assert walked == total >= 5 and outcomes["old"] >= 4


async def test_another_client_takes_over_after_the_owner_crashed_mid_settle(tmp_path):
    import asyncio

    from mevedel_server.store import (
        LeaseStanding,
        TakeoverNeedsConfirmation,
        observe_lease,
    )

    root = tmp_path / "ws"
    root.mkdir()
    target = FaultInjectingTarget(LocalTarget(root))
    owner = SessionService(target, ME, lease_seconds=1, renew_every=3600)
    sid = await _one_committed_turn(owner, root)
    await owner.turns.begin_turn(sid, "doomed")
    target.arm(3, "crash")  # inside the publication, before its commit point
    with pytest.raises(SimulatedCrash):
        await owner.turns.settle(sid)
    kill(owner)
    assert await fresh_reader(root) == {sid: Committed(1, False, "Named")}
    for _ in ticks():
        if (await observe_lease(LocalTarget(root), sid)).standing is LeaseStanding.EXPIRED:
            break
        await asyncio.sleep(0.05)
    successor = SessionService(LocalTarget(root), ClientIdentity("successor", "laptop"))
    with pytest.raises(TakeoverNeedsConfirmation):
        await successor.sessions.open(sid)
    opened = await successor.sessions.open(sid, "takeover", confirm_takeover=True)
    assert opened.action == "takeover"
    await turn(successor, sid, "carried on")
    assert await fresh_reader(root) == {sid: Committed(2, False, "Named")}
    await successor.sessions.close(sid)
