"""Control transfer between a real server process and the ``mevedel`` CLI
(another process, its own client) on one workspace: the CLI asks a server's
user and acquires after the grant; a server asks the CLI, which answers
with keep-control and then grant-control; refusals carry their kinds."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from deadlines import wait_for
from mevedel_protocol import methods

from .test_control_transfer import one_writer, owned, turns_of


async def cli(workspace: Path, state: Path, *args: str) -> tuple[int, dict]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", *args, "--json",
        cwd=workspace,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert b"Traceback" not in err, err.decode()
    return process.returncode, json.loads(out)


async def test_the_cli_asks_a_server_and_acquires_after_the_grant(workspace, machines, tmp_path):
    desk = await machines("desk")
    sid = await owned(desk)
    status, taken = await cli(workspace, tmp_path, "session", "take-control", sid)
    assert status == 0 and taken["outcome"] == "acquired" and taken["access"] == "writable"
    assert desk.questions and "released" in desk.phases()
    assert await one_writer(workspace, sid, [desk]) is None  # the CLI holds it now
    status, _ = await cli(workspace, tmp_path, "turn", "begin", "--session", sid, "from the cli")
    assert status == 0
    status, _ = await cli(workspace, tmp_path, "turn", "settle", "--session", sid)
    assert status == 0
    status, released = await cli(workspace, tmp_path, "session", "release-control", "--session", sid)
    assert status == 0 and released["access"] == "read-only"
    taken = await desk.call(methods.CONTROL_TAKE, {"sessionId": sid})
    assert taken["outcome"] == "acquired"
    assert await turns_of(desk, sid) == ["turn 1", "from the cli"]


async def test_a_server_asks_the_cli_which_keeps_then_grants(workspace, machines, tmp_path):
    status, created = await cli(workspace, tmp_path, "session", "create", "--prompt", "cli turn")
    sid = created["session_id"]
    status, _ = await cli(workspace, tmp_path, "turn", "settle", "--session", sid)
    assert status == 0
    laptop = await machines("laptop")
    assert (await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid}))["outcome"] == "requested"
    status, kept = await cli(workspace, tmp_path, "session", "keep-control", "--session", sid)
    assert status == 0 and kept["verb"] == "keep"
    await wait_for(lambda: "rejected" in laptop.phases(), "the rejection")
    status, refused = await cli(workspace, tmp_path, "session", "grant-control", "--session", sid)
    assert status == 1 and refused["error"]["kind"] == "conflict"  # nothing waits for an answer now
    assert (await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid}))["outcome"] == "requested"
    status, granted = await cli(workspace, tmp_path, "session", "grant-control", "--session", sid)
    assert status == 0 and granted["phase"] == "idle"
    await wait_for(lambda: "acquired" in laptop.phases(), "the server acquiring")
    assert await one_writer(workspace, sid, [laptop]) is laptop
    assert await turns_of(laptop, sid) == ["cli turn"]
    status, refused = await cli(workspace, tmp_path, "session", "take-control", sid, "--wait", "-1")
    assert status == 1 and refused["error"]["kind"] == "invalid-params"


async def test_take_control_without_waiting_reports_the_request_it_filed(workspace, machines, tmp_path):
    desk = await machines("desk")
    desk.answer = "Keep"
    sid = await owned(desk)
    status, filed = await cli(workspace, tmp_path, "session", "take-control", sid, "--wait", "0")
    assert status == 0, filed
    assert filed["outcome"] == "requested" and filed["owner_host"]
    await wait_for(lambda: desk.questions, "the owner being asked")
    await wait_for(lambda: "kept" in desk.phases() or "idle" in desk.phases(), "the owner's answer")
    assert await one_writer(workspace, sid, [desk]) is desk


async def test_a_waiting_take_control_says_whom_it_asked_and_until_when(workspace, machines, tmp_path):
    desk = await machines("desk")
    desk.answer = "Keep"
    sid = await owned(desk)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", "session", "take-control", sid, "--json",
        cwd=workspace,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # Said before any answer arrives: the first stderr line.
    first = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
    assert first.startswith("asked ") and f" to hand session {sid} over; waiting for the answer until " in first, first
    assert "take-control again resumes it" in first
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert b"Traceback" not in err
    assert process.returncode == 1 and json.loads(out)["error"]["kind"] == "rejected"


async def test_an_expired_holder_names_the_command_that_takes_over(workspace, tmp_path):
    from deadlines import ticks
    from mevedel_server.store import ClientIdentity, observe_lease
    from mevedel_server.store.service import SessionService
    from mevedel_server.targets import LocalTarget

    gone = SessionService(LocalTarget(workspace), ClientIdentity("gone-client", "old-laptop"), lease_seconds=1)
    sid = (await gone.sessions.create()).session_id
    await gone.turns.begin_turn(sid, "first")
    await gone.turns.settle(sid)
    await gone.sessions.detach()
    for _ in ticks():
        if (await observe_lease(LocalTarget(workspace), sid)).standing.value == "expired":
            break
        await asyncio.sleep(0.05)
    status, refused = await cli(workspace, tmp_path, "session", "take-control", sid)
    assert status == 1 and "old-laptop" in refused["error"]["message"]
    assert refused["error"]["message"].endswith(f"take it over with: mevedel session take-control {sid} --confirm-takeover")
    status, taken = await cli(workspace, tmp_path, "session", "take-control", sid, "--confirm-takeover")
    assert status == 0 and taken["outcome"] == "took-over"
