"""The end of a command that holds a workspace's target: its last work
there (a session service detached -- a prompt's lease handed to its
client, collection given its seconds --, the answers ``mevedel mcp`` still
owes, the MCP servers a read started stopped) and the target's connection
closed.

On an SSH workspace that is work on the host, after the command's answer
was printed (or, for ``mevedel mcp``, after its client ended the input). A
host that stopped answering (its network dropping every packet) is found
out by the connection's keepalives, about a minute later -- and a remote
program given up on (a Ctrl-C mid-command) is ended there through that
connection first: until then the person saw a command that did not end,
with nothing said. So a wait longer than :data:`NOTICE_SECONDS` is said on
standard error, naming the host, and Ctrl-C stops it: the connection is
dropped at once (the remote processes of programs it had sent are not
waited for), and what the command had not finished there is left as a
killed command leaves it -- a lease that still names this process is one
any client on this machine can take over at once, since the process has
ended.

Every command that holds a target ends here: :func:`leave` for one with a
session service, :func:`finish` for any other."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import SessionService
    from ..targets import Target

#: Seconds of waiting for the host at exit before the wait is said.
NOTICE_SECONDS = 2.0


async def leave(service: SessionService) -> None:
    """Detach ``service`` and close its target, as :func:`finish` does."""
    await finish(service.target, service.sessions.detach)


async def finish(target: Target | None, last: Callable[[], Awaitable[object]] | None = None) -> None:
    """Run ``last`` (the command's last work, on its workspace or not), then
    close ``target`` (``None``: the command reached no target). Raises
    KeyboardInterrupt (the command's status: interrupted) when Ctrl-C
    stopped a wait for an SSH host; what ``last`` raises otherwise."""
    host = getattr(target, "host", None)
    if host is None:  # a local workspace: nothing to wait for on a network
        await _last_and_close(target, last)
        return
    work = asyncio.ensure_future(_last_and_close(target, last))
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def interrupted() -> None:
        if not stop.done():
            stop.set_result(None)

    handled = False
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupted)
        handled = True
    try:
        await asyncio.wait([work, stop], timeout=NOTICE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        if not work.done() and not stop.done():
            print(f"mevedel: still finishing on the SSH host {host} (this command's last work there); Ctrl-C "
                  "stops waiting", file=sys.stderr, flush=True)
            await asyncio.wait([work, stop], return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
            return
        # The connection first: a program given up on would otherwise be
        # ended on the host first, through the silent connection.
        await _close(target, abandon=True)
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        print(f"mevedel: stopped waiting for {host}: what this command had not finished there is left as after a "
              "kill (a session lease that still names this process can be taken over at once from this machine)",
              file=sys.stderr, flush=True)
        raise KeyboardInterrupt
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)


async def _last_and_close(target: Target | None, last: Callable[[], Awaitable[object]] | None) -> None:
    try:
        if last is not None:
            await last()
    finally:
        await _close(target)


async def _close(target: Target | None, *, abandon: bool = False) -> None:
    close = getattr(target, "close", None)
    if close is None:  # a local target holds no connection
        return
    await (close(abandon=True) if abandon else close())
