"""The tool server's instructions: the availability roster follows the
live context by completion's rules, and advertises no family it cannot
serve."""

from __future__ import annotations

from pathlib import Path

from mevedel_server.mcp_client.access import McpAccess
from mevedel_server.mcp_client.config import McpServerSpec
from mevedel_server.mcp_client.connections import McpConnections
from mevedel_server.resources import MemoryRoot, ResolverContext, SkillRoot
from mevedel_server.tool_server.roster import roster, usable

SID = "2026-07-19T09-47-bf87b5dd793a"


class _Live:
    session_id = SID

    def lines(self) -> list[str]:
        return []


def test_without_a_workspace_only_the_documentation():
    context = ResolverContext()
    assert usable(context) == ["mevedel://"]
    assert "No session is bound" in roster(context)


def test_a_workspace_adds_its_own_families_and_a_session_the_session_ones(tmp_path: Path):
    workspace = ResolverContext(workspace_root=tmp_path)
    assert usable(workspace) == ["mevedel://", "work://shared/", "history://saved"]
    session = workspace.with_session(tmp_path / ".mevedel" / "sessions" / SID)
    assert usable(session) == ["mevedel://", "work://", "work://shared/", "artifact://", "history://saved"]
    live = workspace.with_session(tmp_path / ".mevedel" / "sessions" / SID, _Live())
    assert "history://root" in usable(live)
    text = roster(live)
    assert "- history://root -- " in text and "No session is bound" not in text


def test_configured_roots_and_mcp_servers_are_advertised_only_when_present(tmp_path: Path):
    base = ResolverContext(workspace_root=tmp_path)
    assert not {"memory://root", "skill://", "mcp://"} & set(usable(base))
    configured = ResolverContext(
        workspace_root=tmp_path,
        memory_roots=(MemoryRoot(tmp_path / "memory", "local", "mevedel"),),
        skill_roots=(SkillRoot(tmp_path / "skills", "local-mevedel"),),
        mcp=McpAccess(McpConnections(log_dir=tmp_path / "logs"), {"time": McpServerSpec("time", "mcp-server-time")}),
    )
    assert {"memory://root", "skill://", "mcp://"} <= set(usable(configured))
    for never in ("agent://", "shared://", "memory://journal/"):
        assert never not in roster(configured)
