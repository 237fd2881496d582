"""The VS Code client: type-checked against @types/vscode, packaged as a
.vsix, and its protocol layer driven in Node against the real server.

No VS Code binary can be downloaded here, so the extension host itself is
not run; everything the extension asks the server goes through
``src/protocol.ts``, which is what the Node test exercises.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from editor_harness import (
    CLIENTS,
    cli_command,
    editor,
    foreign_sessions,
    git_repository,
    recovery_sessions,
    run_editor,
    server_command,
)

EXTENSION = CLIENTS / "vscode"


@pytest.fixture
def npm() -> str:
    editor("node")
    npm = editor("npm")
    if not (EXTENSION / "node_modules").is_dir():
        pytest.fail(f"{EXTENSION}/node_modules is missing: run scripts/setup --test (it runs npm ci there)")
    return npm


def test_extension_type_checks_and_packages(npm: str, tmp_path: Path) -> None:
    run_editor([npm, "run", "--silent", "typecheck"], env={}, cwd=EXTENSION)
    vsix = tmp_path / "mevedel.vsix"
    run_editor(
        [npm, "exec", "--", "vsce", "package", "--no-dependencies", "--allow-missing-repository", "--out", str(vsix)],
        env={},
        cwd=EXTENSION,
    )
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("extension/package.json"))
        bundle = archive.read("extension/out/extension.js").decode()
    assert "extension/out/extension.js" in names
    assert not any(name.startswith("extension/src/") or "node_modules" in name for name in names), sorted(names)
    # The bundle carries vscode-languageclient and leaves `vscode` to the host.
    assert 'require("vscode")' in bundle
    assert "mevedel/resource/read" in bundle

    contributed = {command["command"] for command in manifest["contributes"]["commands"]}
    registered = set(re.findall(r"'(mevedel\.[A-Za-z]+)':", (EXTENSION / "src" / "commands.ts").read_text()))
    assert contributed == registered
    assert manifest["main"] == "./out/extension.js"
    assert "mevedel.server.command" in manifest["contributes"]["configuration"]["properties"]


def test_protocol_layer_against_real_server(npm: str, tmp_path: Path) -> None:
    # The session suite runs in a workspace where another client left
    # sessions behind (an expired lease, a live one, a directory that is no
    # session).
    workspace = tmp_path / "sessions"
    workspace.mkdir()
    left = foreign_sessions(workspace)
    # The lifecycle suite runs in a Git work tree holding sessions that a
    # crashed Rewind left in recovery.
    lifecycle = tmp_path / "lifecycle"
    lifecycle.mkdir()
    git_repository(lifecycle)
    blocked = recovery_sessions(lifecycle, tmp_path / "scratch")
    # The control suite shares a workspace with the mevedel CLI.
    control = tmp_path / "control"
    control.mkdir()
    # So does the following suite, where the CLI owns the followed session.
    follow = tmp_path / "follow"
    follow.mkdir()
    output = run_editor(
        [npm, "test"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_SESSION_WORKSPACE": str(workspace),
            "MEVEDEL_TEST_LIFECYCLE_WORKSPACE": str(lifecycle),
            "MEVEDEL_TEST_CONTROL_WORKSPACE": str(control),
            "MEVEDEL_TEST_FOLLOW_WORKSPACE": str(follow),
            "MEVEDEL_CLI_COMMAND": json.dumps(cli_command()),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            **left.environment(),
            **blocked.environment(),
        },
        cwd=EXTENSION,
    )
    assert re.search(r"# fail 0\b", output), output
    assert not re.search(r"# pass 0\b", output), output
    assert re.search(r"# skipped 0\b", output), output
    assert "ok 1 - sessions" in output or re.search(r"ok \d+ - sessions", output), output
    assert re.search(r"ok \d+ - lifecycle", output), output
    assert re.search(r"ok \d+ - fork variants list the source, then the forks oldest first", output), output
    assert re.search(r"ok \d+ - control", output), output
    assert re.search(r"ok \d+ - following", output), output
