"""Running a sub-agent's turn: :class:`SubAgents`, one per
:class:`~..engine.AgentEngine`.

An agent's ``Agent`` tool call (``agent``, ``name``, ``prompt``) reaches
:meth:`SubAgents.run` through its tool context. The sub-agent is another
configured ACP agent, started like a root agent (its own process, its own
native conversation, the same tool server with a token of its own) but
serving the caller's session: its ``fs/*`` writes, its terminals' shell
changes and its ApplyPatch calls go through the very same checkpoint seam
(``AgentEngine.record_pre_state``) into the session's open turn -- the
root agent's turn that, directly or through other sub-agents, asked for
it -- so Rewind of that turn restores them. Its permission questions reach
the user naming it (``helper (codex) asks permission: ...``). Cancelling
the caller's turn cancels its sub-agents' turns first.

A sub-agent is retained under its path (the caller's path and ``name``):
its process and native conversation stay for the next call with the same
name, which continues its conversation (natively while the process lives;
else ``session/load``/``resume`` on the same machine, else a labelled
excerpt of its recorded turns). What it said and did is its own record,
never copied into the caller's turn: the caller's transcript gets the
``Agent`` tool call and its answer, the sub-agent's final message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from acp import schema

from ...store import (
    AgentActivity,
    AgentResult,
    AgentTask,
    EvidenceInput,
    Outcome,
    RetainedAgent,
    agent_result,
    final_message,
)
from ..acp_callbacks import AcpCallbacks
from ..config import AgentConfig, AgentSpec
from ..errors import FAILED, AgentError
from ..excerpt import newest_within
from ..live import LiveFeed, TurnUpdate
from ..recorder import TurnRecorder
from ..running_agent import AgentTurn, RunningAgent
from .names import DelegationRefused, SubAgentFailed, check_name, child_path, depth

_log = logging.getLogger(__name__)

#: Characters of a retained agent's earlier turns its excerpt carries.
EXCERPT_BUDGET = 12_000


@dataclass
class Retained:
    """A retained agent of one session: its registry entry's facts (the
    sidecar's :class:`RetainedAgent`, the durable part) and what runs here."""

    path: str
    agent: str
    fingerprint: str
    machine: str
    created_turn: int
    created_turn_id: str
    #: The agent's own conversation (ACP ``sessionId``), once it has one.
    native_session_id: str | None = None
    result: AgentResult | None = None
    running: _ChildRunning | None = None
    #: The turn in flight (None: idle).
    active: AgentTurn | None = None

    @classmethod
    def of(cls, entry: RetainedAgent) -> Retained:
        return cls(entry.path, entry.agent, entry.fingerprint, entry.machine, entry.created_turn, entry.created_turn_id,
                   entry.native_session_id, entry.result)

    def entry(self) -> RetainedAgent:
        return RetainedAgent(
            path=self.path, agent=self.agent, fingerprint=self.fingerprint, native_session_id=self.native_session_id,
            machine=self.machine, created_turn=self.created_turn, created_turn_id=self.created_turn_id,
            activity=AgentActivity.ACTIVE if self.active is not None else AgentActivity.IDLE, result=self.result,
        )

    @property
    def label(self) -> str:
        """How the user is told of it: ``helper (codex)``."""
        return f"{self.path} ({self.agent})"


class _ChildRunning(RunningAgent):
    """A sub-agent's process: the root agent's, except that it notes the
    paths its task changes (its writes, patches and commands) for the
    task's record."""

    def __init__(self, engine: Any, session_id: str, spec: AgentSpec, path: str) -> None:
        super().__init__(engine, session_id, spec)
        self.delegation_path = path
        #: The workspace paths the task in flight changed.
        self.changed: set[str] = set()

    async def _after_command(self) -> None:
        if self.turn is not None:
            self.changed.update(await self.engine.capture_changes(self.session_id))
            await self.engine.learn_authored(self.session_id)


class _ChildClient(AcpCallbacks):
    """The ACP client side of a sub-agent: the root agent's routing (its
    file, terminal and permission requests serve its turn), except that its
    conversation title does not name the session, and its writes are noted."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, schema.SessionInfoUpdate):
            return
        await super().session_update(session_id, update, **kwargs)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        answer = await super().write_text_file(session_id, path, content, **kwargs)
        self.running.changed.add(self.running.files.relative(path))  # type: ignore[attr-defined]
        return answer


class _NestedFront:
    """Tells the editor of a sub-agent's task: every update carries its path
    and the caller's tool call that started it, matched once, when the
    task starts, in the caller's turn by the call's arguments or its order
    (None: no call fits; the same for every update of the task).
    ``call_record_id`` is that call as its record names it, for the task's
    record."""

    def __init__(self, front: Any, caller: AgentTurn, name: str, prompt: str, base: TurnUpdate) -> None:
        self.front = front
        matched = caller.recorder.delegating_call(name, prompt)
        # The caller's call goes out before anything nested under it.
        caller.recorder.feed.flush()
        self.call_record_id = matched[1] if matched is not None else None
        self.base = replace(base, parent_call_id=matched[0] if matched is not None else None)

    def __call__(self, phase: str, **fields: Any) -> None:
        self.front.turn_update(replace(self.base, phase=phase, **fields))


class SubAgents:
    """The retained agents of the sessions one engine serves."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        #: session id -> path -> retained agent.
        self._sessions: dict[str, dict[str, Retained]] = {}

    # Facts ---------------------------------------------------------------------

    def retained(self, session_id: str) -> list[Retained]:
        """The session's retained agents, in path order."""
        table = self._sessions.get(session_id, {})
        return [table[path] for path in sorted(table)]

    def owns(self, running: RunningAgent) -> bool:
        """Whether ``running`` is a sub-agent of its session here (its tool
        calls serve the session's open turn)."""
        table = self._sessions.get(running.session_id, {})
        path = getattr(running, "delegation_path", None)
        return path is not None and path in table and table[path].running is running

    def active(self, session_id: str) -> list[Retained]:
        return [r for r in self.retained(session_id) if r.active is not None]

    # Running -------------------------------------------------------------------

    async def run(self, caller: RunningAgent, agent: str | None, name: str, prompt: str) -> str:
        """Run ``prompt`` as a turn of the retained agent ``name`` of
        ``caller`` (started with ``agent`` when new); its final message, or
        :class:`SubAgentFailed` / :class:`DelegationRefused`."""
        engine = self.engine
        session_id = caller.session_id
        check_name(name)
        if agent is not None and not isinstance(agent, str):
            raise DelegationRefused(f"Agent: the argument 'agent' must be a configured agent's name, not {type(agent).__name__}")
        if not isinstance(prompt, str) or not prompt.strip():
            raise DelegationRefused("Agent: the argument 'prompt' is blank; say what the sub-agent should do")
        root = engine.running_agent(session_id)
        if caller.turn is None or root is None or root.turn is None:
            raise DelegationRefused(f"Agent: no turn of session {session_id} is running; sub-agents run within a prompt turn")
        if caller.turn.cancelled or root.turn.cancelled:
            raise DelegationRefused("Agent: the turn is being cancelled; no sub-agent is started")
        config: AgentConfig = engine.config()
        path = child_path(getattr(caller, "delegation_path", None), name)
        if depth(path) > config.subagent_max_depth:
            raise DelegationRefused(
                f"Agent: {path} would be a sub-agent at depth {depth(path)}, and sub-agents nest at most "
                f"{config.subagent_max_depth} deep (the subagentMaxDepth setting); do this task yourself"
            )
        table = self._sync(session_id)
        retained = table.get(path)
        if retained is not None and retained.active is not None:
            raise DelegationRefused(f"Agent: {retained.label} is already working on a task; wait for its answer, or use another name")
        running_now = sum(1 for r in table.values() if r.active is not None)
        if running_now >= config.subagent_max_concurrent:
            raise DelegationRefused(
                f"Agent: {running_now} sub-agents are already running in this session, the most at once "
                f"(the subagentMaxConcurrent setting is {config.subagent_max_concurrent}); wait for one of them to answer"
            )
        spec = self._spec(config, retained, agent, caller)
        if retained is None:
            retained = Retained(path, spec.name, spec.fingerprint, engine.machine, root.turn.turn, root.turn.turn_id)
            table[path] = retained
        tell = _NestedFront(engine.front, caller.turn, name, prompt,
                            TurnUpdate(session_id, f"{path} ({spec.name})", "starting", root.turn.turn, root.turn.turn_id, agent_path=path))
        items: list[EvidenceInput] = []
        recorder = TurnRecorder(items.append, LiveFeed(lambda events: tell("running", events=tuple(events))))
        turn = AgentTurn(session_id, retained.label, root.turn.turn, root.turn.turn_id, recorder)
        retained.active = turn  # reserved before the first await: a second call is refused
        self._publish(session_id)
        tell("starting")
        keepalive = asyncio.ensure_future(self._keep_caller_alive(caller, turn))
        earlier = retained.result  # its last task's, until this one's is recorded
        outcome = "errored"
        try:
            answer = await self._run(retained, spec, turn, items, prompt, config, tell.call_record_id)
            outcome = "completed"
            return answer
        except SubAgentFailed:
            outcome = retained.result.outcome if retained.result is not None else "errored"
            raise
        finally:
            keepalive.cancel()
            retained.active = None
            turn.settled.set()
            self._publish(session_id)
            # Why it was interrupted or failed, as its task records it (the
            # root turn's settled update says so of the turn).
            result = retained.result if retained.result is not earlier else None
            tell("settled", outcome=outcome, reason=result.reason if result is not None else None)

    def _sync(self, session_id: str) -> dict[str, Retained]:
        """The session's retained agents here, made one with its registry:
        an entry not known here yet (a resumed session) is taken from it; an
        idle one the registry no longer holds (a Rewind removed it) is
        forgotten, its process stopped."""
        table = self._sessions.setdefault(session_id, {})
        try:
            entries = {entry.path: entry for entry in self.engine.service.agents.retained_agents(session_id)}
        except Exception as error:  # the session is not open here: nothing durable to follow
            _log.info("session %s: its retained agents are not readable: %s", session_id, error)
            return table
        for path, retained in list(table.items()):
            entry = entries.get(path)
            if retained.active is not None:
                continue
            if entry is None or entry.created_turn_id != retained.created_turn_id:
                del table[path]
                if retained.running is not None:
                    asyncio.ensure_future(self._stop_running(retained))
                continue
            retained.result = entry.result  # a Rewind may have cut the task it came from
            if entry.native_session_id != retained.native_session_id:
                # Its native history was detached (Rewind, Redo): a new conversation continues it.
                retained.native_session_id = entry.native_session_id
                if retained.running is not None:
                    retained.running.process.native_session_id = None
        for path, entry in entries.items():
            table.setdefault(path, Retained.of(entry))
        return table

    def _publish(self, session_id: str) -> None:
        """Record the registry in the session (published with the turn's
        next checkpoint or its settlement)."""
        table = self._sessions.get(session_id, {})
        try:
            self.engine.service.agents.set_retained_agents(session_id, [table[path].entry() for path in sorted(table)])
        except Exception as error:  # the session went away under the turn: the turn says so itself
            _log.warning("session %s: its retained agents were not recorded: %s", session_id, error)

    def _spec(self, config: AgentConfig, retained: Retained | None, agent: str | None, caller: RunningAgent) -> AgentSpec:
        if retained is not None:
            if agent is not None and agent != retained.agent:
                raise DelegationRefused(
                    f"Agent: {retained.label} is a retained {retained.agent} agent and continues as one; "
                    f"give another name to start a {agent} agent"
                )
            spec = config.agents.get(retained.agent)
            if spec is None:
                raise DelegationRefused(f"Agent: {retained.label} cannot continue: agent {retained.agent!r} is no longer configured")
            return spec
        try:
            return config.choose(agent if agent is not None else caller.spec.name)
        except AgentError as error:
            raise DelegationRefused(f"Agent: {error.authored} {error.reason}") from None

    async def _keep_caller_alive(self, caller: RunningAgent, turn: AgentTurn) -> None:
        """While the sub-agent works, its caller is not idle: the caller's
        idle timeout counts from the sub-agent's last sign of life."""
        while True:
            await asyncio.sleep(0.2)
            if caller.turn is not None:
                caller.turn.last_activity = max(caller.turn.last_activity, turn.last_activity, time.monotonic() if turn.permission_tasks else 0)

    async def _run(self, retained: Retained, spec: AgentSpec, turn: AgentTurn, items: list[EvidenceInput], prompt: str,
                   config: AgentConfig, call_id: str | None) -> str:
        engine = self.engine
        try:
            running, continued = await self._ready(turn.session_id, retained, spec, config)
        except AgentError as error:
            retained.result = AgentResult(turn=turn.turn, outcome="errored", reason=f"could not start: {error.reason}"[:500], text="")
            raise SubAgentFailed(f"{retained.label} could not start: {error.reason}" + (f" ({error.action})" if error.action else "")) from None
        blocks: list = []
        if not continued:
            excerpt = self._excerpt(turn.session_id, retained)
            if excerpt:
                blocks.append(schema.TextContentBlock(type="text", text=excerpt))
        blocks.append(schema.TextContentBlock(type="text", text=prompt))
        running.turn = turn
        running.changed = set()
        if turn.cancelled:
            # Its caller's turn was cancelled while it started (``cancel``
            # had no native session to send session/cancel to yet): the
            # prompt is not sent, and the task settles interrupted now
            # rather than after the cancel timeout.
            return await self._settle(retained, running, turn, items, prompt, call_id, None, None)
        # The caller's tool call going away ends the task the same way: what
        # it did stays recorded.
        return await engine.prompt_and_settle(
            running, turn, blocks, config,
            lambda stop_reason, error: self._settle(retained, running, turn, items, prompt, call_id, stop_reason, error))

    async def _ready(self, session_id: str, retained: Retained, spec: AgentSpec, config: AgentConfig) -> tuple[_ChildRunning, bool]:
        """The retained agent's process with its conversation; True when
        that conversation is the agent's own history of its earlier turns."""
        engine = self.engine
        running = retained.running
        if (running is not None and running.process.alive and running.process.native_session_id is not None
                and running.process.native_session_id == retained.native_session_id):
            return running, True
        if running is not None:
            await self._stop_running(retained)
        running = _ChildRunning(engine, session_id, spec, retained.path)
        retained.running = running
        try:
            # In the session's working directory, as its root agent (a
            # Worktree Fork: its checkout).
            await running.process.start(_ChildClient(running), running.directory.local(engine.local_cwd), config.start_timeout_seconds)
            servers = list(engine.mcp_servers(running.session_id))
            try:
                tools = await engine.tool_server(running)
            except (OSError, RuntimeError) as error:
                raise AgentError(FAILED, retained.label, f"the tool server for it could not start: {error}") from None
            if tools is not None:
                servers.insert(0, tools)
            same = retained.fingerprint == spec.fingerprint and retained.machine == engine.machine
            resume = retained.native_session_id if same else None
            continued = await running.process.open_session(running.directory.path, servers, resume, config.start_timeout_seconds)
        except BaseException:
            await self._stop_running(retained)
            raise
        retained.native_session_id = running.process.native_session_id
        retained.fingerprint = spec.fingerprint
        retained.machine = engine.machine
        return running, continued

    async def _settle(self, retained: Retained, running: _ChildRunning, turn: AgentTurn, items: list[EvidenceInput], prompt: str,
                      call_id: str | None, stop_reason: str | None, error: AgentError | None) -> str:
        engine = self.engine
        outcome, reason = await engine.end_turn(running, turn, stop_reason, error, "cancelled with its caller's turn")
        running.turn = None
        # What its commands changed belongs to the open turn, like the root's.
        with contextlib.suppress(Exception):
            await engine.capture_changes(turn.session_id)
        await engine.learn_authored(turn.session_id)
        if not running.process.alive:
            await self._stop_running(retained)
        final = final_message(items)
        retained.result = agent_result(turn.turn, outcome.value, reason, items)
        # Its conversation (its own transcript, history://root/PATH) and its
        # result in the registry change together, with no await between:
        # the turn's next checkpoint or settlement publishes both or neither.
        # It names the call that started it: a reader nests it there even
        # among parallel calls.
        try:
            engine.service.agents.append_agent_task(turn.session_id, retained.path, retained.agent, prompt, items, outcome, reason,
                                                    paths=sorted(running.changed), call_id=call_id)
        except Exception as failure:
            _log.warning("session %s: %s's task was not recorded: %s", turn.session_id, retained.label, failure)
        self._publish(turn.session_id)
        if outcome is Outcome.COMPLETED:
            return final or f"({retained.label} ended its turn without a message)"
        said = f"\n\nIts last message before that:\n{final}" if final else ""
        if outcome is Outcome.INTERRUPTED:
            raise SubAgentFailed(f"{retained.label} was interrupted: {reason}.{said}")
        raise SubAgentFailed(f"{retained.label} failed: {reason}.{said}")

    def _recorded_tasks(self, session_id: str, path: str) -> list[tuple[int, AgentTask]]:
        """The retained agent's settled tasks as ``(session turn, task)``,
        from its own transcript (this process's and earlier ones', on this
        machine or another)."""
        try:
            return self.engine.service.agents.agent_tasks(session_id, path)
        except Exception:
            return []

    def _excerpt(self, session_id: str, retained: Retained) -> str | None:
        """A labelled excerpt of the retained agent's earlier turns, for a
        new native conversation that continues it."""
        parts: list[str] = []
        tasks = self._recorded_tasks(session_id, retained.path)
        if not tasks and retained.result is not None:
            result = retained.result
            parts.append(f"## Your latest task (session turn {result.turn}), {result.outcome}\nYou: {result.text}")
        for number, (turn, task) in enumerate(tasks, start=1):
            lines = [f"## Task {number} (session turn {turn})", f"Caller: {task.prompt}"]
            for step in task.steps:
                if step.kind == "response" and step.text:
                    lines.append(f"You: {step.text}")
                elif step.kind == "tool_call":
                    lines.append(f"(tool call: {step.name})")
            if task.outcome is not Outcome.COMPLETED:
                lines.append(f"(this task was {task.outcome.value}{': ' + task.reason if task.reason else ''})")
            parts.append("\n".join(lines))
        if not parts:
            return None
        kept = newest_within(parts, EXCERPT_BUDGET)
        return (
            f"[mevedel] You are the retained agent {retained.path}, continuing an earlier conversation whose history you "
            "do not have. Below is an excerpt of it, for context only: do not repeat its actions; the workspace already "
            "reflects them.\n\n" + "\n\n".join(kept)
        )

    # Cancel and stop -------------------------------------------------------------

    async def cancel(self, caller: RunningAgent) -> None:
        """Cancel the turns of the sub-agents ``caller`` started (all of the
        session's when ``caller`` is its root agent), deepest first."""
        prefix = getattr(caller, "delegation_path", None)
        config = self.engine.config()
        chosen = [
            r for r in self.active(caller.session_id)
            if r.running is not None and r.running is not caller and (prefix is None or r.path.startswith(prefix + "/"))
        ]
        for retained in sorted(chosen, key=lambda r: -depth(r.path)):
            turn, running = retained.active, retained.running
            if turn is None or running is None or turn.cancelled:
                continue
            turn.cancelled = True
            for task in list(turn.permission_tasks):
                task.cancel()
            if running.process.alive and running.process.native_session_id is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(running.process.conn.cancel(session_id=running.process.native_session_id),
                                           config.cancel_timeout_seconds)

    async def stop(self, session_id: str) -> None:
        """Stop the session's sub-agents' processes (the session's agent
        stops); the retained agents stay known, to be continued later."""
        for retained in self.retained(session_id):
            if retained.active is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(retained.active.settled.wait(), self.engine.config().cancel_timeout_seconds)
            await self._stop_running(retained)

    def forget(self, session_id: str, paths: Sequence[str] | None = None) -> None:
        """Forget retained agents (``paths``; None: all) of a session whose
        processes are already stopped."""
        table = self._sessions.get(session_id)
        if table is None:
            return
        for path in list(table) if paths is None else paths:
            table.pop(path, None)
        if not table:
            self._sessions.pop(session_id, None)

    async def _stop_running(self, retained: Retained) -> None:
        running, retained.running = retained.running, None
        if running is None:
            return
        self.engine.forget_tools(running)
        with contextlib.suppress(Exception):
            await running.terminals.close_all()
        with contextlib.suppress(Exception):
            await running.process.stop(grace=0.5)
