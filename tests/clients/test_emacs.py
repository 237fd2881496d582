"""The Emacs client (eglot) in real batch Emacs against the real server.

Every test runs under each Emacs there is: the system's (Debian's Emacs 28
with elpa-eglot 1.9) and Emacs 30 with its built-in eglot, which
``scripts/setup --test`` unpacks from Debian's bookworm-backports into
``.venv/emacs-30`` (``MEVEDEL_EMACS30`` names another one)."""

from __future__ import annotations

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
    server_command,
    server_processes,
)

TESTS = REPOSITORY / "tests" / "clients" / "emacs"
AGENT = REPOSITORY / "tests" / "agents" / "scripted_agent.py"
GUIDE = REPOSITORY / "docs" / "client-emacs.md"
EMACS30 = REPOSITORY / ".venv" / "emacs-30" / "bin" / "emacs"


@pytest.fixture(params=["system", "emacs30"])
def emacs(request) -> str:
    """The Emacs binary: the system's, or the unpacked Emacs 30."""
    if request.param == "system":
        return editor("emacs")
    found = Path(os.environ.get("MEVEDEL_EMACS30", EMACS30))
    if not found.exists():
        pytest.skip(f"Emacs 30 is not unpacked at {found} (scripts/setup --test unpacks Debian's bookworm-backports emacs-nox there)")
    return str(found)


#: The ERT tests that must have passed (by name, after mevedel-lsp-test-).
REQUIRED = (
    "completion-never-doubles-the-scheme",
    "session-round-trip",
    "takeover-question-is-asked",
    "join-and-inspect-rows",
    "rewind-and-redo-confirm-or-decline",
    "a-moved-session-refuses-the-commit",
    "fork-worktree-fork-and-save-as",
    "fork-variants-picker",
    "recovery-is-offered-retried-and-abandoned",
    "remote-workspaces-reach-the-server",
)

#: The ERT tests where the `mevedel` CLI is another client of the workspace
#: (run in an Emacs of their own: each takes half a minute).
REQUIRED_WITH_CLI = (
    "control-transfer",
    "following-a-session-owned-elsewhere",
)
WITH_CLI = "\\\\|".join(f"^mevedel-lsp-test-{name}$" for name in REQUIRED_WITH_CLI)

#: The chat's ERT tests (tests/clients/emacs/mevedel-lsp-chat-test.el).
REQUIRED_CHAT = (
    "chat-prompt-runs-a-turn",
    "chat-streams-while-running-and-cancels",
    "chat-a-prompt-aborted-while-its-agent-starts-says-so",
    "chat-rewind-redo-and-fork",
    "chat-errors-say-what-to-do",
    "chat-a-prompt-sent-as-a-refusal-shows-stands",
    "chat-a-message-right-behind-an-answer-is-read",
    "chat-mode-and-model-picker",
)


def test_emacs_client(emacs: str, workspace: Workspace, tmp_path) -> None:
    # A Git work tree (Worktree Fork branches from HEAD) holding sessions a
    # crashed Rewind left in recovery.
    git_repository(workspace.root)
    blocked = recovery_sessions(workspace.root, tmp_path / "scratch")
    # -q, not -Q: site-start is what puts Debian's elpa-eglot on Emacs 28's
    # load path (the unpacked Emacs 30 has none: it uses its own eglot).
    output = run_editor(
        [emacs, "--batch", "-q", "-L", str(CLIENTS / "emacs"), "-l", str(TESTS / "mevedel-lsp-test.el"),
         "--eval", f'(ert-run-tests-batch-and-exit (quote (not "{WITH_CLI}")))'],
        env={
            **editor_environment(workspace),
            **foreign_sessions(workspace.root).environment(),
            **blocked.environment(),
            "HOME": str(workspace.root.parent),
        },
        cwd=workspace.root,
    )
    assert re.search(r"Ran \d+ tests, \d+ results as expected, 0 unexpected", output), output
    for name in REQUIRED:
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{name}", output), output


def test_emacs_client_with_another_client(emacs: str, workspace: Workspace) -> None:
    """Control transfer and following, with the `mevedel` CLI as the other client."""
    output = run_editor(
        [emacs, "--batch", "-q", "-L", str(CLIENTS / "emacs"), "-l", str(TESTS / "mevedel-lsp-test.el"),
         "--eval", f'(ert-run-tests-batch-and-exit "{WITH_CLI}")'],
        env={**editor_environment(workspace), "HOME": str(workspace.root.parent)},
        cwd=workspace.root,
    )
    assert re.search(rf"Ran {len(REQUIRED_WITH_CLI)} tests, {len(REQUIRED_WITH_CLI)} results as expected, 0 unexpected", output), output
    for name in REQUIRED_WITH_CLI:
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{name}", output), output


def _run_chat_tests(emacs: str, workspace: Workspace, prefix: str, *files: str) -> str:
    """Run the ERT tests named ``prefix...`` of the chat test file (and
    ``files`` beside it) against the scripted ACP agent."""
    loads = [arg for name in ("mevedel-lsp-test.el", "mevedel-lsp-chat-test.el", *files) for arg in ("-l", str(TESTS / name))]
    return run_editor(
        [emacs, "--batch", "-q", "-L", str(CLIENTS / "emacs"), *loads,
         "--eval", f'(ert-run-tests-batch-and-exit "^{prefix}")'],
        env={
            **editor_environment(workspace),
            "MEVEDEL_TEST_AGENT_COMMAND": json.dumps([sys.executable, str(AGENT)]),
            "HOME": str(workspace.root.parent),
        },
        cwd=workspace.root,
    )


def test_emacs_chat(emacs: str, workspace: Workspace) -> None:
    """The chat against the scripted ACP agent (each test its own session)."""
    output = _run_chat_tests(emacs, workspace, "mevedel-lsp-test-chat-")
    assert re.search(rf"Ran {len(REQUIRED_CHAT)} tests, {len(REQUIRED_CHAT)} results as expected, 0 unexpected", output), output
    for name in REQUIRED_CHAT:
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{name}", output), output


def test_emacs_queue(emacs: str, workspace: Workspace) -> None:
    """Prompts queued behind the running turn in the chat (p), edited (e)
    and cancelled (k) on their line, sent when the turn settles; S steers."""
    output = _run_chat_tests(emacs, workspace, "mevedel-lsp-test-queue-", "mevedel-lsp-queue-test.el")
    assert re.search(r"Ran 1 tests, 1 results as expected, 0 unexpected", output), output
    assert re.search(r"passed +1/1 +mevedel-lsp-test-queue-prompts-wait-behind-the-turn", output), output


def test_emacs_subagents(emacs: str, workspace: Workspace) -> None:
    """A sub-agent's activity (the parent's Agent call running a second
    scripted agent) streams nested under the call, folds once it settled
    (TAB shows it) while the root's turn goes on, reads back from the
    server as it showed live (the task folded under its call), and the
    Rewind impact names it; a
    sub-agent's own sub-agent nests inside it, one called through no
    reported call shows under its name after the turn's text; a task
    cancelled with its caller's turn says why under its folded heading
    (read back as live); a
    failed task says why under its heading, live and read back (once,
    read back as live); two Agent calls made at once each show their own
    task, live and read back."""
    output = _run_chat_tests(emacs, workspace, "mevedel-lsp-test-subagent-", "mevedel-lsp-subagent-test.el")
    assert re.search(r"Ran 5 tests, 5 results as expected, 0 unexpected", output), output
    for name in ("activity-nests-under-its-call-and-folds", "nested-sub-agents-and-an-unknown-call", "interrupted-says-why",
                 "failed-task-read-back-says-why", "parallel-calls-each-nest-their-own-task"):
        assert re.search(rf"passed +\d+/5 +mevedel-lsp-test-subagent-{name}", output), output


#: The review buffer's ERT tests (tests/clients/emacs/mevedel-lsp-review-test.el).
REQUIRED_REVIEW = ("review-a-turn-from-the-turns-list-and-the-chat", "review-restore-a-file")


def test_emacs_review(emacs: str, workspace: Workspace) -> None:
    """A scripted agent's turn (an fs write and a shell command that adds,
    deletes, renames and chmods) reviewed in diff-mode, ediff and refresh,
    from the turns list and from the chat; a path restored from the review
    (no and C-g change nothing)."""
    output = _run_chat_tests(emacs, workspace, "mevedel-lsp-test-review-", "mevedel-lsp-review-test.el")
    assert re.search(rf"Ran {len(REQUIRED_REVIEW)} tests?, {len(REQUIRED_REVIEW)} results? as expected, 0 unexpected", output), output
    for name in REQUIRED_REVIEW:
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{name}", output), output


#: The artifact store's ERT tests (tests/clients/emacs/mevedel-lsp-artifacts-test.el).
REQUIRED_ARTIFACTS = (
    "artifact-document-round-trip",
    "artifact-whiteboard-and-refusals",
    "artifact-files-open-as-text-or-image",
    "artifact-max-versions-setting",
    "artifact-held-by-another-server",
    "artifact-taken-elsewhere-turns-read-only",
)


def _run_ert_file(emacs: str, workspace: Workspace, test_file: str, prefix: str, required: tuple[str, ...]) -> None:
    """Run the ERT tests named ``prefix...`` of TEST_FILE (beside
    mevedel-lsp-test.el, whose helpers it uses) against the real server;
    each of REQUIRED (after mevedel-lsp-test-) must have passed."""
    output = run_editor(
        [
            emacs, "--batch", "-q", "-L", str(CLIENTS / "emacs"),
            "-l", str(TESTS / "mevedel-lsp-test.el"), "-l", str(TESTS / test_file),
            "--eval", f'(ert-run-tests-batch-and-exit "^{prefix}")',
        ],
        env={**editor_environment(workspace), "HOME": str(workspace.root.parent)},
        cwd=workspace.root,
    )
    assert re.search(rf"Ran {len(required)} tests, {len(required)} results as expected, 0 unexpected", output), output
    for name in required:
        assert re.search(rf"passed +\d+/\d+ +mevedel-lsp-test-{name}", output), output


def test_emacs_artifacts(emacs: str, workspace: Workspace) -> None:
    """The artifact store's list and item buffers against the real server
    (and a second server process of the same workspace holding an item)."""
    _run_ert_file(emacs, workspace, "mevedel-lsp-artifacts-test.el", "mevedel-lsp-test-artifact-", REQUIRED_ARTIFACTS)


def test_emacs_a_command_waits_for_the_server_eglot_is_connecting(emacs: str, workspace: Workspace) -> None:
    """C-c m p while eglot connects the server (just started, or restarted
    after it was killed) waits for it: eglot says "Reconnected!" before the
    new server answered, and the command then said none was running."""
    _run_ert_file(emacs, workspace, "mevedel-lsp-connect-test.el", "mevedel-lsp-test-connect-",
                  ("connect-a-command-waits-for-the-server-eglot-is-connecting",))


def test_emacs_package_headers_and_byte_compilation(emacs: str, tmp_path) -> None:
    """package.el reads the headers (name, version, requirements) and the file
    byte-compiles without a single warning."""
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


def documented_elisp(marker: str) -> str:
    """The elisp block of docs/client-emacs.md that follows <!-- MARKER -->,
    with the checkout's path for /path/to/mevedel-lsp."""
    guide = GUIDE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {re.escape(marker)} -->\s*```elisp\n(.*?)```", guide, re.S)
    assert found, f"docs/client-emacs.md has no elisp block marked {marker}"
    return found.group(1).replace("/path/to/mevedel-lsp", str(REPOSITORY))


def first_run(emacs: str, init: str, visit: Path, tmp_path: Path) -> str:
    """What a stock Emacs with INIT as its init file shows on opening VISIT:
    the server is found on PATH, as the docs say to install it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "init.el").write_text(init, encoding="utf-8")
    output = run_editor(
        [emacs, "--batch", "-q", "-l", str(tmp_path / "init.el"), "-l", str(TESTS / "first-run.el")],
        env={
            "HOME": str(tmp_path),
            "MEVEDEL_TEST_VISIT": str(visit),
            "PATH": f"{Path(server_command()[0]).parent}{os.pathsep}{os.environ['PATH']}",
        },
        cwd=visit.parent,
    )
    found = re.search(r"^FIRST-RUN .*$", output, re.M)
    assert found, output
    return found.group(0)


def test_the_documented_setup_manages_a_markdown_file_in_a_stock_emacs(emacs: str, workspace: Workspace, tmp_path) -> None:
    """A new user's first run: the setup the guide gives, in an Emacs without
    markdown-mode, manages a .md file (it opens in text-mode) and a .txt file,
    and C-M-i completes addresses there."""
    init = documented_elisp("emacs-setup")
    assert "(mevedel-lsp-global-mode 1)" in init
    notes = workspace.root / "notes.md"
    notes.write_text("# Notes\n\nSee work://shared/notes.md\n")
    facts = first_run(emacs, init, notes, tmp_path / "md")
    assert facts.startswith("FIRST-RUN mode=text-mode managed=t server=mevedel-lsp-server"), facts
    assert re.search(r"key=(completion-at-point|complete-symbol)$", facts), facts
    facts = first_run(emacs, init, workspace.document, tmp_path / "txt")
    assert facts.startswith("FIRST-RUN mode=text-mode managed=t server=mevedel-lsp-server"), facts


def test_the_documented_eglot_server_programs_entry_starts_the_server(emacs: str, workspace: Workspace, tmp_path) -> None:
    """The guide's `eglot-server-programs' entry, for those who set eglot up
    themselves, starts mevedel-lsp with the package's server class."""
    init = documented_elisp("emacs-eglot-entry")
    assert "eglot-server-programs" in init
    facts = first_run(emacs, init, workspace.document, tmp_path)
    assert facts.startswith("FIRST-RUN mode=text-mode managed=t server=mevedel-lsp-server"), facts


# The chat as a user sees it: emacs -nw in tmux -------------------------------------------


class Screen:
    """One tmux server of its own (its socket named for this test) running a
    command in a window of a fixed size."""

    def __init__(self, command: list[str], *, env: dict[str, str], cwd: Path, width: int = 100, height: int = 42,
                 explain=None) -> None:
        self.tmux = shutil.which("tmux")
        if self.tmux is None:
            pytest.skip("tmux is not installed (scripts/setup --test installs it)")
        #: What the program knows beyond its screen, for a failed wait.
        self.explain = explain
        self.socket = f"mevedel-test-{uuid.uuid4().hex[:12]}"
        environment = " ".join(f"{key}={json.dumps(value)}" for key, value in env.items())
        line = f"cd {json.dumps(str(cwd))} && env {environment} {' '.join(json.dumps(part) for part in command)}"
        self._tmux("new-session", "-d", "-s", "chat", "-x", str(width), "-y", str(height), line)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run([self.tmux, "-L", self.socket, *args], capture_output=True, text=True, check=True)
        return done.stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "chat", *keys)

    def text(self, *keys: str) -> None:
        """Type KEYS literally."""
        self._tmux("send-keys", "-t", "chat", "-l", *keys)

    def capture(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "chat")

    def wait_for(self, predicate, what: str, seconds: float = 90) -> str:
        """Capture the screen until PREDICATE holds of it; fail naming WHAT."""
        deadline = time.monotonic() + seconds
        while True:
            screen = self.capture()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {what}:\n{screen}{self.explain() if self.explain else ''}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], capture_output=True)


SCREEN_SCRIPT = [[
    {"think": "The user wants the notes file rewritten."},
    {"say": "I will rewrite notes.txt and then clean the build."},
    {"tool_call": {"id": "c1", "title": "Edit notes.txt", "kind": "edit", "status": "pending"}},
    {"write": {"path": "notes.txt", "content": "alpha\nBETA\ngamma\n"}},
    {"tool_update": {"id": "c1", "status": "completed", "text": "1 line changed",
                     "diff": {"path": "notes.txt", "old": "alpha\nbeta\ngamma\n", "new": "alpha\nBETA\ngamma\n"}}},
    {"plan": [{"content": "rewrite notes.txt", "status": "completed", "priority": "high"},
              {"content": "clean the build", "status": "in_progress", "priority": "medium"}]},
    {"permission": {"tool_call_id": "c2", "title": "Run make clean",
                    "options": [{"id": "allow", "name": "Allow once", "kind": "allow_once"},
                                {"id": "reject", "name": "Reject", "kind": "reject_once"}]}},
    {"say": "\nDone: notes.txt now says BETA."},
]]


#: What an Emacs on a Screen knows that its screen does not show, asked over
#: its server and written to OUT-FILE: a failed wait says which keys ran
#: which commands, which buffers there are and where Emacs is waiting (the
#: backtrace of a command blocked in a request has the request below the
#: server's own frames; the server's filter runs while it waits).
EMACS_STATE = r"""
(let* ((print-length 40) (print-level 6)
       (parts
        (list
         (format "selected window's buffer %S, current buffer %S, minibuffer depth %d, last command %S"
                 (window-buffer (selected-window)) (current-buffer) (minibuffer-depth) last-command)
         (concat "buffers (name, major mode, modified):\n"
                 (mapconcat (lambda (b) (format "  %S %S %S" (buffer-name b) (buffer-local-value 'major-mode b)
                                                (buffer-modified-p b)))
                            (buffer-list) "\n"))
         (concat "recent keys [and the commands they ran]:\n  "
                 (mapconcat (lambda (e) (if (and (consp e) (null (car e))) (format "[%S]" (cdr e))
                                          (or (ignore-errors (single-key-description e)) (format "%S" e))))
                            (recent-keys t) " "))
         (format "live mevedel-lsp servers: %S"
                 (ignore-errors (mapcar #'jsonrpc-name (mevedel-lsp--servers))))
         (let ((frames (with-output-to-string (backtrace))))
           ;; From the frame that runs this form down: the frames above it are this form's.
           (concat "backtrace:\n" (substring frames (or (string-match "^ *server-eval-and-print" frames) 0))))
         (concat "*Messages*:\n" (with-current-buffer (messages-buffer) (buffer-string)))
         (mapconcat (lambda (b)
                      (with-current-buffer b
                        (format "%s (its end):\n%s" (buffer-name b)
                                (buffer-substring-no-properties (max (point-min) (- (point-max) 8000)) (point-max)))))
                    (seq-filter (lambda (b) (string-match-p "EGLOT.*events" (buffer-name b))) (buffer-list))
                    "\n"))))
  (with-temp-file OUT-FILE (insert (mapconcat #'identity parts "\n\n") "\n")))
"""


def _emacs_server(tmp_path: Path) -> tuple[str, object]:
    """Init lines that start a server in the Emacs (TCP: a socket path under
    the test's directory would be too long), and what a failed wait of its
    Screen adds to the message: `EMACS_STATE`, asked with emacsclient."""
    directory = tmp_path / f"emacs-server-{uuid.uuid4().hex[:8]}"
    init = f"(setq server-use-tcp t server-auth-dir {json.dumps(str(directory) + '/')} server-name \"test\")\n(server-start)"

    def explain() -> str:
        out = directory / "state.txt"
        expression = EMACS_STATE.replace("OUT-FILE", json.dumps(str(out)))
        try:
            asked = subprocess.run(["emacsclient", "-f", str(directory / "test"), "--eval", expression],
                                   capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"\n--- Emacs did not answer emacsclient: {error}"
        if not out.exists():
            return f"\n--- Emacs wrote no state: {asked.stdout}{asked.stderr}"
        return f"\n--- what Emacs knows ---\n{out.read_text(encoding='utf-8', errors='replace')}"

    return init, explain


def _terminal_emacs(emacs: str, workspace: Workspace, tmp_path: Path, turns: list, settings: str = "", init_more: str = "") -> Screen:
    """emacs -nw in tmux with the documented setup (and INIT_MORE), the
    test's server and a scripted agent playing TURNS, visiting notes.txt."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    server_init, explain = _emacs_server(tmp_path)
    agent = "[" + " ".join(json.dumps(part) for part in [sys.executable, str(AGENT), str(script)]) + "]"
    init = "\n".join([
        documented_elisp("emacs-setup"),
        ";; The test's server and agent, and a quiet start.",
        f"(setq mevedel-lsp-server-command '({' '.join(json.dumps(part) for part in server_command())}))",
        f"(setq mevedel-lsp-settings '(:agents (:scripted (:command {agent})) :defaultAgent \"scripted\" {settings}))",
        "(setq inhibit-startup-screen t native-comp-async-report-warnings-errors 'silent",
        "      native-comp-deferred-compilation nil native-comp-jit-compilation nil)",
        server_init,
        init_more,
        "",
    ])
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "init.el").write_text(init, encoding="utf-8")
    return Screen(
        [emacs, "-nw", "-q", "-l", str(home / "init.el"), str(workspace.root / "notes.txt")],
        env={"HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
             "XDG_STATE_HOME": str(tmp_path / "state")},
        cwd=workspace.root,
        explain=explain,
    )


ASK_CLEAN = {"permission": {"tool_call_id": "c2", "title": "Run make clean",
                            "options": [{"id": "allow", "name": "Allow once", "kind": "allow_once"},
                                        {"id": "reject", "name": "Reject", "kind": "reject_once"}]}}


def _prompt_from_notes(screen: Screen, text: str) -> None:
    """Once eglot manages notes.txt: C-c m p, TEXT, C-c C-c."""
    screen.wait_for(lambda s: "[eglot:" in s, "eglot managing notes.txt")
    screen.keys("C-c", "m", "p")
    screen.wait_for(lambda s: "*mevedel prompt*" in s, "the prompt buffer")
    screen.text(text)
    screen.keys("C-c", "C-c")


def test_emacs_c_g_or_an_empty_answer_refuses_a_permission_at_once(emacs: str, workspace: Workspace, tmp_path) -> None:
    """C-g at the agent's question, then Enter on an empty answer at the
    next: each is answered at once (refused), the turn goes on and settles
    long before the question's timeout; nothing breaks in the filter."""
    (workspace.root / "notes.txt").write_text("alpha\n")
    turns = [[ASK_CLEAN, {"say": "after the first"}, ASK_CLEAN, {"say": "after the second"}]]
    screen = _terminal_emacs(emacs, workspace, tmp_path, turns, ":permissionTimeoutSeconds 600")
    try:
        _prompt_from_notes(screen, "Clean up.")
        asked = screen.wait_for(lambda s: "Answer (Allow once, Reject) [empty or C-g: refuse]" in s, "the first question")
        screen.keys("C-g")
        screen.wait_for(lambda s: "after the first" in s, "the turn going on after C-g")
        screen.wait_for(lambda s: s.count("Answer (Allow once, Reject)") == 1 and "after the first" in s, "the second question")
        screen.keys("Enter")
        settled = screen.wait_for(lambda s: "(mevedel chat:idle)" in s, "the settled turn", seconds=60)
        assert "── completed (end_turn)" in settled, settled
        assert settled.count("Permission Run make clean → refused: declined") == 2, settled
        assert "json-value-p" not in settled and "Error running timer" not in settled, settled
        assert asked
    finally:
        screen.close()


def test_emacs_a_server_that_exits_before_it_connected_is_named(emacs: str, workspace: Workspace, tmp_path) -> None:
    """C-c m p while eglot connects a server that exits before it answers:
    the command waits, then says the server did not connect and names the
    buffer that says why. (In batch Emacs eglot's error in the dead
    server's sentinel ends Emacs, so on a terminal.)"""
    (workspace.root / "notes.txt").write_text("alpha\n")
    leave = tmp_path / "leave"
    # A stand-in that answers nothing and exits once told to.
    stand_in = json.dumps(["sh", "-c", f"while [ ! -e {shlex.quote(str(leave))} ]; do sleep 0.1; done"])
    screen = _terminal_emacs(emacs, workspace, tmp_path, [], "",
                             f"(setq mevedel-lsp-server-command (json-parse-string {json.dumps(stand_in)} :array-type 'list)"
                             " eglot-sync-connect nil)")
    try:
        screen.wait_for(lambda s: "Waiting in background" in s, "eglot connecting in the background")
        screen.keys("C-c", "m", "p")
        screen.wait_for(lambda s: "mevedel: waiting for eglot to connect the mevedel-lsp server" in s, "the command waiting")
        leave.touch()
        refused = screen.wait_for(lambda s: "mevedel: the mevedel-lsp server eglot was starting did not connect" in s,
                                  "the refusal naming the server")
        assert "its buffer *EGLOT (project/" in refused and "*mevedel prompt*" not in refused, refused
    finally:
        screen.close()


def test_emacs_after_a_restart_continues_the_last_session_or_starts_afresh(emacs: str, workspace: Workspace, tmp_path) -> None:
    """Restart Emacs: C-c m p offers the workspace's most recent session by
    the agent's title and C-c C-c continues it (turn 2, the same chat);
    after another restart C-c C-n in the prompt buffer starts a new one."""
    (workspace.root / "notes.txt").write_text("alpha\n")
    # (Each Emacs starts the agent afresh: its script begins again.)
    turns = [[{"session_title": "Tidy the notes file for the release please"}, {"say": "an answer"}]]

    def run_emacs() -> Screen:
        screen = _terminal_emacs(emacs, workspace, tmp_path, turns)
        screen.wait_for(lambda s: "[eglot:" in s, "eglot managing notes.txt")
        return screen

    def quit_emacs(screen: Screen) -> None:
        """C-x C-c, answering its questions about live processes, until
        Emacs is gone (its tmux window with it)."""
        screen.keys("C-x", "C-c")
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                shown = screen.capture()
                if "(yes or no)" in shown:
                    screen.text("yes")
                    screen.keys("Enter")
                elif "(y or n)" in shown:
                    screen.text("y")
                time.sleep(0.2)
            raise AssertionError(f"emacs did not exit:\n{screen.capture()}")
        except subprocess.CalledProcessError:
            pass  # the window closed with Emacs
        finally:
            screen.close()

    screen = run_emacs()
    try:
        screen.keys("C-c", "m", "p")
        screen.wait_for(lambda s: "the current session (a new one if none)" in s, "a prompt to a new session")
        screen.text("Tidy the notes.")
        screen.keys("C-c", "C-c")
        screen.wait_for(lambda s: "(mevedel chat:idle)" in s and "mevedel: turn 1 of " in s, "the first turn settled")
    finally:
        quit_emacs(screen)
    screen = run_emacs()
    try:
        screen.keys("C-c", "m", "p")
        offered = screen.wait_for(lambda s: "continue Tidy the notes file" in s, "the offer to continue")
        assert "C-c C-n new session" in offered, offered
        screen.text("And again.")
        screen.keys("C-c", "C-c")
        chat = screen.wait_for(lambda s: "(mevedel chat:idle)" in s and "mevedel: turn 2 of Tidy the notes file" in s, "the second turn settled")
        # The turn of the Emacs before keeps its labels, read from the record.
        assert "── Turn 1 · scripted · completed" in chat and "── Turn 2 · scripted · completed" in chat, chat
        assert chat.count("── completed (end_turn)") == 2, chat
    finally:
        quit_emacs(screen)
    screen = run_emacs()
    try:
        screen.keys("C-c", "m", "p")
        screen.wait_for(lambda s: "continue Tidy the notes file" in s, "the offer to continue")
        screen.keys("C-c", "C-n")
        screen.wait_for(lambda s: "the current session (a new one if none)" in s, "a prompt to a new session")
        screen.text("Something else.")
        screen.keys("C-c", "C-c")
        chat = screen.wait_for(lambda s: "(mevedel chat:idle)" in s and "mevedel: turn 1 of " in s, "the fresh turn settled")
        assert "Turn 2" not in chat, chat
    finally:
        quit_emacs(screen)


def test_emacs_after_the_server_died_mid_turn_says_to_open_the_session_and_then_goes_on(emacs: str, workspace: Workspace, tmp_path) -> None:
    """The server is killed while a turn runs: the chat says so, eglot
    starts another; p in the chat is refused saying what to do (open the
    session again, not the LSP method), and opening it takes it over with
    the turn recorded interrupted; the next prompt is turn 2, in the chat
    the dead server showed (taken over: one chat for the session)."""
    (workspace.root / "notes.txt").write_text("alpha\n")
    release = tmp_path / "release"
    turns = [[{"say": "Working on it."}, {"wait_file": str(release)}, {"say": "Finished."}]]
    # An hour's lease: the killed server's session is offered Take over at
    # once (its death is proven on this machine), not when the lease ends.
    # eglot reconnects only to a server that lasted its
    # `eglot-autoreconnect' seconds (timed on an idle timer); t: always.
    screen = _terminal_emacs(emacs, workspace, tmp_path, turns, ":leaseSeconds 3600", "(setq eglot-autoreconnect t)")
    try:
        _prompt_from_notes(screen, "A long job.")
        screen.wait_for(lambda s: "Working on it." in s, "the turn running")
        (server,) = server_processes(workspace.root)
        os.kill(server, signal.SIGKILL)
        screen.wait_for(lambda s: "Server died" in s, "the chat saying the server died")
        release.touch()  # the next agent goes straight through
        # eglot says "Reconnected!" once it stops blocking, at the first
        # output of any process: often before the new server answered (and
        # "Connected!" said), when the keys below wait for it.
        screen.wait_for(lambda s: ("Connected!" in s or "Reconnected!" in s) and len(server_processes(workspace.root)) == 1,
                        "eglot connected again")
        # Into the chat first, as a person would: where the cursor is after
        # the crash (the chat or notes.txt) depends on when the reply came.
        screen.keys("C-c", "m", "m")
        screen.keys("p")
        screen.wait_for(lambda s: "*mevedel prompt*" in s, "the prompt buffer from the chat")
        screen.text("Go on.")
        screen.keys("C-c", "C-c")
        refused = screen.wait_for(lambda s: "What to do: open the session again" in s, "what to do after the restart")
        assert "M-x mevedel-lsp-open-session" in refused, refused
        screen.keys("M-x")
        screen.text("mevedel-lsp-open-session")
        screen.keys("Enter")
        screen.wait_for(lambda s: "Open session:" in s, "the session question")
        screen.keys("Tab")  # the one session (SPC would complete a word)
        screen.wait_for(lambda s: "Open session: A long job. (" in s, "the session completed")
        screen.keys("Enter")
        screen.wait_for(lambda s: "Answer (Take over, Cancel)" in s, "the takeover question")
        screen.text("Take over")
        screen.keys("Enter")
        screen.wait_for(lambda s: "turn 1 was in flight and is now interrupted" in s, "the interrupted turn said")
        screen.keys("C-c", "m", "p")
        screen.wait_for(lambda s: "*mevedel prompt*" in s, "the prompt buffer")
        screen.text("Go on.")
        screen.keys("C-c", "C-c")
        chat = screen.wait_for(lambda s: "Finished." in s and "(mevedel chat:idle)" in s, "turn 2 settled")
        assert "── Turn 2 · scripted · completed" in chat, chat
        # The chat of the dead server was taken over, not left beside a second one.
        screen.keys("M-:")
        screen.text('(message "chat buffers: %S" (seq-filter (lambda (name) (string-prefix-p "*mevedel chat" name))'
                    ' (mapcar (function buffer-name) (buffer-list))))')
        screen.keys("Enter")
        listed = screen.wait_for(lambda s: "chat buffers: (" in s, "the chat buffers listed")
        # The message shows first as said, then M-: echoes its string with
        # the quotes escaped: the screen may hold either.
        assert re.search(r'chat buffers: \(\\?"\*mevedel chat A long job\.\*\\?"\)', listed), listed
    finally:
        screen.close()


def test_emacs_chat_on_a_terminal(emacs: str, workspace: Workspace, tmp_path) -> None:
    """emacs -nw in tmux with the documented setup: C-c m p opens the prompt
    buffer, C-c C-c sends it, the agent's permission question is answered in
    the minibuffer, and the chat shows the whole turn.  The screen is saved
    to the test's directory (docs/screens/emacs-chat.txt is one such)."""
    (workspace.root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": SCREEN_SCRIPT}))
    agent = "[" + " ".join(json.dumps(part) for part in [sys.executable, str(AGENT), str(script)]) + "]"
    init = "\n".join([
        documented_elisp("emacs-setup"),
        ";; The test's server and agent, and a quiet start.",
        f"(setq mevedel-lsp-server-command '({' '.join(json.dumps(part) for part in server_command())}))",
        f"(setq mevedel-lsp-settings '(:agents (:scripted (:command {agent})) :defaultAgent \"scripted\"))",
        "(setq inhibit-startup-screen t native-comp-async-report-warnings-errors 'silent",
        "      native-comp-deferred-compilation nil native-comp-jit-compilation nil)",
        "",
    ])
    home = tmp_path / "home"
    home.mkdir()
    (home / "init.el").write_text(init, encoding="utf-8")
    screen = Screen(
        [emacs, "-nw", "-q", "-l", str(home / "init.el"), str(workspace.root / "notes.txt")],
        env={"HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
        cwd=workspace.root,
    )
    try:
        screen.wait_for(lambda s: "[eglot:" in s, "eglot managing notes.txt")
        screen.keys("C-c", "m", "p")
        screen.wait_for(lambda s: "*mevedel prompt*" in s, "the prompt buffer")
        screen.text("Rewrite notes.txt: capitalise beta.")
        screen.keys("C-j")
        screen.text("Then clean the build.")
        screen.keys("C-c", "C-c")
        screen.wait_for(lambda s: "Answer (Allow once, Reject)" in s, "the agent's permission question")
        screen.text("Allow once")
        screen.keys("Enter")
        settled = screen.wait_for(lambda s: "(mevedel chat:idle)" in s, "the settled turn")
        (tmp_path / "emacs-chat-settled.txt").write_text(settled, encoding="utf-8")
        # The chat window follows the turn: its end is on the screen; the
        # window of notes.txt shows what the agent wrote.
        assert "── completed (end_turn)" in settled and "mevedel: turn 1 of " in settled, settled
        # (Emacs 30 gives flymake a two-column margin on a terminal.)
        assert [line.strip() for line in settled.splitlines()[1:4]] == ["alpha", "BETA", "gamma"], settled
        # The whole chat, in one window, from its top.
        screen.keys("C-x", "1")
        screen.keys("M-<")
        shown = screen.wait_for(
            lambda s: sum(line.startswith("-UU") for line in s.splitlines()) == 1 and s.splitlines()[2].startswith("── Turn 1"),
            "the chat alone, from its top",
        )
        (tmp_path / "emacs-chat.txt").write_text(shown, encoding="utf-8")
        print(shown)
        for expected in (
            "── Turn 1 · scripted · completed ──",
            "You: Rewrite notes.txt: capitalise beta.",
            "     Then clean the build.",
            "Reasoning (TAB shows or hides it)",
            "I will rewrite notes.txt and then clean the build.",
            "Tool Edit notes.txt  [edit · completed]",
            "    -beta",
            "    +BETA",
            "    - [x] rewrite notes.txt",
            "Permission Run make clean → Allow once",
            "Done: notes.txt now says BETA.",
            "*mevedel chat",
            "(mevedel chat:idle)",
        ):
            assert expected in shown, f"{expected!r} is not on the screen:\n{shown}"
        # Reasoning is folded away.
        assert "The user wants the notes file rewritten." not in shown, shown
        assert (workspace.root / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"
    finally:
        screen.close()


def test_emacs_input_history(emacs: str, workspace: Workspace) -> None:
    """M-p and M-n in the prompt buffer, in a workspace whose input history
    file is corrupt (renamed aside by the server, told once)."""
    (workspace.root / ".mevedel").mkdir(exist_ok=True)
    (workspace.root / ".mevedel" / "input-history").write_text("{not a history")
    output = _run_chat_tests(emacs, workspace, "mevedel-lsp-test-history-", "mevedel-lsp-history-test.el")
    assert re.search(r"Ran 1 tests, 1 results as expected, 0 unexpected", output), output
    assert re.search(r"passed +1/1 +mevedel-lsp-test-history-m-p-and-m-n-step-through-sent-prompts", output), output
    assert len(list((workspace.root / ".mevedel").glob("input-history.corrupt-*"))) == 1


def test_emacs_c_g_at_the_question_before_a_session_beside_a_held_one_starts_nothing(emacs: str, workspace: Workspace, tmp_path) -> None:
    """A second session while the first is open here asks whether both may
    share the project's files; C-g there: nothing is started, the echo area
    says so, and Emacs goes on (the next command starts a session once
    told Start anyway)."""
    # The question's time limit far off: what answers it is the key.
    screen = _terminal_emacs(emacs, workspace, tmp_path, [[{"say": "unused"}]],
                             ":controlTransfer (:promptTimeoutSeconds 600)")
    try:
        screen.wait_for(lambda s: "[eglot:" in s, "eglot managing notes.txt")
        _new_session(screen, "First")
        screen.wait_for(lambda s: "created session First" in s, "the first session")
        _new_session(screen, "Second")
        # The question's text, not only its last line: a terminal redraw
        # can put the answer line (moved down as the minibuffer grew) on
        # the screen before the lines of text above it are written.
        screen.wait_for(lambda s: "[empty or C-g: Cancel]" in s and "share this project's files" in _unwrapped(s),
                        "the question with its text")
        screen.keys("C-g")
        # The message and the whole of Eglot's mode-line segment.
        told = screen.wait_for(lambda s: "no new session was started" in _unwrapped(s) and re.search(r"\[eglot:[^]\n]*\]", s),
                               "what C-g did")
        (tmp_path / "emacs-declined.txt").write_text(told)
        assert "Traceback" not in told and "Error running timer" not in told, told
        # A declined question is no failure: no error in the mode line
        # (it read [eglot:project/error]), and the echo area does not name
        # the request it refused.
        assert "error" not in re.search(r"\[eglot:[^]\n]*\]", told).group(0), told
        assert "mevedel/session/create" not in told, told
        _new_session(screen, "Third")
        screen.wait_for(lambda s: "[empty or C-g: Cancel]" in s, "the question again")
        screen.text("Start anyway")
        screen.keys("Enter")
        screen.wait_for(lambda s: "created session Third" in s, "the session started anyway")
        # The sessions list: the two started, no other.
        screen.keys("C-c", "m", "l")
        listed = screen.wait_for(lambda s: "Third" in s and "First" in s and "*mevedel sessions" in s, "the sessions list")
        assert "Second" not in listed, listed
    finally:
        screen.close()


def _new_session(screen: Screen, name: str) -> None:
    """C-c m c, NAME, Enter."""
    screen.keys("C-c", "m", "c")
    screen.wait_for(lambda s: "New session name" in s, "the name's prompt")
    screen.text(name)
    screen.keys("Enter")


def _unwrapped(screen: str) -> str:
    """SCREEN with a terminal's wrapped lines joined (a long message in the
    echo area continues on the next line)."""
    return re.sub(r"\\?\n", "", screen)
