"""``mevedel session release-control`` over SSH when the connection drops
as its one program (the explicit save, whose commit is the release) is
sent: nothing is released, the command says so, why, and what to run --
retry-publication, then release-control again -- and those release the
session with what it held, for another client to acquire. Real CLI
processes (two clients), a real SSH server that drops the connection."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


async def mevedel(fault_server, tmp_path: Path, root: Path, who: str, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "HOME": str(fault_server.home(tmp_path)), "XDG_STATE_HOME": str(tmp_path / f"{who}-state")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", *args, "--json", "--workspace", fault_server.url(root),
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert b"Traceback" not in out + err, err.decode()
    return process.returncode, json.loads(out)


async def test_a_release_control_whose_program_is_dropped_releases_nothing_and_says_what_to_run(tmp_path, fault_server):
    root = tmp_path / "ws"
    root.mkdir()
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "turn", "begin", "--new", "first")
    assert status == 0, out
    sid = out["session_id"]
    assert (await mevedel(fault_server, tmp_path, root, "owner", "turn", "append", "response", "--text", "done"))[0] == 0
    assert (await mevedel(fault_server, tmp_path, root, "owner", "turn", "settle"))[0] == 0

    # The program that writes the released generation never reaches the host.
    fault_server.when = (b'"released"', "drop-before-run")
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "session", "release-control")
    assert fault_server.when is None, "the release was never sent"
    assert status == 1 and out["error"]["kind"] == "publication-pending", out
    message = out["error"]["message"]
    assert f"session {sid}: control was not released: this client still holds the session; publication pending: " in message
    assert message.endswith(
        f"; mevedel session retry-publication --session {sid} publishes it (abandon-publication drops it), "
        f"then mevedel session release-control --session {sid} releases"
    ), message
    assert (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists()
    status, out = await mevedel(fault_server, tmp_path, root, "asker", "session", "take-control", sid, "--wait", "0")
    assert status == 0 and out["outcome"] == "requested", out  # still held: asked, not acquired

    assert (await mevedel(fault_server, tmp_path, root, "owner", "session", "retry-publication", "--session", sid))[0] == 0
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "session", "release-control", "--session", sid)
    assert status == 0 and out["access"] == "read-only" and out["saved"], out
    status, out = await mevedel(fault_server, tmp_path, root, "asker", "session", "take-control", sid, "--wait", "30")
    assert status == 0 and out["outcome"] == "acquired" and out["settled_turns"] == 1, out
