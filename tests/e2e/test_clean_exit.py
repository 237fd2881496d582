"""However the editor goes away, the server saves and releases its open
sessions and exits promptly: a ``shutdown`` and ``exit``, an ``exit``
alone, the end of its input, SIGTERM and SIGHUP. The proof is what the next
client sees: ``mevedel session list`` from the same workspace offers the
session as Resume with a free lease, not Join (held) and not Take over (a
lease left to expire). Exit hooks that hang and a release that hangs only
delay the exit by their time limits.

The server runs as a real process spoken to over raw LSP framing, so that a
test controls its stdin and sends it signals."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from mevedel_protocol import methods
from mevedel_server.lsp import server as lsp_server
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

#: The exit may take its two time limits; the rest is process start and teardown.
EXIT_BOUND_SECONDS = lsp_server.EXIT_HOOK_SECONDS + lsp_server.EXIT_RELEASE_SECONDS + 6


class RawClient:
    """A minimal LSP client over a server process's stdin and stdout: it
    answers every request of the server with ``null``."""

    def __init__(self, process: asyncio.subprocess.Process, log_file: Path) -> None:
        self.process = process
        self.log_file = log_file
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, log_file: Path, *command: str) -> RawClient:
        process = await asyncio.create_subprocess_exec(
            *(command or (sys.executable, "-m", "mevedel_server")),
            "--log-file", str(log_file), "--log-level", "INFO",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, log_file)

    def _send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            length = None
            while (line := await stdout.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if not line or length is None:
                break
            message = json.loads(await stdout.readexactly(length))
            if "method" in message and "id" in message:  # a request of the server
                self._send({"id": message["id"], "result": None})
            elif "method" not in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed its output"))

    async def request(self, method: str, params) -> object:
        msg_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        self._send({"id": msg_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 60)
        assert "error" not in reply, reply["error"]
        return reply.get("result")

    def notify(self, method: str, params=None) -> None:
        self._send({"method": method, "params": params})

    async def initialize(self, workspace: Path) -> None:
        await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": workspace.as_uri(),
                "capabilities": {},
                "workspaceFolders": [{"uri": workspace.as_uri(), "name": "project"}],
            },
        )
        self.notify("initialized", {})

    async def exited(self) -> int:
        """The process's status once it exits (a hang fails the test: the
        wait is bounded by the exit's own time limits and a margin)."""
        try:
            status = await asyncio.wait_for(self.process.wait(), EXIT_BOUND_SECONDS)
        except TimeoutError:
            pytest.fail(f"the server had not exited {EXIT_BOUND_SECONDS} s later; its log:\n{self.log()}")
        await self._reading
        assert self.process.stderr is not None
        stderr = await self.process.stderr.read()
        assert b"Traceback" not in stderr, stderr.decode()
        return status

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8")


@pytest.fixture
async def start(tmp_path):
    """Starts servers (``RawClient.start``); kills any a failed test left running."""
    clients: list[RawClient] = []

    async def starting(*command: str) -> RawClient:
        client = await RawClient.start(tmp_path / f"server-{len(clients)}.log", *command)
        clients.append(client)
        return client

    yield starting
    for client in clients:
        if client.process.returncode is None:
            client.process.kill()
            await client.process.wait()


async def listed(workspace: Path, state: Path, sid: str) -> dict:
    """The session's row in ``mevedel session list --json`` (the next client's view)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", "session", "list", "--json", "--workspace", str(workspace),
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    rows = {row["session_id"]: row for row in json.loads(out)["sessions"]}
    return rows[sid]


async def holding_a_session(client: RawClient, workspace: Path, state: Path) -> str:
    """A saved session with a turn in flight, its lease held by the server."""
    await client.initialize(workspace)
    sid = (await client.request(methods.SESSION_CREATE, {"name": "Held at exit"}))["sessionId"]
    await client.request(methods.TURN_BEGIN, {"prompt": "first"})
    await client.request(methods.TURN_APPEND, {"kind": "response", "text": "done"})
    await client.request(methods.TURN_SETTLE, {})
    await client.request(methods.TURN_BEGIN, {"prompt": "in flight when the editor goes away"})
    row = await listed(workspace, state, sid)
    assert (row["action"], row["lease"]) == ("Join", "held")  # another client could only join now
    return sid


async def assert_released(workspace: Path, state: Path, sid: str) -> None:
    """Resumable without a takeover, the turn in flight saved as such."""
    row = await listed(workspace, state, sid)
    assert (row["action"], row["lease"]) == ("Resume", "free")
    reader = SessionService(LocalTarget(workspace), ClientIdentity("reader", "elsewhere"))
    assert [t.state for t in await reader.turns.summaries(sid)] == ["completed", "in-flight"]


async def shutdown_then_exit(client: RawClient) -> None:
    assert await client.request("shutdown", None) is None
    client.notify("exit")  # stdin stays open, as some editors keep it until the process ends


async def exit_alone(client: RawClient) -> None:
    client.notify("exit")


async def end_of_input(client: RawClient) -> None:
    assert client.process.stdin is not None
    client.process.stdin.close()


async def sigterm(client: RawClient) -> None:
    client.process.send_signal(signal.SIGTERM)  # stdin stays open: the editor still holds it


async def sighup(client: RawClient) -> None:
    client.process.send_signal(signal.SIGHUP)


#: How the editor goes away, the reason the server logs and the status it
#: exits with: 0 for every orderly end (a handled signal included; editors
#: read a non-zero status as a crash), 1 for an exit without shutdown (the
#: LSP rule).
ENDINGS = {
    "shutdown-and-exit": (shutdown_then_exit, "shutdown requested", 0),
    "exit-without-shutdown": (exit_alone, "exit without shutdown", 1),
    "end-of-input": (end_of_input, "end of input", 0),
    "sigterm": (sigterm, "received SIGTERM", 0),
    "sighup": (sighup, "received SIGHUP", 0),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_server_releases_its_sessions_however_it_ends(workspace, tmp_path, start, ending):
    end, reason, expected_status = ENDINGS[ending]
    client = await start()
    sid = await holding_a_session(client, workspace, tmp_path)
    await end(client)
    status = await client.exited()
    log = client.log()
    assert status == expected_status, log
    assert f"{reason}: stopping" in log and "without waiting" not in log, log
    await assert_released(workspace, tmp_path, sid)


# A server whose exit hooks, or whose release of the sessions, never ends:
# the exit gives up on each after its (here shortened) time limit.
HANGING = """
import asyncio, importlib, sys, time
from mevedel_server.lsp import server, session_registry
main = importlib.import_module("mevedel_server.lsp.main")

server.EXIT_HOOK_SECONDS = server.EXIT_RELEASE_SECONDS = 1.0
build_server = server.build_server

async def hang():
    await asyncio.Event().wait()

async def blocked_release(self):
    await asyncio.to_thread(time.sleep, 3600)  # a thread the interpreter would wait for at exit

def build(features):
    ls = build_server(features)
    if sys.argv[1] == "hook":
        ls.on_exit.append(hang)
    else:
        session_registry.SessionRegistry.close_all = blocked_release
    return ls

server.build_server = build  # main() imports it when it builds the server
main.main(sys.argv[2:])
"""


async def test_a_hanging_exit_hook_is_abandoned_and_the_sessions_still_released(workspace, tmp_path, start):
    client = await start(sys.executable, "-c", HANGING, "hook")
    sid = await holding_a_session(client, workspace, tmp_path)
    await sigterm(client)
    # Hooks and releases that would hang for an hour: the exit's bounded
    # wait fails the test unless the time limits abandoned them.
    assert await client.exited() == 0
    assert "exit hooks still running after 1.0 seconds" in client.log()
    await assert_released(workspace, tmp_path, sid)


async def test_a_release_that_hangs_is_given_up_and_the_server_exits_anyway(workspace, tmp_path, start):
    client = await start(sys.executable, "-c", HANGING, "release")
    sid = await holding_a_session(client, workspace, tmp_path)
    await sigterm(client)
    # Hooks and releases that would hang for an hour: the exit's bounded
    # wait fails the test unless the time limits abandoned them.
    assert await client.exited() == 0
    log = client.log()
    assert "gave up saving and releasing the open sessions after 1.0 seconds" in log
    assert "exiting with status 0 without waiting for unfinished work" in log
    row = await listed(workspace, tmp_path, sid)
    # Nothing released it, but the process that held it has ended: another
    # client of this machine may take it over at once, not after its expiry.
    assert (row["action"], row["lease"], row["holder_ended"]) == ("Take over", "expired", True)
