"""``mevedel mcp --client-state DIR`` keeps all of its client's state in
DIR, whatever ``$XDG_STATE_HOME`` the MCP client that starts it passes:
the identity, the saves kept for an SSH host, the approved workspace MCP
servers. Two commands with the same DIR share them; another DIR does not.
The official ``mcp`` client drives the real command over stdio; the kept
save is made by ``mevedel turn settle`` against the fault-injecting SSH
server on loopback, the approval by ``mevedel read --approve-mcp``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from .test_mcp_tool_server import add, envelope, ok

SCRIPTED = Path(__file__).resolve().parents[1] / "mcp_servers" / "scripted_server.py"


def _environment(tmp_path: Path, state: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def _another_client_state(tmp_path: Path, of: Path) -> Path:
    """A state directory of the same client (its identity copied), nothing
    else: ``$XDG_STATE_HOME/mevedel`` of another XDG_STATE_HOME."""
    other = tmp_path / "other" / "mevedel"
    other.mkdir(parents=True)
    shutil.copy(of / "cli-client.json", other / "cli-client.json")
    return other


async def _served(params: StdioServerParameters, log: Path, sid: str) -> str:
    """Resume the session through the server; what it said on standard error."""
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert "done" in await ok(session, "Read", path="history://root")
                assert await ok(session, "ApplyPatch", patch=envelope(add(f"work://{log.stem}.md", "x"))) == f"A work://{log.stem}.md"
    said = log.read_text()
    assert "Traceback" not in said, said
    return said


async def test_a_kept_save_is_the_client_states_and_follows_it(tmp_path, fault_server):
    from unit.cli.test_cli_ssh_unknown_outcome import settlement_kept_here

    root = tmp_path / "ws"
    root.mkdir()
    sid, _told = await settlement_kept_here(fault_server, tmp_path, root)
    client_state = tmp_path / "state" / "mevedel"  # where `mevedel turn settle` kept it
    kept = sorted((client_state / "unrecorded").glob(f"*/{sid}/pending-*.json"))
    assert len(kept) == 1
    await fault_server.start()

    def server(given: Path, xdg_state: Path) -> StdioServerParameters:
        args = ["-m", "mevedel_server.cli", "mcp", "--workspace", fault_server.url(root), "--session", sid, "--client-state", str(given)]
        return StdioServerParameters(command=sys.executable, args=args, env=_environment(tmp_path, xdg_state), cwd=str(tmp_path))

    pending = root / ".mevedel" / "sessions" / sid / ".pending-publication"
    # The same client from another state directory, started where $XDG_STATE_HOME holds the kept save: not its save.
    other = _another_client_state(tmp_path, client_state)
    said = await _served(server(other, tmp_path / "state"), tmp_path / "other.log", sid)
    assert "the save this machine kept" not in said, said
    assert kept[0].exists() and not list(pending.glob("pending-*.json"))
    # The kept save's own state directory, with $XDG_STATE_HOME elsewhere: it reaches the host.
    said = await _served(server(client_state, tmp_path / "elsewhere"), tmp_path / "same.log", sid)
    assert f"mevedel: session {sid}: the save this machine kept since " in said and "is recorded on " in said, said
    assert not kept[0].exists()
    assert [p.name for p in pending.glob("pending-*.json")] == [kept[0].name]


def _cli(tmp_path: Path, workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", str(workspace)],
                          env=_environment(tmp_path, tmp_path / "state"), cwd=workspace, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


async def test_an_approved_workspace_server_is_the_client_states(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    entry = {"command": sys.executable, "args": [str(SCRIPTED)]}
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo": entry}}), encoding="utf-8")
    # Approved by `mevedel read` in the user's environment: remembered in $XDG_STATE_HOME/mevedel.
    approved = _cli(tmp_path, workspace, "read", "mcp://repo/test%3A%2F%2Fpid", "--approve-mcp", "repo")
    assert approved.returncode == 0 and "pid " in approved.stdout, approved.stderr
    assert _cli(tmp_path, workspace, "session", "list").returncode == 0  # the CLI client's identity is made
    client_state = tmp_path / "state" / "mevedel"
    other = _another_client_state(tmp_path, client_state)

    async def read_through(given: Path, xdg_state: Path) -> tuple[bool, str]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mevedel_server.cli", "mcp", "--workspace", str(workspace), "--client-state", str(given)],
            env=_environment(tmp_path, xdg_state), cwd=str(workspace),
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("Read", {"path": "mcp://repo/test%3A%2F%2Fpid"})
                return bool(result.isError), result.content[0].text

    # Its own directory, started without the user's $XDG_STATE_HOME: approved.
    failed, text = await read_through(client_state, tmp_path / "elsewhere")
    assert not failed and "pid " in text, text
    # Another directory, though $XDG_STATE_HOME holds the approval: not approved.
    failed, text = await read_through(other, tmp_path / "state")
    # ... and the refusal says how to approve it for this client.
    assert failed and f"approve it once in a terminal: XDG_STATE_HOME={tmp_path / 'other'} mevedel read mcp://repo --approve-mcp repo" in text, text
