"""``mcp://`` in the language server: the one :class:`McpConnections` of
this server (stopped in an exit hook), the ``mcpServers``,
``mcpCallTimeoutSeconds`` and ``mcpStartTimeoutSeconds`` settings, and the approval question for a
workspace's ``.mcp.json`` servers.

A workspace server starts only after its exact command was approved: the
first read that needs it asks through ``window/showMessageRequest``
(actions ``Allow`` / ``Deny``; no answer within
``permissionTimeoutSeconds``, a dismissal or an error is Deny). An answer
``Allow`` is remembered outside the workspace
(:mod:`mevedel_server.mcp_client.approvals`). Completion and hover never
ask and never start anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import mcp_client, targets
from .questions import consents

if TYPE_CHECKING:
    from ..mcp_client import McpAccess, McpConnections, McpServerSpec
    from ..targets import Target
    from .server import MevedelLanguageServer
    from .workspaces import Folder

ALLOW = "Allow"
DENY = "Deny"
HOW_TO_APPROVE = "read mcp://{name} in the editor and answer Allow to the question it asks"


def connections(ls: MevedelLanguageServer) -> McpConnections:
    found = getattr(ls, "mcp_connections", None)
    if found is None:
        found = mcp_client.McpConnections(
            call_timeout=float(ls.settings.mcp_call_timeout_seconds),
            start_timeout=float(ls.settings.mcp_start_timeout_seconds),
            max_message_bytes=ls.settings.mcp_max_message_bytes,
        )
        ls.mcp_connections = found  # type: ignore[attr-defined]
    return found


async def _ask(ls: MevedelLanguageServer, spec: McpServerSpec) -> bool:
    return await consents(
        ls,
        f"The workspace's .mcp.json asks to start MCP server '{spec.name}' with the command: "
        f"{spec.runs} -- Allow it to run? (Remembered for this exact command in this workspace.)",
        ALLOW,
        DENY,
        ls.settings.permission_timeout_seconds,
        f"MCP server {spec.name}: the approval question",
    )


def access(ls: MevedelLanguageServer, folder: Folder | None) -> McpAccess | None:
    """What a request in ``folder`` may reach of MCP (None: nothing is
    configured and there is no workspace to hold a ``.mcp.json``)."""
    try:
        settings_servers = mcp_client.servers_from_setting(ls.settings.mcp_servers)
    except ValueError:  # refused settings never get here; be safe
        settings_servers = {}
    if folder is None and not settings_servers:
        return None
    workspace_key = None if folder is None else (folder.remote.uri if folder.remote is not None else str(folder.root))

    def target() -> Target | None:
        if folder is None:
            return None
        known = ls.sessions.target(folder) if ls.sessions is not None and folder.remote is None else None
        if known is not None:
            return known
        if folder.remote is not None:
            return ls.sessions.service(folder).target if ls.sessions is not None else None
        try:
            return targets.LocalTarget(folder.root)
        except targets.TargetError:
            return None

    async def ask(spec: McpServerSpec) -> bool | None:
        return await _ask(ls, spec)

    return mcp_client.McpAccess(
        connections(ls),
        settings_servers,
        approvals=mcp_client.Approvals(),
        workspace_key=workspace_key,
        workspace_target=target,
        cwd=None if folder is None or folder.remote is not None else str(folder.root),
        ask=ask,
        how_to_approve=HOW_TO_APPROVE,
    )


def register(ls: MevedelLanguageServer) -> None:
    def settings_changed() -> None:
        connections(ls).call_timeout = float(ls.settings.mcp_call_timeout_seconds)
        connections(ls).start_timeout = float(ls.settings.mcp_start_timeout_seconds)
        connections(ls).max_message_bytes = ls.settings.mcp_max_message_bytes

    async def stop_servers() -> None:
        await connections(ls).close_all()

    ls.on_settings_changed.append(settings_changed)
    ls.on_exit.append(stop_servers)
