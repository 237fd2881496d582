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
import logging
import os
from collections.abc import Sequence
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
#: Bytes one line of the agent's output may take (images travel inline).
STDIO_LIMIT = 50 * 1024 * 1024


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
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._stderr_task: asyncio.Task | None = None
        self._stdout_task: asyncio.Task | None = None

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

    def stderr_tail(self, lines: int = STDERR_TAIL) -> str:
        return " | ".join(list(self._tail)[-lines:])

    # Life -----------------------------------------------------------------------

    async def start(self, client: Any, cwd: str | None, timeout: float) -> None:
        """Start the program and ``initialize`` it, or raise AgentError."""
        argv = list(self.spec.command)
        try:
            self.process = await asyncio.create_subprocess_exec(
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
        self.conn = acp.connect_to_agent(client, self.process.stdin, messages, use_unstable_protocol=True)
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
        assert self.conn is not None
        if resume is not None and (self.can_resume or self.can_load):
            try:
                if self.can_resume:
                    await self.until_gone(self.conn.resume_session(session_id=resume, cwd=cwd, mcp_servers=list(mcp_servers)), timeout, "session/resume")
                else:
                    await self.until_gone(self.conn.load_session(cwd=cwd, session_id=resume, mcp_servers=list(mcp_servers)), timeout, "session/load")
                self.native_session_id = resume
                return True
            except AgentError as error:
                if error.kind == NEEDS_LOGIN or not self.alive:
                    raise
                _log.info("agent %s could not continue session %s (%s); starting a new one", self.spec.name, resume, error.reason)
        response = await self.until_gone(self.conn.new_session(cwd=cwd, mcp_servers=list(mcp_servers)), timeout, "session/new")
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
            await self._reap()
            raise AgentError(FAILED, f"agent {self.spec.name!r}", f"{self.why_gone()} during {what}", f"its log is {self.log_path}") from None

    def _refusal(self, error: RequestError, what: str) -> AgentError:
        text = f"{error} {error.data or ''}".lower()
        if error.code == AUTH_REQUIRED or "auth" in text or "login" in text or "log in" in text:
            return AgentError(NEEDS_LOGIN, f"agent {self.spec.name!r}", f"needs a login ({error})", self.login_hint())
        details = error.data.get("details") if isinstance(error.data, dict) else None
        said = f"{error}" + (f" ({details})" if isinstance(details, str) and details else "")
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

    async def _reap(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.process.wait(), 0.5)

    async def _only_objects(self, stdout: asyncio.StreamReader, messages: asyncio.StreamReader) -> None:
        """Pass the agent's output on line by line, dropping lines that are
        not JSON objects: the SDK takes ``null`` for the end of the stream
        and fails its receive loop on an array, so one bad line from an
        agent would otherwise end the connection (a malformed object is
        logged and skipped by the SDK itself)."""
        try:
            while True:
                try:
                    line = await stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    self._tail.append("[mevedel] dropped an output line longer than the message limit")
                    continue
                if not line:
                    break
                stripped = line.strip()
                if stripped.startswith(b"{"):
                    messages.feed_data(line if line.endswith(b"\n") else line + b"\n")
                elif stripped:
                    _log.warning("agent %s wrote a line that is not a JSON-RPC message; skipped", self.spec.name)
        finally:
            messages.feed_eof()

    async def _keep_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab", buffering=0) as log:
            log.write(f"--- {self.spec.name}: {' '.join(self.spec.command)}\n".encode())
            while True:
                try:
                    line = await self.process.stderr.readline()
                except (ValueError, asyncio.LimitOverrunError):  # a line longer than the limit
                    continue
                if not line:
                    return
                log.write(line)
                text = line.decode("utf-8", "replace").strip()
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
