"""One agent process: started from its configured command, spoken to over
stdio with the official ACP SDK, its standard error kept in a log the user
can open (and its last lines for error messages).

Everything that can go wrong while starting becomes an :class:`AgentError`
that says what to do: a program that is not installed, an agent that
exits or never answers ``initialize``, one that asks for a login.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import json
import logging
import os
import re
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import acp
from acp import RequestError, schema

from .config import AgentSpec
from .errors import FAILED, NEEDS_LOGIN, NOT_INSTALLED, AgentError

_log = logging.getLogger(__name__)

#: JSON-RPC code of ACP's "authentication required".
AUTH_REQUIRED = -32000
#: Lines of the agent's standard error kept for error messages.
STDERR_TAIL = 20
#: Bytes of the agent's standard error read (and logged) at once.
STDERR_CHUNK = 64 * 1024
#: Bytes of a standard error line looked at for the tail (300 characters kept).
_TAIL_LINE_BYTES = 1200
#: Bytes one line of the agent's output may take (images travel inline).
STDIO_LIMIT = 50 * 1024 * 1024
#: The agent's log (its standard error, and what the ACP SDK says of its
#: messages) is rotated to ``NAME.log.1`` past this many bytes: a chatty or
#: hostile agent cannot fill the disk.
LOG_MAX_BYTES = 8 * 1024 * 1024
#: Bytes of an over-long line kept at each end to find its request id.
_OVERLONG_KEEP = 64 * 1024
_ID = re.compile(rb'(?<!\\)"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,20})')
_ACP_DIR = os.path.dirname(acp.__file__)

#: The agent whose connection the current task serves (its SDK tasks are
#: made under it, so they inherit it): where the SDK's log records go.
_SERVING: contextvars.ContextVar[AgentProcess | None] = contextvars.ContextVar("mevedel_agent", default=None)


class AgentLog:
    """An agent's log file, capped: past :data:`LOG_MAX_BYTES` it is moved
    to ``.1`` (replacing the older one) and begun again."""

    def __init__(self, path: Path, limit: int = LOG_MAX_BYTES) -> None:
        self.path = path
        self.limit = limit

    def write(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size + len(data) > self.limit:
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with open(self.path, "ab", buffering=0) as log:
                log.write(data[-self.limit :])
        except OSError as error:
            _log.warning("cannot write the agent log %s: %s", self.path, error)


class _SdkLogRoute(logging.Filter):
    """The ACP SDK logs an agent's malformed messages with
    ``logging.exception`` on the root logger: a traceback on the user's
    terminal for the agent's fault. Its records go to the agent's log
    instead, and the user sees one line naming the agent and what it did."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.pathname.startswith(_ACP_DIR):
            return True
        agent = _SERVING.get()
        if agent is not None:
            agent.sdk_said(record)
            return False
        # No agent to blame: one line, never the traceback.
        record.msg, record.args = f"ACP: {_said(record)}", None
        record.exc_info = record.exc_text = None
        return True


def _said(record: logging.LogRecord) -> str:
    error = record.exc_info[1] if record.exc_info else None
    text = record.getMessage()
    if error is not None:
        text += f": {type(error).__name__}: {str(error)[:200]}"
    return " ".join(text.split())


logging.getLogger().addFilter(_SdkLogRoute())
#: Starts the agent's program (``asyncio.create_subprocess_exec``'s
#: signature). ``mevedel prompt`` hands over an agent it started before its
#: own imports through this (``cli/agent_prestart.py``).
spawn: Callable[..., Awaitable[asyncio.subprocess.Process]] = asyncio.create_subprocess_exec


def _client_capabilities() -> schema.ClientCapabilities:
    return schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
    )


class AgentProcess:
    def __init__(self, spec: AgentSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.conn: acp.core.ClientSideConnection | None = None
        self.init: schema.InitializeResponse | None = None
        self.native_session_id: str | None = None
        #: The agent's answer to the last session/new, load or resume (its
        #: modes and config options).
        self.opened: Any = None
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._stderr_task: asyncio.Task | None = None
        self._stdout_task: asyncio.Task | None = None
        self.log = AgentLog(log_path)
        #: What the SDK reported of this agent, shown once each.
        self._shown: set[str] = set()

    # Facts ----------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None and self.conn is not None

    @property
    def can_load(self) -> bool:
        caps = self.init.agent_capabilities if self.init else None
        return bool(caps and caps.load_session)

    @property
    def can_resume(self) -> bool:
        caps = self.init.agent_capabilities if self.init else None
        return bool(caps and caps.session_capabilities and caps.session_capabilities.resume)

    @property
    def accepts_images(self) -> bool:
        caps = self.init.agent_capabilities if self.init else None
        return bool(caps and caps.prompt_capabilities and caps.prompt_capabilities.image)

    @property
    def accepts_resources(self) -> bool:
        caps = self.init.agent_capabilities if self.init else None
        return bool(caps and caps.prompt_capabilities and caps.prompt_capabilities.embedded_context)

    def why_gone(self) -> str:
        """How the process ended, with its last words on standard error."""
        code = self.process.returncode if self.process is not None else None
        what = "the agent's connection closed" if code is None else f"the agent exited with status {code}"
        last = self.stderr_tail(3)
        return f"{what}{': ' + last if last else ''}"

    def stderr_said(self, lines: int = 3) -> str:
        """The agent's last stderr lines as a clause for an error message
        (the real cause often is there: "Not logged in"), or nothing."""
        tail = self.stderr_tail(lines)
        return f"; it last said on stderr: {tail}" if tail else ""

    def stderr_tail(self, lines: int = STDERR_TAIL) -> str:
        return " | ".join(list(self._tail)[-lines:])

    # Life -----------------------------------------------------------------------

    async def start(self, client: Any, cwd: str | None, timeout: float) -> None:
        """Start the program and ``initialize`` it, or raise AgentError."""
        argv = list(self.spec.command)
        try:
            self.process = await spawn(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.spec.env},
                cwd=cwd,
                limit=STDIO_LIMIT,
                start_new_session=True,
            )
        except (FileNotFoundError, NotADirectoryError):
            raise AgentError(
                NOT_INSTALLED,
                f"agent {self.spec.name!r}",
                f"its program {argv[0]!r} was not found",
                f"install it (docs/agents.md says how) or fix agents.{self.spec.name}.command",
            ) from None
        except PermissionError:
            raise AgentError(
                NOT_INSTALLED, f"agent {self.spec.name!r}", f"its program {argv[0]!r} is not executable", f"fix agents.{self.spec.name}.command"
            ) from None
        except OSError as error:
            raise AgentError(FAILED, f"agent {self.spec.name!r}", f"could not start: {error.strerror or error}") from None
        self._stderr_task = asyncio.create_task(self._keep_stderr())
        assert self.process.stdin is not None and self.process.stdout is not None
        messages = asyncio.StreamReader(limit=STDIO_LIMIT)
        self._stdout_task = asyncio.create_task(self._only_objects(self.process.stdout, messages))
        serving = _SERVING.set(self)
        try:
            self.conn = acp.connect_to_agent(client, self.process.stdin, messages, use_unstable_protocol=True)
        finally:
            _SERVING.reset(serving)
        try:
            self.init = await self.until_gone(
                self.conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=_client_capabilities(),
                    client_info=schema.Implementation(name="mevedel", title="mevedel", version="0.1"),
                ),
                timeout,
                "initialize",
            )
        except BaseException:
            await self.stop()
            raise

    async def open_session(self, cwd: str, mcp_servers: Sequence[Any], resume: str | None, timeout: float) -> bool:
        """A native session for the next prompt: ``resume`` (an id this
        installation gave before) through ``session/resume`` or
        ``session/load`` when the agent offers one, else a new session.
        True when the named conversation was continued."""
        if self.conn is None:
            # Stopped between ``initialize`` and here (the engine awaits the
            # tool server in between): the session closed or the server is
            # exiting while the agent started.
            raise AgentError(FAILED, f"agent {self.spec.name!r}", "was stopped before its session opened (the session closed or the server is exiting)",
                             "prompt again")
        if resume is not None and (self.can_resume or self.can_load):
            try:
                if self.can_resume:
                    self.opened = await self.until_gone(self.conn.resume_session(session_id=resume, cwd=cwd, mcp_servers=list(mcp_servers)), timeout, "session/resume")
                else:
                    self.opened = await self.until_gone(self.conn.load_session(cwd=cwd, session_id=resume, mcp_servers=list(mcp_servers)), timeout, "session/load")
                self.native_session_id = resume
                return True
            except AgentError as error:
                if error.kind == NEEDS_LOGIN or not self.alive:
                    raise
                _log.info("agent %s could not continue session %s (%s); starting a new one", self.spec.name, resume, error.reason)
        response = await self.until_gone(self.conn.new_session(cwd=cwd, mcp_servers=list(mcp_servers)), timeout, "session/new")
        self.opened = response
        self.native_session_id = response.session_id
        return False

    async def until_gone(self, awaitable: Any, timeout: float | None, what: str) -> Any:
        """``awaitable``'s result, or an AgentError when the agent refuses,
        exits or lets ``timeout`` pass first."""
        try:
            return await asyncio.wait_for(awaitable, timeout)
        except asyncio.TimeoutError:
            raise AgentError(
                FAILED,
                f"agent {self.spec.name!r}",
                f"did not answer {what} within {timeout:g} s",
                f"check that the agent runs on its own; its log is {self.log_path}",
            ) from None
        except RequestError as error:
            raise self._refusal(error, what) from None
        except (ConnectionError, BrokenPipeError, asyncio.IncompleteReadError):
            await self.reap()
            raise AgentError(FAILED, f"agent {self.spec.name!r}", f"{self.why_gone()} during {what}", f"its log is {self.log_path}") from None

    def _refusal(self, error: RequestError, what: str) -> AgentError:
        text = f"{error} {error.data or ''}".lower()
        if error.code == AUTH_REQUIRED or "auth" in text or "login" in text or "log in" in text:
            return AgentError(NEEDS_LOGIN, f"agent {self.spec.name!r}", f"needs a login ({error})", self.login_hint())
        details = error.data.get("details") if isinstance(error.data, dict) else None
        said = f"{error}" + (f" ({details})" if isinstance(details, str) and details else "") + self.stderr_said()
        action = f"its log is {self.log_path}"
        if what in ("session/new", "session/load", "session/resume"):
            # Agents that need a login do not all say so (Claude's adapter
            # fails session/new with an internal error without one).
            action = f"if the agent needs a login, log in first (docs/agents.md); {action}"
        return AgentError(FAILED, f"agent {self.spec.name!r}", f"refused {what}: {said}", action)

    def login_hint(self) -> str:
        methods = list(self.init.auth_methods or []) if self.init else []
        described = []
        for method in methods:
            name = getattr(method, "name", None) or getattr(method, "id", "")
            description = getattr(method, "description", None)
            described.append(f"{name}: {description}" if description else str(name))
        how = "; ".join(described) if described else "log in with the agent's own command"
        return f"log in first ({how}); docs/agents.md says how for each agent"

    async def reap(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.process.wait(), 0.5)

    async def _only_objects(self, stdout: asyncio.StreamReader, messages: asyncio.StreamReader) -> None:
        """Pass the agent's output on line by line, dropping lines that are
        not JSON objects: the SDK takes ``null`` for the end of the stream
        and fails its receive loop on an array, so one bad line from an
        agent would otherwise end the connection (a malformed object is
        logged and skipped by the SDK itself). A line longer than the
        message limit is dropped too, and a request is answered with an
        error at once (else the agent would wait for its answer forever)."""
        try:
            while True:
                try:
                    line = await stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as ended:
                    line = ended.partial
                except asyncio.LimitOverrunError as over:
                    await self._overlong(stdout, await stdout.readexactly(over.consumed))
                    continue
                if not line:
                    break
                stripped = line.strip()
                if stripped.startswith(b"{"):
                    messages.feed_data(line if line.endswith(b"\n") else line + b"\n")
                elif stripped:
                    self.agent_fault("wrote a line that is not a JSON-RPC message; it was skipped")
        finally:
            messages.feed_eof()

    async def _overlong(self, stdout: asyncio.StreamReader, head: bytes) -> None:
        """Skip the rest of a line longer than :data:`STDIO_LIMIT` whose
        first bytes were ``head``; answer it when it was a request."""
        tail = b""
        while True:
            try:
                tail = (tail + await stdout.readuntil(b"\n"))[-_OVERLONG_KEEP:]
                break
            except asyncio.IncompleteReadError as ended:
                tail = (tail + ended.partial)[-_OVERLONG_KEEP:]
                break
            except asyncio.LimitOverrunError as over:
                tail = (tail + await stdout.readexactly(over.consumed))[-_OVERLONG_KEEP:]
        head = head[:_OVERLONG_KEEP]
        method = re.search(rb'"method"\s*:\s*"([^"\\]{1,100})"', head)
        name = method.group(1).decode("ascii", "replace") if method else "a message"
        found = _ID.search(head.split(b'"params"', 1)[0]) or _ID.search(tail)
        reason = f"{name} is longer than the {STDIO_LIMIT // (1024 * 1024)} MiB message limit; it was not read"
        self.agent_fault(f"sent {reason}")
        if found is None or method is None or self.process is None or self.process.stdin is None:
            return
        try:
            request_id = json.loads(found.group(1))
        except ValueError:
            return
        answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32600, "message": "Invalid request", "data": {"reason": reason}}}
        with contextlib.suppress(Exception):
            self.process.stdin.write((json.dumps(answer) + "\n").encode("utf-8"))

    def agent_fault(self, what: str) -> None:
        """The agent did something wrong that mevedel survived: one line for
        the user (once per kind of fault) and one in the agent's log."""
        self.log.write(f"[mevedel] {what}\n".encode("utf-8", "replace"))
        self._tail.append(f"[mevedel] {what}"[:300])
        if what not in self._shown:
            self._shown.add(what)
            _log.warning("agent %s %s (its log is %s)", self.spec.name, what, self.log_path)

    def sdk_said(self, record: logging.LogRecord) -> None:
        """A record of the ACP SDK about this agent's connection: whole (with
        its traceback) in the agent's log, one line for the user."""
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.log.write(f"[ACP SDK] {text}\n".encode("utf-8", "replace"))
        self.agent_fault(f"sent what the ACP SDK could not handle ({_said(record)})")

    async def _keep_stderr(self) -> None:
        # Read and logged by the chunk, not by the line: an agent writing
        # megabytes of short lines cost a log open and an event-loop turn
        # per line, seconds of CPU that at load stalled the turn.
        assert self.process is not None and self.process.stderr is not None
        self.log.write(f"--- {self.spec.name}: {' '.join(self.spec.command)}\n".encode())
        partial = b""
        while True:
            chunk = await self.process.stderr.read(STDERR_CHUNK)
            if not chunk:
                break
            self.log.write(chunk)
            lines = (partial + chunk).split(b"\n")
            # Only a line's head is kept (a line without end is not held whole).
            partial = lines.pop()[:_TAIL_LINE_BYTES]
            self._keep_tail(lines[-STDERR_TAIL:])
        self._keep_tail([partial])

    def _keep_tail(self, lines: Sequence[bytes]) -> None:
        for line in lines:
            text = line[:_TAIL_LINE_BYTES].decode("utf-8", "replace").strip()
            if text:
                self._tail.append(text[:300])

    async def stop(self, grace: float = 2.0) -> None:
        """End the connection and the process (its whole process group)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), grace)
        process = self.process
        if process is not None and process.returncode is None:
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), grace)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(process.wait(), grace)
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._stderr_task, grace)
