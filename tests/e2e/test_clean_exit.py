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
import json
import os
import sys
from pathlib import Path

import pytest

from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

from .raw_client import ENDINGS, RawClient, sigterm


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
    sid = (await client.result(methods.SESSION_CREATE, {"name": "Held at exit"}))["sessionId"]
    await client.result(methods.TURN_BEGIN, {"prompt": "first"})
    await client.result(methods.TURN_APPEND, {"kind": "response", "text": "done"})
    await client.result(methods.TURN_SETTLE, {})
    await client.result(methods.TURN_BEGIN, {"prompt": "in flight when the editor goes away"})
    row = await listed(workspace, state, sid)
    assert (row["action"], row["lease"]) == ("Join", "held")  # another client could only join now
    return sid


async def assert_released(workspace: Path, state: Path, sid: str) -> None:
    """Resumable without a takeover, the turn in flight saved as such."""
    row = await listed(workspace, state, sid)
    assert (row["action"], row["lease"]) == ("Resume", "free")
    reader = SessionService(LocalTarget(workspace), ClientIdentity("reader", "elsewhere"))
    assert [t.state for t in await reader.turns.summaries(sid)] == ["completed", "in-flight"]


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_server_releases_its_sessions_however_it_ends(workspace, tmp_path, raw_servers, ending):
    end, reason, expected_status = ENDINGS[ending]
    client = await raw_servers()
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


async def test_a_hanging_exit_hook_is_abandoned_and_the_sessions_still_released(workspace, tmp_path, raw_servers):
    client = await raw_servers(sys.executable, "-c", HANGING, "hook")
    sid = await holding_a_session(client, workspace, tmp_path)
    await sigterm(client)
    # Hooks and releases that would hang for an hour: the exit's bounded
    # wait fails the test unless the time limits abandoned them.
    assert await client.exited() == 0
    assert "exit hooks still running after 1.0 seconds" in client.log()
    await assert_released(workspace, tmp_path, sid)


async def test_a_release_that_hangs_is_given_up_and_the_server_exits_anyway(workspace, tmp_path, raw_servers):
    client = await raw_servers(sys.executable, "-c", HANGING, "release")
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
