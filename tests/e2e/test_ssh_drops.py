"""A connection to an SSH workspace that drops in the middle of an agent's
turn: the agent is told what it may not rely on, the user gets no
traceback, and the turn settles once the host answers again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys

from lsprotocol import types
from pytest_lsp import ClientServerConfig

from deadlines import wait_for
from mevedel_protocol import methods

from .conftest import make_client, request
from .test_agent_turns import AGENT, Watch, prompt


async def _server(fault_server, tmp_path, project, script):
    """A real server whose remote workspace is ``project`` through the
    fault-injecting SSH server, with the scripted agent configured."""
    home = fault_server.home(tmp_path)
    url = fault_server.url(project)
    settings = {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, "defaultAgent": "scripted"}
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "mevedel_server"], client_factory=make_client,
        server_env={**os.environ, "HOME": str(home)},
    )
    client = await config.start()
    await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), initialization_options={"remoteWorkspaces": [url], **settings}))
    return client, url


@contextlib.asynccontextmanager
async def _turn_with_a_drop(fault_server, tmp_path, project, steps: list, fault: tuple, what: str):
    """A turn in ``project`` whose agent says "ready", waits until the test
    has armed ``fault`` on the host, then runs ``steps``: the client, the
    workspace's address, what the client was shown and the turn's result
    (the server shut down after)."""
    armed = tmp_path / "armed"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[{"say": "ready"}, {"wait_file": str(armed)}, *steps]]}))
    client, url = await _server(fault_server, tmp_path, project, script)
    try:
        watch = Watch(client)
        turn = asyncio.ensure_future(prompt(client, "Go on", workspaceFolder=url))
        await wait_for(lambda: "ready" in watch.text(), f"the agent ready to {what}")
        fault_server.when = fault
        armed.touch()
        result = await asyncio.wait_for(turn, 120)
        yield client, url, watch, result
    finally:
        await client.shutdown_session()


async def test_a_drop_during_an_agents_write_is_told_and_the_turn_settles(fault_server, tmp_path):
    project = tmp_path / "remote"
    project.mkdir()
    (project / "notes.md").write_text("before\n")
    steps = [{"write": {"path": "notes.md", "content": "after\n"}}, {"say": " then"}]
    # The next program -- the write -- runs, and its answer is lost.
    async with _turn_with_a_drop(fault_server, tmp_path, project, steps, (b"WriteProject", "drop-after-run"), "write") as (
        client, url, watch, result,
    ):
        assert result["outcome"] == "completed", result
        said = watch.text()
        assert "write notes.md failed: " in said and "notes.md may or may not have been written: ssh target" in said, said
        assert "(read it before relying on it)" in said and " then" in said
        # The state before the lost write is a named gap: Rewind says so
        # instead of claiming to restore it.
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", "workspaceFolder": url})
        gaps = {g["path"]: g["reason"] for g in impact["gaps"]}
        assert "connection was lost during the agent's write" in gaps["notes.md"], impact


async def test_a_command_cut_off_by_a_drop_is_told_and_the_next_one_runs(fault_server, tmp_path):
    project = tmp_path / "remote"
    project.mkdir()
    steps = [
        {"terminal": {"command": "sh", "args": ["-c", "echo made > made.txt"]}},
        {"terminal": {"command": "sh", "args": ["-c", "echo second"]}},
    ]
    async with _turn_with_a_drop(fault_server, tmp_path, project, steps, (b"made.txt", "drop-before-run"), "run its commands") as (
        _client, _url, watch, result,
    ):
        assert result["outcome"] == "completed", result
        said = watch.text()
        # Dropped before it started: the client sees it either when the
        # command's channel opens (it did not run) or when it ends (unknown).
        told = ("the command did not run" in said) or ("whether and how far it ran is unknown" in said)
        assert "ran: exit 127" in said and told, said
        assert not (project / "made.txt").exists()
        assert "second" in said  # the next command runs on a new connection
