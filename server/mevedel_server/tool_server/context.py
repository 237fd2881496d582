"""What one served MCP session is bound to.

Whoever serves the tools (``mevedel mcp`` standalone, or the LSP server for
an agent it launched) supplies a :class:`ToolContext`. The tool server never
builds a resolver context itself: it asks for a fresh one at every call, so
a session opened, closed or taken over since is seen at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..resources import ResolverContext


class ToolRefused(Exception):
    """A refusal the context gives (``before_project_write``): the whole
    tool call fails with ``message`` and nothing is touched."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@runtime_checkable
class ToolContext(Protocol):
    def resolver_context(self) -> ResolverContext:
        """A fresh context for one call: the bound workspace and session
        (``session_dir``/``remote_session``, ``live_history``),
        ``session_writable`` (only this holder's open, writable session
        says yes) and ``store_target`` for SSH workspaces."""
        ...

    async def before_project_write(self, paths: Sequence[str]) -> None:
        """Called by ApplyPatch after it is prepared (and the session is
        found writable here) and before it runs, with the workspace-relative paths of the project files it is about
        to add, change, delete or move (never addresses). Raising
        :class:`ToolRefused` refuses the whole patch."""
        ...

    # Optional (``tools`` calls it when present):
    #
    # async def after_project_write(self, paths: Sequence[str]) -> Sequence[str]:
    #     """Called once an ApplyPatch of project files has committed, with
    #     the workspace-relative paths it touched: tells the workspace's
    #     artifact store about authored files written below
    #     ``.mevedel/artifacts/ID/`` (:mod:`mevedel_server.artifacts.learned_writes`). Returns notes
    #     for the model; never refuses (the files are written)."""


async def after_project_write(context: object, paths: Sequence[str]) -> list[str]:
    """``context.after_project_write(paths)`` when the context has one (a
    context without it learns nothing: the default no-op)."""
    hook = getattr(context, "after_project_write", None)
    if hook is None or not paths:
        return []
    return list(await hook(paths) or ())
