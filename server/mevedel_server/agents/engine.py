"""The agent engine: one prompt is one turn, the agent's work recorded as
it happens.

:class:`AgentEngine` serves one workspace's :class:`SessionService`. A
prompt starts the session's agent process when none runs (one per open
writable session), continues the agent's native conversation when this
installation on this machine can (``session/resume`` or ``session/load``),
or starts a new one seeded with a transcript excerpt, then begins a turn,
publishes the in-flight state, and sends the ACP prompt. While the agent
works, its ``session/update`` stream becomes the turn's records
(:mod:`.recorder`) and the owner's live view (:mod:`.live`); its file
reads and writes (:mod:`.workspace_files`) and shell commands
(:mod:`.terminals`) run through the workspace's target, every change
checkpointed. The turn settles with the agent's stop reason, or as
interrupted (cancel) or errored (the agent failed), keeping what arrived.

The engine knows nothing of LSP: a front end (the LSP server, the CLI)
passes an :class:`EngineFront` that shows live updates and asks the user
the agent's permission questions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import mimetypes
import os
import posixpath
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from acp import RequestError, schema

from ..artifacts import (
    AuthoredFacts,
    Mail,
    learn_shell_writes,
    mail_text,
    mark_delivered,
    pending_mail,
    session_artifacts,
)
from ..store import (
    ABORT_REASON,
    EngineRef,
    EngineState,
    Outcome,
    SessionService,
    is_refusal,
)
from ..targets import (
    ControlProgram,
    Entry,
    Operation,
    OpResult,
    Read,
    Status,
    TargetError,
)
from ..tool_server import ToolHost
from .acp_callbacks import AcpCallbacks, PermissionQuestion
from .checkpoint_exclude import CheckpointExclude, is_editor_file
from .commit_rides import keep_on_settlement, not_riding, walk_riding
from .config import AgentConfig, AgentSpec
from .errors import ATTACHMENT_REFUSED, FAILED, PROMPT_ABORTED, AgentError
from .excerpt import reconciliation_notice, transcript_excerpt
from .file_state import FileStateRecord, Passengers
from .fork_note import fork_files_note
from .live import LiveFeed, TurnUpdate
from .process import AgentProcess
from .recorder import TurnRecorder
from .running_agent import AdmittedPrompt, AgentTurn, RunningAgent, safe_name
from .session_options import SessionOptions
from .tool_context import AgentToolContext
from .working_directory import WorkingTrees

if TYPE_CHECKING:
    from ..resources import ResolverContext
    from ..store import SaveResult

_log = logging.getLogger(__name__)

IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
#: An attachment larger than this is refused before dispatch.
MAX_ATTACHMENT_BYTES = 4 * 1024 * 1024
#: Why a turn (or a prompt whose agent was starting) the user cancelled
#: (``mevedel/turn/cancel``, Ctrl-C) was interrupted.
CANCEL_REASON = "cancelled by the user"


@dataclass(frozen=True)
class Aborted:
    """What :meth:`AgentEngine.abort` stopped: the turn, settled (``saved``
    None: its settlement did not go through), or (``turn`` None) a prompt
    whose turn had not begun: its agent still starting, it never reached it."""

    turn: int | None
    saved: SaveResult | None = None


@dataclass(frozen=True)
class PromptOutcome:
    session_id: str
    turn: int
    turn_id: str
    agent: str
    outcome: str
    stop_reason: str | None
    error: AgentError | None = None


class EngineFront(Protocol):
    def turn_update(self, update: TurnUpdate) -> None: ...

    async def ask_permission(self, question: PermissionQuestion, timeout: float) -> str | None:
        """The chosen option id, or None (declined, no answer in time)."""
        ...


@dataclass(frozen=True)
class Attachment:
    uri: str
    mime_type: str
    data: bytes


#: The name of mevedel's own tool server in the agent's ``mcpServers``.
TOOL_SERVER_NAME = "mevedel"


def mevedel_command() -> tuple[str, list[str]]:
    """How an agent starts ``mevedel`` of this very installation: the
    ``mevedel`` program beside this interpreter, else the interpreter
    running the CLI module."""
    beside = Path(sys.executable).parent / "mevedel"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside), []
    return sys.executable, ["-m", "mevedel_server.cli"]


class AgentEngine:
    def __init__(
        self,
        service: SessionService,
        *,
        root: str,
        config: Callable[[], AgentConfig],
        front: EngineFront,
        log_dir: Path,
        open_document: Callable[[str], str | None] | None = None,
        read_address: Callable[[str], Awaitable[str]] | None = None,
        is_address: Callable[[str], bool] | None = None,
        mcp_servers: Callable[[str], Sequence[Any]] | None = None,
        tool_host: ToolHost | None = None,
        tool_context: Callable[[str], ResolverContext] | None = None,
        machine: str | None = None,
        local_cwd: str | None = None,
    ) -> None:
        self.service = service
        self.root = posixpath.normpath(root)
        self.config = config
        self.front = front
        self.log_dir = log_dir
        self.machine = machine or socket.gethostname() or "localhost"
        #: Each working directory's file access and file-state record (a
        #: Worktree Fork works in its checkout); the root's are these two.
        self.trees = WorkingTrees(service.target, self.root, max_file_bytes=service.turns.max_snapshot_bytes, open_document=open_document)
        self.files = self.trees.files("")
        self.file_state = self.trees.record("")
        #: The artifact store's authored files, which the file record never walks.
        self.authored = AuthoredFacts(service.target)
        self.trees.riders.append(self.authored)  # looked at when a file record walks: one program
        self._read_address = read_address
        self._is_address = is_address or (lambda text: "://" in text)
        self.mcp_servers = mcp_servers or (lambda session_id: [])
        #: The tool server every agent gets (``mevedel mcp`` in relay mode):
        #: the host this process runs and the front end's resolver context
        #: for a session.
        self._tool_host = tool_host if tool_context is not None else None
        self._tool_context = tool_context
        #: Where the agent process itself runs (its cwd): the workspace when
        #: it is on this machine.
        self.local_cwd = local_cwd
        self._running: dict[str, RunningAgent] = {}
        #: The sessions' modes and config options (:mod:`.session_options`).
        self.options = SessionOptions(self)
        #: Each session's prompt between its admission and its end (the
        #: agent may still be starting: no turn yet).
        self._admitted: dict[str, AdmittedPrompt] = {}
        #: Called with the session id once a prompt has ended, the session
        #: idle again (the prompt queue sends the next entry then).
        self.after_turn: list[Callable[[str], None]] = []
        #: Called with the session id as a prompt's turn starts, and just
        #: before its settlement is published (a front end has that
        #: publication carry what ends with the turn: the CLI's runner record).
        self.before_turn: list[Callable[[str], None]] = []
        self.before_settle: list[Callable[[str], None]] = []
        #: The session's queued prompts and steering (:mod:`.prompt_queue`).
        from .prompt_queue import PromptQueue

        self.queue = PromptQueue(self)
        from .delegation.runner import SubAgents  # it builds on this module's classes

        #: The sessions' retained sub-agents (the ``Agent`` tool).
        self.delegation = SubAgents(self)

    # Facts ------------------------------------------------------------------------

    def running_agent(self, session_id: str) -> RunningAgent | None:
        """The session's agent process here, if one runs."""
        return self._running.get(session_id)

    def running_turn(self, session_id: str) -> bool:
        running = self._running.get(session_id)
        return session_id in self._admitted or (running is not None and running.turn is not None)

    def working_directory(self, session_id: str) -> str:
        """The session's working directory, workspace-relative ("" for the
        root): a running agent's, else the session's own."""
        running = self._running.get(session_id)
        if running is not None:
            return running.directory.relative
        return self.service.session(session_id).conversation.sidecar.working_directory

    def log_path(self, agent: str) -> Path:
        return self.log_dir / f"agent-{safe_name(agent)}.log"

    def is_running(self, running: RunningAgent) -> bool:
        """Whether ``running`` is still its session's agent here."""
        return self._running.get(running.session_id) is running or self.delegation.owns(running)

    async def apply_title(self, session_id: str, title: str) -> None:
        """The agent's title as the session's display name (the spec's
        naming rules; an explicit name wins). Never fails the turn."""
        try:
            await self.service.sessions.apply_title(session_id, title)
        except Exception as error:
            _log.info("session %s: the agent's title was not recorded: %s", session_id, getattr(error, "reason", error))

    # Checkpointing writes -------------------------------------------------------------

    def record_pre_state(
        self, session_id: str, relative: str, before: Entry | None, *, gap: str | None = None, directory: bool = False
    ) -> None:
        """Record a path's state before the turn's first change to it (the
        first record of a path in a turn wins): the service's one
        checkpoint seam, which all three writers (``fs/write_text_file``,
        ApplyPatch, shell commands) reach through here."""
        directory = directory or (before is not None and before.kind == Entry.DIRECTORY)
        if is_editor_file(relative) or CheckpointExclude.of(self.config().checkpoint_exclude)(relative, directory):
            return
        self.service.turns.record_pre_state(session_id, relative, before, gap=gap)

    async def record_before_writes(self, session_id: str, paths: Sequence[str]) -> None:
        """Record the current state of files someone is about to write for
        the agent (the tool server's ApplyPatch) into the open turn's
        checkpoint, as ``fs/write_text_file`` does before it writes (and
        the directories above them it will make, as absent)."""
        where = self.trees.files(self.working_directory(session_id))
        pending: list[str] = []
        for path in paths:
            if path not in pending and not self.service.turns.captured(session_id, where.relative(path)):
                pending.append(path)
        files = {where.relative(path) for path in pending}
        first = [op for relative in sorted(files) for op in self.written_ops(session_id, relative)]
        for relative, before in await where.read_before(pending, first=first):
            if not self.service.turns.captured(session_id, relative):
                # Not one of the files: a directory above them it will make.
                self.record_pre_state(session_id, relative, before, directory=relative not in files)

    def remember_after_writes(self, session_id: str, paths: Sequence[str]) -> None:
        """The tool server's ApplyPatch wrote ``paths`` (as the agent names
        them, like :meth:`record_before_writes`): remembered as
        ``fs/write_text_file``'s writes are (:meth:`remember_written`). Not
        before the write: a sync in between would find a new file absent
        and forget it."""
        where = self.trees.files(self.working_directory(session_id))
        for path in paths:
            self.remember_written(session_id, where.relative(path))

    # Prompt -----------------------------------------------------------------------

    async def prompt(self, session_id: str, text: str, *, on_begun: Callable[[int], Awaitable[None]] | None = None,
                     **options: Any) -> PromptOutcome:
        """One turn at a time per session: a prompt while one runs (or its
        agent starts) is refused; the front ends queue it instead
        (:mod:`.prompt_queue`). ``on_begun`` is awaited once the turn holding
        the prompt is published (before the agent gets it)."""
        if self.running_turn(session_id):
            raise AgentError(FAILED, f"session {session_id}", "already has an agent turn running",
                             "queue the prompt (it is sent when the turn settles), steer (cancel the turn and send it now), or wait")
        admitted = self._admitted[session_id] = AdmittedPrompt(on_begun)
        for hook in list(self.before_turn):
            hook(session_id)
        try:
            return await self._prompt(session_id, text, admitted, **options)
        finally:
            del self._admitted[session_id]
            admitted.ended.set()
            for hook in list(self.after_turn):
                hook(session_id)

    async def _prompt(self, session_id: str, text: str, admitted: AdmittedPrompt, *, agent: str | None = None,
                      attachments: Sequence[str] = ()) -> PromptOutcome:
        if not isinstance(text, str) or not text.strip():
            raise AgentError(FAILED, "the prompt", "is blank; write what the agent should do")
        self.service.session(session_id).require_writable()
        # Told before the agent starts, let alone mutates anything.
        await self.service.turns.require_commands_settled(session_id, "prompt it")
        config = self.config()
        recorded = self.service.agents.engine(session_id)
        spec = config.choose(agent, recorded.agent if recorded else None)
        admitted.agent = spec.name
        self.front.turn_update(TurnUpdate(session_id, spec.name, "starting"))
        try:
            running, continued = await self._ready(session_id, spec, recorded, config, admitted)
            blocks = await self._attachments(running.process, attachments)
            if admitted.aborted is not None:
                raise _prompt_aborted(spec, admitted.aborted)
        except Exception as error:
            if admitted.aborted is None:
                if isinstance(error, AgentError):
                    self.front.turn_update(TurnUpdate(session_id, spec.name, "settled", error=error))
                raise
            # Aborted while its agent started (an agent that outlasted the
            # cancel timeout was ended, failing its start however far it
            # got): the user is told it was aborted, and its agent, if it
            # started, stays for the next prompt.
            if not isinstance(error, AgentError):
                _log.info("session %s: the aborted prompt's agent start ended: %s", session_id, error)
            aborted = error if isinstance(error, AgentError) and error.kind == PROMPT_ABORTED else _prompt_aborted(spec, admitted.aborted)
            self.front.turn_update(TurnUpdate(session_id, spec.name, "settled", outcome=Outcome.INTERRUPTED.value,
                                              error=aborted, reason=admitted.aborted))
            raise aborted from None
        started = await self.service.turns.begin_turn(session_id, text, agent=spec.name)
        reconcile = started.reminder or (recorded is not None and recorded.state is EngineState.UNCERTAIN)
        excerpt = notice = None
        if reconcile or not continued:
            records = self.service.turns.transcript_records(session_id)
            before = records[: _last_turn_begin(records)]
            if reconcile:
                notice = reconciliation_notice(before, self.service.turns.turn_paths(session_id, _previous_turn_id(before)))
            if not continued:
                excerpt = transcript_excerpt(before, files=self._files_note(session_id))
        feed = LiveFeed(lambda events: self.front.turn_update(
            TurnUpdate(session_id, spec.name, "running", started.turn, started.turn_id, tuple(events))))
        recorder = TurnRecorder(lambda item: self.service.turns.append_now(session_id, item), feed)
        turn = admitted.turn = AgentTurn(session_id, spec.name, started.turn, started.turn_id, recorder)
        if admitted.aborted is not None:
            # Aborted as the turn began: it settles as aborted, never sent.
            turn.aborted, turn.cancelled = admitted.aborted, True
        running.turn = turn
        try:
            return await self._run_turn(running, turn, text, blocks, excerpt, notice, config)
        finally:
            running.turn = None
            turn.settled.set()

    async def _run_turn(self, running: RunningAgent, turn: AgentTurn, text: str, blocks: list, excerpt: str | None,
                        notice: str | None, config: AgentConfig) -> PromptOutcome:
        session_id = turn.session_id
        self.front.turn_update(TurnUpdate(session_id, turn.agent, "running", turn.turn, turn.turn_id))
        try:
            self._set_engine(session_id, running, EngineState.UNCERTAIN)
            # The in-flight state, published before dispatch, and the
            # baseline a shell command's changes are found against (its
            # walk in the publication's program).
            await walk_riding(running.file_state, self.service.session(session_id),
                              lambda: self.service.turns.checkpoint(session_id))
            # That baseline, held until the settlement committed: should this
            # process die mid-turn, the next owner finds what the turn
            # changed against it (turn_recovery.py).
            marker = running.file_state.held_marker(session_id, turn.turn_id)
            await running.file_state.hold(marker)
            await self._forget_settled_baselines(running.file_state, marker)
            await self.learn_authored(None)
            turn.mail = await self._mail(session_id)
        except Exception as failure:
            # Nothing was sent: the turn ends here, and says why, rather
            # than dispatch work whose changes could not be checkpointed.
            _log.exception("session %s: preparing the turn failed", session_id)
            why = AgentError(FAILED, f"session {session_id}", f"the turn could not be prepared: {getattr(failure, 'reason', failure)}")
            return await self._settle(running, turn, None, why)
        await self._begun(session_id, turn.turn)
        if turn.cancelled:
            # Cancelled or aborted before its prompt went: the agent is not
            # handed work the user already stopped.
            return await self._settle(running, turn, None, None)
        prompt: list = []
        if notice:
            prompt.append(schema.TextContentBlock(type="text", text=notice))
        if excerpt:
            prompt.append(schema.TextContentBlock(type="text", text=excerpt))
        if turn.mail:
            prompt.append(schema.TextContentBlock(type="text", text=mail_text(turn.mail)))
        prompt.append(schema.TextContentBlock(type="text", text=text))
        prompt.extend(blocks)
        return await self.prompt_and_settle(running, turn, prompt, config,
                                             lambda stop_reason, error: self._settle(running, turn, stop_reason, error))

    async def prompt_and_settle(self, running: RunningAgent, turn: AgentTurn, prompt: list, config: AgentConfig,
                                 settle: Callable[[str | None, AgentError | None], Awaitable[Any]]) -> Any:
        """Send ``prompt`` to ``running``'s agent, wait for its answer and
        ``settle`` with the stop reason or the failure (a root turn, or a
        sub-agent's task)."""
        process = running.process
        stop_reason: str | None = None
        error: AgentError | None = None
        request = asyncio.ensure_future(process.conn.prompt(session_id=process.native_session_id, prompt=prompt))
        try:
            stop_reason = await self._await_prompt(running, turn, request, config)
        except AgentError as failed:
            error = failed
        except asyncio.CancelledError:
            # The front end went away mid-turn ($/cancelRequest): cancel the
            # agent's turn and settle it here, then let the cancel through.
            turn.cancelled = True
            await self._cancel_agent(running, turn, config)
            with contextlib.suppress(BaseException):
                stop_reason = (await asyncio.wait_for(asyncio.shield(request), config.cancel_timeout_seconds)).stop_reason
            try:
                await settle(stop_reason, None)
            except Exception as failure:  # the cancel goes through whatever the settlement says
                _log.info("settling a cancelled turn of %s: %s", turn.agent, failure)
            raise
        return await settle(stop_reason, error)

    async def _begun(self, session_id: str, turn: int) -> None:
        admitted = self._admitted.get(session_id)
        hook = admitted.on_begun if admitted is not None else None
        if hook is not None:
            admitted.on_begun = None  # type: ignore[union-attr]
            try:
                await hook(turn)
            except Exception:  # the turn goes on; its caller's bookkeeping is its own
                _log.exception("session %s: after the turn began", session_id)

    async def _await_prompt(self, running: RunningAgent, turn: AgentTurn, request: asyncio.Future, config: AgentConfig) -> str | None:
        """The agent's stop reason; an AgentError when it fails, goes
        silent for the idle timeout, or outlives a cancel's grace."""
        process = running.process
        cancel_deadline: float | None = None
        seen = -1
        while True:
            try:
                response = await asyncio.wait_for(asyncio.shield(request), 0.25)
                return response.stop_reason
            except asyncio.TimeoutError:
                pass
            except RequestError as refused:
                await asyncio.sleep(0)  # stderr written before the answer is read first
                raise AgentError(FAILED, f"agent {turn.agent!r}", f"failed the prompt: {refused}{process.stderr_said()}",
                                 f"its log is {process.log_path}") from None
            except (ConnectionError, BrokenPipeError):
                await process.reap()
                why = process.why_gone()
                await process.stop(grace=0.5)  # a closed connection with a live process is of no use
                raise AgentError(FAILED, f"agent {turn.agent!r}", f"{why} during the turn",
                                 f"the next prompt restarts it; its log is {process.log_path}") from None
            now = time.monotonic()
            if turn.recorder.updates != seen or turn.permission_tasks or running.terminals.running:
                # Streaming, waiting on the user or on a command is not silence.
                seen = turn.recorder.updates
                turn.last_activity = now
            if turn.cancelled and cancel_deadline is None:
                cancel_deadline = now + config.cancel_timeout_seconds
            if cancel_deadline is not None and now >= cancel_deadline:
                request.cancel()
                await process.stop(grace=0.5)
                raise AgentError(FAILED, f"agent {turn.agent!r}", f"did not end its turn within {config.cancel_timeout_seconds:g} s of the cancel; its connection was closed")
            if not turn.cancelled and now - turn.last_activity > config.idle_timeout_seconds:
                request.cancel()
                await process.stop(grace=0.5)
                raise AgentError(FAILED, f"agent {turn.agent!r}", f"sent nothing for {config.idle_timeout_seconds:g} s; its connection was closed",
                                 f"the next prompt restarts it; its log is {process.log_path}")

    async def end_turn(self, running: RunningAgent, turn: AgentTurn, stop_reason: str | None, error: AgentError | None,
                        cancelled: str) -> tuple[Outcome, str | None]:
        """End ``turn`` of ``running`` (a root turn, or a sub-agent's task):
        its questions withdrawn, its terminals closed, its open calls and
        text recorded; its outcome and the reason (``cancelled``: why a
        cancelled one was)."""
        for task in list(turn.permission_tasks):
            task.cancel()
        await running.terminals.close_all()
        if turn.cancelled:
            outcome, reason = Outcome.INTERRUPTED, cancelled
            if error is not None:
                reason += f" ({error.reason})"
        elif error is not None:
            outcome, reason = Outcome.ERRORED, error.reason
        elif stop_reason == "cancelled":
            outcome, reason = Outcome.INTERRUPTED, "the agent cancelled the turn"
        else:
            outcome, reason = Outcome.COMPLETED, None if stop_reason in (None, "end_turn") else f"the agent stopped: {stop_reason}"
        turn.recorder.finish(reason or "the turn ended")
        return outcome, reason

    async def _settle(self, running: RunningAgent, turn: AgentTurn, stop_reason: str | None, error: AgentError | None) -> PromptOutcome:
        session_id = turn.session_id
        outcome, reason = await self.end_turn(running, turn, stop_reason, error, turn.aborted or CANCEL_REASON)
        withdraw = not_riding
        # The files the turn captured are read for their post-turn content
        # in the walk's program (the turn's mutations are over); a path the
        # walk adds is read by the settlement.
        reads = Passengers(())
        with contextlib.suppress(Exception):  # the session went away: the settlement says so
            reads = Passengers(tuple(self.service.turns.post_turn_reads(session_id)))
        record = running.file_state
        marker = record.held_marker(session_id, turn.turn_id)
        with contextlib.suppress(Exception):
            await self.capture_changes(session_id, passengers=reads)
            withdraw = await keep_on_settlement(record, self.service.session(session_id).lease, release=marker)
        await self.learn_authored(session_id)
        alive = running.process.alive
        if not alive:
            await running.process.stop()
        try:
            self._set_engine(session_id, running, EngineState.READY if outcome is Outcome.COMPLETED and alive else EngineState.UNCERTAIN)
            if self.before_settle:
                checkpoints = self.service.session(session_id).checkpoints
                if checkpoints is not None:
                    await checkpoints.stop()  # what rides the settlement rides no mid-turn checkpoint
                for hook in list(self.before_settle):
                    hook(session_id)
            settled = await self.service.turns.settle(session_id, outcome, reason=reason, stop_reason=stop_reason,
                                                       read=(reads.ops, reads.results) if reads.results is not None else None)
            turn.saved = settled
            if settled.committed:
                # The checkpoint holds the turn's changes: its baseline may go
                # (the settlement's program removed it, unless nothing rode).
                with contextlib.suppress(Exception):
                    await record.release(marker)
        except Exception as failure:
            # The session went away under the turn (closed, its lease lost):
            # what was checkpointed stays; the next owner resumes the turn
            # as interrupted.
            if not is_refusal(failure):
                raise
            _log.warning("session %s: the turn could not be settled here: %s", session_id, failure)
            error = error or AgentError(FAILED, f"session {session_id}", f"the turn could not be settled: {failure}")
            outcome = Outcome.INTERRUPTED if turn.cancelled else Outcome.ERRORED
        finally:
            withdraw()
        if error is not None and turn.cancelled:
            error = None
        if turn.mail and outcome is Outcome.COMPLETED:
            await mark_delivered(session_artifacts(self.service), turn.mail, turn.turn)
        self.front.turn_update(TurnUpdate(session_id, turn.agent, "settled", turn.turn, turn.turn_id, (), outcome.value, stop_reason, error,
                                          reason=reason))
        return PromptOutcome(session_id, turn.turn, turn.turn_id, turn.agent, outcome.value, stop_reason, error)

    # Cancel -----------------------------------------------------------------------

    async def cancel(self, session_id: str) -> bool:
        """Ask the agent to end the turn in flight; True when one was running.
        The prompt settles it (interrupted) once the agent answers, or when
        the cancel timeout closes the connection. A prompt whose agent is
        still starting is stopped before it reaches the agent, as
        :meth:`abort` stops it ("cancelled by the user"); True too."""
        running = self._running.get(session_id)
        turn = running.turn if running is not None else None
        if running is None or turn is None:
            admitted = self._admitted.get(session_id)
            if admitted is None or admitted.turn is not None or admitted.aborted is not None:
                return False
            self._stop_admitted(session_id, admitted, CANCEL_REASON)
            return True
        if turn.cancelled:
            return False
        turn.cancelled = True
        self.front.turn_update(TurnUpdate(session_id, turn.agent, "cancelling", turn.turn, turn.turn_id))
        await self._cancel_agent(running, turn, self.config())
        return True

    async def abort(self, session_id: str, reason: str | None = None) -> Aborted | None:
        """Abort the turn in flight (``mevedel/turn/abort``): the agent is
        cancelled as :meth:`cancel` does, and its process ended when the
        cancel timeout passes without its answer; the turn then settles as
        interrupted with ``reason`` (default "aborted") through the turn's
        own settlement, which records every change the agent made, its
        commands' included. Until then the turn stays in flight, so what
        the agent still writes is recorded in it; after it, the agent is
        refused every write and command. A prompt whose agent is still
        starting (no turn yet) is stopped before it reaches the agent: the
        agent is kept for the next prompt once it has started, or ended
        should its start outlast the cancel timeout. Answers once the turn
        or the prompt has ended; None when no prompt of this engine runs in
        the session. An :class:`Aborted` without ``saved`` but with a turn:
        its settlement did not go through (the turn is then in flight with
        no agent running it: ``Turns.abort(stopped=True)`` settles it)."""
        reason = reason or ABORT_REASON
        running = self._running.get(session_id)
        turn = running.turn if running is not None else None
        if running is None or turn is None:
            admitted = self._admitted.get(session_id)
            return None if admitted is None else await self._abort_admitted(session_id, admitted, reason)
        turn.aborted = reason
        if not turn.cancelled:
            turn.cancelled = True
            self.front.turn_update(TurnUpdate(session_id, turn.agent, "cancelling", turn.turn, turn.turn_id))
            await self._cancel_agent(running, turn, self.config())
        await turn.settled.wait()  # bounded: the cancel timeout ends the agent's connection
        return Aborted(turn.turn, turn.saved)

    async def _abort_admitted(self, session_id: str, admitted: AdmittedPrompt, reason: str) -> Aborted:
        """Abort ``admitted``, a prompt whose turn had not begun when the
        abort came: it goes no further than its agent's start (a turn that
        begins meanwhile settles as aborted before it is sent)."""
        self._stop_admitted(session_id, admitted, reason)
        await admitted.ended.wait()  # bounded: the stop ends an agent whose start outlasts the cancel timeout
        turn = admitted.turn
        return Aborted(None) if turn is None else Aborted(turn.turn, turn.saved)

    def _stop_admitted(self, session_id: str, admitted: AdmittedPrompt, reason: str) -> None:
        """Stop ``admitted`` before it reaches its agent (an abort, or a
        cancel, came while the agent started), for ``reason``: the prompt
        raises prompt-aborted once the start is over. An abort after a
        cancel says why in its own words."""
        first = admitted.aborted is None
        if first or reason != CANCEL_REASON:
            admitted.aborted = reason
        if not first:
            return
        if admitted.agent is not None:
            self.front.turn_update(TurnUpdate(session_id, admitted.agent, "cancelling"))
        admitted.stopping = asyncio.ensure_future(self._end_slow_start(session_id, admitted))

    async def _end_slow_start(self, session_id: str, admitted: AdmittedPrompt) -> None:
        """End the agent of a stopped prompt whose start outlasts the cancel
        timeout, as one that ignores a cancel is ended."""
        try:
            await asyncio.wait_for(asyncio.shield(admitted.ended.wait()), self.config().cancel_timeout_seconds)
        except asyncio.TimeoutError:
            starting = admitted.starting or self._running.get(session_id)
            if admitted.turn is None and starting is not None and starting.process.native_session_id is None:
                # Its agent is still starting (no session opened yet): it is
                # ended, which fails its start. One that started is kept for
                # the next prompt.
                await starting.process.stop(grace=0.5)

    def kill(self, session_id: str) -> bool:
        """End the session's agent process at once (the user asked a second
        time while the agent ignores the cancel): its whole process group
        gets SIGKILL, the connection closes, and the turn in flight settles
        as interrupted with what arrived; an agent still starting for a
        cancelled prompt fails its start. True when there was one to end."""
        running = self._running.get(session_id)
        if running is None and session_id in self._admitted:
            running = self._admitted[session_id].starting
        process = running.process.process if running is not None else None
        if running is None or process is None or process.returncode is not None:
            return False
        if running.turn is not None:
            running.turn.cancelled = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        return True

    async def _cancel_agent(self, running: RunningAgent, turn: AgentTurn, config: AgentConfig) -> None:
        await self.delegation.cancel(running)  # its sub-agents' turns end first
        for task in list(turn.permission_tasks):
            task.cancel()
        if running.process.alive and running.process.native_session_id is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running.process.conn.cancel(session_id=running.process.native_session_id), config.cancel_timeout_seconds)

    # Lifetime ---------------------------------------------------------------------

    async def stop(self, session_id: str, *, grace: float | None = None) -> None:
        """Stop the session's agent (the session closes, its lease is lost,
        the server exits). A turn in flight is cancelled first and given
        ``grace`` seconds (default: the cancel timeout) to settle as
        interrupted before the process is ended."""
        running = self._running.get(session_id)
        if running is None:
            return
        turn = running.turn
        if turn is not None:
            if not turn.cancelled:
                turn.cancelled = True
                self.front.turn_update(TurnUpdate(session_id, turn.agent, "cancelling", turn.turn, turn.turn_id))
                await self._cancel_agent(running, turn, self.config())
            wait = self.config().cancel_timeout_seconds if grace is None else grace
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(turn.settled.wait(), wait)
        if self._running.get(session_id) is running:
            del self._running[session_id]
        self.forget_tools(running)
        await self.delegation.stop(session_id)  # once the session has no agent here
        await running.terminals.close_all()
        await running.process.stop(grace=0.5 if grace is not None else 2.0)

    async def stop_all(self, grace: float = 1.0) -> None:
        """Stop every agent at once (the server exits: ``grace`` bounds it),
        and the file-state record's watch of the tree with them."""
        self.queue.stopping = True  # a turn ended by the exit sends nothing queued
        try:
            await asyncio.gather(*(self.stop(session_id, grace=grace) for session_id in list(self._running)), return_exceptions=True)
        finally:
            self.trees.close()

    def detach(self, session_id: str) -> None:
        """Forget the agent's own history for ``session_id`` (its transcript
        was rewound, redone or copied): the next prompt starts a new native
        conversation from a transcript excerpt."""
        recorded = self.service.agents.engine(session_id)
        if recorded is not None and recorded.state is not EngineState.DETACHED:
            self.service.agents.set_engine(session_id, EngineRef(
                agent=recorded.agent, fingerprint=recorded.fingerprint, native_session_id=None,
                machine=recorded.machine, state=EngineState.DETACHED))
        running = self._running.get(session_id)
        if running is not None and running.turn is None:
            running.process.native_session_id = None

    # Internals --------------------------------------------------------------------

    async def _ready(self, session_id: str, spec: AgentSpec, recorded: EngineRef | None, config: AgentConfig,
                     admitted: AdmittedPrompt) -> tuple[RunningAgent, bool]:
        """The session's agent, started and with a native session; True
        when that session continues the agent's own history."""
        running = self._running.get(session_id)
        if running is not None and (running.spec != spec or not running.process.alive):
            await self.stop(session_id)
            running = None
        if running is not None and running.process.native_session_id is not None:
            if recorded is not None and recorded.native_session_id == running.process.native_session_id:
                return running, True
            # The transcript moved away from the agent's history (Rewind,
            # Redo, a copy): the same process starts a new native session.
            running.process.native_session_id = None
        if running is None:
            running = admitted.starting = RunningAgent(self, session_id, spec)
            await self.trees.require(session_id, running.directory.relative)
            # The record's first walk overlaps the agent's start (a new
            # process's turn: every `mevedel prompt`); the turn's refresh
            # then looks only at what changed meanwhile.
            running.file_state.prime()
            await running.process.start(AcpCallbacks(running), running.directory.local(self.local_cwd), config.start_timeout_seconds)
            self._running[session_id] = running
        servers = list(self.mcp_servers(session_id))
        try:
            tools = await self.tool_server(running)
        except (OSError, RuntimeError) as error:  # no socket can be made; the server is exiting
            await self.stop(session_id)
            raise AgentError(FAILED, f"session {session_id}", f"the tool server for its agent could not start: {error}") from None
        if tools is not None:
            servers.insert(0, tools)
        resume = None
        if (recorded is not None and recorded.agent == spec.name and recorded.fingerprint == spec.fingerprint
                and recorded.machine == self.machine and recorded.native_session_id is not None
                and recorded.state in (EngineState.READY, EngineState.UNCERTAIN)):
            resume = recorded.native_session_id
        try:
            continued = await running.process.open_session(running.directory.path, servers, resume, config.start_timeout_seconds)
        except AgentError:
            await self.stop(session_id)
            raise
        await self.options.opened(running, running.process.opened, config.start_timeout_seconds)
        return running, continued

    def _files_note(self, session_id: str) -> str | None:
        """What the excerpt says of the files when the transcript is not
        their history: a fork before its first own turn."""
        return fork_files_note(self.service.session(session_id).conversation, self.root)

    async def tool_server(self, running: RunningAgent) -> schema.McpServerStdio | None:
        """``mevedel mcp`` for ``running``'s ``mcpServers``: a relay to this
        process's tool host with the agent's own token (registered once
        per agent process)."""
        if self._tool_host is None or self._tool_context is None:
            return None
        if running.tool_token is None:
            socket_path, running.tool_token = await self._tool_host.register(AgentToolContext(self, running, self._tool_context))
        else:
            socket_path = self._tool_host.socket_path or await self._tool_host.start()
        command, args = mevedel_command()
        env = self._tool_host.environment(socket_path, running.tool_token)
        return schema.McpServerStdio(
            name=TOOL_SERVER_NAME, command=command, args=[*args, "mcp"],
            env=[schema.EnvVariable(name=name, value=value) for name, value in env.items()],
        )

    def forget_tools(self, running: RunningAgent) -> None:
        token, running.tool_token = running.tool_token, None
        if token is not None and self._tool_host is not None:
            self._tool_host.unregister(token)

    def _set_engine(self, session_id: str, running: RunningAgent, state: EngineState) -> None:
        self.service.agents.set_engine(session_id, EngineRef(
            agent=running.spec.name, fingerprint=running.spec.fingerprint,
            native_session_id=running.process.native_session_id if state is not EngineState.DETACHED else None,
            machine=self.machine, state=state))

    def written_ops(self, session_id: str, path: str) -> list[Operation]:
        """What the program of the agent's first write of ``path``
        (target-relative) in the open turn runs first, so that a crash
        cannot hide it (FileStateRecord.written_ops): nothing unless no
        walk looks at the path."""
        opened = self.service.turns.open_turn(session_id)
        if opened is None:
            return []
        record = self.trees.record(self.working_directory(session_id))
        return record.written_ops(record.held_marker(session_id, opened.turn_id), path)

    def write_snapshot(self, session_id: str, path: str) -> list[Operation]:
        """The operations that snapshot ``path`` (target-relative) for the
        session's file-state record at the end of the program of the
        agent's write of it (FileStateRecord.write_snapshot)."""
        return self.trees.record(self.working_directory(session_id)).write_snapshot(path)

    def remember_written(self, session_id: str, path: str, *,
                         snapshot: tuple[list[Operation], tuple[OpResult, ...]] | None = None) -> None:
        """The agent wrote ``path`` (target-relative) through ``fs/*`` or
        ApplyPatch: the session's file-state record looks at it from now on
        even inside an ignored directory, so a shell command's later change
        to it is checkpointed (FileStateRecord.remember). ``snapshot``: the
        operations of :meth:`write_snapshot` the write ran, and their results."""
        record = self.trees.record(self.working_directory(session_id))
        record.remember(path)
        if snapshot is not None:
            record.written(path, *snapshot)

    async def capture_changes(self, session_id: str, *, passengers: Passengers | None = None) -> list[str]:
        """Record the pre-turn state of every file changed since the record
        was last brought up to date (shell commands, and anything the agent
        changed without asking us); the paths that changed. ``passengers``:
        see ``FileStateRecord.changes``."""
        changes = await self.trees.record(self.working_directory(session_id)).changes(passengers=passengers)
        for change in changes:
            try:
                self.record_pre_state(session_id, change.path, change.before, gap=change.gap, directory=change.made_directory)
            except Exception as error:  # one odd path must not lose the others
                _log.warning("could not checkpoint %s: %s", change.path, error)
        return [change.path for change in changes]

    async def _forget_settled_baselines(self, record: FileStateRecord, own: str) -> None:
        """Let go the baselines held beside ``own`` whose turn is no longer
        in flight (settled by a process that did not know of them, or its
        session deleted): while one is held, the record removes no blob.
        Rare: read only when there are any; a session that cannot be read
        keeps its baseline."""
        for marker, session_id, turn_id in record.held_by_others(own):
            try:
                in_flight = await self.service.turns.in_flight_turn_id(session_id)
            except Exception as error:  # unreachable or unreadable: kept, looked at again next turn
                _log.info("could not tell whether turn %s of %s is in flight: %s", turn_id, session_id, error)
                continue
            if in_flight != turn_id:
                with contextlib.suppress(Exception):
                    await record.release(marker)

    async def learn_authored(self, session_id: str | None) -> None:
        """Tell the artifact store what changed among its authored files
        since the last look (``None``: only look), as an ApplyPatch of them
        would: a new id directory becomes an artifact, the session attaches
        what it wrote. Never stops the command."""
        try:
            if session_id is None:
                await self.authored.look()
                return
            paths = await self.authored.changes()
        except (TargetError, ValueError) as error:
            _log.warning("shell writes to the artifact store are not followed: %s", error)
            return
        if paths:
            for note in await learn_shell_writes(session_artifacts(self.service), session_id, paths):
                _log.log(logging.WARNING if "not taken" in note else logging.INFO, "%s", note)

    async def _mail(self, session_id: str) -> list[Mail]:
        """The comments routed to the session that no answered prompt
        carried yet; none when they cannot be read (the turn goes on)."""
        try:
            return await pending_mail(session_artifacts(self.service), session_id)
        except Exception as error:
            _log.warning("session %s: comments on its items are not delivered now: %s", session_id, error)
            return []

    async def _attachments(self, process: AgentProcess, attachments: Sequence[str]) -> list:
        blocks: list = []
        for authored in attachments:
            item = await self._attachment(authored)
            if item.mime_type in IMAGE_TYPES:
                if not process.accepts_images:
                    raise AgentError(ATTACHMENT_REFUSED, authored, f"is an image and agent {process.spec.name!r} does not accept images",
                                     "attach text, or use an agent that advertises image prompts")
                blocks.append(schema.ImageContentBlock(type="image", data=base64.b64encode(item.data).decode(), mime_type=item.mime_type, uri=item.uri))
                continue
            try:
                text = item.data.decode("utf-8")
            except UnicodeDecodeError:
                raise AgentError(ATTACHMENT_REFUSED, authored, "is neither text nor a PNG, JPEG, GIF or WebP image") from None
            if process.accepts_resources:
                blocks.append(schema.EmbeddedResourceContentBlock(type="resource", resource=schema.TextResourceContents(uri=item.uri, text=text, mime_type=item.mime_type)))
            else:
                blocks.append(schema.TextContentBlock(type="text", text=f"[attachment {authored}]\n{text}"))
        return blocks

    async def _attachment(self, authored: str) -> Attachment:
        if not isinstance(authored, str) or not authored.strip():
            raise AgentError(ATTACHMENT_REFUSED, repr(authored), "is empty")
        if self._is_address(authored):
            if self._read_address is None:
                raise AgentError(ATTACHMENT_REFUSED, authored, "addresses cannot be attached here")
            try:
                text = await self._read_address(authored)
            except AgentError:
                raise
            except Exception as error:
                raise AgentError(ATTACHMENT_REFUSED, authored, str(getattr(error, "reason", error))) from None
            return Attachment(authored, "text/markdown", text.encode("utf-8"))
        try:
            relative = self.files.relative(authored)
        except RequestError as error:
            raise AgentError(ATTACHMENT_REFUSED, authored, str((error.data or {}).get("reason", error))) from None
        result = (await self.service.target.run(ControlProgram([Read(relative)])))[0]
        if result.status is Status.ABSENT:
            raise AgentError(ATTACHMENT_REFUSED, authored, "does not exist in the workspace")
        if not result.ok:
            raise AgentError(ATTACHMENT_REFUSED, authored, result.reason or "cannot be read")
        if len(result.value) > MAX_ATTACHMENT_BYTES:
            raise AgentError(ATTACHMENT_REFUSED, authored, f"is larger than {MAX_ATTACHMENT_BYTES} bytes")
        mime = _sniff(result.value) or mimetypes.guess_type(relative)[0] or "text/plain"
        return Attachment(f"file://{posixpath.join(self.root, relative)}", mime, result.value)


def _prompt_aborted(spec: AgentSpec, reason: str) -> AgentError:
    return AgentError(PROMPT_ABORTED, "the prompt", f"was aborted ({reason}) while agent {spec.name!r} started; it never reached the agent",
                      "send it again to have it run")


def _sniff(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _previous_turn_id(records: Sequence[object]) -> str | None:
    """The id of the last turn ``records`` (the conversation before the
    turn being prompted) begin."""
    from ..store import TurnBegin

    return next((record.turn_id for record in reversed(records) if isinstance(record, TurnBegin)), None)


def _last_turn_begin(records: Sequence[object]) -> int:
    """Index of the last turn's begin record (the excerpt stops before the
    turn being prompted now)."""
    from ..store import TurnBegin

    for index in range(len(records) - 1, -1, -1):
        if isinstance(records[index], TurnBegin):
            return index
    return len(records)
