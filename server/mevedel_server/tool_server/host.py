"""The tool server inside a process that drives agents (the LSP server,
``mevedel prompt``): one unix socket, one token per agent.

An agent reaches the tools through ``mevedel mcp`` in relay mode
(:mod:`.relay`), which the agent starts itself with ``MEVEDEL_TOOL_SOCKET``
and ``MEVEDEL_TOOL_TOKEN`` in its environment. The relay connects to the
socket and sends its token on the first line; the host answers ``ok`` and
serves one MCP session (:func:`.server.serve`) over the connection, with
the :class:`~.context.ToolContext` that token was registered for, so every
tool call runs here, in the process that holds the agent's session, on the
workspace's ``Target``. A token binds one agent to one context: it never
names a session, and another agent's token reaches only that agent's.

The socket lives in a directory only this user can enter (0700, made with
``mkdtemp`` under ``$XDG_RUNTIME_DIR`` or the temporary directory, the first
whose socket path fits the unix limit). Tokens
are random (256 bits) and compared in constant time. A connection that sends
no token line within :data:`HANDSHAKE_TIMEOUT`, sends garbage or an unknown
token is logged and closed with nothing served (an unknown token gets
``refused`` first, so the relay can say so). :meth:`ToolHost.unregister`
ends the token's live connections; :meth:`ToolHost.close` (the process
exits) ends all of them and removes the socket and its directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketListener, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .relay import ACCEPTED, HANDSHAKE_TIMEOUT, REFUSED, SOCKET_ENV, TOKEN_ENV

__all__ = ["ACCEPTED", "HANDSHAKE_TIMEOUT", "REFUSED", "SOCKET_ENV", "TOKEN_ENV", "ToolHost"]

_log = logging.getLogger(__name__)

#: Bytes a token line may take.
TOKEN_LINE_MAX = 256
#: Bytes one MCP message may take (an ApplyPatch carries whole files).
MESSAGE_MAX = 32 * 1024 * 1024
#: A unix socket path longer than this cannot be bound (108 with the NUL).
SOCKET_PATH_MAX = 104
#: Connections waiting to be accepted (anyio's default).
LISTEN_BACKLOG = 65536

Serve = Callable[[Any, Any, Any], Awaitable[None]]


def _default_serve() -> Serve:
    from .server import serve

    return serve


def _listen(path: Path) -> socket.socket:
    """A unix socket listening at ``path``, which only this user may
    connect to (as ``anyio.create_unix_listener`` makes one, without its
    worker thread)."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listening.bind(os.fspath(path))
        os.chmod(path, 0o600)
        listening.listen(LISTEN_BACKLOG)
        listening.setblocking(False)
    except BaseException:
        listening.close()
        raise
    return listening


def _socket_directory(parent: str | None) -> Path:
    """A new private directory for the socket, with a path short enough to
    bind: under ``parent`` (default ``$XDG_RUNTIME_DIR``), else the
    temporary directory, else ``/tmp`` -- the first whose socket path fits.
    A long ``parent`` or ``$TMPDIR`` (a test's temporary directory, a
    deep home) is passed over, not an error: ``/tmp`` always fits."""
    defaults = [os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"]
    candidates = ([parent] if parent is not None else []) + defaults
    last: OSError | None = None
    for candidate in candidates:
        if not candidate or not os.path.isdir(candidate):
            continue
        # mkdtemp's name is the prefix and 8 characters.
        if len(os.fsencode(os.path.join(candidate, "mevedel-tools-12345678", "tools.sock"))) > SOCKET_PATH_MAX:
            continue
        try:
            made = Path(tempfile.mkdtemp(prefix="mevedel-tools-", dir=candidate))
        except OSError as error:
            last = error
            continue
        if len(os.fsencode(made / "tools.sock")) <= SOCKET_PATH_MAX:
            os.chmod(made, 0o700)
            return made
        made.rmdir()
    raise OSError(f"no directory to hold the tool socket ({last or 'every candidate path is too long for a unix socket'})")


class ToolHost:
    """The tool server's socket in this process, started on first use."""

    def __init__(self, serve: Serve | None = None, *, directory: str | None = None) -> None:
        self._serve = serve
        self._parent = directory
        self._dir: Path | None = None
        #: The listening socket; anyio's listener over it once a connection came.
        self._listening: socket.socket | None = None
        self._listener: SocketListener | None = None
        self._task: Any = None
        self._contexts: dict[str, Any] = {}
        #: The cancel scopes of each token's live connections.
        self._live: dict[str, set[anyio.CancelScope]] = {}
        self._closed = False
        self._starting: asyncio.Lock | None = None

    # Facts --------------------------------------------------------------------------

    @property
    def socket_path(self) -> str | None:
        return None if self._dir is None else str(self._dir / "tools.sock")

    def connections(self, token: str) -> int:
        """How many connections serve ``token`` now."""
        return len(self._live.get(token, ()))

    # Life ---------------------------------------------------------------------------

    async def start(self) -> str:
        """Listen (once); the socket's path."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:  # two agents starting at once make one socket
            if self._closed:
                raise RuntimeError("the tool host is closed")
            if self._dir is None:
                directory = _socket_directory(self._parent)
                try:
                    listening = _listen(directory / "tools.sock")
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                self._dir = directory
                self._listening = listening
                self._task = asyncio.ensure_future(self._serve_when_asked(listening))
                _log.info("tool server listening at %s", self.socket_path)
            assert self.socket_path is not None
            return self.socket_path

    async def register(self, context: Any) -> tuple[str, str]:
        """A new token bound to ``context``: ``(socket_path, token)`` for the
        relay's environment."""
        path = await self.start()
        token = secrets.token_urlsafe(32)
        self._contexts[token] = context
        return path, token

    def unregister(self, token: str) -> None:
        """Forget ``token`` and end its live connections."""
        self._contexts.pop(token, None)
        for scope in list(self._live.pop(token, ())):
            scope.cancel()

    def environment(self, socket_path: str, token: str) -> dict[str, str]:
        return {SOCKET_ENV: socket_path, TOKEN_ENV: token}

    async def close(self) -> None:
        """Stop listening, end every connection, remove the socket and its
        directory."""
        self._closed = True
        for token in list(self._contexts):
            self.unregister(token)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.aclose()
        listening, self._listening = self._listening, None
        if listening is not None:
            listening.close()  # its listener's already, or never served
        directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    # Connections --------------------------------------------------------------------

    def _lookup(self, candidate: bytes) -> tuple[str, Any] | None:
        """The token ``candidate`` is and its context, comparing against
        every registered token in constant time."""
        found = None
        for token, context in list(self._contexts.items()):
            if hmac.compare_digest(token.encode("ascii"), candidate):
                found = (token, context)
        return found

    async def _serve_when_asked(self, listening: socket.socket) -> None:
        """Accept connections once the first one is waiting: until then the
        socket is a plain listening one, so a process whose agent never
        starts its tools (or not yet: a prompt before its first chunk)
        loads none of anyio's socket and thread machinery."""
        loop = asyncio.get_running_loop()
        asked = loop.create_future()
        loop.add_reader(listening.fileno(), lambda: asked.done() or asked.set_result(None))
        try:
            await asked
        finally:
            loop.remove_reader(listening.fileno())
        self._listener = await SocketListener.from_socket(listening)
        await self._accept_loop(self._listener)

    async def _accept_loop(self, listener: SocketListener) -> None:
        async with anyio.create_task_group() as group:
            while True:
                try:
                    stream = await listener.accept()
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                except OSError as error:  # out of descriptors: wait, do not spin
                    _log.warning("tool server: accepting a connection failed: %s", error)
                    await anyio.sleep(0.5)
                    continue
                group.start_soon(self._connection, stream)

    async def _connection(self, stream: SocketStream) -> None:
        try:
            async with stream:
                await self._handle(stream)
        except Exception:
            _log.exception("tool server: a connection failed")

    async def _handle(self, stream: SocketStream) -> None:
        buffered = BufferedByteReceiveStream(stream)
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT):
                line = await buffered.receive_until(b"\n", TOKEN_LINE_MAX)
        except TimeoutError:
            _log.warning("tool server: closed a connection that sent no token within %g s", HANDSHAKE_TIMEOUT)
            return
        except (anyio.DelimiterNotFound, anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
            _log.warning("tool server: closed a connection that sent no token line")
            return
        found = self._lookup(line.rstrip(b"\r"))
        if found is None:
            _log.warning("tool server: refused a connection with an unknown token")
            with contextlib.suppress(Exception):
                await stream.send(REFUSED)
            return
        token, context = found
        try:
            await stream.send(ACCEPTED)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the relay went away before being answered
        serve = self._serve or _default_serve()
        with anyio.CancelScope() as scope:
            live = self._live.setdefault(token, set())
            live.add(scope)
            try:
                await self._session(serve, context, buffered, stream)
            finally:
                live.discard(scope)
                if not live and self._live.get(token) is live:
                    del self._live[token]

    async def _session(self, serve: Serve, context: Any, buffered: BufferedByteReceiveStream, stream: SocketStream) -> None:
        from mcp.shared.message import SessionMessage

        read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as group:
            group.start_soon(self._pump_in, buffered, read_writer)
            group.start_soon(self._pump_out, stream, write_reader, group.cancel_scope)
            try:
                await serve(context, read_stream, write_stream)
            finally:
                # What the server still sends goes out, then the connection ends.
                write_stream.close()
                read_stream.close()

    @staticmethod
    async def _pump_in(buffered: BufferedByteReceiveStream, writer: Any) -> None:
        """Socket lines -> MCP messages, until the peer stops sending."""
        from mcp import types
        from mcp.shared.message import SessionMessage

        async with writer:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", MESSAGE_MAX)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                except anyio.DelimiterNotFound:
                    _log.warning("tool server: a message longer than %d bytes; connection closed", MESSAGE_MAX)
                    return
                if not line.strip():
                    continue
                try:
                    message: Any = SessionMessage(types.JSONRPCMessage.model_validate_json(line))
                except Exception as error:  # the server answers it as a parse error
                    message = error
                try:
                    await writer.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

    @staticmethod
    async def _pump_out(stream: SocketStream, reader: Any, scope: anyio.CancelScope) -> None:
        """MCP messages -> socket lines; the connection ends with them."""
        try:
            async with reader:
                async for message in reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")
                    await stream.send(data + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            scope.cancel()
