"""``mevedel session grant-control`` over SSH when the connection drops as
the hand-over's release is sent: the command says the release failed and
why, and what to run -- the next grant-control, which finishes the
hand-over and says so -- and the asker then acquires the session. Real CLI
processes (two clients), a real SSH server that drops the connection."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"

async def mevedel(fault_server, tmp_path: Path, root: Path, who: str, *args: str, as_json: bool = True) -> tuple[int, str]:
    home = fault_server.home(tmp_path)
    config = tmp_path / f"{who}-config" / "mevedel" / "config.json"
    if not config.exists():
        script = tmp_path / f"{who}-script.json"
        script.write_text(json.dumps({"turns": [[{"say": f"{who} here"}]]}))
        config.parent.mkdir(parents=True)
        config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    # Each client its own state (its identity) and configuration.
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / f"{who}-state"),
           "XDG_CONFIG_HOME": str(config.parent.parent)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", *args, *(["--json"] if as_json else []),
        "--workspace", fault_server.url(root),
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert b"Traceback" not in out + err, err.decode()
    # Without --json a refusal is told on stderr.
    return process.returncode, out.decode() + ("" if as_json else err.decode())


@pytest.mark.parametrize("first", ["turn", "prompt"])
async def test_a_grant_whose_release_is_dropped_says_why_and_the_next_grant_control_finishes_it(tmp_path, fault_server, first):
    """``turn``: nothing changed since the last publication, so the release
    alone failed; ``prompt``: the agent binding's end had to be published
    with it, so that final publication was left pending, journalled on the
    host -- the release's own, which the next command publishes again as
    the release without anyone's retry-publication."""
    root = tmp_path / "ws"
    root.mkdir()
    if first == "turn":
        status, out = await mevedel(fault_server, tmp_path, root, "owner", "turn", "begin", "--new", "first")
        assert status == 0, out
        assert (await mevedel(fault_server, tmp_path, root, "owner", "turn", "append", "response", "--text", "done"))[0] == 0
        assert (await mevedel(fault_server, tmp_path, root, "owner", "turn", "settle"))[0] == 0
    else:
        status, out = await mevedel(fault_server, tmp_path, root, "owner", "prompt", "Start", as_json=False)
        assert status == 0 and "owner here" in out, out
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "session", "list")
    sid = json.loads(out)["sessions"][0]["session_id"]
    status, out = await mevedel(fault_server, tmp_path, root, "asker", "session", "take-control", sid, "--wait", "0")
    assert status == 0 and json.loads(out)["outcome"] == "requested", out

    # The program that writes the grant's fence and release never reaches the host.
    fault_server.when = (b"fence-", "drop-before-run")
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "session", "grant-control", as_json=False)
    assert fault_server.when is None, "the release was never sent"
    assert status == 0, out
    line = out.splitlines()[0]
    assert line.startswith("granted; its release failed (") and "ssh target" in line, line
    assert line.endswith("); run grant-control again to try it again"), line
    assert "None" not in line
    recorded = root / ".mevedel" / "sessions" / sid / ".pending-publication"
    assert recorded.exists() == (first == "prompt")

    # The next grant-control (another process) releases, and says so.
    status, out = await mevedel(fault_server, tmp_path, root, "owner", "session", "grant-control", as_json=False)
    assert status == 0 and out.splitlines()[0] == f"granted earlier; session {sid} is handed over now", out

    status, out = await mevedel(fault_server, tmp_path, root, "asker", "session", "take-control", sid, "--wait", "30")
    assert status == 0 and json.loads(out)["outcome"] == "acquired", out
    assert not recorded.exists()
