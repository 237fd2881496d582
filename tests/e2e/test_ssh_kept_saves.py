"""A save the language server's SSH host could not record: this machine
keeps it, the user is told so in the editor, and it reaches the host when
the session is next opened here -- by a new server or the ``mevedel``
command -- once, however many of them open it at the same moment. Real
servers over stdio, real CLI processes, a real SSH server that goes away."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig

from deadlines import wait_for
from lease_expiry import lease_expired
from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

from .conftest import make_client, request, settled_turn_and_one_open


class Machine:
    """This machine as the user has it: one home (whose ``~/.ssh/config``
    reaches the SSH server) and one state directory for every mevedel
    process started here."""

    def __init__(self, tmp_path: Path, fault_server, project: Path) -> None:
        self.home = fault_server.home(tmp_path)
        self.state = tmp_path / "state"
        self.env = {**os.environ, "HOME": str(self.home), "XDG_STATE_HOME": str(self.state)}
        self.project = project
        self.url = fault_server.url(project)
        self.host = f"127.0.0.1:{fault_server.port}"

    async def server(self):
        config = ClientServerConfig(
            server_command=[sys.executable, "-m", "mevedel_server"], client_factory=make_client, server_env=self.env
        )
        client = await config.start()
        # A short lease: a server that exits with the host away cannot release it.
        await client.initialize_session(types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options={"remoteWorkspaces": [self.url], "leaseSeconds": 3},
        ))
        return client

    async def mevedel(self, *args: str) -> tuple[int, dict, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mevedel_server.cli", *args, "--json", "--workspace", self.url,
            cwd=self.home, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert b"Traceback" not in out + err, err.decode()
        return process.returncode, json.loads(out), err.decode()

    def kept(self, sid: str) -> list[Path]:
        """The records this machine keeps of session ``sid``."""
        return sorted((self.state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json"))

    def on_the_host(self, sid: str) -> list[Path]:
        """The pending records the session directory on the host holds."""
        return sorted((self.project / ".mevedel" / "sessions" / sid / ".pending-publication").glob("pending-*.json"))

    async def lease_expired(self, sid: str) -> None:
        await lease_expired(self.project, sid, "the exited server's")


def shown(client, kind: types.MessageType) -> list[str]:
    return [m.message for m in client.messages if m.type == kind]


@pytest.fixture
def machine(tmp_path: Path, fault_server) -> Machine:
    project = tmp_path / "remote"
    project.mkdir()
    return Machine(tmp_path, fault_server, project)


async def _settle_with_the_host_gone(client, machine: Machine, fault_server) -> str:
    """A session with one settled turn whose second turn's settlement
    fails as the host goes away: its ID (the server still runs)."""
    ws = {"workspaceFolder": machine.url}
    sid = await settled_turn_and_one_open(client, ws)
    # A Barrier flushes a publication before its head: the settlement's
    # program is lost, and the host then refuses every new connection.
    fault_server.when, fault_server.then_unreachable = (b"Barrier", "drop-before-run"), True
    with pytest.raises(JsonRpcException) as caught:
        await request(client, methods.TURN_SETTLE, ws)
    assert caught.value.data["kind"] == "publication-pending", caught.value.data
    await wait_for(lambda: shown(client, types.MessageType.Warning), "the warning that this machine keeps the save")
    [warning] = shown(client, types.MessageType.Warning)
    assert warning.startswith(f"Session {sid}: {machine.host} could not be reached to record the save, so this machine keeps it"), warning
    assert f"it is recorded on {machine.host} when the session is next opened on this machine" in warning
    assert len(machine.kept(sid)) == 1 and machine.on_the_host(sid) == []
    return sid


async def _turns_on_the_host(machine: Machine, sid: str) -> list[tuple[int, str]]:
    """The settled turns the host's session directory holds, read there."""
    reader = SessionService(LocalTarget(machine.project), ClientIdentity("a-reader", "the-host"))
    return [(t.turn, t.state) for t in await reader.turns.summaries(sid)]


async def test_a_save_the_host_could_not_record_is_published_by_the_same_server_once_the_host_answers(machine, fault_server):
    client = await machine.server()
    try:
        sid = await _settle_with_the_host_gone(client, machine, fault_server)
        await fault_server.start()
        retried = await request(client, methods.SESSION_RETRY_PUBLICATION, {"workspaceFolder": machine.url})
        assert retried["committed"] is True, retried
        [told] = shown(client, types.MessageType.Info)
        assert told.startswith(f"Session {sid}: the save this machine kept since ") and told.endswith(
            f"is published on {machine.host}; this machine keeps it no more."
        ), told
        assert machine.kept(sid) == [] and machine.on_the_host(sid) == []
    finally:
        await client.shutdown_session()
    assert await _turns_on_the_host(machine, sid) == [(1, "completed"), (2, "completed")]


@pytest.mark.parametrize("opener", ["a new server", "the mevedel command"])
async def test_a_save_kept_by_a_server_that_exited_is_recorded_when_the_session_is_next_opened(machine, fault_server, opener):
    client = await machine.server()
    try:
        sid = await _settle_with_the_host_gone(client, machine, fault_server)
    finally:
        await client.shutdown_session()
    assert len(machine.kept(sid)) == 1  # the exit lost nothing
    await fault_server.start()
    await machine.lease_expired(sid)
    recorded = "the save this machine kept since "
    if opener == "a new server":
        client = await machine.server()
        try:
            ws = {"workspaceFolder": machine.url, "sessionId": sid}
            opened = await request(client, methods.SESSION_OPEN, {**ws, "mode": "takeover", "confirmTakeover": True})
            assert "did not publish" in opened["session"]["pendingPublication"], opened
            await wait_for(lambda: shown(client, types.MessageType.Info), "the news that the host has the save")
            [told] = shown(client, types.MessageType.Info)
            assert told.startswith(f"Session {sid}: {recorded}") and told.endswith(
                f"is recorded on {machine.host} now, pending: retrying the failed save (mevedel/session/retryPublication) "
                "publishes it, abandoning it (mevedel/session/abandonPublication) drops it."
            ), told
            assert machine.kept(sid) == [] and len(machine.on_the_host(sid)) == 1
            assert (await request(client, methods.SESSION_RETRY_PUBLICATION, ws))["committed"] is True
        finally:
            await client.shutdown_session()
    else:
        status, opened, logged = await machine.mevedel("session", "open", sid, "--mode", "takeover", "--confirm-takeover")
        assert status == 0, (opened, logged)
        assert f"mevedel: session {sid}: {recorded}" in logged and f"is recorded on {machine.host} now, pending" in logged, logged
        assert machine.kept(sid) == [] and len(machine.on_the_host(sid)) == 1
        status, retried, logged = await machine.mevedel("session", "retry-publication", "--session", sid)
        assert status == 0 and retried["committed"] is True, (retried, logged)
    assert machine.on_the_host(sid) == []
    assert await _turns_on_the_host(machine, sid) == [(1, "completed"), (2, "completed")]


async def test_a_kept_save_opened_by_three_processes_at_once_reaches_the_host_once(machine, fault_server):
    """A new server and two commands (one client: this user's CLI) open
    the session at the same moment: one record reaches the host, one of
    them says so, and publishing it gives the session its second turn once."""
    client = await machine.server()
    try:
        sid = await _settle_with_the_host_gone(client, machine, fault_server)
    finally:
        await client.shutdown_session()
    [kept] = machine.kept(sid)
    await fault_server.start()
    await machine.lease_expired(sid)
    server = await machine.server()
    try:
        ws = {"workspaceFolder": machine.url, "sessionId": sid}

        async def server_opens():
            try:
                return await request(server, methods.SESSION_OPEN, {**ws, "mode": "takeover", "confirmTakeover": True})
            except JsonRpcException as refused:
                return refused.data

        opened, *commands = await asyncio.gather(
            server_opens(),
            *(machine.mevedel("session", "open", sid, "--mode", "takeover", "--confirm-takeover") for _ in range(2)),
        )
        # The server tells it before it answers the open: it has arrived.
        told = [m for m in shown(server, types.MessageType.Info) if "is recorded on" in m]
        told += [line for _, _, logged in commands for line in logged.splitlines() if "is recorded on" in line]
        assert len(told) == 1, (told, opened, commands)
        assert machine.kept(sid) == [] and [p.name for p in machine.on_the_host(sid)] == [kept.name]
        if opened.get("session", {}).get("access") == "writable" and not any(status == 0 for status, _, _ in commands):
            assert (await request(server, methods.SESSION_RETRY_PUBLICATION, ws))["committed"] is True
        else:
            status, retried, logged = await machine.mevedel("session", "retry-publication", "--session", sid)
            assert status == 0 and retried["committed"] is True, (retried, logged, opened)
    finally:
        await server.shutdown_session()
    assert machine.on_the_host(sid) == []
    assert await _turns_on_the_host(machine, sid) == [(1, "completed"), (2, "completed")]
