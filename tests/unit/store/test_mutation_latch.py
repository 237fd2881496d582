"""The unsettled-mutation latch a crashed owner leaves: a new owner is told
what may still run; records proven gone (the group no longer exists here)
clear it by themselves; what cannot be proven needs acknowledgement."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.store import ClientIdentity, LeaseStanding, observe_lease
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")


async def saved_session(root: Path, client: ClientIdentity, **options) -> tuple[SessionService, str]:
    svc = SessionService(LocalTarget(root), client, **options)
    sid = (await svc.sessions.create()).session_id
    await svc.turns.begin_turn(sid, "first")
    await svc.turns.append(sid, EvidenceInput("response", text="done"))
    await svc.turns.settle(sid)
    return svc, sid


async def expired(root: Path, sid: str) -> None:
    for _ in ticks():
        if (await observe_lease(LocalTarget(root), sid)).standing is LeaseStanding.EXPIRED:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the lease never expired")


async def test_a_taken_over_latch_names_the_live_group_and_clears_once_it_is_gone(tmp_path):
    crashed, sid = await saved_session(tmp_path, ME, lease_seconds=1)
    left = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        session = crashed.session(sid)
        armed = await session.latch.arm(session.lease)
        await session.latch.launched(session.lease, left.pid, "sleep 300", 1, session.time.now(), armed_id=armed)
        await crashed.sessions.detach()  # the owner dies; its command runs on
        await expired(tmp_path, sid)
        heir = SessionService(LocalTarget(tmp_path), OTHER)
        await heir.sessions.open(sid, confirm_takeover=True)
        state = await heir.turns.unsettled_mutation(sid)
        assert state.set and [r.pgid for r in state.alive] == [left.pid]
        assert f"process group {left.pid}" in state.message() and "workstation" in state.message()
    finally:
        os.killpg(left.pid, signal.SIGKILL)
        left.wait()
    assert not (await heir.turns.unsettled_mutation(sid)).set
    assert not (await observe_lease(LocalTarget(tmp_path), sid)).record.unsettled_mutation
    assert not list((tmp_path / ".mevedel" / "sessions" / sid / ".mutations").glob("armed-*"))
    await heir.sessions.close(sid)


async def test_a_latch_without_a_record_is_unprovable_until_acknowledged(tmp_path):
    crashed, sid = await saved_session(tmp_path, ME)
    session = crashed.session(sid)
    await session.latch.arm(session.lease)  # dies before recording the group
    await crashed.sessions.detach()
    again = SessionService(LocalTarget(tmp_path), ME)
    await again.sessions.open(sid)
    state = await again.turns.unsettled_mutation(sid)
    assert state.set and not state.alive and "acknowledge" in state.message()
    assert (await again.turns.unsettled_mutation(sid)).set  # it does not clear by itself
    assert await again.turns.acknowledge_unsettled_mutation(sid)
    assert not (await again.turns.unsettled_mutation(sid)).set
    assert not (await observe_lease(LocalTarget(tmp_path), sid)).record.unsettled_mutation
    assert not await again.turns.acknowledge_unsettled_mutation(sid)
    await again.sessions.close(sid)


async def test_a_record_of_another_boot_of_this_machine_is_proven_gone(tmp_path):
    crashed, sid = await saved_session(tmp_path, ME)
    session = crashed.session(sid)
    armed = await session.latch.arm(session.lease)
    await session.latch.launched(session.lease, 4_000_000, "make", 1, session.time.now(), armed_id=armed)
    path = tmp_path / ".mevedel" / "sessions" / sid / ".mutations" / f"armed-{armed}.json"
    import json

    record = json.loads(path.read_text())
    if record["boot_id"] is None:
        pytest.skip("no boot identity on this machine: nothing can be proven")
    record["boot_id"] = "0" * 8 + record["boot_id"][8:] if not record["boot_id"].startswith("0" * 8) else "1" * 8 + record["boot_id"][8:]
    path.write_text(json.dumps(record))
    await crashed.sessions.detach()
    again = SessionService(LocalTarget(tmp_path), ME)
    await again.sessions.open(sid)
    assert not (await again.turns.unsettled_mutation(sid)).set
    assert not path.exists()
    await again.sessions.close(sid)
