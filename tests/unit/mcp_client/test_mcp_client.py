"""The MCP client core: configuration entries and their fingerprints,
approvals kept per workspace, name and exact command, and connections that
start only on use and are all stopped by close_all (real subprocesses of
tests/mcp_servers/scripted_server.py through the official SDK)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from mevedel_server.addresses import ErrorKind, Operation
from mevedel_server.mcp_client import (
    Approvals,
    McpAccess,
    McpConnections,
    McpServerSpec,
    servers_from_setting,
    servers_problem,
)
from mevedel_server.mcp_client.config import parse_workspace_file
from mevedel_server.resources import (
    ReadOptions,
    ResolverContext,
    complete,
    execute,
    prepare,
)
from mevedel_server.resources.engine.resolver import AddressError

SCRIPTED = Path(__file__).resolve().parents[2] / "mcp_servers" / "scripted_server.py"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"x": {"args": []}}, "x.command must be a non-empty string"),
        ({"x": {"command": "a", "args": "b"}}, "x.args must be a list of strings"),
        ({"x": {"command": "a", "env": {"A=B": "c"}}}, "x.env must map variable names to strings"),
        ({"x": {"url": "http://localhost:1"}}, "x: only stdio servers"),
        ([], "must be an object"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(value, problem):
    assert problem in servers_problem(value)


def test_the_fingerprint_covers_command_arguments_and_environment():
    base = servers_from_setting({"s": {"command": "prog", "args": ["a"], "env": {"K": "v"}}})["s"]
    for changed in (
        {"command": "other", "args": ["a"], "env": {"K": "v"}},
        {"command": "prog", "args": ["b"], "env": {"K": "v"}},
        {"command": "prog", "args": ["a"], "env": {"K": "w"}},
    ):
        assert servers_from_setting({"s": changed})["s"].fingerprint != base.fingerprint
    assert base.command_line == "K=v prog a"


def test_a_workspace_file_keeps_its_good_entries_and_names_its_bad_ones():
    found = parse_workspace_file(b'{"mcpServers": {"good": {"command": "x"}, "bad": {"command": 3}}}')
    assert list(found.servers) == ["good"] and found.servers["good"].origin == "workspace"
    assert "bad.command" in found.problems["bad"]
    assert parse_workspace_file(b"{").file_problem.startswith("not valid JSON: .mcp.json: Expecting property name")


def test_a_hostile_workspace_file_is_not_valid_json_never_an_internal_error():
    # 100,000 '[' would raise RecursionError from the parser.
    assert parse_workspace_file(b"[" * 100_000).file_problem == "not valid JSON: .mcp.json: nested too deeply"
    assert parse_workspace_file(b'{"x": "\xff"}').file_problem.startswith("not valid JSON: .mcp.json: not UTF-8 text")


async def test_a_deeply_nested_workspace_file_reads_as_a_named_problem(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / ".mcp.json").write_bytes(b"[" * 100_000)
    found = await execute(prepare(Operation.READ, "mcp://", ReadOptions(), ResolverContext(mcp=_workspace_access(tmp_path))))
    assert "not valid JSON: .mcp.json: nested too deeply" in str(found)


async def test_an_approval_covers_the_workspace_files_the_command_runs(tmp_path):
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    (ws / "bin" / "srv.sh").write_text("#!/bin/sh\necho approved\n")
    (ws / "tool.py").write_text("print('approved')\n")
    (ws / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "script": {"command": "./bin/srv.sh"},
        "python": {"command": "python3", "args": ["tool.py", "--config=bin/srv.sh"]},
    }}))
    access = _workspace_access(tmp_path)
    access.cwd = str(ws)
    entries, _ = await access.servers()
    specs = {e.name: e.spec for e in entries}
    assert specs["script"].program == "bin/srv.sh" and [p for p, _ in specs["script"].files] == ["bin/srv.sh"]
    assert specs["python"].program == shutil.which("python3")
    assert [p for p, _ in specs["python"].files] == ["bin/srv.sh", "tool.py"]
    assert "program " + shutil.which("python3") in specs["python"].runs and "tool.py sha256:" in specs["python"].runs
    for spec in specs.values():
        access.approvals.approve(access.workspace_key, spec)
    assert {e.name: e.standing for e in (await access.servers())[0]} == {"script": "ready", "python": "ready"}
    record = json.loads((tmp_path / "approvals.json").read_text())["approved"][0]
    assert record["program"] == "bin/srv.sh" and list(record["files"]) == ["bin/srv.sh"]
    # A pull changes the script: both approvals that name it lapse.
    (ws / "bin" / "srv.sh").write_text("#!/bin/sh\necho something else\n")
    assert {e.name: e.standing for e in (await access.servers())[0]} == {"script": "needs-approval", "python": "needs-approval"}


def test_an_approval_holds_for_one_workspace_name_and_command(tmp_path):
    approvals = Approvals(tmp_path / "approvals.json")
    spec = McpServerSpec("s", "prog", ("a",), origin="workspace")
    approvals.approve("/ws", spec)
    assert approvals.approved("/ws", spec)
    assert not approvals.approved("/other", spec)
    assert not approvals.approved("/ws", McpServerSpec("s", "prog", ("b",), origin="workspace"))
    assert oct((tmp_path / "approvals.json").stat().st_mode & 0o777) == oct(0o600)


def _pids(text: str) -> int:
    return int(text.split("pid ")[1].split()[0])


async def test_completion_and_hover_never_start_a_server_and_close_all_stops_every_one(tmp_path):
    marker = tmp_path / "ran"
    spec = McpServerSpec("s", sys.executable, (str(SCRIPTED), "--marker", str(marker)))
    connections = McpConnections(call_timeout=10, log_dir=tmp_path / "logs")
    context = ResolverContext(mcp=McpAccess(connections, {"s": spec}))
    assert [c.label for c in complete("mcp://", context)] == ["mcp://s"]
    assert complete("mcp://s/", context) == []
    assert not marker.exists()
    found = await execute(prepare(Operation.READ, "mcp://s/test%3A%2F%2Fpid", ReadOptions(), context))
    pid = _pids(found.text)
    assert marker.exists()
    assert [c.label for c in complete("mcp://s/test", context)] == [
        "mcp://s/test%3A%2F%2Fdie", "mcp://s/test%3A%2F%2Fhang", "mcp://s/test%3A%2F%2Fhuge", "mcp://s/test%3A%2F%2Fpid"
    ]
    await connections.close_all()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(AddressError) as refused:
        await execute(prepare(Operation.READ, "mcp://s/test%3A%2F%2Fpid", ReadOptions(), context))
    assert refused.value.kind is ErrorKind.UNREADABLE


async def test_a_program_that_does_not_exist_is_a_clear_failure(tmp_path):
    spec = McpServerSpec("gone", str(tmp_path / "no-such-program"))
    context = ResolverContext(mcp=McpAccess(McpConnections(call_timeout=10, log_dir=tmp_path), {"gone": spec}))
    with pytest.raises(AddressError) as refused:
        await execute(prepare(Operation.READ, "mcp://gone", ReadOptions(), context))
    assert refused.value.kind is ErrorKind.UNREADABLE
    assert "could not be started" in refused.value.reason and "was not found" in refused.value.reason


async def test_a_server_that_never_finishes_starting_is_given_up_on_and_killed(tmp_path):
    pid_file = tmp_path / "pid"
    script = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
    spec = McpServerSpec("mute", sys.executable, ("-c", script, str(pid_file)))
    connections = McpConnections(start_timeout=2, log_dir=tmp_path)
    context = ResolverContext(mcp=McpAccess(connections, {"mute": spec}))
    with pytest.raises(AddressError) as refused:
        await execute(prepare(Operation.READ, "mcp://mute", ReadOptions(), context))
    assert refused.value.kind is ErrorKind.UNREADABLE
    assert refused.value.reason == "MCP server 'mute' did not finish starting within 2 s"
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z"
    await connections.close_all()


async def test_an_answer_over_the_message_limit_is_unreadable_at_once_and_the_server_still_answers(tmp_path):
    spec = McpServerSpec("s", sys.executable, (str(SCRIPTED),))
    connections = McpConnections(call_timeout=60, log_dir=tmp_path / "logs", max_message_bytes=1024 * 1024)
    context = ResolverContext(mcp=McpAccess(connections, {"s": spec}))
    try:
        with pytest.raises(AddressError) as refused:
            await execute(prepare(Operation.READ, "mcp://s/test%3A%2F%2Fhuge", ReadOptions(), context))
        assert refused.value.kind is ErrorKind.UNREADABLE
        assert "larger than 1048576 bytes (mcpMaxMessageBytes)" in refused.value.reason
        found = await execute(prepare(Operation.READ, "mcp://s/test%3A%2F%2Fpid", ReadOptions(), context))
        assert found.text.startswith("     1\tpid ")  # the same server goes on answering
    finally:
        await connections.close_all()


async def test_a_server_that_outlives_its_input_has_ended_when_close_all_returns(tmp_path):
    """The server's exit stops the MCP servers it started: one that neither
    exits when its input ends nor on SIGTERM is killed, and gone (reaped)
    once ``close_all`` returns -- not a moment after the caller exited."""
    spec = McpServerSpec("s", sys.executable, (str(SCRIPTED), "--linger"))
    connections = McpConnections(call_timeout=60, log_dir=tmp_path / "logs")
    context = ResolverContext(mcp=McpAccess(connections, {"s": spec}))
    found = await execute(prepare(Operation.READ, "mcp://s/test%3A%2F%2Fpid", ReadOptions(), context))
    pid = int(found.text.split()[-1])
    await connections.close_all()
    assert not Path(f"/proc/{pid}").exists(), Path(f"/proc/{pid}/stat").read_text()


def test_a_bad_mcp_servers_setting_is_refused_naming_the_entry():
    from mevedel_protocol import Settings
    from mevedel_server.lsp.configuration import merge_settings

    settings, problems = merge_settings(Settings(), {"mcpServers": {"x": {"command": ""}}, "mcpCallTimeoutSeconds": 0})
    messages = sorted(p.message for p in problems)
    assert messages == [
        "mevedel setting mcpCallTimeoutSeconds: must be between 1 and 3600 seconds, got 0; keeping its previous value",
        "mevedel setting mcpServers: x.command must be a non-empty string (the program); keeping its previous value",
    ]
    assert settings.mcp_servers == {}


def _workspace_access(root: Path, settings: dict | None = None) -> McpAccess:
    from mevedel_server.targets import LocalTarget

    return McpAccess(
        McpConnections(call_timeout=5, log_dir=root / "logs"),
        servers_from_setting(settings or {}),
        approvals=Approvals(root / "approvals.json"),
        workspace_key=str(root / "ws"),
        workspace_target=lambda: LocalTarget(root / "ws"),
    )


async def test_a_workspace_mcp_json_reached_through_a_symbolic_link_configures_nothing(tmp_path):
    (tmp_path / "ws").mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"mcpServers": {"planted": {"command": "touch"}}}')
    (tmp_path / "ws" / ".mcp.json").symlink_to(elsewhere)
    entries, problem = await _workspace_access(tmp_path).servers()
    assert entries == [] and problem.startswith(".mcp.json could not be read")


async def test_a_setting_shadows_a_workspace_server_of_the_same_name_and_others_need_approval(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / ".mcp.json").write_text(
        '{"mcpServers": {"tool": {"command": "from-repo"}, "extra": {"command": "repo-only", "args": ["x"]}}}'
    )
    access = _workspace_access(tmp_path, {"tool": {"command": "mine"}})
    entries, problem = await access.servers()
    assert problem is None
    assert [(e.name, e.origin, e.standing, e.spec.command) for e in entries] == [
        ("tool", "settings", "ready", "mine"),
        ("extra", "workspace", "needs-approval", "repo-only"),
    ]
    found = await execute(prepare(Operation.READ, "mcp://", ReadOptions(), ResolverContext(mcp=access)))
    assert "mcp://extra -- workspace .mcp.json; needs approval before it runs: approve it first; runs repo-only x" in found.text


async def test_a_command_line_access_keeps_its_approvals_where_it_is_told(tmp_path, monkeypatch):
    """``configured_access(approvals=...)`` (``mevedel mcp --client-state``)
    reads the approvals of that file, not of the default state directory."""
    from mevedel_server.mcp_client import configured_access

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "default-state"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".mcp.json").write_text('{"mcpServers": {"extra": {"command": "repo-only"}}}')
    mine = tmp_path / "client" / "mcp-approvals.json"
    entries, _problem = await configured_access(workspace, tmp_path / "config.json", approvals=mine).servers()
    assert [(e.name, e.standing) for e in entries] == [("extra", "needs-approval")]
    mine.parent.mkdir()
    Approvals(mine).approve(str(workspace), entries[0].spec)

    entries, _problem = await configured_access(workspace, tmp_path / "config.json", approvals=mine).servers()
    assert [(e.name, e.standing) for e in entries] == [("extra", "ready")]
    # The default file approves nothing of it.
    entries, _problem = await configured_access(workspace, tmp_path / "config.json").servers()
    assert [(e.name, e.standing) for e in entries] == [("extra", "needs-approval")]
