"""describe (hover) and backing_file (go-to-definition)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Family, Operation
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.navigation.describe import backing_file, describe


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    workspace, session = tmp_path / "ws", tmp_path / "session"
    (session / "local").mkdir(parents=True)
    (session / "local" / "notes.md").write_text("12345")
    (session / "tool-results" / "executions").mkdir(parents=True)
    (session / "tool-results" / "executions" / "old.log.gz").write_bytes(gzip.compress(b"x"))
    workspace.mkdir()
    return ResolverContext(workspace_root=workspace, session_dir=session, docs_root=tmp_path / "docs")


async def test_an_existing_file_exists_with_its_size(context):
    found = await describe("work://notes.md", context)
    assert (found.status, found.kind, found.size, found.family) == ("exists", "file", 5, Family.WORK)
    assert Operation.APPLY_PATCH in found.operations


async def test_missing_unavailable_and_discovery_statuses(context, tmp_path):
    assert (await describe("work://gone.md", context)).status == "missing"
    assert (await describe("work://", context)).status == "discovery"
    assert (await describe("memory://root", context)).status == "discovery"
    agent = await describe("agent://root/x", context)
    assert agent.status == "unavailable" and "not a saved session" in agent.reason
    no_session = await describe("work://notes.md", context.with_session(None))
    assert no_session.status == "unavailable" and str(tmp_path) not in (no_session.reason or "")
    shared = await describe("work://shared", context)
    assert shared.status == "discovery" and not (context.workspace_root / ".mevedel").exists()


async def test_compressed_log_exists_without_a_size(context):
    found = await describe("artifact://executions/old.log", context)
    assert (found.status, found.kind, found.size) == ("exists", "file", None)


async def test_describe_of_a_malformed_address_raises(context):
    with pytest.raises(AddressError) as caught:
        await describe("work://a/../b", context)
    assert caught.value.kind is ErrorKind.MALFORMED_ADDRESS


def test_backing_file_returns_the_contained_file_only(context, tmp_path):
    assert backing_file("work://notes.md", context) == (context.session_dir / "local" / "notes.md").resolve()
    assert backing_file("work://gone.md", context) is None
    assert backing_file("work://", context) is None
    assert backing_file("artifact://executions/old.log", context) is None  # no plain file to visit
    (tmp_path / "secret").write_text("s")
    (context.session_dir / "local" / "leak").symlink_to(tmp_path / "secret")
    assert backing_file("work://leak", context) is None
    assert backing_file("not an address", context) is None


async def test_describe_reads_no_content(context, monkeypatch):
    import builtins

    def refuse(*args, **kwargs):
        raise AssertionError("describe opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert (await describe("work://notes.md", context)).size == 5
    assert (await describe("artifact://executions/old.log", context)).status == "exists"
