"""Completion: scheme prefixes first, then only that scheme's metadata,
bounded and deterministic, with no content read and nothing created."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mevedel_server.resources.engine.context import (
    MemoryRoot,
    ResolverContext,
    SkillRoot,
)
from mevedel_server.resources.navigation.completion import complete


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    workspace, session = tmp_path / "ws", tmp_path / "session"
    (session / "local" / "plans").mkdir(parents=True)
    (session / "local" / "notes.md").write_text("n")
    (session / "local" / "shared").mkdir()  # unaddressable in the session scope
    (workspace / ".mevedel" / "shared").mkdir(parents=True)
    (workspace / ".mevedel" / "shared" / "handoff.md").write_text("h")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "architecture.md").write_text("a")
    (docs / "image.png").write_bytes(b"\x89PNG")
    memory = tmp_path / "memory"
    memory.mkdir()
    skills = tmp_path / "skills"
    (skills / "review").mkdir(parents=True)
    (skills / "review" / "SKILL.md").write_text("s")
    return ResolverContext(
        workspace_root=workspace,
        session_dir=session,
        docs_root=docs,
        memory_roots=(MemoryRoot(memory, "local", "mevedel"),),
        skill_roots=(SkillRoot(skills, "local-mevedel"),),
    )


def labels(prefix: str, context: ResolverContext) -> list[str]:
    return [candidate.label for candidate in complete(prefix, context)]


def test_empty_prefix_offers_all_scheme_prefixes_first(context):
    found = complete("", context)
    assert [c.label for c in found] == [
        "work://", "artifact://", "skill://", "agent://", "history://", "memory://", "mcp://", "shared://",
        "mevedel://", "memory://root", "memory://journal/", "work://shared/", "history://root",
        "history://saved", "shared://library",
    ]
    assert all(c.kind == "scheme" for c in found)
    assert {c.label: c.available for c in found}["agent://"] is False
    assert {c.label: c.available for c in found}["mevedel://"] is True


def test_partial_scheme_filters(context):
    assert labels("me", context) == ["memory://", "mevedel://", "memory://root", "memory://journal/"]


def test_work_offers_shared_then_session_entries_without_the_hidden_shared(context):
    assert labels("work://", context) == ["work://shared/", "work://notes.md", "work://plans/"]
    assert labels("work://n", context) == ["work://notes.md"]
    assert labels("work://shared/", context) == ["work://shared/handoff.md"]


def test_once_a_scheme_is_typed_only_its_metadata_is_used(context):
    assert labels("mevedel://", context) == ["mevedel://architecture.md"]
    assert labels("history://", context) == ["history://root", "history://saved"]
    assert labels("shared://", context) == ["shared://library"]
    assert labels("agent://", context) == []
    assert labels("nope://", context) == []


def test_memory_offers_readable_keys_not_digests(context, tmp_path):
    assert labels("memory://", context) == ["memory://root", "memory://journal/", "memory://local-mevedel/"]
    twin = tmp_path / "twin"
    twin.mkdir()
    doubled = ResolverContext(
        docs_root=context.docs_root,
        memory_roots=context.memory_roots + (MemoryRoot(twin, "local", "mevedel"),),
    )
    digests = [label for label in labels("memory://", doubled) if label not in ("memory://root", "memory://journal/")]
    assert digests == [
        f"memory://{hashlib.sha256(os.path.realpath(p).encode()).hexdigest()}/" for p in (tmp_path / "memory", twin)
    ]


def test_skill_offers_aliases_then_exact_after_at(context, tmp_path):
    assert labels("skill://", context) == ["skill://local-mevedel/review"]
    exact = labels("skill://review@", context)
    real = os.path.realpath(tmp_path / "skills" / "review")
    assert exact == [f"skill://review@{hashlib.sha256(f'local-mevedel:{real}'.encode()).hexdigest()}"]
    assert labels("skill://local-mevedel/review/", context) == ["skill://local-mevedel/review/SKILL.md"]


def test_completion_is_bounded_ordered_and_creates_nothing(tmp_path):
    session = tmp_path / "session"
    local = session / "local"
    local.mkdir(parents=True)
    for n in range(10_000):
        (local / f"f{n:05d}.txt").touch()
    context = ResolverContext(session_dir=session, workspace_root=tmp_path / "ws", docs_root=tmp_path / "docs")
    found = labels("work://f", context)
    assert len(found) == context.completion_limit == 200
    assert found == [f"work://f{n:05d}.txt" for n in range(200)]
    assert labels("work://f09999", context) == ["work://f09999.txt"]
    assert not (tmp_path / "ws").exists()
    small = ResolverContext(session_dir=session, docs_root=tmp_path / "docs", completion_limit=3)
    assert len(complete("", small)) == 3


def test_completion_never_reads_file_content(context, monkeypatch):
    import builtins

    def refuse(*args, **kwargs):
        raise AssertionError("completion opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    assert labels("work://shared/", context) == ["work://shared/handoff.md"]
    assert labels("skill://", context)


def test_invalid_typed_text_offers_nothing(context):
    assert labels("work://../", context) == []


def test_a_reused_listing_still_sees_a_new_entry(context):
    local = context.session_dir / "local"
    quiet = 1_000_000_000  # long ago: the listing may be reused
    os.utime(local, (quiet, quiet))
    assert labels("work://n", context) == ["work://notes.md"]
    (local / "new.md").write_text("x")  # changes the directory's modification time
    assert labels("work://n", context) == ["work://new.md", "work://notes.md"]


def test_links_and_special_files_are_never_offered(context, tmp_path):
    local = context.session_dir / "local"
    (local / "sub" / "target").mkdir(parents=True)
    (local / "link").symlink_to(local / "sub" / "target")
    (local / "lfile").symlink_to(local / "notes.md")
    os.mkfifo(local / "lpipe")
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (local / "sub" / "escape").symlink_to(outside)
    assert labels("work://l", context) == []
    assert labels("work://sub/", context) == ["work://sub/target/"]
    # Nothing is listed through a link, even one that stays inside.
    assert labels("work://link/", context) == []
    assert labels("work://sub/escape/", context) == []


@pytest.mark.parametrize("planted", [".mevedel/shared", ".mevedel"])
def test_a_symlinked_root_offers_nothing(context, tmp_path, planted):
    import shutil

    outside = tmp_path / "outside"
    (outside / "shared").mkdir(parents=True)
    (outside / "secret.md").write_text("s")
    (outside / "shared" / "secret.md").write_text("s")
    link = context.workspace_root / planted
    shutil.rmtree(link)
    link.symlink_to(outside)
    assert labels("work://shared/", context) == []


def test_artifact_completion_offers_logical_log_names(tmp_path):
    executions = tmp_path / "session" / "tool-results" / "executions"
    executions.mkdir(parents=True)
    (executions / "run.log.gz").write_bytes(b"")
    (executions / ".tmp-x").write_bytes(b"")
    context = ResolverContext(session_dir=tmp_path / "session", docs_root=tmp_path / "docs")
    assert labels("artifact://", context) == ["artifact://executions/"]
    assert labels("artifact://executions/", context) == ["artifact://executions/run.log"]
    assert labels("artifact://executions/run.log.", context) == []


def test_memory_root_descendants_and_exact_skill_descendants(context, tmp_path):
    (tmp_path / "memory" / "topics").mkdir()
    (tmp_path / "memory" / "style.md").write_text("s")
    assert labels("memory://local-mevedel/", context) == ["memory://local-mevedel/style.md", "memory://local-mevedel/topics/"]
    assert labels("memory://local-mevedel/st", context) == ["memory://local-mevedel/style.md"]
    assert labels("memory://journal/", context) == []
    (exact,) = labels("skill://review@", context)
    assert labels(exact + "/", context) == [exact + "/SKILL.md"]


class _Live:
    session_id = "2026-07-19T09-47-bf87b5dd793a"

    def lines(self) -> list[str]:
        return ["# Segment 1"]


def test_history_availability_follows_the_live_conversation_and_the_workspace(context):
    def shown(ctx: ResolverContext) -> dict[str, bool]:
        return {c.label: c.available for c in complete("history://", ctx)} | {
            "history://": {c.label: c.available for c in complete("hist", ctx)}["history://"]
        }

    assert shown(context) == {"history://root": False, "history://saved": True, "history://": True}
    live = context.with_session(context.session_dir, _Live())
    assert shown(live) == {"history://root": True, "history://saved": True, "history://": True}
    bare = ResolverContext(docs_root=context.docs_root)
    assert shown(bare) == {"history://root": False, "history://saved": False, "history://": False}
