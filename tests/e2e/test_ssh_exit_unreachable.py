"""The editor goes away after a save its SSH host could not record, with
the host now out of reach: the server answers ``shutdown`` and its process
ends, however the editor goes -- ``shutdown`` and ``exit``, ``exit`` alone,
or its input simply closed -- and the save this machine kept stays in the
pending-save spool for the next start.

A real OpenSSH server on loopback that dies with its sessions (the save is
refused), whose port then accepts connections and never answers (a host
gone quiet: every new connection waits), and the real server over stdio."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig

from deadlines import GENEROUS_SECONDS
from mevedel_protocol import methods
from ssh_fixtures import OpenSshServer, sshd_missing, throwaway_sshd

from .conftest import make_client, request


@pytest.fixture
def sshd(tmp_path: Path):
    """An sshd of this test's own: the test kills it."""
    missing = sshd_missing()
    if missing:
        pytest.skip(missing)
    directory = tmp_path / "sshd"
    directory.mkdir()
    with throwaway_sshd(directory) as server:
        yield server


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def _kill_host(server: OpenSshServer) -> None:
    """sshd and every session it started (the remote programs included)."""
    listener = int((server.directory / "sshd.pid").read_text())
    for pid in [listener, *_descendants(listener)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _black_hole(port: int) -> socket.socket:
    """The host's port accepts connections and never says a word."""
    quiet = socket.socket()
    quiet.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    quiet.bind(("127.0.0.1", port))
    quiet.listen(64)
    return quiet


async def _within(awaitable, what: str):
    try:
        return await asyncio.wait_for(awaitable, GENEROUS_SECONDS)
    except TimeoutError:
        raise AssertionError(f"{what} was never answered") from None


async def shutdown_then_exit(client) -> None:
    await _within(client.shutdown_async(None), "the shutdown request")
    client.exit(None)


async def exit_alone(client) -> None:
    client.exit(None)


async def close_input(client) -> None:
    client._server.stdin.close()


ENDINGS = {
    "shutdown-and-exit": (shutdown_then_exit, 0),
    "exit-without-shutdown": (exit_alone, 1),
    "input-closed": (close_input, 0),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_server_exits_with_the_host_out_of_reach_and_the_kept_save_stays(sshd, tmp_path, ending):
    end, expected_status = ENDINGS[ending]
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {sshd.client_key}\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n  IdentityAgent none\n"
    )
    project = tmp_path / "remote"
    project.mkdir()
    url, log, state = sshd.url(project), tmp_path / "server.log", tmp_path / "state"
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "mevedel_server", "--log-file", str(log)],
        client_factory=make_client,
        server_env={**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(state)},
    )
    client = await config.start()
    quiet = None
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options={"remoteWorkspaces": [url]},
        ))
        ws = {"workspaceFolder": url}
        sid = (await request(client, methods.SESSION_CREATE, ws))["sessionId"]
        for turn, answer in enumerate(["first answer", "second answer"], 1):
            await request(client, methods.TURN_BEGIN, {**ws, "prompt": f"turn {turn}"})
            await request(client, methods.TURN_APPEND, {**ws, "kind": "response", "text": answer})
            if turn == 1:
                assert (await request(client, methods.TURN_SETTLE, ws))["committed"] is True
        _kill_host(sshd)
        with pytest.raises(JsonRpcException) as caught:
            await _within(request(client, methods.TURN_SETTLE, ws), "the save with the host gone")
        assert caught.value.data["kind"] == "publication-pending", caught.value.data
        kept = sorted((state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json"))
        assert len(kept) == 1, kept
        quiet = _black_hole(sshd.port)
        await end(client)
        status = await _within(client._server.wait(), f"the end of the process after {ending}")
        assert status == expected_status, log.read_text()
        # Nothing durable was lost: the next start on this machine records it on the host.
        assert sorted((state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json")) == kept
        assert "Traceback" not in log.read_text()
    finally:
        if client._server.returncode is None:
            client._server.kill()
            await client._server.wait()
        await client.stop()
        if quiet is not None:
            quiet.close()
