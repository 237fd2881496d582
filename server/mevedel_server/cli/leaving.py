"""The end of a command: its session service detached (a prompt's lease
handed to its client, collection given its seconds) and its target's
connection closed.

On an SSH workspace that is work on the host, after the command's answer
was printed. A host that stopped answering (its network dropping every
packet) is found out by the connection's keepalives, about a minute later:
until then the person saw the answer and a command that did not end, with
nothing said. So a wait longer than :data:`NOTICE_SECONDS` is said, naming
the host, and Ctrl-C stops it: the connection is dropped at once (the
remote processes of programs it had sent are not waited for), and what the
command had not finished there is left as a killed command leaves it -- a
lease that still names this process is one any client on this machine can
take over at once, since the process has ended."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import SessionService

#: Seconds of waiting for the host at exit before the wait is said.
NOTICE_SECONDS = 2.0


async def leave(service: SessionService) -> None:
    """Detach ``service`` and close its target. Raises KeyboardInterrupt
    (the command's status: interrupted) when Ctrl-C stopped a wait for an
    SSH host."""
    target = service.target
    host = getattr(target, "host", None)
    if host is None:  # a local workspace: nothing to wait for on a network
        await _detach_and_close(service)
        return
    work = asyncio.ensure_future(_detach_and_close(service))
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
            print(f"mevedel: still finishing on the SSH host {host} (this command's last writes there); Ctrl-C "
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


async def _detach_and_close(service: SessionService) -> None:
    try:
        await service.sessions.detach()
    finally:
        await _close(service.target)


async def _close(target, *, abandon: bool = False) -> None:
    close = getattr(target, "close", None)
    if close is None:  # a local target holds no connection
        return
    await (close(abandon=True) if abandon else close())
