"""A question on the terminal: one line typed by the person, read through
the event loop (``mevedel prompt``'s permission questions, the question
whether to start a session beside a held one)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios


async def read_answer(prompt: str) -> str | None:
    """One line typed on the terminal, read through the event loop (never
    by a thread blocked on the terminal, which would outlive the question
    and swallow the next line typed into the shell); None at end of input.
    Cancelled (Ctrl-C, the question timed out), it stops reading and drops
    what was typed and not yet sent."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    fd = sys.stdin.fileno()
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str | None] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not line.done():
            line.set_result(data.decode("utf-8", "replace") if data else None)

    loop.add_reader(fd, readable)
    try:
        answer = await line
    except asyncio.CancelledError:
        with contextlib.suppress(OSError, termios.error):
            termios.tcflush(fd, termios.TCIFLUSH)
        sys.stderr.write("\n")
        sys.stderr.flush()
        raise
    finally:
        loop.remove_reader(fd)
    if answer is None:  # Ctrl-D: the terminal echoed no end of line
        sys.stderr.write("\n")
        sys.stderr.flush()
    return answer
