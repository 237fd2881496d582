"""The Neovim client in real headless Neovim against the real server."""

from __future__ import annotations

import re

from editor_harness import (
    CLIENTS,
    REPOSITORY,
    Workspace,
    editor,
    editor_environment,
    foreign_sessions,
    git_repository,
    recovery_sessions,
    run_editor,
)

SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "mevedel_test.lua"


def test_neovim_client(workspace: Workspace, tmp_path) -> None:
    nvim = editor("nvim")
    # A Git work tree (Worktree Fork branches from HEAD) holding sessions a
    # crashed Rewind left in recovery.
    git_repository(workspace.root)
    blocked = recovery_sessions(workspace.root, tmp_path / "scratch")
    output = run_editor(
        [
            nvim,
            "--headless",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "--cmd",
            f"set rtp^={CLIENTS / 'neovim'}",
            "-c",
            f"luafile {SCRIPT}",
        ],
        env={
            **editor_environment(workspace),
            **foreign_sessions(workspace.root).environment(),
            **blocked.environment(),
            "XDG_STATE_HOME": str(workspace.root.parent / "state"),
        },
        cwd=workspace.root,
    )
    assert re.search(r"^\d+ tests, 0 failed$", output, re.MULTILINE), output
    assert "PASS go to definition on a directory opens a read-only virtual buffer" in output, output
    for session_test in (
        "sessions: create, pick",
        "sessions: the takeover question",
        "answers later still takes over",
        "lifecycle: rewind and redo",
        "lifecycle: a commit after the session moved",
        "lifecycle: fork, worktree fork and save as",
        "lifecycle: the fork variants picker",
        "lifecycle: a session in recovery",
        "control: the Grant/Keep question",
        "following: a joined transcript follows the owner",
        "settings: remoteWorkspaces",
    ):
        assert re.search(rf"^PASS .*{re.escape(session_test)}", output, re.MULTILINE), output
