"""mcp:// through the real language server over stdio, against MCP servers
nobody here wrote (``@modelcontextprotocol/server-everything`` from npm,
``mcp-server-time`` from PyPI) and a small scripted one for a server that
dies mid-read and one that hangs; the approval question for a workspace's
``.mcp.json``; and ``mevedel read mcp://...`` on the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import SERVER, answering, initialize_params, request

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / "tests" / "mcp_servers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
SCRIPTED = REPO / "tests" / "mcp_servers" / "scripted_server.py"
TIME = Path(sys.executable).with_name("mcp-server-time")

needs_everything = pytest.mark.skipif(
    not EVERYTHING.exists() or shutil.which("node") is None,
    reason="server-everything is installed by scripts/setup --test (npm)",
)
needs_time = pytest.mark.skipif(not TIME.exists(), reason="mcp-server-time is a test extra (pip install -e .[test])")

STATIC = "mcp://everything/demo%3A%2F%2Fresource%2Fstatic%2Fdocument%2Farchitecture.md"
DYNAMIC_TEXT = "mcp://everything/demo%3A%2F%2Fresource%2Fdynamic%2Ftext%2F7"
DYNAMIC_BLOB = "mcp://everything/demo%3A%2F%2Fresource%2Fdynamic%2Fblob%2F7"


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    """Approvals and server logs go to this test's own state directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _servers() -> dict:
    return {
        "everything": {"command": "node", "args": [str(EVERYTHING)]},
        "time": {"command": str(TIME)},
        "scripted": {"command": sys.executable, "args": [str(SCRIPTED)]},
    }


async def _read(client, address: str) -> dict:
    return await request(client, methods.RESOURCE_READ, {"address": address, "view": "plain"})


async def _refused(client, address: str) -> dict:
    with pytest.raises(JsonRpcException) as refused:
        await _read(client, address)
    return refused.value.data


async def _complete(client, uri: str, text: str) -> list[str]:
    answer = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=len(text)))
    )
    items = answer["items"] if isinstance(answer, dict) else (answer.items if hasattr(answer, "items") else answer)
    return [item["label"] if isinstance(item, dict) else item.label for item in items]


def _open(client, path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, text)))
    return uri


async def _started(workspace: Path, options: dict):
    client = await SERVER.start()
    await client.initialize_session(initialize_params(workspace, **options))
    return client


@needs_everything
@needs_time
async def test_reading_real_mcp_servers_and_completing_only_what_a_connection_knows(workspace):
    client = await _started(workspace, {"mcpServers": _servers(), "mcpCallTimeoutSeconds": 5})
    try:
        # Completion offers the configured servers, and nothing of a server not yet connected.
        uri = _open(client, workspace / "notes.md", "mcp://")
        assert set(await _complete(client, uri, "mcp://")) >= {"mcp://everything", "mcp://time", "mcp://scripted"}
        uri = _open(client, workspace / "more.md", "mcp://everything/")
        assert await _complete(client, uri, "mcp://everything/") == []
        listing = await _read(client, "mcp://")
        assert "mcp://everything -- mcpServers setting; not connected" in listing["text"]

        server = await _read(client, "mcp://everything")
        assert STATIC in server["text"]
        assert "template demo://resource/dynamic/text/{resourceId}" in server["text"]
        assert "template demo://resource/dynamic/blob/{resourceId}" in server["text"]
        assert "resource templates" in server["notice"]

        # Now the connection knows the server's resources: completion offers them.
        assert STATIC in await _complete(client, uri, "mcp://everything/")
        assert "mcp://everything -- mcpServers setting; connected" in (await _read(client, "mcp://"))["text"]

        static = await _read(client, STATIC)
        assert static["kind"] == "file" and "Architecture" in static["text"]
        text = await _read(client, DYNAMIC_TEXT)
        assert text["text"].startswith("Resource 7: This is a plaintext resource")
        blob = await _read(client, DYNAMIC_BLOB)
        assert re.fullmatch(r"\[binary content demo://resource/dynamic/blob/7: \S+, \d+ bytes, sha256 [0-9a-f]{64}; not shown as text\]", blob["text"])
        assert "binary content only" in blob["notice"]

        missing = await _refused(client, "mcp://everything/demo%3A%2F%2Fnothing-here")
        assert missing["kind"] == "missing-target" and "not found" in missing["reason"]
        unknown = await _refused(client, "mcp://nobody")
        assert unknown["kind"] == "owner-missing" and "no MCP server named 'nobody'" in unknown["reason"]

        # mcp-server-time (PyPI) has tools only: a clean, empty listing.
        time_listing = await _read(client, "mcp://time")
        assert time_listing["kind"] == "empty" and "offers no resources" in time_listing["notice"]

        # Hover tells what is known without starting anything.
        uri = _open(client, workspace / "hover.md", "see mcp://everything here")
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(line=0, character=6))
        )
        contents = hover["contents"] if isinstance(hover, dict) else hover.contents
        value = contents["value"] if isinstance(contents, dict) else contents.value
        assert "MCP server: connected" in value

        # A document link leads to the resource's virtual document, read fresh.
        uri = _open(client, workspace / "links.md", f"the text: {DYNAMIC_TEXT}")
        links = await client.text_document_document_link_async(types.DocumentLinkParams(types.TextDocumentIdentifier(uri)))
        (link,) = links
        target = link["target"] if isinstance(link, dict) else link.target
        linked = await request(client, methods.RESOURCE_READ, {"uri": target, "view": "plain"})
        assert linked["text"].startswith("Resource 7: This is a plaintext resource")
    finally:
        await client.shutdown_session()


async def test_a_server_that_dies_mid_read_or_hangs_gives_clear_errors_and_the_server_goes_on(workspace):
    client = await _started(workspace, {"mcpServers": {"scripted": _servers()["scripted"]}, "mcpCallTimeoutSeconds": 3})
    try:
        first = (await _read(client, "mcp://scripted/test%3A%2F%2Fpid"))["text"]
        died = await _refused(client, "mcp://scripted/test%3A%2F%2Fdie")
        assert died["kind"] == "unreadable"
        assert died["reason"].startswith("MCP server 'scripted' exited during resources/read")
        assert died["authored"] == "mcp://scripted/test%3A%2F%2Fdie"
        # The next read starts the server again: another process answers.
        again = (await _read(client, "mcp://scripted/test%3A%2F%2Fpid"))["text"]
        assert again.startswith("pid ") and again != first
        hung = await _refused(client, "mcp://scripted/test%3A%2F%2Fhang")
        assert hung["kind"] == "unreadable"
        assert hung["reason"] == "MCP server 'scripted' did not answer resources/read within 3 s"
        # The language server is unaffected.
        assert (await _read(client, "work://shared/notes.md"))["text"].startswith("# Notes")
        last = (await _read(client, "mcp://scripted/test%3A%2F%2Fpid"))["text"]
        assert last.startswith("pid ")
    finally:
        await client.shutdown_session()
    # The server's exit stopped the MCP server it had started.
    assert not _running(int(last.split()[1]))


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _workspace_file(workspace: Path, marker: Path, *extra: str) -> None:
    entry = {"command": sys.executable, "args": [str(SCRIPTED), "--marker", str(marker), *extra]}
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo": entry}}), encoding="utf-8")


@pytest.mark.parametrize("answer", ["Allow", "Deny", None])
async def test_a_workspace_mcp_json_server_runs_only_once_the_user_allows_its_exact_command(workspace, tmp_path, answer):
    marker = tmp_path / "repo-server-ran"
    _workspace_file(workspace, marker)
    client = await SERVER.start()
    questions = answering(client, answer)

    try:
        await client.initialize_session(initialize_params(workspace))
        # Opening, completing and hovering in the cloned repository run nothing.
        uri = _open(client, workspace / "README.md", "mcp://repo/test%3A%2F%2Fpid")
        await _complete(client, uri, "mcp://repo/")
        await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(line=0, character=3)))
        await client.text_document_document_link_async(types.DocumentLinkParams(types.TextDocumentIdentifier(uri)))
        listing = await _read(client, "mcp://")
        assert "mcp://repo -- workspace .mcp.json; needs approval" in listing["text"]
        assert questions == [] and not marker.exists()

        if answer == "Allow":
            assert (await _read(client, "mcp://repo/test%3A%2F%2Fpid"))["text"].startswith("pid ")
            assert marker.exists()
            assert len(questions) == 1
            assert f"{sys.executable} {SCRIPTED} --marker {marker}" in questions[0].message
            # Remembered: no second question for the same command.
            await _read(client, "mcp://repo")
            assert len(questions) == 1
            stored = json.loads((tmp_path / "state" / "mevedel" / "mcp-approvals.json").read_text())
            assert [r["name"] for r in stored["approved"]] == ["repo"]
            # A changed command is another approval.
            marker.unlink()
            _workspace_file(workspace, marker, "--changed")
            await _read(client, "mcp://repo/test%3A%2F%2Fpid")
            assert len(questions) == 2
        else:
            refused = await _refused(client, "mcp://repo/test%3A%2F%2Fpid")
            assert refused["kind"] == "unavailable" and "was not approved" in refused["reason"]
            assert len(questions) == 1
            assert not marker.exists()
            assert not (tmp_path / "state" / "mevedel" / "mcp-approvals.json").exists()
    finally:
        await client.shutdown_session()


def _cli(workspace: Path, tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *arguments, "--workspace", str(workspace)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )


@needs_everything
def test_the_cli_reads_mcp_addresses_and_wants_approve_mcp_for_a_workspace_server(workspace, tmp_path):
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"mcpServers": {"everything": _servers()["everything"]}}), encoding="utf-8")
    done = _cli(workspace, tmp_path, "read", DYNAMIC_TEXT)
    assert done.returncode == 0, done.stderr
    assert "Resource 7: This is a plaintext resource" in done.stdout

    marker = tmp_path / "repo-server-ran"
    _workspace_file(workspace, marker)
    refused = _cli(workspace, tmp_path, "read", "mcp://repo/test%3A%2F%2Fpid")
    assert refused.returncode == 1
    assert "mcp://repo/test%3A%2F%2Fpid: unavailable:" in refused.stderr
    assert "--approve-mcp repo" in refused.stderr
    assert not marker.exists()
    approved = _cli(workspace, tmp_path, "read", "mcp://repo/test%3A%2F%2Fpid", "--approve-mcp", "repo")
    assert approved.returncode == 0, approved.stderr
    assert "pid " in approved.stdout and marker.exists()
    # Remembered: the next command needs no flag.
    assert _cli(workspace, tmp_path, "read", "mcp://repo/test%3A%2F%2Fpid").returncode == 0


@pytest.mark.usefixtures("openssh_server")
def test_over_ssh_the_cli_reads_the_workspaces_mcp_json_through_its_target_and_runs_the_server_here(workspace, tmp_path, openssh_server):
    from ssh_fixtures import ALIAS

    from .test_ssh_workspace import ssh_home

    marker = tmp_path / "repo-server-ran"
    _workspace_file(workspace, marker)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "HOME": str(ssh_home(tmp_path, openssh_server))}

    def cli(*arguments: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *arguments, "--workspace", f"ssh://{ALIAS}{workspace}"],
                              capture_output=True, text=True, env=env, timeout=120, check=False, cwd=tmp_path)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    refused = cli("read", "mcp://repo/test%3A%2F%2Fpid")
    assert refused.returncode == 1 and "mcp://repo/test%3A%2F%2Fpid: unavailable:" in refused.stderr, refused.stderr
    assert "--approve-mcp repo" in refused.stderr and not marker.exists()
    approved = cli("read", "mcp://repo/test%3A%2F%2Fpid", "--approve-mcp", "repo")
    assert approved.returncode == 0, approved.stderr
    assert "pid " in approved.stdout and marker.exists()

    # The agent of a `mevedel prompt` on that workspace reads it too, through its Read tool.
    agent = REPO / "tests" / "agents" / "scripted_agent.py"
    log, script = tmp_path / "agent-events.jsonl", tmp_path / "agent-script.json"
    call = {"mcp_call": {"id": "r1", "tool": "Read", "arguments": {"path": "mcp://repo/test%3A%2F%2Fpid"}}}
    script.write_text(json.dumps({"log": str(log), "turns": [[call]]}), encoding="utf-8")
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(agent), str(script)]}}}), encoding="utf-8")
    prompted = cli("prompt", "Read the repo server")
    assert prompted.returncode == 0, prompted.stderr
    (answer,) = [e["text"] for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "mcp_result"]
    assert answer.startswith("mcp Read: ") and "pid " in answer, answer
