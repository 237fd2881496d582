"""Serving one client: the connection (stdio or TCP), the loop that reads
its frames into the protocol, and the exit sequence however the serving
ends (see ``main``'s docstring for the statuses and signals).

stdin is read by a daemon thread into a bounded queue of chunks, so a read
still blocked at exit never holds the process (pygls reads it in a pool
thread the interpreter joins at exit) and a client writing faster than the
server reads waits instead of filling memory.

Frames are read by ``framing.FrameReader``, not pygls: whatever bytes arrive,
the server neither dies nor stops answering (see that module), and each
message goes through ``MevedelProtocol.receive``'s envelope and lifecycle
checks before pygls dispatches it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from pygls.io_ import StdoutWriter

from .server import MevedelLanguageServer
from .transport.framing import FrameReader

_log = logging.getLogger(__name__)

#: The signals that stop the server cleanly (those this platform has).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name)
)

#: Opens the connection: the reader of the client's messages and the writer to it.
Connect = Callable[[], Awaitable[tuple[Any, Any]]]


def serve(server: MevedelLanguageServer, connect: Connect) -> int:
    """Serve one client until it goes away, then run the exit sequence and
    end the process (``exit_now``) with its exit status."""
    try:
        return asyncio.run(_serve(server, connect))
    except SystemExit as ended:  # pygls ends the event loop this way after the exit notification
        status = server.exit_status if server.exit_status is not None else ended.code
        status = status if isinstance(status, int) else 1
        _log.info("exit notification: exiting with status %s", status)
        return status


async def _serve(server: MevedelLanguageServer, connect: Connect) -> int:
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []
    signalled = asyncio.Event()

    def on_signal(signum: signal.Signals) -> None:
        if received:
            _log.info("received %s while stopping; the stop is bounded, going on", signum.name)
            return
        received.append(signum)
        signalled.set()

    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError):  # no loop signal handlers here (Windows)
            pass

    reading = asyncio.create_task(_read(server, connect))
    waiting = asyncio.create_task(signalled.wait())
    try:
        await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reading.cancel()
        waiting.cancel()
    failed = reading.exception() if reading.done() and not reading.cancelled() else None
    if received:
        why = f"received {received[0].name}"
    elif failed is not None:
        _log.error("serving the client failed", exc_info=failed)
        why = "serving the client failed"
    else:
        why = "end of input"
    finished = await server.stop(why)
    # A shutdown request waiting on the same stop finishes (and answers)
    # rather than being cancelled by the loop's teardown.
    for _ in range(3):
        await asyncio.sleep(0)
    status = server.exit_status if server.exit_status is not None else 0 if failed is None else 1
    server.exit_now(status, finished=finished)
    return status  # not reached: exit_now ends the process


async def _read(server: MevedelLanguageServer, connect: Connect) -> None:
    reader, writer = await connect()
    server.protocol.set_writer(writer)
    frames = FrameReader(
        reader,
        max_bytes=lambda: server.settings.max_message_bytes,
        on_broken=server.protocol.frame_broken,
    )
    try:
        while (body := await frames.next_body()) is not None:
            if not server.protocol.receive(body):
                frames.reject(body)
    except ConnectionError as error:  # the client's end of a TCP connection went away
        _log.warning("the connection was lost: %s", error)


class _StdinChunks:
    """stdin as chunks, at most ``_STDIN_QUEUE`` of them waiting: the pump
    thread blocks while the loop is behind, so a client writing faster than
    the server reads cannot fill memory."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(_STDIN_QUEUE)
        self._ended = False

    async def read(self, n: int = -1) -> bytes:
        if self._ended:
            return b""
        chunk = await self._queue.get()
        if not chunk:
            self._ended = True
        return chunk

    async def put(self, chunk: bytes) -> None:
        await self._queue.put(chunk)


#: Chunks of stdin (64 KiB each) read ahead of the server.
_STDIN_QUEUE = 16


async def stdio_connection() -> tuple[_StdinChunks, StdoutWriter]:
    loop = asyncio.get_running_loop()
    chunks = _StdinChunks()
    # Not sys.stdin.buffer: a daemon thread blocked in a buffered read holds
    # its lock, and the interpreter takes that lock when it exits.
    thread = threading.Thread(target=_pump, args=(sys.stdin.fileno(), chunks, loop), name="stdin", daemon=True)
    thread.start()
    return chunks, StdoutWriter(sys.stdout.buffer)


def _pump(fd: int, chunks: _StdinChunks, loop: asyncio.AbstractEventLoop) -> None:
    """Copy ``fd`` into ``chunks`` until end of input (an empty chunk)."""
    chunk = b""
    try:
        while chunk := os.read(fd, 65536):
            asyncio.run_coroutine_threadsafe(chunks.put(chunk), loop).result()
    except OSError as error:
        _log.error("reading stdin failed: %s", error)
    except (RuntimeError, concurrent.futures.CancelledError):  # the loop is closed: the server is exiting
        return
    try:
        asyncio.run_coroutine_threadsafe(chunks.put(b""), loop).result()
    except (RuntimeError, concurrent.futures.CancelledError):
        pass


def tcp_connection(host: str, port: int) -> Connect:
    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )

        def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if accepted.done():  # one client per server
                writer.close()
            else:
                accepted.set_result((reader, writer))

        listener = await asyncio.start_server(on_client, host, port)
        _log.info("serving on %s", ", ".join(str(sock.getsockname()) for sock in listener.sockets))
        try:
            return await accepted
        finally:
            listener.close()

    return connect
