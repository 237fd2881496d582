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

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from ..mcp_client import Approvals, McpAccess, McpConnections, McpServerSpec, servers_from_setting
from ..targets import LocalTarget, Target, TargetError

if TYPE_CHECKING:
    from .server import MevedelLanguageServer
    from .workspaces import Folder

_log = logging.getLogger(__name__)

ALLOW = "Allow"
DENY = "Deny"
HOW_TO_APPROVE = "read mcp://{name} in the editor and answer Allow to the question it asks"


def connections(ls: MevedelLanguageServer) -> McpConnections:
    found = getattr(ls, "mcp_connections", None)
    if found is None:
        found = McpConnections(
            call_timeout=float(ls.settings.mcp_call_timeout_seconds),
            start_timeout=float(ls.settings.mcp_start_timeout_seconds),
        )
        ls.mcp_connections = found  # type: ignore[attr-defined]
    return found


async def _ask(ls: MevedelLanguageServer, spec: McpServerSpec) -> bool:
    question = types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=(
            f"The workspace's .mcp.json asks to start MCP server '{spec.name}' with the command: "
            f"{spec.command_line} -- Allow it to run? (Remembered for this exact command in this workspace.)"
        ),
        actions=[types.MessageActionItem(title=ALLOW), types.MessageActionItem(title=DENY)],
    )
    waiting = ls.settings.permission_timeout_seconds
    try:
        answer = await asyncio.wait_for(ls.window_show_message_request_async(question), waiting)
    except asyncio.TimeoutError:
        _log.info("MCP server %s: the approval question had no answer within %s s: Deny", spec.name, waiting)
        return False
    except Exception as error:  # an error answer is no consent
        _log.info("MCP server %s: the approval question was answered with an error (%s): Deny", spec.name, error)
        return False
    title = answer.get("title") if isinstance(answer, dict) else getattr(answer, "title", None)
    return title == ALLOW


def access(ls: MevedelLanguageServer, folder: Folder | None) -> McpAccess | None:
    """What a request in ``folder`` may reach of MCP (None: nothing is
    configured and there is no workspace to hold a ``.mcp.json``)."""
    try:
        settings_servers = servers_from_setting(ls.settings.mcp_servers)
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
            return LocalTarget(folder.root)
        except TargetError:
            return None

    async def ask(spec: McpServerSpec) -> bool | None:
        return await _ask(ls, spec)

    return McpAccess(
        connections(ls),
        settings_servers,
        approvals=Approvals(),
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

    async def stop_servers() -> None:
        await connections(ls).close_all()

    ls.on_settings_changed.append(settings_changed)
    ls.on_exit.append(stop_servers)
