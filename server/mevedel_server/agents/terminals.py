"""The agent's shell (ACP ``terminal/*``): commands run inside the
workspace, on the machine that holds it, with their file changes
checkpointed.

A command runs as a process of its own (no shell unless the agent asks for
one: ``command`` is the program, ``args`` its arguments; a ``command`` with
no ``args`` that contains whitespace is a command line, run by ``/bin/sh
-c``). On a local workspace it is a subprocess in its own process group,
its working directory proven to be physically below the root; on an SSH
workspace it runs on the host through ``SshTarget.run_command`` (output
arrives when it ends there).

Around every command the owner's hooks run: ``before`` records what changed
since the owner last looked (so the command's own changes stand apart),
``after`` records the pre-turn state of everything the command created,
changed or deleted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from acp import RequestError

from ..targets import ControlProgram, LocalTarget, ProcessGroup, RemoteGroup, Target
from .execution_log import ExecutionLog
from .workspace_files import NOT_UNICODE, require_unicode, shown

_log = logging.getLogger(__name__)

#: Output kept per terminal when no cap is given (``terminalOutputMaxBytes``).
DEFAULT_OUTPUT_LIMIT = 1024 * 1024
#: The longest a command may run on an SSH host (it is killed then).
REMOTE_COMMAND_TIMEOUT = 3600.0


@dataclass
class Terminal:
    terminal_id: str
    limit: int
    #: The agent's ``outputByteLimit`` when it asked for more than the cap.
    asked: int | None = None
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    process: asyncio.subprocess.Process | None = None
    #: The command's whole output (bounded), kept when it ends.
    log: ExecutionLog | None = None
    #: Its id under the unsettled-mutation latch (from arming it on; the
    #: record of its process group is named by it).
    armed_id: str | None = None
    command: str = ""
    #: Its process group on an SSH host, announced once it exists there.
    remote_group: RemoteGroup | None = None

    @property
    def pgid(self) -> int | None:
        """Its process group (its own session), here or on the SSH host."""
        if self.process is not None:
            return self.process.pid
        return self.remote_group.pgid if self.remote_group is not None else None

    def add(self, data: bytes) -> None:
        if self.log is not None:
            self.log.add(data)
        self.output += data
        if len(self.output) > self.limit:
            cut = len(self.output) - self.limit
            # Never cut inside a UTF-8 sequence: skip continuation bytes.
            while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:
                cut += 1
            del self.output[:cut]
            self.truncated = True

    @property
    def text(self) -> str:
        text = self.output.decode("utf-8", "replace")
        if self.truncated and self.asked is not None:
            # The agent asked to keep more than it got: it is told why.
            return f"[mevedel: only the last {self.limit} bytes of output are kept, not the {self.asked} asked for]\n" + text
        return text


class CommandLatch(Protocol):
    """The session's unsettled-mutation latch around a command, local or
    on the SSH host: ``arm`` before it is launched (a failure refuses the
    command), ``launched`` once its group exists, ``stopped`` once it did
    not start or its group was killed."""

    async def arm(self, terminal: Terminal) -> None: ...
    async def launched(self, terminal: Terminal) -> None: ...
    async def stopped(self, terminal: Terminal) -> None: ...


def _require_word(word: object, field: str) -> None:
    """Refuse an argument, working directory or environment entry no
    process can be started with, naming it: the same rule on every target."""
    if not isinstance(word, str):
        raise RequestError.invalid_params({field: shown(str(word)), "reason": "is not text"})
    if "\x00" in word:
        raise RequestError.invalid_params({field: shown(word), "reason": "holds a NUL character, which no program can be given"})
    if not require_unicode(word):
        raise RequestError.invalid_params({field: shown(word), "reason": NOT_UNICODE})


def _require_env(env: dict[str, str]) -> None:
    for name, value in env.items():
        _require_word(name, "env")
        _require_word(value, "env")
        if not name or "=" in name:
            raise RequestError.invalid_params({"env": shown(name), "reason": "is not an environment variable name (empty, or holds '=')"})


def local_root_of(target: Target) -> str | None:
    """The directory of a target on this machine (through wrappers), or None."""
    for _ in range(8):
        if isinstance(target, LocalTarget):
            return str(target.root)
        inner = getattr(target, "inner", None)
        if inner is None:
            return None
        target = inner
    return None


def _remote(target: Target):
    for _ in range(8):
        if callable(getattr(target, "run_command", None)):
            return target
        target = getattr(target, "inner", None)
        if target is None:
            return None
    return None


class Terminals:
    def __init__(
        self,
        target: Target,
        root: str,
        *,
        before: Callable[[], Awaitable[None]],
        after: Callable[[], Awaitable[None]],
        keep: Callable[[Terminal], Awaitable[None]] | None = None,
        latch: CommandLatch | None = None,
        base: str = "",
    ) -> None:
        self.target = target
        self.root = posixpath.normpath(root)
        #: The session's working directory, workspace-relative ("" for the
        #: root; a Worktree Fork's checkout): a command's default cwd, and
        #: the directory every cwd must lie in.
        self.base = base.strip("/")
        self.top = posixpath.join(self.root, self.base) if self.base else self.root
        self._before = before
        self._after = after
        #: Saves a command's execution log when it ends.
        self._keep = keep
        self._latch = latch
        self._terminals: dict[str, Terminal] = {}
        self._count = 0
        self._local_root = local_root_of(target)
        self._remote = None if self._local_root is not None else _remote(target)

    @property
    def running(self) -> int:
        return sum(1 for t in self._terminals.values() if not t.done.is_set())

    def _argv(self, command: str, args: Sequence[str] | None) -> list[str]:
        if not isinstance(command, str) or not command.strip():
            raise RequestError.invalid_params({"command": shown(str(command)), "reason": "is not a command"})
        words = [command, *(args or [])]
        for word in words:
            _require_word(word, "command" if word is command else "args")
        if not args and any(c.isspace() for c in command.strip()):
            return ["/bin/sh", "-c", command]
        return words

    def _cwd(self, cwd: str | None) -> str:
        """The workspace-relative working directory ('.' for the root)."""
        if cwd is None:
            return self.base or "."
        _require_word(cwd, "cwd")
        full = posixpath.normpath(cwd if posixpath.isabs(cwd) else posixpath.join(self.top, cwd))
        if full == self.top:
            return self.base or "."
        if not full.startswith(self.top.rstrip("/") + "/"):
            where = f"the session's working directory {self.top}" if self.base else f"the workspace {self.root}"
            raise RequestError.invalid_params({"cwd": cwd, "reason": f"is outside {where}"})
        inside = full[len(self.top.rstrip("/")) + 1 :]
        return f"{self.base}/{inside}" if self.base else inside

    async def create(
        self, command: str, args: Sequence[str] | None, env: dict[str, str], cwd: str | None, limit: int | None,
        *, cap: int = DEFAULT_OUTPUT_LIMIT, log: ExecutionLog | None = None,
    ) -> Terminal:
        """Start a command; the terminal (registered once it runs). Output
        kept: the agent's ``limit``, at most ``cap`` bytes (the setting);
        and all of it, within its own bound, in ``log``."""
        argv = self._argv(command, args)
        _require_env(env)
        relative = self._cwd(cwd)
        if self._local_root is None and self._remote is None:
            raise RequestError.internal_error({"reason": "this workspace cannot run commands"})
        directory = self._local_directory(relative, cwd) if self._local_root is not None else None
        self._count += 1
        asked = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
        terminal = Terminal(f"term-{self._count}", min(asked or cap, cap), asked if asked is not None and asked > cap else None, log=log)
        terminal.command = " ".join(argv)
        await self._before()
        if self._latch is not None:
            try:
                await self._latch.arm(terminal)
            except Exception:
                await self._after()
                raise
        # Registered only once it runs: a terminal that never started must
        # not count as running (the turn would wait for it forever).
        if directory is not None:
            try:
                terminal.process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=directory,
                    env={**os.environ, **env},
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except (OSError, ValueError) as error:  # ValueError: what the checks above missed
                await self._after()
                if self._latch is not None:
                    await self._latch.stopped(terminal)
                reason = getattr(error, "strerror", None) or str(error)
                raise RequestError.invalid_params({"command": shown(command), "reason": reason}) from None
            if self._latch is not None:
                await self._latch.launched(terminal)
            self._terminals[terminal.terminal_id] = terminal
            terminal.task = asyncio.create_task(self._run_local(terminal))
        else:
            words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else argv
            self._terminals[terminal.terminal_id] = terminal
            terminal.task = asyncio.create_task(self._run_remote(terminal, words, relative))
        return terminal

    def _local_directory(self, relative: str, authored: str | None) -> str:
        local = self._local_root or self.root
        # Proven physically below the working directory (which must itself
        # be where the workspace says: a link there leads elsewhere).
        root = os.path.realpath(os.path.join(local, self.base) if self.base else local)
        if self.base and root != os.path.join(os.path.realpath(local), self.base):
            raise RequestError.invalid_params({"cwd": authored or self.base, "reason": "the working directory is a symbolic link, which is not followed"})
        directory = os.path.realpath(os.path.join(os.path.realpath(local), relative))
        if directory != root and not directory.startswith(root.rstrip("/") + "/"):
            where = "the session's working directory" if self.base else "the workspace"
            raise RequestError.invalid_params({"cwd": authored, "reason": f"leads outside {where} (a symbolic link)"})
        if not os.path.isdir(directory):
            raise RequestError.invalid_params({"cwd": authored, "reason": "is not a directory"})
        return directory

    async def _run_local(self, terminal: Terminal) -> None:
        process = terminal.process
        assert process is not None and process.stdout is not None
        try:
            while chunk := await process.stdout.read(65536):
                terminal.add(chunk)
            code = await process.wait()
            if code < 0:
                terminal.signal = signal.Signals(-code).name
            else:
                terminal.exit_code = code
        finally:
            await self._settled(terminal)

    async def _run_remote(self, terminal: Terminal, argv: list[str], cwd: str) -> None:
        async def started(group: RemoteGroup) -> None:
            terminal.remote_group = group
            if self._latch is not None:
                await self._latch.launched(terminal)

        try:
            outcome = await self._remote.run_command(
                argv, cwd, timeout=REMOTE_COMMAND_TIMEOUT, started=started if self._latch is not None else None
            )
            terminal.add(outcome.stdout + outcome.stderr)
            terminal.exit_code = outcome.exit_status
        except asyncio.CancelledError:
            terminal.signal = "SIGKILL"
            raise
        except Exception as error:  # the host went away, or refused the cwd
            # Say exactly what is known: a connection lost before the
            # command started means it did not run; lost while it ran, its
            # effects are unknown (the files are looked at after it anyway).
            if getattr(error, "outcome_unknown", False):
                said = f"the connection was lost while the command ran, so whether and how far it ran is unknown: {error}"
            else:
                said = f"the command did not run: {error}"
            _log.warning("terminal %s: %s", terminal.terminal_id, said)
            terminal.add(f"\n[mevedel: {said}]\n".encode())
            terminal.exit_code = 127
        finally:
            await self._settled(terminal)
            if terminal.remote_group is None and self._latch is not None:
                # It never got a group (it did not start): nothing to prove.
                await self._latch.stopped(terminal)

    async def _settled(self, terminal: Terminal) -> None:
        try:
            await asyncio.shield(self._after())
            if terminal.log is not None and self._keep is not None:
                # Saved before the exit is reported: an agent told the
                # command ended can read its log at once.
                await asyncio.shield(self._keep(terminal))
        finally:
            terminal.done.set()

    def _get(self, terminal_id: str) -> Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "reason": "no such terminal"})
        return terminal

    def output(self, terminal_id: str) -> Terminal:
        return self._get(terminal_id)

    async def wait(self, terminal_id: str) -> Terminal:
        terminal = self._get(terminal_id)
        await terminal.done.wait()
        return terminal

    async def kill(self, terminal_id: str) -> None:
        terminal = self._get(terminal_id)
        await self._stop(terminal)

    async def release(self, terminal_id: str) -> None:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            return
        await self._stop(terminal)
        self._terminals.pop(terminal_id, None)

    async def _stop(self, terminal: Terminal) -> None:
        """Kill what the command started. Its whole process group (its own
        session: ``start_new_session``) is killed even after the command
        itself exited, so a child it left in the background (``cmd &``,
        ``nohup``) does not outlive the terminal's release or the turn. A
        process that made a session of its own (``setsid``, a daemon's
        double fork) has left the group and cannot be found this way: that
        is not contained (docs/agents.md)."""
        if terminal.process is not None:
            try:
                os.killpg(terminal.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif terminal.task is not None and not terminal.done.is_set():
            terminal.task.cancel()
        await terminal.done.wait()
        killed = terminal.remote_group is None or await self._kill_remote_group(terminal.remote_group)
        if terminal.pgid is not None and self._latch is not None and killed:
            await self._latch.stopped(terminal)

    async def _kill_remote_group(self, group: RemoteGroup) -> bool:
        """What a remote command left running in its group is killed at
        release, as a local one's is (on the host, by the executor, only
        while the host's boot is the one the group was announced in); a
        host that cannot be reached leaves the latch's record to prove."""
        try:
            op = ProcessGroup(pgid=group.pgid, kill=True, boot_id=group.boot_id)
            return (await self.target.run(ControlProgram([op])))[0].ok
        except Exception as error:
            _log.warning("the process group %s on the SSH host was not killed: %s", group.pgid, error)
            return False

    async def close_all(self) -> None:
        for terminal_id in list(self._terminals):
            await self.release(terminal_id)
