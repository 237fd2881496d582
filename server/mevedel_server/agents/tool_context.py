"""What the MCP tool server is bound to when an agent the engine drives
calls it: that agent's session, in the front end that runs the engine.

One :class:`AgentToolContext` per agent process, registered with the
process's :class:`~mevedel_server.tool_server.host.ToolHost` when the agent
starts (its token goes to the agent in ``mcpServers``) and unregistered when
it stops. Its resolver context is the front end's own for the bound
workspace and session (the LSP server's request scope, the CLI's), made
fresh for every call; an ApplyPatch of project files first records their
current content into the open turn's checkpoint -- the same recording an
``fs/write_text_file`` makes -- so Rewind restores them, and is refused when
no turn of this agent is running.

An artifact's authored files (``.mevedel/artifacts/ID/...``) are not
checkpointed: a patch first takes the item lease of every live item it
writes (or is refused naming the process that holds it), and the artifact
store versions them (one version per turn that
wrote the primary file). After such a patch commits, the workspace's
:class:`~mevedel_server.artifacts.attachments.SessionArtifacts` learns of it
(:mod:`mevedel_server.artifacts.learned_writes`): a new id directory
becomes an artifact, and the session attaches what it wrote. The front end
gives that store with the resolver context factory, as its ``artifacts``
attribute (a callable answering the store, or None: nothing is learnt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from acp import RequestError

from ..artifacts import (
    ArtifactError,
    artifact_item,
    held_refusal,
    hold_written_items,
    learn_patch_writes,
)
from ..store import is_refusal, naming_session
from ..tool_server import ToolRefused

if TYPE_CHECKING:
    from ..resources import ResolverContext
    from .engine import AgentEngine, RunningAgent


class AgentToolContext:
    """A :class:`~mevedel_server.tool_server.context.ToolContext` for one
    running agent of one session."""

    def __init__(self, engine: AgentEngine, running: RunningAgent, resolver_context: Callable[[str], ResolverContext]) -> None:
        self._engine = engine
        self._running = running
        self._resolver_context = resolver_context

    @property
    def session_id(self) -> str:
        return self._running.session_id

    def resolver_context(self) -> ResolverContext:
        # Plain paths are the session's working directory's (a Worktree
        # Fork's checkout), like its fs/* requests and terminals.
        context = self._resolver_context(self._running.session_id)
        directory = self._running.directory.relative
        return dataclasses.replace(context, working_directory=directory) if directory else context

    async def before_project_write(self, paths: Sequence[str]) -> None:
        running = self._running
        if running.turn is None or not self._engine.is_running(running):
            raise ToolRefused(
                f"no turn of session {running.session_id} is running: project files are changed during a prompt turn "
                "(so Rewind can undo it); change work:// files, or make the change in the next turn"
            )
        work = self._work()
        if work is not None:
            try:
                await hold_written_items(work, paths)
            except ArtifactError as error:
                raise ToolRefused(held_refusal(error)) from None
        project = [path for path in paths if artifact_item(path) is None]
        if not project:
            return
        changed = getattr(running, "changed", None)
        if changed is not None:  # a sub-agent's task notes what it changes
            changed.update(project)
        try:
            await self._engine.record_before_writes(running.session_id, project)
        except RequestError as error:  # a path the agent may not write (outside, .mevedel/)
            data = error.data if isinstance(error.data, dict) else {}
            raise ToolRefused(f"{data.get('path', ', '.join(paths))}: {data.get('reason', error)}") from None
        except Exception as error:
            if not is_refusal(error):
                raise
            # The session cannot take a checkpoint now (read-only, handed over...).
            raise ToolRefused(f"{naming_session(running.session_id, error)}; nothing was changed") from None

    async def delegate(self, agent: str | None, name: str, prompt: str) -> str:
        """The ``Agent`` tool: run ``prompt`` as a turn of this agent's
        retained sub-agent ``name`` (:mod:`.delegation.runner`); its final
        message, or :class:`ToolRefused` naming the refusal or the outcome."""
        from .delegation import DelegationRefused, SubAgentFailed

        if not self._engine.is_running(self._running):
            raise ToolRefused(f"Agent: this agent no longer serves session {self._running.session_id}")
        try:
            return await self._engine.delegation.run(self._running, agent, name, prompt)
        except (DelegationRefused, SubAgentFailed) as refused:
            raise ToolRefused(refused.message) from None

    async def after_project_write(self, paths: Sequence[str]) -> Sequence[str]:
        """Remember the project files the committed patch wrote (the
        file-state record looks at them even in an ignored directory) and
        tell the workspace's artifact store about the authored ones (notes
        for the model)."""
        self._engine.remember_after_writes(self._running.session_id, [p for p in paths if artifact_item(p) is None])
        if not any(artifact_item(path) is not None for path in paths):
            return []
        work = self._work()
        if work is None:
            return []
        return await learn_patch_writes(work, self._running.session_id, paths)

    def _work(self):
        """The workspace's artifact store (None: the front end gives none)."""
        stores = getattr(self._resolver_context, "artifacts", None)
        return stores() if callable(stores) else None
