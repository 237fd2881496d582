"""agent:// reads the session's retained-agent registry: the listing in path
order, a settled result with its outcome, the explicit NOT READY status of an
agent at work, JSON selection, and the unavailable errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import ReadOptions
from mevedel_server.resources.engine.resolver import execute, prepare
from mevedel_server.store.content.sidecar import (
    AgentActivity,
    AgentResult,
    RetainedAgent,
)

TURN_ID = "0123456789abcdef"


def entry(path: str, **fields) -> RetainedAgent:
    return RetainedAgent(path=path, agent=fields.pop("agent", "codex"), fingerprint="a" * 64, machine="here",
                         created_turn=1, created_turn_id=TURN_ID, **fields)


class Live:
    """An open session's live source, as ``LiveHistory`` gives it."""

    session_id = "s"

    def __init__(self, agents: list[RetainedAgent]) -> None:
        self._agents = agents

    def agents(self) -> list[RetainedAgent]:
        return self._agents

    def lines(self) -> list[str]:
        return []


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    registry = [
        entry("reviewer", result=AgentResult(turn=2, outcome="completed", text='{"issues": [{"line": 3}], "ok": false}')),
        entry("reviewer/search", agent="claude", result=AgentResult(turn=2, outcome="interrupted", reason="cancelled with its caller's turn", text="partial")),
        entry("worker", activity=AgentActivity.ACTIVE, result=AgentResult(turn=1, outcome="completed", text="old result")),
        entry("zero"),
    ]
    return ResolverContext(workspace_root=tmp_path, session_dir=tmp_path / "session", live_history=Live(registry))


async def read(address: str, context: ResolverContext, **options) -> str:
    return (await execute(prepare(Operation.READ, address, ReadOptions(**options), context))).text


async def test_the_listing_is_in_path_order(context):
    text = await read("agent://", context)
    assert [line.split("\t")[1] for line in text.splitlines()] == [
        "agent://root/reviewer", "agent://root/reviewer/search", "agent://root/worker", "agent://root/zero"]


async def test_a_settled_result_has_its_outcome_and_whole_payload(context):
    text = await read("agent://root/reviewer/search", context)
    assert "status: interrupted (cancelled with its caller's turn)" in text and "agent: claude" in text and "partial" in text
    assert '{"issues": [{"line": 3}], "ok": false}' in await read("agent://root/reviewer", context)


async def test_an_agent_at_work_is_not_ready_and_shows_no_stale_result(context):
    text = await read("agent://root/worker", context)
    assert "NOT READY: worker (codex) is working on a task" in text and "history is not yet available" in text
    assert "old result" not in text
    # Pagination cannot hide the status.
    assert "NOT READY" in await read("agent://root/worker", context, limit=1)
    assert "old result" not in await read("agent://root/worker#/x", context)


async def test_json_selection(context):
    selected = await read("agent://root/reviewer#/issues/0/line", context)
    assert selected.splitlines()[0].endswith("status: completed") and selected.splitlines()[-1] == "     5\t3"
    with pytest.raises(AddressError) as caught:
        await read("agent://root/reviewer/search#/x", context)
    assert caught.value.kind is ErrorKind.UNAVAILABLE and "not JSON" in caught.value.reason
    with pytest.raises(AddressError) as caught:
        await read("agent://root/reviewer#/nothing", context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET


async def test_missing_agents_and_agents_without_a_result_are_unavailable(context):
    for address, reason in (("agent://root/nobody", "has no retained agent nobody"), ("agent://root/zero", "no settled result")):
        with pytest.raises(AddressError) as caught:
            await read(address, context)
        assert caught.value.kind is ErrorKind.UNAVAILABLE and reason in caught.value.reason


async def test_no_retained_agents_is_an_empty_listing_that_says_so(tmp_path):
    context = ResolverContext(workspace_root=tmp_path, session_dir=tmp_path / "session", live_history=Live([]))
    result = await execute(prepare(Operation.READ, "agent://", ReadOptions(), context))
    assert result.text == "" and "no retained agents" in result.notice


async def test_without_a_session_it_is_owner_missing(tmp_path):
    with pytest.raises(AddressError) as caught:
        await read("agent://", ResolverContext(workspace_root=tmp_path))
    assert caught.value.kind is ErrorKind.OWNER_MISSING


def test_completion_offers_the_retained_agents(context):
    from mevedel_server.resources.navigation.completion import complete

    labels = [(c.label, c.detail) for c in complete("agent://root/rev", context)]
    assert labels == [("agent://root/reviewer", "codex: completed"), ("agent://root/reviewer/search", "claude: interrupted")]
    assert ("agent://root/worker", "codex: working") in [(c.label, c.detail) for c in complete("agent://", context)]
    scheme = next(c for c in complete("ag", context) if c.label == "agent://")
    assert scheme.available
    history = [c.label for c in complete("history://root/rev", context)]
    assert history == ["history://root/reviewer", "history://root/reviewer/search"]
