"""Retained sub-agents: an agent hands a task to another configured agent
through the tool server's ``Agent`` tool, inside the same session and the
same turn (``docs/agents.md``, "Delegating to another agent").

:mod:`.names` is the pure part (a retained agent's path, the limits);
:mod:`.runner` runs a sub-agent's turn for :class:`~..engine.AgentEngine`,
which reaches it through one attribute (``engine.delegation``) and three
calls: ``owns`` (a sub-agent's tool calls may write), ``cancel`` (a
cancelled turn cancels its sub-agents) and ``stop`` (the session's agent
stops, and its sub-agents with it).
"""

from .names import DelegationRefused, SubAgentFailed, check_name, child_path

# The runner builds on the engine's classes: imported by the engine itself
# (``from .delegation.runner import SubAgents``), never from here, so the
# agents' configuration can use the limits without importing the engine.
__all__ = ["DelegationRefused", "SubAgentFailed", "check_name", "child_path"]
