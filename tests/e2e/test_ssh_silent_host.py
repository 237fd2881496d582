"""A save whose SSH host has gone silent -- its network drops every packet,
the connection stays open and nothing answers -- is answered: the editor is
told the save is pending and this machine keeps it in the pending-save
spool, as for a host that refused it; an artifact write is answered
``unavailable`` naming the host. Neither the connection the server holds
nor a new one to the silent host waits forever.

The real server over stdio and a real OpenSSH server on loopback: stopped
with SIGSTOP (its connections and remote programs too) after a first save
succeeded, with the user's OpenSSH limits short in ``~/.ssh/config``; or
killed with its sessions and its port then accepting connections and never
answering, with no limit in the config at all (the server's own bound)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods
from silent_host import black_hole, killed, own_sshd_fixture, silenced, ssh_home, within  # noqa: F401
from ssh_fixtures import OpenSshServer

from .conftest import request, settled_turn_and_one_open, ssh_home_server, stop_server


@contextmanager
def _stopped(sshd: OpenSshServer):
    with silenced(sshd):
        yield


@contextmanager
def _mute_after_death(sshd: OpenSshServer):
    """sshd killed with every session (the connection drops), then its port
    accepts connections and never says a word."""
    killed(sshd)
    with black_hole(sshd.port):
        yield


SILENCES = {
    # Keepalives find the open connection dead; reconnecting gives up.
    "stopped mid-connection": (_stopped, "  ServerAliveInterval 1\n  ServerAliveCountMax 2\n  ConnectTimeout 2\n"),
    # No limit configured: connecting still gives up, at the server's bound.
    "mute after the connection dropped": (_mute_after_death, ""),
}


@pytest.mark.parametrize("silence", list(SILENCES))
async def test_a_save_on_a_silent_host_is_answered_and_kept_on_this_machine(own_sshd, tmp_path, silence):
    go_silent, limits = SILENCES[silence]
    client, url, log, state = await ssh_home_server(tmp_path, own_sshd, limits)
    try:
        ws = {"workspaceFolder": url}
        sid = await settled_turn_and_one_open(client, ws)
        with go_silent(own_sshd):
            with pytest.raises(JsonRpcException) as caught:
                await within(request(client, methods.TURN_SETTLE, ws), "the save on the silent host")
            assert caught.value.data["kind"] == "publication-pending", caught.value.data
            kept = sorted((state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json"))
            assert len(kept) == 1, kept
            warnings = [m.message for m in client.messages if m.type == types.MessageType.Warning]
            assert any("could not be reached to record the save, so this machine keeps it" in w for w in warnings), warnings
            client.exit(None)
            await within(client._server.wait(), "the end of the server")
        assert "Traceback" not in log.read_text()
    finally:
        await stop_server(client)


@pytest.mark.parametrize("silence", list(SILENCES))
async def test_an_artifact_write_on_a_silent_host_is_answered_unavailable(own_sshd, tmp_path, silence):
    go_silent, limits = SILENCES[silence]
    client, url, log, _state = await ssh_home_server(tmp_path, own_sshd, limits)
    try:
        ws = {"workspaceFolder": url}
        await request(client, methods.SESSION_CREATE, ws)
        doc = await request(client, methods.ARTIFACT_CREATE, {**ws, "kind": "document", "title": "Plan", "content": "# Plan\n"})
        read = await request(client, methods.ARTIFACT_READ, {**ws, "id": doc["id"]})
        with go_silent(own_sshd):
            with pytest.raises(JsonRpcException) as caught:
                await within(
                    request(client, methods.ARTIFACT_WRITE, {**ws, "id": doc["id"], "content": "# Plan\n- more\n", "baseRevision": read["revision"]}),
                    "the artifact write on the silent host",
                )
            assert caught.value.data["kind"] == "unavailable", caught.value.data
            assert f"127.0.0.1:{own_sshd.port}" in caught.value.data["reason"], caught.value.data
            client.exit(None)
            await within(client._server.wait(), "the end of the server")
        assert "Traceback" not in log.read_text()
    finally:
        await stop_server(client)
