"""The Emacs client (eglot) in real batch Emacs against the real server."""

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

TESTS = REPOSITORY / "tests" / "clients" / "emacs" / "mevedel-lsp-test.el"


def test_emacs_client(workspace: Workspace, tmp_path) -> None:
    emacs = editor("emacs")
    # A Git work tree (Worktree Fork branches from HEAD) holding sessions a
    # crashed Rewind left in recovery.
    git_repository(workspace.root)
    blocked = recovery_sessions(workspace.root, tmp_path / "scratch")
    # -q, not -Q: site-start is what puts Debian's elpa-eglot on the load path.
    output = run_editor(
        [emacs, "--batch", "-q", "-L", str(CLIENTS / "emacs"), "-l", str(TESTS), "-f", "ert-run-tests-batch-and-exit"],
        env={
            **editor_environment(workspace),
            **foreign_sessions(workspace.root).environment(),
            **blocked.environment(),
            "HOME": str(workspace.root.parent),
        },
        cwd=workspace.root,
    )
    assert re.search(r"Ran \d+ tests, \d+ results as expected, 0 unexpected", output), output
    for session_test in (
        "session-round-trip",
        "takeover-question-is-asked",
        "join-and-inspect-rows",
        "rewind-and-redo-confirm-or-decline",
        "a-moved-session-refuses-the-commit",
        "fork-worktree-fork-and-save-as",
        "fork-variants-picker",
        "recovery-is-offered-retried-and-abandoned",
        "control-transfer",
        "following-a-session-owned-elsewhere",
        "remote-workspaces-reach-the-server",
    ):
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{session_test}", output), output


def test_emacs_package_headers_and_byte_compilation(tmp_path) -> None:
    """package.el reads the headers (name, version, requirements) and the file
    byte-compiles without a single warning."""
    emacs = editor("emacs")
    info = run_editor(
        [
            emacs,
            "--batch",
            "-q",
            "--eval",
            "(progn (require (quote package)) (with-temp-buffer"
            f' (insert-file-contents "{CLIENTS / "emacs" / "mevedel-lsp.el"}")'
            " (let ((desc (package-buffer-info)))"
            '   (princ (format "package %s %s requires %S\n" (package-desc-name desc)'
            "     (package-version-join (package-desc-version desc)) (package-desc-reqs desc))))))",
        ],
        env={"HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert "package mevedel-lsp 0.1.0 requires ((emacs (28 1)) (eglot (1 9)) (jsonrpc (1 0 14)))" in info, info
    source = tmp_path / "mevedel-lsp.el"
    source.write_text((CLIENTS / "emacs" / "mevedel-lsp.el").read_text())
    output = run_editor(
        [
            emacs,
            "--batch",
            "-q",
            "--eval",
            "(setq byte-compile-error-on-warn t)",
            "-f",
            "batch-byte-compile",
            str(source),
        ],
        env={"HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert (tmp_path / "mevedel-lsp.elc").exists(), output
