"""artifact://: read-only persisted output, gzip-retired execution logs under
their logical handles, discovery without storage, owner errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.resources.engine.resolver import execute, prepare


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    session = tmp_path / "session"
    session.mkdir()
    return ResolverContext(workspace_root=tmp_path, session_dir=session, docs_root=tmp_path / "docs")


@pytest.fixture()
def results(context: ResolverContext) -> Path:
    root = context.session_dir / "tool-results"
    (root / "executions").mkdir(parents=True)
    (root / "call-1.txt").write_text("persisted output\n")
    (root / "executions" / "live.log").write_text("still running\n")
    (root / "executions" / "old.log.gz").write_bytes(gzip.compress(b"retired line 1\nretired needle\n"))
    (root / "executions" / ".old.log.gz.tmp").write_bytes(b"partial")
    return root


async def run(operation, address, options, context):
    return await execute(prepare(operation, address, options, context))


def shown(result) -> list[str]:
    return [line.split("\t", 1)[1] for line in result.text.splitlines()]


async def test_bare_listing_shows_logical_handles_only(context, results):
    result = await run(Operation.READ, "artifact://", ReadOptions(), context)
    assert shown(result) == ["artifact://call-1.txt", "artifact://executions/live.log", "artifact://executions/old.log"]


async def test_a_gzip_execution_log_reads_decompressed_under_its_log_handle(context, results):
    result = await run(Operation.READ, "artifact://executions/old.log", ReadOptions(offset=2), context)
    assert result.text == "     2\tretired needle"
    assert result.total_lines == 2


async def test_glob_and_grep_use_logical_names_and_uncompressed_text(context, results):
    glob = await run(Operation.GLOB, "artifact://", GlobOptions(pattern="**/*.log"), context)
    assert glob.matches == ("artifact://executions/live.log", "artifact://executions/old.log")
    grep = await run(Operation.GREP, "artifact://executions", GrepOptions(pattern="needle"), context)
    assert [(m.address, m.line) for m in grep.matches] == [("artifact://executions/old.log", 2)]
    explicit = await run(Operation.GREP, "artifact://executions/old.log", GrepOptions(pattern="retired"), context)
    assert len(explicit.matches) == 2


async def test_physical_gz_names_are_not_aliases(context, results):
    for operation, options in (
        (Operation.READ, ReadOptions()),
        (Operation.GREP, GrepOptions(pattern="x")),
        (Operation.GLOB, GlobOptions()),
    ):
        with pytest.raises(AddressError) as caught:
            await run(operation, "artifact://executions/old.log.gz", options, context)
        assert caught.value.kind is ErrorKind.UNAVAILABLE
        assert "artifact://executions/old.log" in caught.value.reason


async def test_a_raw_log_outranks_its_gzip_twin(context, results):
    (results / "executions" / "live.log.gz").write_bytes(gzip.compress(b"stale\n"))
    result = await run(Operation.READ, "artifact://executions/live.log", ReadOptions(), context)
    assert result.text == "     1\tstill running"
    listing = await run(Operation.READ, "artifact://", ReadOptions(), context)
    assert shown(listing).count("artifact://executions/live.log") == 1


async def test_private_temporaries_are_never_artifacts(context, results):
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "artifact://executions/.old.log.gz.tmp", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET


async def test_before_any_output_discovery_is_empty_and_creates_nothing(context):
    for operation, options in ((Operation.READ, ReadOptions()), (Operation.GLOB, GlobOptions()), (Operation.GREP, GrepOptions(pattern="a"))):
        result = await run(operation, "artifact://", options, context)
        assert result.notice and "no persisted output yet" in result.notice
    assert not (context.session_dir / "tool-results").exists()


async def test_explicit_missing_handle_is_missing_target(context, results):
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "artifact://call-9.txt", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET


async def test_without_a_session_artifacts_are_owner_missing(context):
    for address in ("artifact://", "artifact://call-1.txt"):
        with pytest.raises(AddressError) as caught:
            await run(Operation.READ, address, ReadOptions(), context.with_session(None))
        assert caught.value.kind is ErrorKind.OWNER_MISSING
