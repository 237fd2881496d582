"""Connections to stdio MCP servers, with the official ``mcp`` SDK client.

A server is started on its first use (a read of ``mcp://SERVER...``), never
by completion or hover, which only see what :meth:`McpConnections.known`
already holds. Each connection lives in a task of its own (the SDK's
context managers are entered and left in one task); requests are sent from
the callers' tasks. Starting a server (up to its ``initialize`` answer)
and every call have their own time limits. When the server's output
ends (it exited or was killed) the connection is closed, requests in flight
fail with a clear error, and the next use starts the server again. Standard
error of a server goes to ``$XDG_STATE_HOME/mevedel/logs/mcp-NAME.log``; its
last lines are quoted when the server fails.

:meth:`McpConnections.close_all` stops every server: stdin closed, then the
SDK's SIGTERM / SIGKILL of its process group; a server that outlives the
grace period is cancelled, which kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

# The MCP SDK (and pydantic under it) is imported where a server is started
# or called: every CLI read and the language server make this module's
# McpConnections, most never reach a server, and the SDK costs a quarter of
# a second to import.
if TYPE_CHECKING:
    from mcp import ClientSession, McpError
    from mcp import types as mcp_types

from ..state_directory import state_directory
from .config import McpServerSpec
from .errors import McpClientError

_log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_SECONDS = 30.0
#: ``mcpMaxMessageBytes`` unless set (its bounds are the setting's: ``.config``).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Starting a server (``npx``/``uvx`` may fetch packages first) and its
#: ``initialize`` answer may take this long.
DEFAULT_START_TIMEOUT_SECONDS = 60.0
#: Pages of a resource listing followed (a server could page forever).
MAX_LIST_PAGES = 50
#: Entries of a resource listing kept.
MAX_LISTED = 10_000
_RESOURCE_NOT_FOUND = -32002


@dataclass(frozen=True)
class ResourceListing:
    """What a server advertises: resources and resource templates."""

    resources: tuple[mcp_types.Resource, ...]
    templates: tuple[mcp_types.ResourceTemplate, ...]
    #: The server has no resources capability at all.
    unsupported: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class Known:
    """What completion may show of a server: its state and its last listing."""

    state: str
    listing: ResourceListing | None


def _log_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:40]
    return f"mcp-{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.log"


def default_log_dir() -> Path:
    return Path(state_directory()) / "logs"


@dataclass(eq=False)
class _Connection:
    spec: McpServerSpec
    cwd: str | None
    log_path: Path
    session: ClientSession | None = None
    capabilities: mcp_types.ServerCapabilities | None = None
    task: asyncio.Task[None] | None = None
    ready: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    lost: bool = False
    log_offset: int = 0
    #: The server's process once started (the leader of its own group).
    process: Any = None

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self.lost

    def last_words(self) -> str:
        """The last lines the server wrote to standard error since it started."""
        try:
            with open(self.log_path, "rb") as stream:
                stream.seek(self.log_offset)
                text = stream.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()][-3:]
        return ("; its last output: " + " | ".join(lines)) if lines else ""


class McpConnections:
    """Every MCP connection of one front end (the LSP server, a CLI command)."""

    def __init__(
        self,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_SECONDS,
        start_timeout: float = DEFAULT_START_TIMEOUT_SECONDS,
        log_dir: Path | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        #: The longest message read from a server (``mcpMaxMessageBytes``).
        self.max_message_bytes = max_message_bytes
        self.log_dir = log_dir or default_log_dir()
        self._connections: dict[tuple[str, str, str | None], _Connection] = {}
        self._listings: dict[tuple[str, str, str | None], ResourceListing] = {}
        self._failures: dict[tuple[str, str, str | None], str] = {}
        self._closing = False
        #: What an operation last read of each workspace's ``.mcp.json``
        #: (by workspace key): completion's only view of workspace servers.
        self.observed: dict[str, Any] = {}
        #: Approvals (workspace, name, fingerprint) seen by an operation.
        self.approved_seen: set[tuple[str, str, str]] = set()

    @staticmethod
    def _key(spec: McpServerSpec, cwd: str | None) -> tuple[str, str, str | None]:
        return (spec.name, spec.fingerprint, cwd)

    # -- what completion and hover may see (no I/O, never connects) ---------------

    def known(self, spec: McpServerSpec, cwd: str | None) -> Known:
        key = self._key(spec, cwd)
        connection = self._connections.get(key)
        if connection is not None and connection.alive and connection.session is not None:
            return Known("connected", self._listings.get(key))
        # What a connection that is gone listed is not offered any more.
        if key in self._failures:
            return Known(f"failed: {self._failures[key]}", None)
        return Known("not connected", None)

    # -- connecting -------------------------------------------------------------

    async def _connection(self, spec: McpServerSpec, cwd: str | None) -> _Connection:
        if self._closing:
            raise McpClientError("failed", f"MCP server {spec.name!r} is not started: the server is shutting down")
        key = self._key(spec, cwd)
        connection = self._connections.get(key)
        if connection is None or not connection.alive:
            if connection is not None:
                await self._finish(connection)
            self._listings.pop(key, None)  # a new connection lists afresh
            connection = self._start(spec, cwd)
            self._connections[key] = connection
        try:
            async with asyncio.timeout(self.start_timeout):
                await asyncio.shield(connection.ready)
        except TimeoutError:
            self._connections.pop(key, None)
            await self._finish(connection, cancel=True)
            reason = f"did not finish starting within {self.start_timeout:g} s{connection.last_words()}"
            self._failures[key] = reason
            raise McpClientError("failed", f"MCP server {spec.name!r} {reason}") from None
        except McpClientError as error:
            self._connections.pop(key, None)
            self._failures[key] = error.reason
            raise
        self._failures.pop(key, None)
        return connection

    def _start(self, spec: McpServerSpec, cwd: str | None) -> _Connection:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / _log_name(spec.name)
        connection = _Connection(spec, cwd, log_path)
        with contextlib.suppress(OSError):
            connection.log_offset = log_path.stat().st_size
        connection.task = asyncio.ensure_future(self._run(connection))
        return connection

    async def _run(self, connection: _Connection) -> None:
        from mcp import ClientSession, StdioServerParameters

        from .bounded_stdio import (
            bounded_stdio_client,  # the SDK's stdio client under it
        )

        spec = connection.spec
        parameters = StdioServerParameters(
            command=spec.command, args=list(spec.args), env=dict(spec.env) or None, cwd=connection.cwd
        )
        try:
            with open(connection.log_path, "a", encoding="utf-8", errors="replace") as errlog:
                started = functools.partial(setattr, connection, "process")
                async with bounded_stdio_client(parameters, errlog, self.max_message_bytes, started) as (read, write):
                    # Messages pass through a pump that notices the end of
                    # the server's output, so a dead server is known at once.
                    forward, received = anyio.create_memory_object_stream[Any](0)
                    ended = anyio.Event()

                    async def pump() -> None:
                        async with forward:
                            async for message in read:
                                await forward.send(message)
                        ended.set()

                    async with anyio.create_task_group() as group:
                        group.start_soon(pump)
                        async with ClientSession(received, write) as session:
                            initialized = await session.initialize()
                            connection.session = session
                            connection.capabilities = initialized.capabilities
                            if not connection.ready.done():
                                connection.ready.set_result(None)
                            stop = asyncio.ensure_future(connection.stop.wait())
                            gone = asyncio.ensure_future(ended.wait())
                            try:
                                await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
                            finally:
                                stop.cancel()
                                gone.cancel()
                            connection.lost = True
                        group.cancel_scope.cancel()
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # an exception group from the SDK's task groups, an OSError...
            reason = _start_failure(error, spec)
            if not connection.ready.done():
                connection.ready.set_exception(McpClientError("failed", f"MCP server {spec.name!r} {reason}{connection.last_words()}"))
            else:
                _log.info("MCP server %s ended: %r", spec.name, error)
        finally:
            connection.lost = True
            connection.session = None
            if not connection.ready.done():
                connection.ready.set_exception(
                    McpClientError("failed", f"MCP server {spec.name!r} exited before it finished starting{connection.last_words()}")
                )
            # Nobody awaits a future that failed after the start was given up on.
            if connection.ready.done() and not connection.ready.cancelled():
                connection.ready.exception()

    async def _finish(self, connection: _Connection, *, cancel: bool = False) -> None:
        connection.stop.set()
        task = connection.task
        if task is None or task.done():
            return
        if cancel:
            await _kill(task)
            return
        with contextlib.suppress(BaseException):
            await task

    # -- calls --------------------------------------------------------------------

    async def _call(self, spec: McpServerSpec, cwd: str | None, what: str, call: Any) -> Any:
        from mcp import McpError
        from mcp import types as mcp_types
        from pydantic import ValidationError

        connection = await self._connection(spec, cwd)
        session = connection.session
        if session is None:  # lost between start and call
            raise McpClientError("failed", f"MCP server {spec.name!r} exited{connection.last_words()}")
        # The call races the connection: a server that exits ends the call
        # at once, whatever the SDK does with requests still in flight.
        running = asyncio.ensure_future(call(session, connection))
        assert connection.task is not None
        try:
            await asyncio.wait({running, connection.task}, timeout=self.call_timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            running.cancel()
            raise
        if not running.done():
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
            if connection.task.done():
                raise McpClientError("failed", f"MCP server {spec.name!r} exited during {what}{connection.last_words()}")
            raise McpClientError("failed", f"MCP server {spec.name!r} did not answer {what} within {self.call_timeout:g} s")
        try:
            return running.result()
        except McpError as error:
            code = error.error.code
            if code == mcp_types.CONNECTION_CLOSED or not connection.alive:
                connection.lost = True
                raise McpClientError(
                    "failed", f"MCP server {spec.name!r} exited during {what}{connection.last_words()}"
                ) from None
            raise _server_error(spec, what, error) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            connection.lost = True
            raise McpClientError("failed", f"MCP server {spec.name!r} exited during {what}{connection.last_words()}") from None
        except ValidationError as error:
            raise McpClientError("failed", f"MCP server {spec.name!r} answered {what} with a malformed result ({error.error_count()} problems)") from None

    async def list(self, spec: McpServerSpec, cwd: str | None) -> ResourceListing:
        """The server's resources and resource templates (every page, bounded)."""
        from mcp import McpError
        from mcp import types as mcp_types

        async def call(session: ClientSession, connection: _Connection) -> ResourceListing:
            capabilities = connection.capabilities
            if capabilities is not None and capabilities.resources is None:
                return ResourceListing((), (), unsupported=True)
            resources: list[mcp_types.Resource] = []
            templates: list[mcp_types.ResourceTemplate] = []
            truncated = False
            cursor: str | None = None
            for _page in range(MAX_LIST_PAGES):
                page = await session.list_resources(cursor)
                resources += page.resources
                cursor = page.nextCursor
                if not cursor or len(resources) >= MAX_LISTED:
                    break
            truncated = bool(cursor)
            cursor = None
            for _page in range(MAX_LIST_PAGES):
                try:
                    template_page = await session.list_resource_templates(cursor)
                except McpError as error:
                    if error.error.code == mcp_types.METHOD_NOT_FOUND:
                        break
                    raise
                templates += template_page.resourceTemplates
                cursor = template_page.nextCursor
                if not cursor or len(templates) >= MAX_LISTED:
                    break
            truncated = truncated or bool(cursor)
            return ResourceListing(tuple(resources[:MAX_LISTED]), tuple(templates[:MAX_LISTED]), truncated=truncated)

        listing = await self._call(spec, cwd, "resources/list", call)
        self._listings[self._key(spec, cwd)] = listing
        return listing

    async def read(self, spec: McpServerSpec, cwd: str | None, uri: str) -> mcp_types.ReadResourceResult:
        """``resources/read`` of ``uri``, fresh (nothing is cached)."""
        from mcp import types as mcp_types
        from pydantic import ValidationError

        try:
            mcp_types.ReadResourceRequestParams(uri=uri)  # type: ignore[arg-type]
        except ValidationError:
            raise McpClientError("missing", f"{uri!r} is not a URI (an MCP resource URI has a scheme, such as file:// or demo://)") from None

        async def call(session: ClientSession, connection: _Connection) -> mcp_types.ReadResourceResult:
            if connection.capabilities is not None and connection.capabilities.resources is None:
                raise McpClientError("missing", f"MCP server {spec.name!r} has no resources")
            return await session.read_resource(uri)  # type: ignore[arg-type]

        return await self._call(spec, cwd, "resources/read", call)

    async def warm(self, spec: McpServerSpec, cwd: str | None) -> None:
        """List a just-used server once, so completion knows its resources."""
        if self._key(spec, cwd) not in self._listings:
            with contextlib.suppress(McpClientError):
                await self.list(spec, cwd)

    # -- stopping -----------------------------------------------------------------

    async def close_all(self, grace: float = 1.0) -> None:
        """Stop every server (at exit): its input is closed, and a server
        still running after ``grace`` seconds is killed."""
        self._closing = True
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.stop.set()
        tasks = [c.task for c in connections if c.task is not None and not c.task.done()]
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=grace)
        # Killed, and their ends waited for, before their tasks are
        # cancelled: a cancellation may land on the SDK's own wait for the
        # process, and the caller (a server's exit) must not return while a
        # server it started still runs (at load it did, for a moment).
        await asyncio.gather(*(_end_process(c.process) for c in connections if c.task in pending and c.process is not None))
        await asyncio.gather(*(_kill(task) for task in pending))


async def _end_process(process: Any) -> None:
    """SIGKILL to the server's process group (the SDK starts each server in
    a session of its own), then its exit waited for."""
    if process.returncode is None:  # not yet reaped: its pid is still its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await process.wait()


async def _kill(task: asyncio.Task[None]) -> None:
    """End a connection's task now. One cancellation only interrupts the
    await it lands on (the SDK's shutdown then waits for the process to
    exit on its own); cancelling again interrupts that wait, and the
    process is killed as the SDK leaves it."""
    for _attempt in range(40):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=0.05)
    if task.done() and not task.cancelled():
        with contextlib.suppress(BaseException):
            task.result()


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _start_failure(error: BaseException, spec: McpServerSpec) -> str:
    from mcp import McpError
    from mcp import types as mcp_types

    for leaf in _leaves(error):
        if isinstance(leaf, FileNotFoundError):
            return f"could not be started: {spec.command!r} was not found"
        if isinstance(leaf, PermissionError):
            return f"could not be started: {spec.command!r} is not executable"
        if isinstance(leaf, OSError):
            return f"could not be started ({leaf.strerror or type(leaf).__name__})"
        if isinstance(leaf, McpError):
            if leaf.error.code == mcp_types.CONNECTION_CLOSED:
                return "exited before it finished starting"
            return f"refused to start: {leaf.error.message}"
    leaf = _leaves(error)[0]
    return f"failed while starting ({type(leaf).__name__})"


def _server_error(spec: McpServerSpec, what: str, error: McpError) -> McpClientError:
    from mcp import types as mcp_types

    from .bounded_stdio import TOO_LARGE

    message = error.error.message
    lowered = message.lower()
    if error.error.code == _RESOURCE_NOT_FOUND or (error.error.code == mcp_types.INVALID_PARAMS and "not found" in lowered):
        return McpClientError("missing", f"MCP server {spec.name!r} says: {message}")
    if error.error.code == mcp_types.METHOD_NOT_FOUND:
        return McpClientError("missing", f"MCP server {spec.name!r} has no resources ({what}: {message})")
    if error.error.code == TOO_LARGE:
        return McpClientError("failed", f"MCP server {spec.name!r}: its answer to {what} is {message}")
    return McpClientError("failed", f"MCP server {spec.name!r} answered {what} with an error: {message}")
