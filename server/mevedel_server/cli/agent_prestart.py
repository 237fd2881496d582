"""``mevedel prompt`` starts its agent before its own heavy imports.

An ACP agent takes as long to start as this process takes to import the
agent engine (both load the ACP SDK, and the engine the session store and
the tool server besides). Started one after the other they made a person
wait for both; so the prompt command starts the agent it will most likely
use -- ``--agent``, else ``defaultAgent``, else the only one configured, as
:meth:`AgentConfig.choose` picks without a session -- first, with exactly
the command, environment, working directory and process group the engine
would give it, and :func:`spawn` (installed as the engine's
``agents.process.spawn``) hands it over when the engine starts that very
program. Nothing else is done with it: the engine speaks to it as to one
it started itself.

When the engine starts anything else (the session remembers another
agent), the early one is never spoken to: it is ended when the command
ends, as an agent whose stdin closes. A program that cannot be started is
left to the engine, which reports it the usual way.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any

_early: _Early | None = None


class _Early:
    def __init__(self, popen: subprocess.Popen, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        self.popen = popen
        self.argv = argv
        self.env = env
        self.cwd = cwd


def prestart(command: Sequence[str], env: Mapping[str, str], cwd: str | None) -> None:
    """Start ``command`` now, as ``AgentProcess.start`` would."""
    global _early
    argv = list(command)
    environment = {**os.environ, **env}
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            cwd=cwd,
            start_new_session=True,
        )
    except (OSError, ValueError):
        return  # the engine starts it again and says what is wrong
    _early = _Early(popen, argv, environment, cwd)
    atexit.register(_discard)


async def spawn(*argv: str, env: Mapping[str, str] | None = None, cwd: str | None = None, limit: int = 2**16, **options: Any):
    """``asyncio.create_subprocess_exec``, or the agent started early when
    this is the same program started the same way."""
    global _early
    early = _early
    if early is not None and list(argv) == early.argv and dict(env or os.environ) == early.env and cwd == early.cwd \
            and options.get("start_new_session") and early.popen.poll() is None:
        _early = None
        return await _Adopted.adopt(early.popen, limit)
    return await asyncio.create_subprocess_exec(*argv, env=env, cwd=cwd, limit=limit, **options)


def _discard() -> None:
    """End an early agent nobody used (its stdin closes; then a kill)."""
    global _early
    early, _early = _early, None
    if early is None:
        return
    with contextlib.suppress(OSError):
        early.popen.stdin.close()  # type: ignore[union-attr]
    try:
        early.popen.wait(2)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(early.popen.pid, 9)
        early.popen.wait()


class _Adopted:
    """A started ``Popen`` as ``asyncio.subprocess.Process``: stream
    reader and writer on its pipes, ``wait`` and ``returncode`` from a
    thread that waits for it (as asyncio's own child watcher does)."""

    def __init__(self, popen: subprocess.Popen, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()

        def wait() -> None:
            code = popen.wait()
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(self._ended, code)

        threading.Thread(target=wait, name=f"agent-{popen.pid}-waiter", daemon=True).start()

    def _ended(self, code: int) -> None:
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    @classmethod
    async def adopt(cls, popen: subprocess.Popen, limit: int) -> _Adopted:
        loop = asyncio.get_running_loop()
        readers = []
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(limit=limit, loop=loop)
            await loop.connect_read_pipe(lambda reader=reader: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
            readers.append(reader)
        transport, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(loop=loop), popen.stdin)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(popen, writer, readers[0], readers[1])

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, signal: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


def prestart_for(arguments: Any, config: Any) -> None:
    """Start early the agent a prompt with these arguments most likely
    gets, in the workspace the engine will start it in; then hand it over
    (installs :func:`spawn` as the engine's)."""
    from ..agents import AgentError
    from .session_client import CommandError, workspace_root

    try:
        spec = config.choose(arguments.agent)
        local = workspace_root(arguments)
    except (AgentError, CommandError):
        return  # the engine refuses it, as it would have
    prestart(spec.command, spec.env, str(local) if local is not None else None)
    from ..agents import process  # the ACP SDK: imported while the agent starts

    process.spawn = spawn
