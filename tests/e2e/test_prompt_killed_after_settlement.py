"""A ``mevedel prompt`` continuing a session, killed (SIGKILL) after its
turn settled, while it stopped its agent and before its exit handed its
lease to its CLI client: an editor's server on the same machine proves the
holder dead and takes the session over at once -- not after the CLI lease's
minute -- with nothing in flight to interrupt. (A prompt that ends well
keeps the session for its own client: ``tests/unit/cli/test_cli_dead_holder.py``.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from lsprotocol import types

from mevedel_protocol import methods
from settled_prompt import frozen_after_settlement, settled_then_frozen

from .conftest import request

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


async def test_a_prompt_killed_after_its_turn_settled_is_taken_over_at_once(client, workspace, tmp_path):
    questions: list = []

    def answer(params):
        questions.append(params)
        return types.MessageActionItem(title="Take over")

    client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(answer)
    script = tmp_path / "script.json"
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    # The CLI's first prompt ends well; its second resumes the session.
    script.write_text(json.dumps({"turns": [[{"say": "started"}]]}))
    first = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "mevedel_server.cli", "prompt", "Start it"], cwd=workspace, env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    script.write_text(json.dumps(settled_then_frozen([[{"say": "all done"}]])))
    prompt = await asyncio.to_thread(
        frozen_after_settlement, [sys.executable, "-m", "mevedel_server.cli", "prompt", "Finish it"], cwd=workspace, env=env
    )
    prompt.send_signal(signal.SIGKILL)
    out, _err = prompt.communicate()
    assert "all done" in out, out
    listed = (await request(client, methods.SESSION_LIST, {}))["sessions"]
    (row,) = [s for s in listed if s["turns"] == 2]
    assert (row["action"], row["lease"]) == ("Take over", "expired"), row
    opened = await request(client, methods.SESSION_OPEN, {"sessionId": row["sessionId"]})
    assert opened["action"] == "takeover" and "interruptedTurn" not in opened and opened["session"]["access"] == "writable"
    (question,) = questions
    assert "process on this machine has ended" in question.message, question.message
    begun = await request(client, methods.TURN_BEGIN, {"prompt": "carry on"})
    assert begun["turn"] == 3
