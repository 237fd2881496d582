"""A ``mevedel prompt`` over SSH whose host goes away as its turn settles:
the prompt ends saying what happened to the turn, and no more -- its exit
does not try the unreachable host again to hand its lease to its client,
whose head, naming the ended process, lets another client on this machine
take the session over once the host is back, as after a kill. Real CLI
processes, an SSH server that drops the settlement and stops listening."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"


async def test_a_prompt_whose_host_went_away_as_it_settled_ends_without_trying_it_again(tmp_path, fault_server):
    root = tmp_path / "ws"
    root.mkdir()
    home = fault_server.home(tmp_path)
    armed = tmp_path / "armed"  # the agent ends its turn once the test has armed the drop
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[{"say": "ready"}, {"wait_file": str(armed)}, {"say": " done"}]]}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def cli(client: str, *args: str):
        # The SSH server answers in this event loop: the CLI runs beside it.
        return asyncio.create_subprocess_exec(
            sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", fault_server.url(root), cwd=tmp_path,
            env={**env, "XDG_STATE_HOME": str(tmp_path / f"state-{client}")},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )

    prompt = await cli("a", "prompt", "Go")
    assert prompt.stdout is not None
    said = b""
    while b"ready" not in said:
        chunk = await prompt.stdout.read(100)
        assert chunk, (await prompt.stderr.read()).decode()
        said += chunk
    fault_server.when, fault_server.then_unreachable = (b"Barrier", "drop-before-run"), True
    armed.touch()
    _out, err = await asyncio.wait_for(prompt.communicate(), 120)
    told = err.decode()
    assert prompt.returncode == 2 and "the turn could not be settled" in told, told
    assert "lease" not in told and "Traceback" not in told, told
    await fault_server.start()
    listing = await cli("b", "session", "list", "--json")
    out, err = await asyncio.wait_for(listing.communicate(), 120)
    (row,) = json.loads(out)["sessions"]
    assert row["action"] == "Take over" and row["holder_ended"], row
