"""An agent process stopped while it starts: the engine awaits the tool
server between ``initialize`` and ``session/new``, and a session close or
the server's exit may stop the process in that gap. Opening the session
then is refused with an error that says so, never an internal error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.unit.agents.test_scripted_agent import AGENT, FakeClient

from deadlines import GENEROUS_SECONDS
from mevedel_server.agents.config import AgentSpec
from mevedel_server.agents.errors import AgentError
from mevedel_server.agents.process import AgentProcess


async def test_opening_a_session_on_a_stopped_agent_says_it_was_stopped(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": []}))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    process = AgentProcess(AgentSpec("scripted", (sys.executable, str(AGENT), str(script))), tmp_path / "agent.log")
    await process.start(FakeClient(workspace), str(workspace), GENEROUS_SECONDS)
    await process.stop()  # the session closed while the engine awaited the tool server
    with pytest.raises(AgentError) as refused:
        await process.open_session(str(workspace), [], None, GENEROUS_SECONDS)
    assert "stopped before its session opened" in refused.value.reason
