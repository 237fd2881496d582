"""What one request may reach of MCP: the servers configured for its
workspace, whether each may run, and how the front end asks the user.

Servers come from the ``mcpServers`` setting (the user's own, trusted) and
the workspace's ``.mcp.json`` (read through the workspace's Target, fresh
for every operation that needs it; never by completion or hover, which see
only what an earlier operation observed). A setting's server shadows a
workspace server of the same name. A workspace server runs only once the
user approved its exact command (:mod:`.approvals`): the front end's
``ask`` is called when one is needed (the editor's prompt); without one
(the CLI) the refusal says how to approve (``how_to_approve``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import shutil
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..targets import ControlProgram, ReadFiles, SshLocation, Status, Target
from .approvals import Approvals
from .config import (
    MAX_WORKSPACE_FILE_BYTES,
    WORKSPACE_FILE,
    McpServerSpec,
    WorkspaceServers,
    parse_workspace_file,
)
from .connections import Known, McpConnections, ResourceListing
from .errors import McpClientError

Standing = Literal["ready", "needs-approval", "invalid"]

#: The most bytes of one workspace file an approval pins by its digest
#: (a larger one is pinned as unreadable: it runs only until it changes
#: into something readable).
PINNED_FILE_MAX_BYTES = 64 * 1024 * 1024


def _workspace_names(word: str, root: str | None) -> list[str]:
    """The workspace-relative paths a command-line word may name: the word
    itself and the value of ``--option=value``, relative to the workspace
    root or absolute below it (``root``, when the workspace is local)."""
    found = []
    for candidate in (word, word.partition("=")[2] if word.startswith("-") else ""):
        if not candidate or "\x00" in candidate:
            continue
        if posixpath.isabs(candidate):
            if root is None:
                continue
            relative = posixpath.relpath(posixpath.normpath(candidate), root)
        else:
            relative = posixpath.normpath(candidate)
        if relative not in (".", "") and not relative.startswith("../") and relative != "..":
            found.append(relative)
    return found


def _resolved(spec: McpServerSpec, root: str | None, files: tuple[tuple[str, str], ...]) -> str | None:
    """The program ``spec.command`` runs: a workspace file it names, else
    what ``PATH`` (the server's environment's) finds."""
    if "/" in spec.command:
        named = _workspace_names(spec.command, root)
        if named and any(path == named[0] for path, _ in files):
            return named[0]
        return spec.command
    path = spec.env.get("PATH", os.environ.get("PATH"))
    return shutil.which(spec.command, path=path)


@dataclass(frozen=True)
class ServerEntry:
    name: str
    spec: McpServerSpec | None
    origin: Literal["settings", "workspace"]
    standing: Standing
    #: Why an ``invalid`` entry cannot run.
    problem: str | None = None


@dataclass
class McpAccess:
    connections: McpConnections
    settings_servers: Mapping[str, McpServerSpec] = field(default_factory=dict)
    approvals: Approvals | None = None
    #: Identity of the workspace for approvals (its root, or its ssh:// address).
    workspace_key: str | None = None
    #: The workspace's Target (where ``.mcp.json`` is read), made only when
    #: an operation needs it.
    workspace_target: Callable[[], Target | None] | None = None
    #: The working directory servers start in (a local workspace's root).
    cwd: str | None = None
    #: The front end's question "may this workspace server run?" (None, or
    #: an answer None: it cannot ask; the refusal says ``how_to_approve``).
    ask: Callable[[McpServerSpec], Awaitable[bool | None]] | None = None
    #: How the user approves a workspace server in this front end ({name} is filled in).
    how_to_approve: str = "approve it first"

    # -- configuration ------------------------------------------------------------

    async def _workspace_file(self) -> WorkspaceServers:
        if self.workspace_target is None:
            return WorkspaceServers({}, {})
        program = ControlProgram([ReadFiles("", names=(WORKSPACE_FILE,), max_bytes=MAX_WORKSPACE_FILE_BYTES)])
        try:
            target = self.workspace_target()
            if target is None:
                return WorkspaceServers({}, {})
            result = await target.run(program)
        except Exception as error:  # an unreachable SSH host: the file is unknown, not absent
            found = WorkspaceServers({}, {}, f"{WORKSPACE_FILE} could not be read ({type(error).__name__})")
        else:
            reads = result[0].value if result[0].ok else ()
            read = reads[0] if reads else None
            if read is None or read.status is Status.ABSENT:
                found = WorkspaceServers({}, {})
            elif not read.ok:
                found = WorkspaceServers({}, {}, f"{WORKSPACE_FILE} could not be read ({read.reason or read.status.value})")
            elif read.data is None:
                found = WorkspaceServers({}, {}, f"{WORKSPACE_FILE} is larger than {MAX_WORKSPACE_FILE_BYTES} bytes")
            else:
                found = parse_workspace_file(read.data)
                if found.servers:
                    found = dataclasses.replace(found, servers=await self._pinned(target, found.servers))
        if self.workspace_key is not None:
            self.connections.observed[self.workspace_key] = found
        return found

    async def _pinned(self, target: Target, servers: Mapping[str, McpServerSpec]) -> dict[str, McpServerSpec]:
        """Each workspace server with what its approval covers beyond its
        command line: the program the command resolves to, and the sha256
        of every workspace file its words name (``./bin/srv.sh``, the
        ``tool.py`` of ``python tool.py``, the value of ``--config=x``)."""
        named: dict[str, dict[str, str]] = {}
        for name, spec in servers.items():
            words = [spec.command, *spec.args]
            named[name] = {word: path for word in words for path in _workspace_names(word, self.cwd)}
        wanted = sorted({path for paths in named.values() for path in paths.values()})
        digests: dict[str, str] = {}
        if wanted:
            try:
                result = await target.run(ControlProgram([ReadFiles("", names=tuple(wanted), max_bytes=PINNED_FILE_MAX_BYTES, budget=PINNED_FILE_MAX_BYTES)]))
                reads = result[0].value if result[0].ok else ()
            except Exception:
                reads = ()
            for path, read in zip(wanted, reads):
                if read.ok and read.data is not None:
                    digests[path] = hashlib.sha256(read.data).hexdigest()
                elif read.ok:
                    digests[path] = f"larger than {PINNED_FILE_MAX_BYTES} bytes: {read.size}"
                elif read.status is not Status.ABSENT:
                    digests[path] = f"unreadable: {read.reason or read.status.value}"
        pinned: dict[str, McpServerSpec] = {}
        for name, spec in servers.items():
            files = tuple(sorted({(path, digests[path]) for path in named[name].values() if path in digests}))
            program = _resolved(spec, self.cwd, files)
            pinned[name] = dataclasses.replace(spec, program=program, files=files)
        return pinned

    def _approved(self, spec: McpServerSpec, fresh: bool) -> bool:
        """Whether the user approved ``spec`` here: read from the approvals
        file when ``fresh``, else as last seen (completion, hover)."""
        if self.approvals is None or self.workspace_key is None:
            return False
        seen = (self.workspace_key, spec.name, spec.fingerprint)
        if not fresh:
            return seen in self.connections.approved_seen
        approved = self.approvals.approved(self.workspace_key, spec)
        if approved:
            self.connections.approved_seen.add(seen)
        else:
            self.connections.approved_seen.discard(seen)
        return approved

    def _entries(self, workspace: WorkspaceServers, *, fresh: bool = True) -> list[ServerEntry]:
        entries = [ServerEntry(name, spec, "settings", "ready") for name, spec in self.settings_servers.items()]
        for name, spec in workspace.servers.items():
            if name in self.settings_servers:
                continue
            approved = self._approved(spec, fresh)
            entries.append(ServerEntry(name, spec, "workspace", "ready" if approved else "needs-approval"))
        for name, problem in workspace.problems.items():
            if name not in self.settings_servers:
                entries.append(ServerEntry(name, None, "workspace", "invalid", problem))
        return entries

    async def servers(self) -> tuple[list[ServerEntry], str | None]:
        """Every configured server now (``.mcp.json`` read fresh), and a
        problem of the workspace file as a whole."""
        workspace = await self._workspace_file()
        return self._entries(workspace), workspace.file_problem

    def known_servers(self) -> list[ServerEntry]:
        """The servers as last observed: no I/O (completion, hover)."""
        workspace = self.connections.observed.get(self.workspace_key or "", WorkspaceServers({}, {}))
        return self._entries(workspace, fresh=False)

    def known(self, entry: ServerEntry) -> Known | None:
        return None if entry.spec is None else self.connections.known(entry.spec, self.cwd)

    # -- use ------------------------------------------------------------------------

    async def _usable(self, name: str) -> McpServerSpec:
        entries, file_problem = await self.servers()
        entry = next((e for e in entries if e.name == name), None)
        if entry is None:
            configured = ", ".join(sorted(e.name for e in entries)) or "none"
            extra = f"; {file_problem}" if file_problem else ""
            raise McpClientError("not-configured", f"no MCP server named {name!r} is configured (configured: {configured}){extra}")
        if entry.spec is None:
            raise McpClientError("not-configured", f"the {WORKSPACE_FILE} entry {name!r} cannot be used: {entry.problem}")
        if entry.standing == "needs-approval":
            await self._approve(entry.spec)
        return entry.spec

    async def _approve(self, spec: McpServerSpec) -> None:
        what = f"MCP server {spec.name!r} comes from the workspace's {WORKSPACE_FILE} and runs `{spec.runs}`"
        if self.ask is None or self.approvals is None or self.workspace_key is None:
            raise McpClientError("needs-approval", f"{what}; it needs your approval: {self.how_to_approve.format(name=spec.name)}")
        answer = await self.ask(spec)
        if answer is None:  # this front end cannot ask about this one
            raise McpClientError("needs-approval", f"{what}; it needs your approval: {self.how_to_approve.format(name=spec.name)}")
        if not answer:
            raise McpClientError("needs-approval", f"{what}; it was not approved, so it was not started")
        self.approvals.approve(self.workspace_key, spec)
        self.connections.approved_seen.add((self.workspace_key, spec.name, spec.fingerprint))

    async def list(self, name: str) -> ResourceListing:
        spec = await self._usable(name)
        return await self.connections.list(spec, self.cwd)

    async def read(self, name: str, uri: str):  # -> mcp.types.ReadResourceResult
        spec = await self._usable(name)
        result = await self.connections.read(spec, self.cwd, uri)
        await self.connections.warm(spec, self.cwd)
        return result


#: How a process that cannot ask anyone (``mevedel mcp``, an agent's tools
#: under ``mevedel prompt``) says a workspace server is approved.
APPROVE_IN_A_TERMINAL = "approve it once in a terminal: mevedel read mcp://{name} --approve-mcp {name}"


def configured_access(
    workspace: Path | SshLocation,
    config_file: Path,
    *,
    approving: Iterable[str] = (),
    how_to_approve: str = "run it again with --approve-mcp {name} (approves this exact command)",
    remote: Target | None = None,
    approvals: Path | None = None,
) -> McpAccess:
    """The access of a command-line front end (``mevedel read``, and any
    other process bound to one workspace): the servers of its config
    file (``mcpServers``, ``mcpCallTimeoutSeconds``,
    ``mcpStartTimeoutSeconds``), the workspace's ``.mcp.json``, and
    ``approving`` -- the workspace servers the user approved on the
    command line. An SSH workspace's ``.mcp.json`` is read through its
    target ``remote``, and its servers run here, as the LSP runs them.
    Approvals are kept in the file ``approvals`` (default
    :func:`.approvals.default_approvals_path`). Its connections are its
    own: close them
    (``access.connections.close_all()``) before the process exits. Raises
    ValueError naming the file and key of a bad configuration."""
    from ..targets import LocalTarget, TargetError
    from .config import load_cli_message_limit, load_cli_servers

    servers, call_timeout, start_timeout = load_cli_servers(config_file)
    limit = load_cli_message_limit(config_file)
    approved_now = frozenset(approving)

    async def ask(spec: McpServerSpec) -> bool | None:
        return True if spec.name in approved_now else None

    def target() -> Target | None:
        if isinstance(workspace, SshLocation):
            return remote
        try:
            return LocalTarget(workspace)
        except TargetError:
            return None

    return McpAccess(
        McpConnections(call_timeout=call_timeout, start_timeout=start_timeout,
                       **({"max_message_bytes": limit} if limit is not None else {})),
        servers,
        approvals=Approvals(approvals),
        workspace_key=workspace.uri if isinstance(workspace, SshLocation) else str(workspace),
        workspace_target=target,
        cwd=None if isinstance(workspace, SshLocation) else str(workspace),
        ask=ask,
        how_to_approve=how_to_approve,
    )
