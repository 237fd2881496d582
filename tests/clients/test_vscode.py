"""The VS Code client: type-checked against @types/vscode, packaged as a
.vsix, and its protocol layer driven in Node against the real server.

The modules that import no ``vscode`` (``src/protocol.ts``,
``src/sessions.ts``, ``src/lifecycle.ts``, ``src/agents.ts``,
``src/chat.ts``, ``src/chatView.ts``, ``src/artifacts.ts``,
``src/review.ts``...) are what the
Node tests exercise; the extension itself runs in a real VS Code
(code-server) in ``test_vscode_workbench.py``. The tests are compiled once,
then run in groups, one pytest test each.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from editor_harness import (
    CLIENTS,
    REPOSITORY,
    cli_command,
    editor,
    foreign_sessions,
    git_repository,
    recovery_sessions,
    run_editor,
    server_command,
)

EXTENSION = CLIENTS / "vscode"
SCRIPTED_AGENT = REPOSITORY / "tests" / "agents" / "scripted_agent.py"


@pytest.fixture(scope="module")
def npm() -> str:
    editor("node")
    npm = editor("npm")
    if not (EXTENSION / "node_modules").is_dir():
        pytest.fail(f"{EXTENSION}/node_modules is missing: run scripts/setup --test (it runs npm ci there)")
    return npm


@pytest.fixture(scope="module")
def compiled(npm: str) -> str:
    """The Node tests compiled (tsc) to out-test/."""
    run_editor([npm, "run", "--silent", "build-tests"], env={}, cwd=EXTENSION)
    return npm


def node_tests(names: list[str], env: dict[str, str]) -> str:
    """Run the compiled Node test files NAMES; their TAP output must show
    them all passing, none skipped."""
    node = editor("node")
    files = [f"out-test/test/{name}.test.js" for name in names]
    output = run_editor([node, "--test", *files], env=env, cwd=EXTENSION)
    assert re.search(r"# fail 0\b", output), output
    assert not re.search(r"# pass 0\b", output), output
    assert re.search(r"# skipped 0\b", output), output
    return output


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
        readme = archive.read("extension/readme.md").decode()
    assert "extension/out/extension.js" in names
    assert not any(name.startswith("extension/src/") or "node_modules" in name for name in names), sorted(names)
    assert not any(name.startswith("extension/test/") or name.startswith("extension/out-test/") for name in names), sorted(names)
    # The bundle carries vscode-languageclient and leaves `vscode` to the host.
    assert 'require("vscode")' in bundle
    assert "mevedel/resource/read" in bundle
    # The chat: the live stream, and the page's policy.
    assert "mevedel/turn/didUpdate" in bundle and "mevedel/turn/prompt" in bundle
    assert "Content-Security-Policy" in bundle and "default-src 'none'" in bundle

    contributes = manifest["contributes"]
    contributed = {command["command"] for command in contributes["commands"]}
    registered = set(re.findall(r"'(mevedel\.[A-Za-z]+)':", (EXTENSION / "src" / "commands.ts").read_text()))
    assert contributed == registered
    assert {"mevedel.promptAgent", "mevedel.openChat", "mevedel.cancelTurn"} <= contributed
    bound = {binding["command"] for binding in contributes["keybindings"]}
    assert {"mevedel.promptAgent", "mevedel.openChat", "mevedel.cancelTurn"} <= bound <= contributed
    in_menus = {item["command"] for items in contributes["menus"].values() for item in items}
    assert "mevedel.promptAgent" in in_menus and in_menus <= contributed
    assert manifest["main"] == "./out/extension.js"
    properties = contributes["configuration"]["properties"]
    for key in ("mevedel.server.path", "mevedel.server.args", "mevedel.agents", "mevedel.defaultAgent", "mevedel.permissions"):
        assert key in properties, key
    # A workspace in Restricted Mode cannot choose the programs run.
    restricted = manifest["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"]
    assert {"mevedel.server.path", "mevedel.agents"} <= set(restricted)

    # The packaged README names every command and how to install the server.
    for command in contributes["commands"]:
        assert f"mevedel: {command['title']}" in readme, command["title"]
    assert "pipx install" in readme and "uv tool install" in readme


def test_resources_and_settings_against_real_server(compiled: str, tmp_path: Path) -> None:
    output = node_tests(
        ["protocol"],
        env={"MEVEDEL_LSP_COMMAND": json.dumps(server_command()), "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert re.search(r"ok \d+ - reading resources", output), output
    assert re.search(r"ok \d+ - settings", output), output


def test_sessions_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The session suite runs in a workspace where another client left
    # sessions behind (an expired lease, a live one, a directory that is no
    # session).
    workspace = tmp_path / "sessions"
    workspace.mkdir()
    left = foreign_sessions(workspace)
    output = node_tests(
        ["sessions"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_SESSION_WORKSPACE": str(workspace),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            **left.environment(),
        },
    )
    assert re.search(r"ok \d+ - sessions", output), output


def test_lifecycle_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The lifecycle suite runs in a Git work tree holding sessions that a
    # crashed Rewind left in recovery.
    lifecycle = tmp_path / "lifecycle"
    lifecycle.mkdir()
    git_repository(lifecycle)
    blocked = recovery_sessions(lifecycle, tmp_path / "scratch")
    output = node_tests(
        ["lifecycle"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_LIFECYCLE_WORKSPACE": str(lifecycle),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            **blocked.environment(),
        },
    )
    assert re.search(r"ok \d+ - lifecycle", output), output
    assert re.search(r"ok \d+ - fork variants list the source, then the forks oldest first", output), output
    assert re.search(r"ok \d+ - a retried recovery leaves a file edited outside the session as it is and names it", output), output


def test_control_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The workspace is shared with the mevedel CLI, the other side of a
    # control transfer.
    control = tmp_path / "control"
    control.mkdir()
    output = node_tests(
        ["control"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_CONTROL_WORKSPACE": str(control),
            "MEVEDEL_CLI_COMMAND": json.dumps(cli_command()),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    assert re.search(r"ok \d+ - control", output), output


def test_following_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The mevedel CLI owns the followed session.
    follow = tmp_path / "follow"
    follow.mkdir()
    output = node_tests(
        ["follow"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_FOLLOW_WORKSPACE": str(follow),
            "MEVEDEL_CLI_COMMAND": json.dumps(cli_command()),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    assert re.search(r"ok \d+ - following", output), output


def test_agent_chat_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The agent suite prompts the scripted ACP agent (a real subprocess on
    # the official SDK, with this Python) through the real server.
    workspace = tmp_path / "agents"
    workspace.mkdir()
    output = node_tests(
        ["chat", "agents"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_AGENT_WORKSPACE": str(workspace),
            "MEVEDEL_TEST_AGENT_COMMAND": json.dumps([sys.executable, str(SCRIPTED_AGENT)]),
            "MEVEDEL_TEST_PYTHON": sys.executable,
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    for name in (
        "a prompt streams into the chat in order, visible before it settles; the permission question is answered",
        "rewinding before the agent turn restores the file it wrote; the impact names it and the agent history",
        "cancel ends the turn interrupted, keeping what arrived",
        "agent text is escaped everywhere it appears: a <script> is inert text",
        "a settled task says why it was interrupted or failed, below its fold, as the turn says its own reason",
        "a recorded turn's interrupted sub-agent task says why below its fold, in the sentence its settled update was said in",
        "a sub-agent's failed task read back says why below its fold, as it did live",
        "two Agent calls made at once each show their own task under them, live and read back",
    ):
        assert re.search(rf"ok \d+ - {re.escape(name)}", output), output
    assert re.search(r"ok \d+ - agents", output), output


def test_review_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The scripted ACP agent's turn writes a file and runs a shell command
    # that adds, deletes, renames and chmods; the review names it all, and
    # a path restored from it asks first.
    workspace = tmp_path / "review"
    workspace.mkdir()
    output = node_tests(
        ["review"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_REVIEW_WORKSPACE": str(workspace),
            "MEVEDEL_TEST_AGENT_COMMAND": json.dumps([sys.executable, str(SCRIPTED_AGENT)]),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    for name in (
        "the review of a turn names every change its fs write and shell command made, and opens the text files side by side",
        "a path restored from a range review: asked first, No and Escape change nothing, Restore brings back its content or mode as a new turn",
        "ranges a person types, and the chat turn button",
    ):
        assert re.search(rf"ok \d+ - {re.escape(name)}", output), output
    assert re.search(r"ok \d+ - review", output), output


def test_artifacts_against_real_server(compiled: str, tmp_path: Path) -> None:
    # The artifacts suite starts a second server on the same workspace to
    # hold an item (its lease), so the first shows it read-only.
    workspace = tmp_path / "artifacts"
    workspace.mkdir()
    output = node_tests(
        ["artifacts"],
        env={
            "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
            "MEVEDEL_TEST_ARTIFACT_WORKSPACE": str(workspace),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    for name in (
        "a new document is listed by title and marked attached to the session that created it",
        "an opened document is edited and saved through mevedel/artifact/write; the server reads the new content",
        "a save over a change the editor never saw is refused with the server words, and reloading shows that change",
        "an item another server process holds opens read-only, names its host, and offers asking for it, which makes it writable",
        "an item asked for is said to be handed over once, when the news that it is free comes, before or after the answer",
    ):
        assert re.search(rf"ok \d+ - {re.escape(name)}", output), output
    assert re.search(r"ok \d+ - artifacts", output), output
