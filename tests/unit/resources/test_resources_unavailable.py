"""Families without an owner in mevedel-lsp yet: valid addresses, distinct
execution errors, never a malformed-address error. (mcp:// has its owner:
tests/unit/test_mcp_client.py; shared://: tests/unit/test_resources_shared.py;
agent://: tests/unit/test_resources_agent.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import ReadOptions
from mevedel_server.resources.engine.resolver import execute, prepare


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    (tmp_path / "session").mkdir()
    return ResolverContext(workspace_root=tmp_path, session_dir=tmp_path / "session", docs_root=tmp_path / "docs")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("memory://journal/", "no published journal entries"),
    ],
)
async def test_each_family_names_its_missing_owner(context, address, reason):
    attempt = prepare(Operation.READ, address, ReadOptions(), context)
    assert attempt.facts[0].backing == "virtual"
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert reason in caught.value.reason
    assert str(caught.value).startswith(address + ": ")


async def test_without_a_session_agent_and_history_root_are_owner_missing(context):
    lonely = context.with_session(None)
    for address in ("agent://root/x", "history://root"):
        with pytest.raises(AddressError) as caught:
            await execute(prepare(Operation.READ, address, ReadOptions(), lonely))
        assert caught.value.kind is ErrorKind.OWNER_MISSING
