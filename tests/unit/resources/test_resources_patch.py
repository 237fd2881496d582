"""ApplyPatch through prepare/execute: which addresses are writable, that
refusals touch nothing, and that results keep the authored addresses."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Family, Operation
from mevedel_server.resources.engine.context import MemoryRoot, ResolverContext
from mevedel_server.resources.engine.options import PatchOptions
from mevedel_server.resources.engine.resolver import execute, prepare

SID = "2026-07-19T09-47-bf87b5dd793a"


def writable(session_id: str) -> bool:
    return session_id == SID


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    workspace = tmp_path / "ws"
    session, memory = workspace / ".mevedel" / "sessions" / SID, workspace / ".mevedel" / "memory"
    session.mkdir(parents=True)
    memory.mkdir()
    (tmp_path / "docs").mkdir()
    return ResolverContext(
        workspace_root=workspace,
        session_dir=session,
        docs_root=tmp_path / "docs",
        memory_roots=(MemoryRoot(memory, "local", "mevedel"),),
        session_writable=writable,
    )


def envelope(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def add(address: str, *lines: str) -> str:
    return f"*** Add File: {address}\n" + "".join(f"+{line}\n" for line in lines)


async def apply(patch: str, context: ResolverContext):
    return await execute(prepare(Operation.APPLY_PATCH, patch, PatchOptions(), context))


async def test_first_write_creates_the_shared_root_and_the_session_scope(context):
    result = await apply(envelope(add("work://shared/notes/handoff.md", "hello"), add("work://plan.md", "p")), context)
    assert (context.workspace_root / ".mevedel" / "shared" / "notes" / "handoff.md").read_text() == "hello\n"
    assert (context.session_dir / "local" / "plan.md").read_text() == "p\n"
    assert result.summary() == "A work://shared/notes/handoff.md\nA work://plan.md"


async def test_prepare_reports_write_facts_for_every_address(context):
    attempt = prepare(
        Operation.APPLY_PATCH,
        envelope(add("work://a.md", "x"), "*** Update File: memory://local-mevedel/t.md\n*** Move to: memory://local-mevedel/u.md\n"),
        PatchOptions(),
        context,
    )
    assert [(f.canonical, f.family, f.writes) for f in attempt.facts] == [
        ("work://a.md", Family.WORK, True),
        ("memory://local-mevedel/t.md", Family.MEMORY, True),
        ("memory://local-mevedel/u.md", Family.MEMORY, True),
    ]
    assert attempt.writes
    assert not (context.session_dir / "local").exists()  # prepare touched nothing


async def test_update_and_move_in_memory_by_digest_key(context):
    memory = context.memory_roots[0].path
    (memory / "topic.md").write_text("one\ntwo\n")
    key = hashlib.sha256(os.path.realpath(memory).encode()).hexdigest()
    patch = envelope(
        f"*** Update File: memory://{key}/topic.md\n*** Move to: memory://local-mevedel/renamed.md\n@@\n one\n-two\n+three\n"
    )
    result = await apply(patch, context)
    assert (memory / "renamed.md").read_text() == "one\nthree\n"
    assert not (memory / "topic.md").exists()
    assert result.summary() == f"R memory://{key}/topic.md -> memory://local-mevedel/renamed.md"


@pytest.mark.parametrize(
    "address",
    ["artifact://x.txt", "mevedel://x.md", "work://shared", "work://", "memory://local-mevedel", "memory://root", "agent://root/a"],
)
async def test_non_writable_addresses_are_unsupported_before_anything_is_touched(context, address):
    patch = envelope(add("work://first.md", "must not appear"), add(address, "x"))
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, patch, PatchOptions(), context)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION
    assert not (context.session_dir / "local").exists()


async def test_an_ordinary_path_is_a_project_file_in_the_same_transaction(context):
    result = await apply(envelope(add("src/main.py", "x"), add("work://plan.md", "p")), context)
    assert (context.workspace_root / "src" / "main.py").read_text() == "x\n"
    assert (context.session_dir / "local" / "plan.md").read_text() == "p\n"
    assert result.summary() == "A src/main.py\nA work://plan.md"


@pytest.mark.parametrize("planted", [".mevedel/shared", ".mevedel"])
async def test_a_symlinked_shared_root_is_refused_for_writes_without_leaking(context, tmp_path, planted):
    import shutil

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "shared").mkdir(parents=True)
    link = context.workspace_root / planted
    if link.exists():
        shutil.rmtree(link)
    link.symlink_to(elsewhere)
    attempt = prepare(Operation.APPLY_PATCH, envelope(add("work://shared/n.md", "x")), PatchOptions(), context)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.CONTAINMENT
    assert str(tmp_path) not in str(caught.value)
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["shared"]


async def test_a_link_escaping_the_root_is_refused(context, tmp_path):
    local = context.session_dir / "local"
    local.mkdir()
    (tmp_path / "outside").mkdir()
    (local / "out").symlink_to(tmp_path / "outside")
    with pytest.raises(AddressError) as caught:
        await apply(envelope(add("work://out/x.md", "x")), context)
    assert caught.value.kind is ErrorKind.CONTAINMENT
    assert list((tmp_path / "outside").iterdir()) == []


async def test_owner_missing_is_reported_at_execute_before_any_write(context):
    lonely = context.with_session(None)
    attempt = prepare(
        Operation.APPLY_PATCH, envelope(add("work://shared/a.md", "x"), add("work://b.md", "y")), PatchOptions(), lonely
    )
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.OWNER_MISSING
    assert not (context.workspace_root / ".mevedel" / "shared").exists()


async def test_an_unconfigured_memory_key_is_unavailable_and_writes_nothing(context):
    attempt = prepare(
        Operation.APPLY_PATCH, envelope(add("work://a.md", "x"), add("memory://global-agents/t.md", "y")), PatchOptions(), context
    )
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert not (context.session_dir / "local").exists()


async def test_a_root_that_moves_after_prepare_is_a_conflict(context, tmp_path):
    memory = tmp_path / "linked-memory"
    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    memory.symlink_to(real)
    linked = ResolverContext(docs_root=context.docs_root, memory_roots=(MemoryRoot(memory, "global", "mevedel"),))
    # A symlinked memory root is refused for writes outright ...
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, envelope(add("memory://global-mevedel/t.md", "x")), PatchOptions(), linked)
    assert caught.value.kind is ErrorKind.CONTAINMENT
    # ... and a real root replaced by another between prepare and execute is a conflict.
    plain = tmp_path / "plain"
    plain.mkdir()
    ctx = ResolverContext(docs_root=context.docs_root, memory_roots=(MemoryRoot(plain, "global", "mevedel"),))
    attempt = prepare(Operation.APPLY_PATCH, envelope(add("memory://global-mevedel/t.md", "x")), PatchOptions(), ctx)
    plain.rename(tmp_path / "moved")
    plain.symlink_to(other)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.CONFLICT
    assert list(other.iterdir()) == []


async def test_an_invalid_patch_fails_at_prepare(context):
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, "not a patch", PatchOptions(), context)
    assert caught.value.kind is ErrorKind.INVALID_PATCH


async def test_a_failing_hunk_leaves_every_file_unchanged(context):
    local = context.session_dir / "local"
    local.mkdir()
    (local / "a.md").write_text("keep\n")
    patch = envelope(add("work://new.md", "x"), "*** Update File: work://a.md\n@@\n-missing line\n+y\n")
    with pytest.raises(AddressError):
        await apply(patch, context)
    assert (local / "a.md").read_text() == "keep\n"
    assert not (local / "new.md").exists()


async def test_artifacts_are_read_only(context):
    results = context.session_dir / "tool-results"
    results.mkdir()
    (results / "call-1.txt").write_text("evidence\n")
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, envelope("*** Delete File: artifact://call-1.txt\n"), PatchOptions(), context)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION
    assert (results / "call-1.txt").read_text() == "evidence\n"


# -- who may write a session's files (issue 18) --------------------------------


@pytest.mark.parametrize("answer", [None, lambda sid: False], ids=["no-answer", "not-writable"])
async def test_a_session_this_client_may_not_write_is_refused_before_anything_is_touched(context, answer):
    import dataclasses

    refused = dataclasses.replace(context, session_writable=answer)
    before = sorted(p.relative_to(context.workspace_root) for p in context.workspace_root.rglob("*"))
    attempt = prepare(Operation.APPLY_PATCH, envelope(add("work://shared/a.md", "x"), add("work://intruder.md", "y")), PatchOptions(), refused)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.OWNER_MISSING
    assert caught.value.authored == "work://intruder.md"
    assert caught.value.reason == (
        f"session {SID} is not open for writing by this client; resume it (or take control of it) "
        "before changing its work:// files"
    )
    assert sorted(p.relative_to(context.workspace_root) for p in context.workspace_root.rglob("*")) == before


async def test_an_unknown_session_id_creates_nothing(context):
    unknown = context.with_session(context.workspace_root / ".mevedel" / "sessions" / "2026-01-01T00-00-000000000000")
    with pytest.raises(AddressError) as caught:
        await apply(envelope(add("work://intruder.md", "y")), unknown)
    assert caught.value.kind is ErrorKind.OWNER_MISSING
    assert sorted(p.name for p in (context.workspace_root / ".mevedel" / "sessions").iterdir()) == [SID]


async def test_shared_and_memory_files_need_no_writable_session(context):
    import dataclasses

    lonely = dataclasses.replace(context.with_session(None), session_writable=None)
    result = await apply(envelope(add("work://shared/a.md", "x"), add("memory://local-mevedel/t.md", "t")), lonely)
    assert result.summary() == "A work://shared/a.md\nA memory://local-mevedel/t.md"
