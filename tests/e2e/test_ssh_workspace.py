"""An ``ssh://`` workspace over stdio: the real server, configured with
``remoteWorkspaces``, serves the whole session surface through SshTarget
against the real OpenSSH fixture on 127.0.0.1, with the connection settings
coming from the user's usual ``~/.ssh/config`` (a host alias, its key and
its known_hosts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig

from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget, parse_ssh_location
from ssh_fixtures import ALIAS, OpenSshServer

from .conftest import CAPABILITIES, make_client, request


def ssh_home(tmp_path: Path, server: OpenSshServer) -> Path:
    """A home whose ``~/.ssh/config`` reaches the fixture by its alias and by
    ``127.0.0.1:PORT``, as a user's own configuration would."""
    home = tmp_path / "client-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        server.config.read_text()
        + f"Host 127.0.0.1\n  IdentityFile {server.client_key}\n  UserKnownHostsFile {server.known_hosts}\n"
        "  IdentityAgent none\n"
    )
    return home


def server_config(home: Path) -> ClientServerConfig:
    return ClientServerConfig(
        server_command=[sys.executable, "-m", "mevedel_server"],
        client_factory=make_client,
        server_env={**os.environ, "HOME": str(home)},
    )


def remote_params(*remote: str, local: Path | None = None, **options) -> types.InitializeParams:
    folders = [types.WorkspaceFolder(uri=local.as_uri(), name="local")] if local is not None else []
    return types.InitializeParams(
        capabilities=CAPABILITIES,
        workspace_folders=folders,
        initialization_options={"remoteWorkspaces": list(remote), **options},
    )


async def failure(client, method: str, params) -> dict:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, method, params)
    return caught.value.data


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "remote project"
    root.mkdir()
    (root / "tracked.txt").write_text("before\n")
    return root


async def test_the_session_surface_on_an_ssh_workspace(openssh_server, tmp_path, project):
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    client = await server_config(home).start()
    try:
        await client.initialize_session(remote_params(url))
        ws = {"workspaceFolder": url}
        assert (await request(client, methods.SESSION_LIST, ws))["sessions"] == []
        created = await request(client, methods.SESSION_CREATE, {**ws, "name": "Over SSH"})
        sid = created["sessionId"]
        assert created["displayName"] == "Over SSH" and created["current"]

        await request(client, methods.TURN_BEGIN, {**ws, "prompt": "Tidy tracked.txt"})
        captured = await request(client, methods.TURN_CAPTURE, {**ws, "path": "tracked.txt"})
        assert captured == {"path": "tracked.txt", "state": "present", "size": 7}
        await request(client, methods.TURN_APPEND, {**ws, "kind": "response", "text": "Tidied it remotely."})
        settled = await request(client, methods.TURN_SETTLE, ws)
        assert settled["committed"] is True

        rows = {r["sessionId"]: r for r in (await request(client, methods.SESSION_LIST, ws))["sessions"]}
        assert (rows[sid]["turns"], rows[sid]["published"], rows[sid]["action"]) == (1, True, "Switch")
        turns = await request(client, methods.TURN_LIST, {**ws, "sessionId": sid})
        assert [(t["turn"], t["state"]) for t in turns["turns"]] == [(1, "completed")]

        live = await request(client, methods.RESOURCE_READ, {**ws, "address": "history://root", "view": "plain"})
        assert "Tidied it remotely." in live["text"]
        saved = await request(client, methods.RESOURCE_READ, {**ws, "address": "history://saved", "view": "plain"})
        assert saved["text"] == f"history://saved/{sid}/segment-0001.chat.jsonl"
        segment = await request(
            client, methods.RESOURCE_READ, {**ws, "address": f"history://saved/{sid}/segment-0001.chat.jsonl", "view": "plain"}
        )
        assert "Tidied it remotely." in segment["text"]

        # work:// under the session, through the same target.
        notes = project / ".mevedel" / "sessions" / sid / "local" / "plans"
        notes.mkdir(parents=True)
        (notes / "plan.md").write_text("step one\nstep two\n")
        (notes.parent / "shared").mkdir()  # work://shared names the workspace scope, not this
        plan = await request(client, methods.RESOURCE_READ, {**ws, "address": "work://plans/plan.md", "view": "plain"})
        assert plan["text"] == "step one\nstep two"
        listing = await request(client, methods.RESOURCE_READ, {**ws, "address": "work://plans/", "view": "plain"})
        assert listing["text"] == "work://plans/plan.md"
        missing = await failure(client, methods.RESOURCE_READ, {**ws, "address": "work://plans/none.md"})
        assert missing["kind"] == "missing-target" and str(project) not in repr(missing)
        # Glob and Grep walk the remote tree; the session scope's own "shared"
        # directory stays hidden there, as locally.
        (notes.parent / "shared" / "hidden.md").write_text("step hidden\n")
        globbed = await request(client, methods.RESOURCE_GLOB, {**ws, "address": "work://", "pattern": "**/*.md"})
        assert globbed["matches"] == ["work://plans/plan.md"]
        grep = await request(client, methods.RESOURCE_GREP, {**ws, "address": "work://plans/", "pattern": "two$"})
        assert [(m["address"], m["line"], m["preview"]) for m in grep["matches"]] == [("work://plans/plan.md", 2, "step two")]
        refused = await failure(client, methods.RESOURCE_GREP, {**ws, "address": "work://nowhere/", "pattern": "x"})
        assert refused["kind"] == "missing-target" and "work://nowhere/" in repr(refused)

        closed = await request(client, methods.SESSION_CLOSE, {**ws, "sessionId": sid})
        assert closed["sessionId"] == sid
        reopened = await request(client, methods.SESSION_OPEN, {**ws, "sessionId": sid})
        assert reopened["session"]["access"] == "writable" and reopened["session"]["settledTurns"] == 1
    finally:
        await client.shutdown_session()

    # The bytes are where the address said: a local reader of that directory
    # sees the same session, turn and capture.
    reader = SessionService(LocalTarget(project), ClientIdentity("local-reader", "this-host"))
    assert [(t.turn, t.state) for t in await reader.turns.summaries(sid)] == [(1, "completed")]
    assert [row.session_id for row in (await reader.sessions.list()).rows] == [sid]


async def test_bad_remote_workspaces_are_reported_and_an_untrusted_host_refused(openssh_server, tmp_path, project):
    home = ssh_home(tmp_path, openssh_server)
    # A host key nobody vouched for: the alias, but an empty known_hosts.
    (home / "empty_known_hosts").write_text("")
    (home / ".ssh" / "config").write_text(
        f"Host untrusted\n  HostName 127.0.0.1\n  Port {openssh_server.port}\n  IdentityFile {openssh_server.client_key}\n"
        f"  UserKnownHostsFile {home / 'empty_known_hosts'}\n  IdentityAgent none\n"
    )
    client = await server_config(home).start()
    try:
        await client.initialize_session(remote_params("ssh://", "ssh:/nohost/x"))
        # Sent while initialize was handled, so before its answer.
        shown = [m.message for m in client.messages]
        assert any("remoteWorkspaces" in m and "'ssh://'" in m for m in shown), shown
        assert (await failure(client, methods.SESSION_LIST, {"workspaceFolder": "ssh://"}))["kind"] == "invalid-params"

        untrusted = f"ssh://untrusted{project}"
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"mevedel": {"remoteWorkspaces": [untrusted]}})
        )
        refused = await failure(client, methods.SESSION_LIST, {"workspaceFolder": untrusted})
        assert refused["kind"] == "unavailable" and "host key is not trusted" in refused["reason"], refused
        assert str(project) not in repr(refused)
        assert not (project / ".mevedel").exists()
    finally:
        await client.shutdown_session()


def cli(home: Path, *args: str) -> dict:
    import json
    import subprocess

    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args, "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    return {"status": done.returncode, "stderr": done.stderr, **json.loads(done.stdout or "{}")}


def test_the_cli_works_on_an_ssh_workspace_and_sees_the_local_spelling_s_sessions(openssh_server, tmp_path, project):
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    created = cli(home, "session", "create", "--workspace", url, "--name", "From the CLI", "--prompt", "Plan it")
    assert created["status"] == 0, created
    sid = created["session_id"]
    # The same directory spelled locally: the same session, held by this CLI client.
    listed = cli(home, "session", "list", "--workspace", str(project))
    assert [(r["session_id"], r["display_name"]) for r in listed["sessions"]] == [(sid, "From the CLI")]
    closed = cli(home, "session", "close", "--session", sid, "--workspace", url)
    assert closed["status"] == 0, closed
    bad = cli(home, "session", "list", "--workspace", "ssh:/nohost/x")
    assert bad["status"] == 1 and bad["error"]["kind"] == "invalid-params" and "ssh:/nohost/x" in bad["error"]["message"]


def test_a_missing_remote_directory_is_one_clear_message(openssh_server, tmp_path, project):
    """The first thing said is what is wrong, naming the address and the
    host; no cleanup runs (or reports) against a workspace not proven there."""
    home = ssh_home(tmp_path, openssh_server)
    for where, why in ((project / "typo", "does not exist"), (project / "tracked.txt", "is not a directory")):
        url = f"ssh://{ALIAS}{where}"
        done = cli(home, "session", "list", "--workspace", url)
        assert done["status"] == 1, done
        canonical = parse_ssh_location(url).uri  # the space percent-encoded
        assert done["error"]["message"] == f"{canonical}: the workspace directory on {ALIAS} {why}"
        assert "cleanup" not in done["stderr"] and "Traceback" not in done["stderr"], done["stderr"]


async def test_the_artifact_store_on_an_ssh_workspace_shares_items_with_a_local_server(openssh_server, tmp_path, project):
    """One directory reached over ssh:// by one server and locally by
    another: the same items, and the item lease fences across them."""
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    remote = await server_config(home).start()
    local = await server_config(home).start()
    try:
        await remote.initialize_session(remote_params(url))
        await local.initialize_session(remote_params(local=project))
        ws = {"workspaceFolder": url}
        await request(remote, methods.SESSION_CREATE, {**ws, "name": "Remote"})
        doc = await request(remote, methods.ARTIFACT_CREATE, {**ws, "kind": "document", "title": "Over SSH", "content": "# one\n"})
        assert doc["attached"]
        await request(remote, methods.ARTIFACT_WRITE, {**ws, "id": doc["id"], "content": "# two\n"})
        assert (project / ".mevedel/artifacts" / doc["id"] / "document.md").read_text() == "# two\n"
        listed = (await request(local, methods.ARTIFACT_LIST, {}))["items"]
        assert [(i["id"], i["title"]) for i in listed] == [(doc["id"], "Over SSH")] and listed[0]["holderHost"]
        held = await failure(local, methods.ARTIFACT_WRITE, {"id": doc["id"], "content": "# three\n"})
        assert held["kind"] == "item-held"
        versions = (await request(remote, methods.ARTIFACT_VERSIONS, {**ws, "id": doc["id"]}))["versions"]
        assert [v["reason"] for v in versions] == ["created"]
    finally:
        for client in (remote, local):
            await client.shutdown_session()
            await client.stop()
