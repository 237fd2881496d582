"""The live projection of an open session (``history://root``).

It renders the conversation's current segment, unsaved records included,
and extends the rendering as records arrive instead of re-rendering the
whole segment for every Read: the projection never moves an earlier line, so
only the new records are rendered. A segment rotation (compaction, /clear)
starts a new rendering.
"""

from __future__ import annotations

from ..content.projection import Projection, agent_lines, retained_tasks
from ..content.turns import Conversation


class LiveHistory:
    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation
        self._segment = 0
        self._rendered = 0
        self._projection = Projection()

    @property
    def session_id(self) -> str:
        return self._conversation.session_id

    def rebind(self, conversation: Conversation) -> None:
        """Follow a conversation restored anew (a joined session refreshed)."""
        self._conversation = conversation
        self._segment = 0

    def agents(self) -> list:
        """The session's retained-agent registry now (``agent://``)."""
        return list(self._conversation.sidecar.agents)

    def agent_lines(self, path: str) -> list[str] | None:
        """The projection of retained agent ``path``'s conversation, its
        own transcript's tasks unsaved ones included (``history://root/PATH``);
        None when the registry has no such agent."""
        conversation = self._conversation
        entry = next((agent for agent in conversation.sidecar.agents if agent.path == path), None)
        if entry is None:
            return None
        return agent_lines(retained_tasks(conversation.records(), path, conversation.agent_tasks(path), entry.created_turn))

    def lines(self) -> list[str]:
        """The projection's lines now (a copy: later records do not change it)."""
        conversation = self._conversation
        records = conversation.records()
        if conversation.current_segment != self._segment or len(records) < self._rendered:
            self._segment = conversation.current_segment
            self._rendered = 0
            self._projection = Projection()
        self._projection.extend(records[self._rendered :])
        self._rendered = len(records)
        return list(self._projection.lines)
