"""The context ``mevedel mcp`` binds itself when no LSP server started it.

A workspace -- a directory of this machine, or one on an SSH host reached
only through the session service's target (no local root: every path and
address is read and written through that target, as for the LSP's remote
folders) -- and optionally one session opened through this client's own
session service: resumed when its lease is free or already this client's
(then ``work://`` and project writes are allowed, as for ``mevedel
apply-patch``), joined read-only when another client holds it (reads only;
every write is refused naming the session). The session is looked at again
at every call, so a lease lost to a takeover stops writes at once.

MCP servers configured for the CLI (``mcpServers`` in its
``config.json``, and a workspace ``.mcp.json`` server the user approved
once, e.g. with ``mevedel read mcp://NAME --approve-mcp NAME``) are
readable as ``mcp://``; this server cannot ask, so an unapproved workspace
server is refused with that instruction.

No turn runs in this process (turns belong to the agent engine), so there
is no open checkpoint to record project files into: the pre-write hook only
takes the item lease of a live item the patch writes (refused, naming the
holder, while another process edits it). Under the LSP server the bridge's context records them.
An authored file of the artifact store (``.mevedel/artifacts/ID/...``)
written here is told to the workspace's store once the patch committed
(:mod:`mevedel_server.artifacts.learned_writes`: a new id directory creates an artifact, the bound
session attaches it); with no turn here, no turn version follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..artifacts import (
    ArtifactError,
    SessionArtifacts,
    held_refusal,
    hold_written_items,
    learn_patch_writes,
    session_artifacts,
    written_items,
)
from ..mcp_client import McpAccess
from ..resources import MemoryRoot, ResolverContext, SkillRoot, writable_sessions
from ..store import SessionService
from .context import ToolRefused


class StandaloneContext:
    def __init__(
        self,
        workspace: Path | None,
        service: SessionService | None,
        session_id: str | None,
        *,
        memory_roots: tuple[MemoryRoot, ...] = (),
        skill_roots: tuple[SkillRoot, ...] = (),
        mcp: McpAccess | None = None,
    ) -> None:
        if workspace is None and service is None:
            raise ValueError("an SSH workspace is reached only through its session service's target")
        #: The local root; None for an SSH workspace (``service.target`` is its only way in).
        self.workspace = workspace
        self.service = service
        self.session_id = session_id
        self.memory_roots = memory_roots
        self.skill_roots = skill_roots
        self.mcp = mcp
        self._artifacts: SessionArtifacts | None = None

    def resolver_context(self) -> ResolverContext:
        service, sid = self.service, self.session_id
        is_open = service is not None and sid is not None and service.is_open(sid)
        opened = sid if is_open else None
        # A Worktree Fork's plain paths are its checkout's, as its agent's are.
        working = service.session(opened).conversation.sidecar.working_directory if service is not None and opened else ""
        if self.workspace is None:
            assert service is not None  # checked when bound
            return ResolverContext(
                memory_roots=self.memory_roots,
                skill_roots=self.skill_roots,
                live_history=service.live_history(opened) if opened else None,
                store_target=service.target,
                remote_workspace=True,
                remote_session=opened,
                session_writable=writable_sessions(service),
                mcp=self.mcp,
                working_directory=working,
            )
        return ResolverContext(
            workspace_root=self.workspace,
            session_dir=self.workspace / ".mevedel" / "sessions" / opened if opened else None,
            memory_roots=self.memory_roots,
            skill_roots=self.skill_roots,
            live_history=service.live_history(opened) if service is not None and opened else None,
            store_target=service.target if service is not None else None,
            session_writable=writable_sessions(service) if service is not None else None,
            mcp=self.mcp,
            working_directory=working,
        )

    async def before_project_write(self, paths: Sequence[str]) -> None:
        """Take the lease of every live item the patch writes, or refuse it
        naming the process that holds one."""
        work = self._work(paths)
        if work is not None:
            try:
                await hold_written_items(work, paths)
            except ArtifactError as error:
                raise ToolRefused(held_refusal(error)) from None

    async def after_project_write(self, paths: Sequence[str]) -> Sequence[str]:
        work = self._work(paths)
        return [] if work is None else await learn_patch_writes(work, self.session_id, paths)

    def _work(self, paths: Sequence[str]) -> SessionArtifacts | None:
        if self.service is None or not written_items(paths):
            return None
        if self._artifacts is None:
            self._artifacts = session_artifacts(self.service)
        return self._artifacts

    async def close(self) -> None:
        """Release what the artifact store holds (the item leases a patch
        took here)."""
        if self._artifacts is not None:
            await self._artifacts.close()
