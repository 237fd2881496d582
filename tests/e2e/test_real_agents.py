"""Real ACP agents nobody here wrote (installed from npm by
``scripts/setup --test`` into ``tests/agents/real``), run without any
credentials: a prompt through each ends quickly in a clear error naming the
agent and the login to do, nothing is recorded as a turn, and the server
keeps serving. No model API is reachable here, so no real agent is ever
claimed to answer a prompt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import request

BIN = Path(__file__).resolve().parents[1] / "agents" / "real" / "node_modules" / ".bin"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not BIN.is_dir(),
    reason="the real ACP agents are not installed (scripts/setup --test installs them with npm)",
)


def use(client, tmp_path: Path, name: str, program: str) -> None:
    home = tmp_path / "empty-home"  # no login of the user's leaks in
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    settings = {"agents": {name: {"command": [str(BIN / program)], "env": env}}, "defaultAgent": name}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))


async def refused(client) -> dict:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, methods.TURN_PROMPT, {"text": "Say hello"})
    return caught.value.data


async def nothing_recorded(client) -> None:
    listed = await request(client, methods.SESSION_LIST, {})
    assert all(row["turns"] == 0 for row in listed["sessions"])


async def test_codex_without_a_login_names_its_login_methods(client, tmp_path):
    use(client, tmp_path, "codex", "codex-acp")
    error = await refused(client)
    assert error["kind"] == "agent-needs-login" and error["authored"] == "agent 'codex'"
    assert "OPENAI_API_KEY" in error["reason"] and "log in first" in error["reason"]
    await nothing_recorded(client)
    listing = await request(client, methods.AGENT_LIST, {})
    assert [a["name"] for a in listing["agents"]] == ["codex"] and listing["agents"][0]["found"]


async def test_claude_without_a_login_fails_naming_the_agent_and_the_login(client, tmp_path):
    use(client, tmp_path, "claude", "claude-agent-acp")
    error = await refused(client)
    assert error["kind"] in ("agent-failed", "agent-needs-login") and error["authored"] == "agent 'claude'"
    assert "log in" in error["reason"]
    await nothing_recorded(client)
