"""``mevedel session follow ID`` as a real process: the starting state, then
one line per publication with whole settled turns, a rename and a release;
nothing for a mid-turn checkpoint; Ctrl-C ends it with status 130; a missing
session is refused with its kind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

OWNER = ClientIdentity("client-owner", "owner-box")


def follow(workspace: Path, state: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "session", "follow", *args],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    # A suite started in the background of a non-interactive shell ignores
    # SIGINT, and an ignored signal stays ignored across exec; a terminal's
    # Ctrl-C reaches a command whose SIGINT is the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def next_line(process: subprocess.Popen) -> dict:
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
    assert line, process.stderr.read()
    return json.loads(line)


async def settle(owner: SessionService, sid: str, prompt: str) -> None:
    await owner.turns.begin_turn(sid, prompt)
    await owner.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await owner.turns.settle(sid)


async def test_follow_streams_whole_turns_until_interrupted(workspace, tmp_path):
    owner = SessionService(LocalTarget(workspace), OWNER)
    sid = (await owner.sessions.create("Streamed")).session_id
    await settle(owner, sid, "first")
    process = follow(workspace, tmp_path / "state", sid, "--json")
    try:
        start = await next_line(process)
        assert start["session_id"] == sid and start["workspace_folder"] == workspace.resolve().as_uri()
        assert [(t["turn"], t["change"], t["prompt"]) for t in start["turns"]] == [(1, "new", "first")]
        assert start["holder_host"] == "owner-box" and start["display_name"] == "Streamed"

        # A checkpoint mid-turn prints nothing; the settled turn does.
        await owner.turns.begin_turn(sid, "second")
        await owner.turns.append(sid, EvidenceInput("response", text="partial"))
        await owner.turns.checkpoint(sid)
        await owner.turns.append(sid, EvidenceInput("response", text="rest"))
        await owner.turns.settle(sid)
        settled = await next_line(process)
        assert [(t["turn"], t["change"], t["state"]) for t in settled["turns"]] == [(2, "new", "completed")]

        await owner.sessions.rename(sid, "Streamed, renamed")
        renamed = await next_line(process)
        assert renamed["renamed"] and renamed["display_name"] == "Streamed, renamed" and renamed["turns"] == []

        await owner.sessions.close(sid)
        released = await next_line(process)
        assert released["holder_changed"] and released["lease_state"] == "released"
    finally:
        process.send_signal(signal.SIGINT)
        status = await asyncio.to_thread(process.wait, 30)
        err = process.stderr.read()
        await owner.sessions.close_all()
    assert status == 130 and "Traceback" not in err


async def test_follow_plain_output_and_a_missing_session(workspace, tmp_path):
    owner = SessionService(LocalTarget(workspace), OWNER)
    sid = (await owner.sessions.create()).session_id
    await settle(owner, sid, "first")
    await owner.sessions.close_all()
    process = follow(workspace, tmp_path / "state", sid)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
        assert line.startswith(f"{sid} ") and "turn 1 new, completed: first" in line
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.to_thread(process.wait, 30)
    missing = follow(workspace, tmp_path / "state", "2026-07-19T09-47-000000000000", "--json")
    out, err = await asyncio.to_thread(missing.communicate, None, 60)
    assert missing.returncode == 1 and json.loads(out)["error"]["kind"] == "missing-target"
    assert "Traceback" not in err
    bad = follow(workspace, tmp_path / "state", sid, "--poll-seconds", "0")
    _out, err = await asyncio.to_thread(bad.communicate, None, 60)
    assert bad.returncode == 2 and "--poll-seconds '0': must be at least 0.1" in err
