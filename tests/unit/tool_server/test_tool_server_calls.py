"""``serve(context, ...)`` with the official MCP client over in-memory
streams: the ToolContext contract (a fresh resolver context per call; the
pre-write hook gets the project paths, not addresses, and a refusal there
touches nothing) and the server answering after a failing call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from mevedel_server.resources import ResolverContext
from mevedel_server.tool_server.context import ToolContext, ToolRefused
from mevedel_server.tool_server.server import serve

SID = "2026-07-19T09-47-bf87b5dd793a"


class RecordingContext:
    """A bound workspace and session whose pre-write hook records what it
    was given (and refuses or fails when told to)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.session_open = True
        self.calls = 0
        self.recorded: list[list[str]] = []
        self.refuse: str | None = None
        self.fail = False

    def resolver_context(self) -> ResolverContext:
        self.calls += 1
        session = self.workspace / ".mevedel" / "sessions" / SID if self.session_open else None
        return ResolverContext(workspace_root=self.workspace, session_dir=session, session_writable=lambda sid: sid == SID)

    async def before_project_write(self, paths: Sequence[str]) -> None:
        if self.fail:
            raise RuntimeError("the checkpoint store is gone")
        if self.refuse is not None:
            raise ToolRefused(self.refuse)
        self.recorded.append(list(paths))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "old.py").write_text("old\n")
    (root / ".mevedel" / "sessions" / SID).mkdir(parents=True)
    return root


async def run_with(context: RecordingContext, body) -> None:
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        async with anyio.create_task_group() as group:
            group.start_soon(serve, context, *server_streams)
            async with ClientSession(*client_streams) as session:
                await session.initialize()
                await body(session)
            group.cancel_scope.cancel()


async def call(session: ClientSession, name: str, **arguments) -> tuple[bool, str]:
    result = await session.call_tool(name, arguments)
    return bool(result.isError), result.content[0].text  # type: ignore[union-attr]


def patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def test_the_recording_context_is_a_tool_context(workspace):
    assert isinstance(RecordingContext(workspace), ToolContext)


async def test_the_hook_gets_workspace_relative_project_paths_before_the_write(workspace):
    context = RecordingContext(workspace)

    async def body(session: ClientSession) -> None:
        text = patch(
            "*** Add File: work://plan.md\n+p\n",
            f"*** Update File: {workspace}/src/old.py\n*** Move to: src/new.py\n@@\n-old\n+new\n",
            "*** Add File: ./docs/../README.md\n+r\n",
        )
        assert await call(session, "ApplyPatch", patch=text) == (
            False,
            # Each file by its workspace-relative path, however the patch spelled it.
            "A work://plan.md\nR src/old.py -> src/new.py\nA README.md",
        )
        # Addresses only: nothing for the hook.
        assert await call(session, "ApplyPatch", patch=patch("*** Add File: work://shared/n.md\n+n\n")) == (False, "A work://shared/n.md")

    await run_with(context, body)
    assert context.recorded == [["README.md", "src/new.py", "src/old.py"]]
    assert (workspace / "src" / "new.py").read_text() == "new\n" and not (workspace / "src" / "old.py").exists()


async def test_a_refusal_or_failure_of_the_hook_touches_nothing_and_the_server_goes_on(workspace):
    context = RecordingContext(workspace)
    text = patch("*** Add File: work://plan.md\n+p\n", "*** Add File: src/added.py\n+a\n")

    async def body(session: ClientSession) -> None:
        context.refuse = "src/added.py: no turn is running to record it"
        assert await call(session, "ApplyPatch", patch=text) == (True, "src/added.py: no turn is running to record it")
        context.refuse, context.fail = None, True
        failed, said = await call(session, "ApplyPatch", patch=text)
        assert failed and said == "ApplyPatch: internal error (RuntimeError); the call was not completed"
        assert "checkpoint store" not in said
        assert await call(session, "Read", path="src/old.py") == (False, "     1\told")

    await run_with(context, body)
    assert not (workspace / "src" / "added.py").exists()
    assert not (workspace / ".mevedel" / "sessions" / SID / "local").exists()


async def test_a_patch_refused_for_authority_never_reaches_the_hook(workspace):
    context = RecordingContext(workspace)
    context.session_open = False

    async def body(session: ClientSession) -> None:
        failed, said = await call(session, "ApplyPatch", patch=patch("*** Add File: src/added.py\n+a\n"))
        assert failed and said.startswith("src/added.py: owner-missing: no session is open")

    await run_with(context, body)
    assert context.recorded == [] and not (workspace / "src" / "added.py").exists()


async def test_every_call_asks_for_a_fresh_context(workspace):
    context = RecordingContext(workspace)
    (workspace / ".mevedel" / "sessions" / SID / "local").mkdir()
    (workspace / ".mevedel" / "sessions" / SID / "local" / "n.md").write_text("note\n")

    async def body(session: ClientSession) -> None:
        assert await call(session, "Read", path="work://n.md") == (False, "     1\tnote")
        context.session_open = False
        failed, said = await call(session, "Read", path="work://n.md")
        assert failed and said.startswith("work://n.md: owner-missing: no session is open")

    await run_with(context, body)
    assert context.calls >= 3  # the roster, then one per call
