"""memory://: readable and digest keys for one root, the union index, and
shadowing disclosure."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import MemoryRoot, ResolverContext
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.resources.engine.resolver import execute, prepare
from mevedel_server.resources.families.memory import keyed_roots


def digest(path: Path) -> str:
    return hashlib.sha256(os.path.realpath(path).encode()).hexdigest()


@pytest.fixture()
def roots(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("local-mevedel", "global-agents"):
        made[name] = tmp_path / name
        made[name].mkdir()
    (made["local-mevedel"] / "style.md").write_text("use tabs\nneedle local\n")
    (made["global-agents"] / "style.md").write_text("needle global\n")
    (made["global-agents"] / "topics").mkdir()
    (made["global-agents"] / "topics" / "build.md").write_text("make\n")
    return made


@pytest.fixture()
def context(tmp_path: Path, roots) -> ResolverContext:
    return ResolverContext(
        docs_root=tmp_path / "docs",
        memory_roots=(
            MemoryRoot(roots["global-agents"], "global", "agents"),
            MemoryRoot(roots["local-mevedel"], "local", "mevedel"),
        ),
    )


async def run(operation, address, options, context):
    return await execute(prepare(operation, address, options, context))


async def test_readable_and_digest_keys_resolve_to_the_same_root(context, roots):
    by_name = await run(Operation.READ, "memory://local-mevedel/style.md", ReadOptions(), context)
    by_digest = await run(Operation.READ, f"memory://{digest(roots['local-mevedel'])}/style.md", ReadOptions(), context)
    assert by_name.text == by_digest.text == "     1\tuse tabs\n     2\tneedle local"


async def test_a_kind_claimed_twice_uses_digests_only(tmp_path, roots):
    second = tmp_path / "second"
    second.mkdir()
    (second / "x.md").write_text("x\n")
    context = ResolverContext(
        docs_root=tmp_path / "docs",
        memory_roots=(MemoryRoot(roots["local-mevedel"], "local", "mevedel"), MemoryRoot(second, "local", "mevedel")),
    )
    assert [k.key for k in keyed_roots(context)] == [digest(roots["local-mevedel"]), digest(second)]
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "memory://local-mevedel/x.md", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert (await run(Operation.READ, f"memory://{digest(second)}/x.md", ReadOptions(), context)).text == "     1\tx"


async def test_union_index_is_ordered_and_labeled(context):
    result = await run(Operation.READ, "memory://root", ReadOptions(), context)
    assert [line.split("\t", 1)[1] for line in result.text.splitlines()] == [
        "local .mevedel (memory://local-mevedel/)",
        "  memory://local-mevedel/style.md",
        "global .agents (memory://global-agents/)",
        "  memory://global-agents/style.md",
        "  memory://global-agents/topics/build.md",
    ]


async def test_no_roots_and_empty_roots_are_reported_differently(tmp_path):
    none = await run(Operation.READ, "memory://root", ReadOptions(), ResolverContext(docs_root=tmp_path))
    assert none.text.endswith("No memory roots are configured.")
    empty_root = tmp_path / "empty"
    empty_root.mkdir()
    configured = ResolverContext(docs_root=tmp_path, memory_roots=(MemoryRoot(empty_root, "local", "agents"),))
    empty = await run(Operation.READ, "memory://root", ReadOptions(), configured)
    assert "1 memory root(s) are configured; none holds a topic yet." in empty.text
    assert "memory://local-agents/): no topics yet" in empty.text
    glob = await run(Operation.GLOB, "memory://root", GlobOptions(), configured)
    assert glob.matches == () and "hold no files yet" in glob.notice
    grep = await run(Operation.GREP, "memory://root", GrepOptions(pattern="x"), ResolverContext(docs_root=tmp_path))
    assert grep.matches == () and "no memory roots are configured" in grep.notice


async def test_union_search_discloses_shadowed_matches(context):
    result = await run(Operation.GREP, "memory://root", GrepOptions(pattern="needle"), context)
    assert [m.address for m in result.matches] == ["memory://local-mevedel/style.md", "memory://global-agents/style.md"]
    assert (
        "memory://global-agents/style.md (global .agents) is shadowed by memory://local-mevedel/style.md (local .mevedel)"
        in result.notice
    )
    glob = await run(Operation.GLOB, "memory://root", GlobOptions(pattern="**/*.md"), context)
    assert glob.matches[0] == "memory://local-mevedel/style.md" and "shadowed" in glob.notice


async def test_unknown_key_is_unavailable_at_execute(context):
    attempt = prepare(Operation.READ, "memory://local-agents/x.md", ReadOptions(), context)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.UNAVAILABLE


async def test_a_missing_root_directory_reads_as_empty_but_a_missing_topic_fails(tmp_path):
    context = ResolverContext(docs_root=tmp_path, memory_roots=(MemoryRoot(tmp_path / "absent", "global", "mevedel"),))
    result = await run(Operation.READ, "memory://global-mevedel", ReadOptions(), context)
    assert result.kind == "empty" and "ApplyPatch can create one" in result.notice
    assert not (tmp_path / "absent").exists()
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "memory://global-mevedel/x.md", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET
