"""Once its exit sequence is over, the server process ends: nothing left
behind holds it -- neither a step of the sequence that swallows the
cancellation its time limit sends and then waits on a host that never
answers, nor what the sequence leaves running (a task that swallows its
cancellation, a program in a worker thread), which the event loop's and
the interpreter's teardown would wait for without a bound. However the
editor goes away: ``shutdown`` and ``exit``, ``exit`` alone, the end of its
input.

A real server process over raw LSP framing, with the uncooperative work
planted by a wrapper script (as ``test_clean_exit`` plants its hangs)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from deadlines import GENEROUS_SECONDS

from .raw_client import ENDINGS

UNCOOPERATIVE = """
import asyncio, importlib, sys, time
from mevedel_server.lsp import server
main = importlib.import_module("mevedel_server.lsp.main")

server.EXIT_HOOK_SECONDS = server.EXIT_RELEASE_SECONDS = 1.0
build_server = server.build_server

async def swallowing():
    # As a stop that cancels its task, awaits it and swallows the
    # CancelledError, then releases a lease on a host that never answers.
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        pass
    await asyncio.Event().wait()

async def leaving_work_behind():
    asyncio.ensure_future(swallowing())
    asyncio.get_running_loop().run_in_executor(None, time.sleep, 3600)  # a LocalTarget program, say

def build(features):
    ls = build_server(features)
    ls.on_exit.append(swallowing if sys.argv[1] == "step" else leaving_work_behind)
    return ls

server.build_server = build  # main() imports it when it builds the server
main.main(sys.argv[2:])
"""


async def answered(future, what: str):
    try:
        return await asyncio.wait_for(future, GENEROUS_SECONDS)
    except TimeoutError:
        raise AssertionError(f"{what} was never answered") from None


#: The editor's own ways to go away (no signal).
EDITOR_ENDINGS = ["shutdown-and-exit", "exit-without-shutdown", "end-of-input"]


@pytest.mark.parametrize("ending", EDITOR_ENDINGS)
@pytest.mark.parametrize("left", ["step", "work"])
async def test_the_process_ends_once_its_exit_sequence_is_over(workspace: Path, raw_servers, ending, left):
    end, reason, expected_status = ENDINGS[ending]
    client = await raw_servers(sys.executable, "-c", UNCOOPERATIVE, left)
    await client.initialize(workspace)
    await end(client)
    status = await answered(client.process.wait(), f"the end of the process after {ending}")
    log = client.log()
    assert status == expected_status, log
    assert f"{reason}: stopping" in log, log
    if left == "step":
        assert "exit hooks still running after 1.0 seconds" in log, log
    else:
        assert "stopped; exiting with status" in log and "without waiting" not in log, log
    assert client.process.stderr is not None
    assert b"Traceback" not in await client.process.stderr.read()
