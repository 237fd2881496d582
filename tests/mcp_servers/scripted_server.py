"""A small MCP server (the official SDK's FastMCP) for the failure cases
of tests/e2e/test_mcp_resources.py: a resource whose read kills the server
mid-read, one whose read never answers, one that says which process
answered (to see a reconnection), and a huge one. ``--marker PATH`` creates PATH when the
server starts: a test proves a server did not run by its absence. ``--linger``: when its
input ends the server does not exit, and ignores SIGTERM (a badly behaved server)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from mcp.server.fastmcp import FastMCP

server = FastMCP("scripted")


@server.resource("test://pid", mime_type="text/plain")
def pid() -> str:
    """The process that answers."""
    return f"pid {os.getpid()}"


@server.resource("test://die", mime_type="text/plain")
def die() -> str:
    """Exits in the middle of the read."""
    os._exit(3)


@server.resource("test://hang", mime_type="text/plain")
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "too late"


@server.resource("test://huge", mime_type="text/plain")
def huge() -> str:
    """MEVEDEL_TEST_HUGE_BYTES characters (default 4 MiB) in one answer."""
    return "x" * int(os.environ.get("MEVEDEL_TEST_HUGE_BYTES", 4 * 1024 * 1024))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--marker":
        Path(sys.argv[2]).write_text("started\n", encoding="utf-8")
    print("scripted MCP server starting", file=sys.stderr, flush=True)
    server.run("stdio")
    if sys.argv[1:] == ["--linger"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
