"""``Agents``: what an open session records of its agents -- the external
agent and its conversation state (``engine``), the person's mode and config
choices per agent, the retained-agent registry, and the tasks retained
agents settled in the turn in flight. The service's front holds it as
``service.agents``; it works on the sessions of the
:class:`~.table.SessionTable` it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..content.projection import retained_tasks
from ..content.sidecar import AgentChoice, EngineRef
from ..content.transcript import AgentTask, Outcome
from .checks import outcome_of, refused_in, require_turn
from .evidence import AGENT_STEP_KINDS, EvidenceInput, agent_step
from .table import SessionTable


class Agents:
    def __init__(self, table: SessionTable) -> None:
        self._table = table

    def engine(self, session_id: str) -> EngineRef | None:
        """The external agent recorded for an open session."""
        return self._table.get(session_id, "read its agent").conversation.sidecar.engine

    def set_engine(self, session_id: str, engine: EngineRef | None) -> None:
        """Record the session's external agent and its conversation state
        (published with the next save, settlement or checkpoint)."""
        session = self._table.mutable(session_id, "record its agent")
        with refused_in(session):
            session.conversation.set_engine(engine, at=self._table.time_now())

    def agent_choice(self, session_id: str, agent: str) -> AgentChoice | None:
        """The person's mode and config choices for ``agent`` in an open
        session (None: none)."""
        return self._table.get(session_id, "read its agent choices").conversation.sidecar.agent_choices.get(agent)

    async def set_agent_choice(self, session_id: str, agent: str, choice: AgentChoice | None) -> None:
        """Remember the person's choices for ``agent`` in the session: in
        the sidecar at once when the session is saved already (a
        metadata-only publication), else with its first save."""
        session = await self._table.gated(session_id, "remember its agent choices", turn_work=True)
        with refused_in(session):
            session.conversation.set_agent_choice(agent, choice, at=self._table.time_now())
        candidate = session.conversation.metadata_candidate()
        if candidate is not None and session.materialized and candidate.changed:
            await session.save(candidate)

    def retained_agents(self, session_id: str) -> list:
        """The open session's retained-agent registry, in path order."""
        return list(self._table.get(session_id, "read its retained agents").conversation.sidecar.agents)

    def set_retained_agents(self, session_id: str, agents: list) -> None:
        """Record the session's retained-agent registry (published with
        the next save, settlement or checkpoint)."""
        session = self._table.mutable(session_id, "record its retained agents")
        with refused_in(session):
            session.conversation.set_agents(agents, at=self._table.time_now())

    def append_agent_task(self, session_id: str, path: str, agent: str, prompt: str, steps: Sequence[EvidenceInput],
                          outcome: Outcome | str, reason: str | None = None, paths: Sequence[str] = (),
                          call_id: str | None = None) -> None:
        """Record a retained agent's settled task in the turn in flight:
        the next line of the agent's own transcript holds its own records
        (``steps``: response, reasoning, tool call and result, plan,
        permission), and the turn a line naming it; both are published
        with the turn's next checkpoint or settlement, in one publication
        with the registry. ``call_id`` is the caller's ``Agent`` tool call
        that started the task, as its ``tool_call`` record names it."""
        session = self._table.mutable(session_id, "record an agent's task")
        opened = require_turn(session, "record an agent's task")
        record = AgentTask(
            turn_id=opened.turn_id, path=path, agent=agent, prompt=prompt, outcome=outcome_of(outcome), reason=reason,
            steps=[agent_step(step) for step in steps if step.kind in AGENT_STEP_KINDS], paths=sorted(set(paths)),
            call_id=call_id,
        )
        with refused_in(session):
            session.conversation.record_agent_task(record)

    def agent_tasks(self, session_id: str, path: str) -> list:
        """Retained agent ``path``'s settled tasks, oldest first, as
        ``(session turn, task)``: its own transcript's, after those a
        session written before agent transcripts holds in its current
        segment."""
        conversation = self._table.get(session_id, "read its agents' tasks").conversation
        entry = next((agent for agent in conversation.sidecar.agents if agent.path == path), None)
        since = entry.created_turn if entry is not None else 1
        return retained_tasks(conversation.records(), path, conversation.agent_tasks(path), since)
