"""mevedel's generated state stays out of ``git status``: the first time a
workspace is written, the spec's generated-state entries are appended to
``.git/info/exclude`` (through the workspace's target, so over SSH too),
once, keeping what the user wrote there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity
from mevedel_server.store.authority.workspace import (
    GENERATED_EXCLUDES,
    ensure_generated_excludes,
)
from mevedel_server.store.service import PRODUCT_STORAGE, EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("excluder", "this-host")


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    return subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("hello\n")
    return root


async def test_a_session_leaves_git_status_showing_only_the_users_files(repo):
    service = SessionService(LocalTarget(repo), ME, **PRODUCT_STORAGE)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "one")
    await service.turns.append(session_id, EvidenceInput("response", text="done"))
    await service.turns.settle(session_id)
    await service.sessions.close(session_id)
    # work://shared: working notes between sessions, not the project's.
    (repo / ".mevedel" / "shared").mkdir()
    (repo / ".mevedel" / "shared" / "handoff.md").write_text("notes\n")
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert ".mevedel/sessions" not in status and ".mevedel/shared" not in status, status
    assert "README.md" in status
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert all(entry in exclude.splitlines() for entry in GENERATED_EXCLUDES)


async def test_resuming_a_session_adds_the_entries_with_the_identity_read(repo):
    """A resume reads the workspace identity and the exclude file in one
    program and adds what is missing."""
    bare = SessionService(LocalTarget(repo), ME)  # touches no exclude file
    session_id = (await bare.sessions.create()).session_id
    await bare.turns.begin_turn(session_id, "one")
    await bare.turns.settle(session_id)
    await bare.sessions.close(session_id)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.write_text("# mine\n")
    service = SessionService(LocalTarget(repo), ME, **PRODUCT_STORAGE)
    await service.sessions.open(session_id, "resume")
    lines = exclude.read_text().splitlines()
    assert lines[0] == "# mine" and all(entry in lines for entry in GENERATED_EXCLUDES)
    await service.sessions.close(session_id)


async def test_the_entries_are_added_once_after_what_the_user_wrote(repo):
    exclude = repo / ".git" / "info" / "exclude"
    exclude.write_text("# mine\n*.log")  # no final newline
    added = await ensure_generated_excludes(LocalTarget(repo))
    assert added == GENERATED_EXCLUDES
    text = exclude.read_text()
    assert text.startswith("# mine\n*.log\n")
    assert await ensure_generated_excludes(LocalTarget(repo)) == ()
    assert exclude.read_text() == text


async def test_a_workspace_that_is_not_a_git_checkout_is_left_alone(tmp_path):
    assert await ensure_generated_excludes(LocalTarget(tmp_path)) == ()
    assert not (tmp_path / ".git").exists()


async def test_a_bare_service_does_not_touch_the_exclude_file(repo):
    service = SessionService(LocalTarget(repo), ME)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "one")
    await service.turns.settle(session_id)
    exclude = repo / ".git" / "info" / "exclude"
    assert not exclude.exists() or "mevedel" not in exclude.read_text()


async def test_on_an_ssh_workspace_the_entries_are_added_on_the_host(openssh_server, repo):
    from mevedel_server.targets.ssh import SshTarget

    target = await SshTarget.connect(openssh_server.url(repo), **openssh_server.options())
    try:
        service = SessionService(target, ME, **PRODUCT_STORAGE)
        session_id = (await service.sessions.create()).session_id
        await service.turns.begin_turn(session_id, "over ssh")
        await service.turns.settle(session_id)
        await service.sessions.close(session_id)
    finally:
        await target.close()
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert ".mevedel/sessions" not in status, status
