"""What the resolver knows about the world a request runs in.

The resolver never looks anything up on its own: the LSP layer (or the CLI)
builds one ``ResolverContext`` per request, naming the workspace, the open
session's directory and live conversation, the session store, and the
configured memory and skill roots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ...addresses import SKILL_ORIGINS
from ...targets import Target
from .docs_root import find_docs_root

if TYPE_CHECKING:
    from ...mcp_client import McpAccess

class LiveHistorySource(Protocol):
    """What ``history://root`` reads: the open session's live projection."""

    @property
    def session_id(self) -> str: ...

    def lines(self) -> list[str]: ...


MemoryLocation = Literal["local", "global"]
MemoryKind = Literal["mevedel", "agents"]

@dataclass(frozen=True, slots=True)
class MemoryRoot:
    """One configured persistent-memory directory (the root of memory://KEY/)."""

    path: Path
    location: MemoryLocation
    kind: MemoryKind

    def __post_init__(self) -> None:
        if self.location not in ("local", "global"):
            raise ValueError(f"memory root location must be local or global, not {self.location!r}")
        if self.kind not in ("mevedel", "agents"):
            raise ValueError(f"memory root kind must be mevedel or agents, not {self.kind!r}")

    @property
    def readable_key(self) -> str:
        """The key this root uses when it is the only root of its kind."""
        return f"{self.location}-{self.kind}"


@dataclass(frozen=True, slots=True)
class SkillRoot:
    """A directory whose subdirectories holding ``SKILL.md`` are skills."""

    path: Path
    origin: str

    def __post_init__(self) -> None:
        if self.origin in SKILL_ORIGINS:
            return
        plugin = self.origin.removeprefix("plugin/")
        if self.origin.startswith("plugin/") and plugin and "/" not in plugin:
            return
        raise ValueError(f"unknown skill origin {self.origin!r}")


@dataclass(frozen=True, slots=True)
class ResolverContext:
    """The request's owners.

    ``session_dir`` is the open session's directory: its ``local/`` is the
    work:// session scope and its ``tool-results/`` holds artifact:// output.
    ``None`` means no session is open, so session-relative addresses answer
    with owner-missing. Nothing here is created by the resolver.

    ``session_writable`` is the front end's answer to "is this session open
    and writable by this client?": an ApplyPatch of a session's ``work://``
    files runs only when it says yes (:mod:`.authority`); ``None`` says no
    to every session.
    """

    workspace_root: Path | None = None
    session_dir: Path | None = None
    memory_roots: tuple[MemoryRoot, ...] = ()
    skill_roots: tuple[SkillRoot, ...] = ()
    docs_root: Path = field(default_factory=find_docs_root)
    completion_limit: int = 200
    #: The open session's live conversation (``history://root``); None when
    #: no session is open here.
    live_history: LiveHistorySource | None = None
    #: The workspace's session store (``history://saved``); None reads the
    #: store under ``workspace_root`` through a local target.
    store_target: Target | None = None
    #: The workspace is reached over SSH through ``store_target``: no local
    #: root, and ``remote_session`` is the open session's id there.
    remote_workspace: bool = False
    remote_session: str | None = None
    #: Whether a session (by id) is open and writable by this client.
    session_writable: Callable[[str], bool] | None = None
    #: The MCP servers this request may reach (``mcp://``); None: none configured.
    mcp: McpAccess | None = None
    #: The session's working directory, workspace-relative ("" for the
    #: root; a Worktree Fork's checkout, ``.worktrees/NAME``): plain paths
    #: are relative to it and must lie below it (:mod:`.project`).
    working_directory: str = ""

    def with_session(self, session_dir: Path | None, live_history: LiveHistorySource | None = None) -> ResolverContext:
        """The same context for another (or no) open session."""
        return dataclasses.replace(self, session_dir=session_dir, live_history=live_history)

    @property
    def session_id(self) -> str | None:
        """The open session's id (the name of its directory)."""
        if self.remote_workspace:
            return self.remote_session
        return None if self.session_dir is None else self.session_dir.name

    @property
    def session_local(self) -> Path | None:
        return None if self.session_dir is None else self.session_dir / "local"

    @property
    def tool_results(self) -> Path | None:
        return None if self.session_dir is None else self.session_dir / "tool-results"

    @property
    def shared_root(self) -> Path | None:
        return None if self.workspace_root is None else self.workspace_root / ".mevedel" / "shared"
