"""One session's agent as it runs: :class:`RunningAgent` (its process,
native session, working tree, file access, terminals and their checkpoints)
and :class:`AgentTurn` (the turn in flight: its recorder, cancel state,
permission questions, the mail it carries). The engine makes and drives
them; the ACP callbacks (:mod:`.acp_callbacks`) and delegation route to
them. The engine is reached through its public methods only."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from acp import RequestError

from .process import AgentProcess
from .recorder import TurnRecorder
from .terminals import Terminal, Terminals

if TYPE_CHECKING:
    from ..artifacts import Mail
    from ..store import SaveResult
    from .config import AgentSpec
    from .engine import AgentEngine
    from .session_options import Offered

_log = logging.getLogger(__name__)


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64] or "agent"


@dataclass
class AgentTurn:
    session_id: str
    agent: str
    turn: int
    turn_id: str
    recorder: TurnRecorder
    cancelled: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    permission_tasks: set[asyncio.Task] = field(default_factory=set)
    #: The comments this turn's prompt carries (delivered if it completes).
    mail: list[Mail] = field(default_factory=list)
    #: Why the user aborted the turn (``mevedel/turn/abort``), which its
    #: settlement records instead of "cancelled by the user".
    aborted: str | None = None
    #: Its settlement's save, once made (an abort answers with it).
    saved: SaveResult | None = None
    #: Set once the turn has settled (whatever its outcome).
    settled: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class AdmittedPrompt:
    """A prompt from its admission to its end; until its turn begins, its
    agent may still be starting."""

    #: Awaited with the turn's number once the turn is published.
    on_begun: Callable[[int], Awaitable[None]] | None = None
    #: The agent chosen for it, once chosen.
    agent: str | None = None
    #: Why the user aborted or cancelled it (``mevedel/turn/abort``,
    #: ``mevedel/turn/cancel``) before its turn began.
    aborted: str | None = None
    #: The agent process started for it (an abort ends it should its start
    #: outlast the cancel timeout).
    starting: RunningAgent | None = None
    #: Its turn, once begun.
    turn: AgentTurn | None = None
    #: Set once the prompt has ended (whatever it came to).
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: Once stopped: ends its agent should the start outlast the cancel timeout.
    stopping: asyncio.Future | None = None


class RunningAgent:
    """One session's agent: its process, its native session, its tools."""

    def __init__(self, engine: AgentEngine, session_id: str, spec: AgentSpec) -> None:
        self.engine = engine
        self.session_id = session_id
        self.spec = spec
        self.process = AgentProcess(spec, engine.log_dir / f"agent-{safe_name(spec.name)}.log")
        self.turn: AgentTurn | None = None
        #: What the agent offers for its session now (modes, config options).
        self.offered: Offered | None = None
        #: This agent's token at the tool host (None: no tool server).
        self.tool_token: str | None = None
        #: Where the agent works (a Worktree Fork: its checkout), and the
        #: file access and file-state record of that tree.
        self.directory = engine.trees.directory(engine.working_directory(session_id))
        self.files = engine.trees.files(self.directory.relative)
        self.file_state = engine.trees.record(self.directory.relative)
        self.terminals = Terminals(
            engine.service.target, engine.root, base=self.directory.relative, before=self._before_command, after=self._after_command, keep=self._keep_log,
            latch=_Latch(self),
        )

    # Shell checkpointing --------------------------------------------------------

    async def _before_command(self) -> None:
        if self.turn is None:
            return
        # What changed since the last look is the turn's doing (a command
        # still running, or the agent unasked): recorded, not dropped. (The
        # new terminal already counts as running here, so a refresh that
        # dropped it never ran anyway.)
        await self.engine.capture_changes(self.session_id)
        await self.engine.learn_authored(self.session_id)

    async def _after_command(self) -> None:
        if self.turn is not None:
            await self.engine.capture_changes(self.session_id)
            await self.engine.learn_authored(self.session_id)

    async def _keep_log(self, terminal: Terminal) -> None:
        """The command's output as ``artifact://executions/NAME.log``."""
        log = terminal.log
        assert log is not None
        try:
            saved = await log.save(self.engine.service.target, self.session_id)
        except Exception as error:  # the command's answer to the agent must not depend on it
            _log.warning("session %s: keeping the output of %s failed: %s", self.session_id, terminal.terminal_id, error)
            saved = None
        if saved is None:
            _log.warning("session %s: the output of %s could not be kept as %s", self.session_id, terminal.terminal_id, log.address)
            terminal.log = None  # the agent is not pointed at a log that is not there


class _Latch:
    """The session's unsettled-mutation latch around this agent's
    commands, local or on the SSH host (:mod:`..store.service.mutation_latch`)."""

    def __init__(self, running: RunningAgent) -> None:
        self.running = running

    def _session(self):
        service = self.running.engine.service
        session = service.session(self.running.session_id) if service.is_open(self.running.session_id) else None
        if session is None or session.lease is None or session.lease.lost or session.read_only is not None:
            return None  # nothing is saved yet, or the session is not this client's: no latch to carry it
        return session

    async def arm(self, terminal: Terminal) -> None:
        session = self._session()
        if session is None:
            return
        try:
            terminal.armed_id = await session.latch.arm(session.lease)
        except Exception as error:
            reason = getattr(error, "reason", None) or str(error)
            raise RequestError.internal_error({"reason": f"the session could not record that a command runs ({reason}); nothing was started"}) from None

    async def launched(self, terminal: Terminal) -> None:
        session = self._session()
        if session is None or terminal.pgid is None:
            return
        turn = self.running.turn
        remote = terminal.remote_group
        try:
            terminal.armed_id = await session.latch.launched(
                session.lease, terminal.pgid, terminal.command, turn.turn if turn else None, session.time.now(),
                machine=None if remote is None else (remote.machine_id, remote.boot_id),
                runs_on=None if remote is None else getattr(self.running.engine.service.target, "host", None) or "the SSH host",
                armed_id=terminal.armed_id,
            )
        except Exception as error:  # the latch stays set: unprovable, the next owner is told
            _log.warning("session %s: the process group of %s is not recorded: %s", self.running.session_id, terminal.terminal_id, error)

    async def stopped(self, terminal: Terminal) -> None:
        session = self._session()
        if session is None or terminal.armed_id is None:
            return  # never armed, or settled already (a kill, then the release)
        armed_id, terminal.armed_id = terminal.armed_id, None
        try:
            await session.latch.settled(session.lease, armed_id)
        except Exception as error:  # the latch stays set; a later check proves the group gone
            _log.warning("session %s: settling %s's latch failed: %s", self.running.session_id, terminal.terminal_id, error)
