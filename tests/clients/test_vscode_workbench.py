"""The VS Code client in a real VS Code: code-server with the packaged .vsix
installed, its workbench driven headless in chromium the way a person uses
it (the command palette, quick picks, the chat view, the artifacts tree,
keys in the editor), against the real ``mevedel-lsp`` from .venv and the
scripted ACP agent. The harness is in ``vscode_workbench.py``; a failing
test leaves a screenshot of the workbench and the extension's output channel
beside its logs (the failure names the folder)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("vscode_workbench")

from editor_harness import REPOSITORY, cli_command  # noqa: E402
from vscode_workbench import CHROMIUM, HARNESS, PLAYWRIGHT, CodeServer, Driver, package_vsix, prerequisites, user_settings, wait_until  # noqa: E402

# The hook that tells the fixture a test failed.
pytest_plugins = ["vscode_workbench"]

#: Each test opens a window (an extension host and a server start; the first
#: test also packages the .vsix and starts code-server) and takes a few dozen
#: steps, each bounded by STEP_SECONDS: more than the suite's 120 s default.
pytestmark = pytest.mark.timeout(360)

AGENT = REPOSITORY / "tests" / "agents" / "scripted_agent.py"
#: Where a failed test leaves what the workbench showed: $MEVEDEL_TEST_ARTIFACTS
#: (CI points it beside its log), else .test-artifacts/ in the checkout --
#: not pytest's temporary directories, which other runs rotate away.
FAILURES = Path(os.environ.get("MEVEDEL_TEST_ARTIFACTS", REPOSITORY / ".test-artifacts")) / "vscode"


class Workbench:
    """One code-server and one browser for the module; each test opens its
    own folder in a fresh window (its own extension host and server)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.agent_script = base / "agent.json"
        self.agent_log = base / "agent.jsonl"
        vsix = package_vsix(base)
        self.server = CodeServer(base / "code-server", vsix, {"XDG_STATE_HOME": str(base / "state")})
        self.drive = Driver({"MEVEDEL_PLAYWRIGHT_CORE": str(PLAYWRIGHT), "MEVEDEL_CHROMIUM": str(CHROMIUM)}, base / "driver.log")
        self.folder: Path | None = None

    def open(self, folder: Path, *, turns: list[list[dict[str, Any]]] | None = None, settings: dict[str, Any] | None = None,
             script: dict[str, Any] | None = None) -> None:
        """Opens FOLDER in a new window: the server starts for it. TURNS is
        the scripted agent's script (one list of steps per prompt), SCRIPT
        more of its keys (modes, config options...)."""
        agent = None
        if turns is not None:
            self.agent_log.unlink(missing_ok=True)
            self.agent_script.write_text(json.dumps({"name": "scripted", "log": str(self.agent_log), "turns": turns, **(script or {})}))
            agent = [sys.executable, str(AGENT), str(self.agent_script)]
        self.server.settings({**user_settings(agent), **(settings or {})})
        self.folder = folder
        self.drive("open", url=self.server.url(folder))

    def keep_failure(self, directory: Path) -> None:
        """Saves the workbench's screenshot, its focus log, the extension's output channel
        and the logs into DIRECTORY, and says where on stderr (the report's
        captured output)."""
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        # Where the keys went: the workbench's focus moves and key presses.
        try:
            (directory / "focus.log").write_text("\n".join(self.drive("focusLog")) + "\n")
        except AssertionError as error:
            (directory / "focus.log").write_text(f"no focus log: {error}\n")
        try:
            self.drive("screenshot", path=str(directory / "workbench.png"))
        except AssertionError as error:
            (directory / "workbench.png.txt").write_text(f"no screenshot: {error}\n")
        for index, channel in enumerate(self.server.output_channels()):
            shutil.copy(channel, directory / f"output-{index}-{channel.name}")
        for log in (self.server.log, self.drive.log, self.agent_log):
            if log.exists():
                shutil.copy(log, directory / log.name)
        print(f"vscode: the failed test's screenshot, output channel and logs are in {directory}", file=sys.stderr)

    def close(self) -> None:
        self.drive.close()
        self.server.stop()


@pytest.fixture(scope="module")
def workbench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
    prerequisites()
    opened = Workbench(tmp_path_factory.mktemp("vscode"))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def vscode(workbench: Workbench, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workbench]:
    """The workbench for one test; on failure its screenshot and the
    extension's output channel go to FAILURES/<test> (named in the report)."""
    yield workbench
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        workbench.keep_failure(FAILURES / request.node.name)


def markdown_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".mevedel" / "shared" / "plans").mkdir(parents=True)
    (folder / ".mevedel" / "shared" / "notes.md").write_text("# Shared notes\n\nalpha beta\n")
    (folder / ".mevedel" / "shared" / "plans" / "first.md").write_text("first plan\n")
    (folder / "doc.md").write_text(
        "See work://shared/notes.md for the notes.\n"
        "Odd: work://shared/%6Eotes.md here.\n"
        "A typo: wrok://x there.\n"
        "\n"
    )
    return folder.resolve()


def open_explorer_file(vscode: Workbench, name: str) -> None:
    vscode.drive("click", selector=".explorer-folders-view .monaco-list-row", hasText=name)
    vscode.drive("waitFor", selector=f'.tab.active[data-resource-name="{name}"]')


def connected(vscode: Workbench) -> None:
    """Opens doc.md and waits for the server's warning on its near-miss
    scheme: the extension is active and its server answers."""
    open_explorer_file(vscode, "doc.md")
    vscode.drive("waitFor", selector='[id="status.problems"]', hasText="1")


def test_addresses_in_a_markdown_file(vscode: Workbench, tmp_path: Path) -> None:
    """Connect; diagnostics on a near-miss scheme; completion, hover and
    go-to-definition of a work:// address, by keys in the editor."""
    folder = markdown_folder(tmp_path)
    vscode.open(folder)
    open_explorer_file(vscode, "doc.md")
    drive = vscode.drive

    # The near-miss scheme is a warning in the Problems panel.
    drive("press", key="Control+Shift+M")
    drive("waitFor", selector=".markers-panel .monaco-list-row", hasText="wrok://x")
    problems = " ".join(drive("texts", selector=".markers-panel .monaco-list-row"))
    assert "work://" in problems, problems

    # Completion after work://shared/ offers the directory's entries; Enter
    # takes one, and the saved file has the canonical address.
    drive("click", selector=".editor-instance .view-line", hasText="A typo")
    drive("press", key="Control+End")
    drive("type", text="More: work://shared/")
    drive("press", key="Control+Space")
    drive("waitFor", selector=".suggest-widget .monaco-list-row", hasText="notes.md")
    offered = drive("texts", selector=".suggest-widget .monaco-list-row")
    assert any("plans" in row for row in offered), offered
    drive("click", selector=".suggest-widget .monaco-list-row", hasText="notes.md")
    drive("waitFor", selector=".editor-instance .view-line", hasText="More: work://shared/notes.md")
    drive("press", key="Control+s")
    wait_until(lambda: (folder / "doc.md").read_text().endswith("\nMore: work://shared/notes.md"), "the saved completion")

    # Hover on the odd spelling shows the canonical address.
    drive("press", key="Control+Home")
    drive("press", key="ArrowDown")
    drive("press", key="Home")
    for _ in range(12):
        drive("press", key="ArrowRight")
    drive("press", key="Control+k")
    drive("press", key="Control+i")
    drive("waitFor", selector=".monaco-hover", hasText="work://shared/notes.md")
    hover = " ".join(drive("texts", selector=".monaco-hover"))
    assert str(folder) not in hover, hover
    drive("press", key="Escape")

    # F12 on the address visits its backing file.
    drive("press", key="Control+Home")
    for _ in range(8):
        drive("press", key="ArrowRight")
    drive("press", key="F12")
    drive("waitFor", selector='.tab.active[data-resource-name="notes.md"]')
    drive("waitFor", selector=".editor-instance .view-line", hasText="# Shared notes")


def permission(title: str) -> dict[str, Any]:
    return {
        "permission": {
            "tool_call_id": "c1",
            "title": title,
            "options": [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}],
        }
    }


CHAT = "mevedel chat"


def send_prompt(vscode: Workbench, text: str) -> None:
    """Types TEXT in the chat's composer and presses Ctrl+Enter."""
    vscode.drive("fill", frame=CHAT, selector="#prompt", text=text)
    vscode.drive("click", frame=CHAT, selector="#prompt")
    vscode.drive("press", key="Control+Enter")


def test_chat_prompt_stream_permissions_cancel_and_turn_list(vscode: Workbench, tmp_path: Path) -> None:
    folder = markdown_folder(tmp_path)
    vscode.open(
        folder,
        turns=[
            [{"say": "Working on it."}, permission("Write out.txt"), {"write": {"path": "out.txt", "content": "v1\n"}}, {"say": "Done once."}],
            [{"say": "Trying again."}, permission("Delete out.txt"), {"say": "Left alone."}],
            [{"say": "Partial answer"}, {"wait_cancel": 60}, {"say": "never said"}],
        ],
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    drive("waitFor", frame=CHAT, selector=".empty", hasText="No turns yet")

    # The first turn streams while it waits for the permission question,
    # which is answered Allow.
    send_prompt(vscode, "Write the file")
    drive("waitFor", frame=CHAT, selector="#live", hasText="Working on it.")
    question = drive("notification", text="scripted asks permission: Write out.txt", button="Allow once")
    assert "Reject" in question, question
    drive("waitFor", frame=CHAT, selector=".turn-1", hasText="Done once.")
    assert "permission: selected allow" in " ".join(drive("texts", frame=CHAT, selector=".turn-1"))
    wait_until(lambda: (folder / "out.txt").exists(), "the file the agent wrote")
    assert (folder / "out.txt").read_text() == "v1\n"

    # The second is answered Reject: the agent hears it, the chat says so.
    send_prompt(vscode, "Delete the file")
    drive("notification", text="scripted asks permission: Delete out.txt", button="Reject")
    drive("waitFor", frame=CHAT, selector=".turn-2", hasText="Left alone.")
    second = " ".join(drive("texts", frame=CHAT, selector=".turn-2"))
    assert "permission: selected reject" in second, second
    drive("waitFor", frame=CHAT, selector=".turn-2 .permission .refused")
    assert (folder / "out.txt").read_text() == "v1\n"

    # A slow turn shows what arrived, and Cancel Turn ends it interrupted.
    send_prompt(vscode, "Take your time")
    drive("waitFor", frame=CHAT, selector="#live", hasText="Partial answer")
    drive("command", title="mevedel: Cancel Turn")
    drive("notification", text="cancel sent")
    # The live turn is .turn-3 already while it says "cancelling…": wait for
    # it to settle before reading it.
    drive("waitFor", frame=CHAT, selector=".turn-3 .turn-state", hasText="interrupted")
    drive("waitFor", frame=CHAT, selector=".turn-3", hasText="Partial answer")
    third = " ".join(drive("texts", frame=CHAT, selector=".turn-3"))
    assert "never said" not in third and "cancelled" in third, third

    # The turn list names all three; picking one shows it in the transcript.
    drive("command", title="mevedel: Go to Turn…")
    rows = drive("quickItems", title="Go to Turn")
    assert len(rows) == 3 and all(f"Turn {n}" in " ".join(rows) for n in (1, 2, 3)), rows
    assert "Write the file" in " ".join(rows) and "cancelled" in " ".join(rows), rows
    drive("pick", title="Go to Turn", label="Delete the file")
    drive("waitFor", selector=".editor-instance .view-line", hasText="Delete the file")


def agent_events(vscode: Workbench, kind: str) -> list[dict[str, Any]]:
    lines = vscode.agent_log.read_text().splitlines() if vscode.agent_log.exists() else []
    return [event for event in map(json.loads, lines) if event["event"] == kind]


def test_chat_mode_and_model_picker(vscode: Workbench, tmp_path: Path) -> None:
    """The chat's line above the composer shows the agent's mode and
    options; Change… picks what and then its value (quick picks, by keys):
    the running agent gets it at once and the next turn runs with it; a
    value the agent refuses is said naming it and the agent; Esc changes
    nothing."""
    folder = markdown_folder(tmp_path)
    vscode.open(
        folder,
        turns=[[{"echo_options": True}]],
        script={
            "modes": {"current": "ask", "available": [{"id": "ask", "name": "Ask"}, {"id": "plan", "name": "Plan", "description": "think first"}]},
            "config_options": [
                {"id": "model", "name": "Model", "category": "model", "current": "small",
                 "options": [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}]},
                {"id": "fast", "name": "Fast", "type": "boolean", "current": False},
            ],
            "refuse": ["model=large"],
        },
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    drive("waitFor", frame=CHAT, selector=".empty", hasText="No turns yet")
    send_prompt(vscode, "One")
    drive("waitFor", frame=CHAT, selector=".turn-1", hasText="options: mode=ask model=small fast=false")
    drive("waitFor", frame=CHAT, selector="#options", hasText="Mode: Ask · Model: Small · Fast: off")

    # Change… → Mode → Plan: the running agent is told at once.
    drive("click", frame=CHAT, selector="#options button", hasText="Change")
    rows = drive("quickItems", title="Change (agent scripted)")
    assert rows == ["ModeAsk", "ModelSmall", "Fastoff"], rows  # each label and the value in effect
    drive("pick", title="Change (agent scripted)", label="Mode")
    modes = drive("quickItems", title="Mode (agent scripted)")
    assert "current" in modes[0] and "think first" in modes[1], modes
    drive("pick", title="Mode (agent scripted)", label="Plan")
    drive("waitFor", frame=CHAT, selector="#options", hasText="Mode: Plan · Model: Small")
    wait_until(lambda: [e["params"]["modeId"] for e in agent_events(vscode, "set_mode")] == ["plan"], "the agent to be told the mode")

    # A value the agent refuses: said, naming it and the agent; nothing changes.
    drive("click", frame=CHAT, selector="#options button", hasText="Change")
    drive("pick", title="Change (agent scripted)", label="Model")
    drive("pick", title="Model (agent scripted)", label="Large")
    said = drive("notification", text="model=large")
    assert "agent 'scripted'" in said and "not available now" in said, said
    drive("waitFor", frame=CHAT, selector="#options", hasText="Model: Small")

    # Esc at the first question: nothing is sent.
    sent = len(agent_events(vscode, "set_config_option"))
    drive("click", frame=CHAT, selector="#options button", hasText="Change")
    drive("quickItems", title="Change (agent scripted)")
    drive("dismiss")
    assert len(agent_events(vscode, "set_config_option")) == sent

    # Fast on; the next turn runs with all of it.
    drive("click", frame=CHAT, selector="#options button", hasText="Change")
    drive("pick", title="Change (agent scripted)", label="Fast")
    drive("pick", title="Fast (agent scripted)", label="on")
    drive("waitFor", frame=CHAT, selector="#options", hasText="Fast: on")
    send_prompt(vscode, "Two")
    drive("waitFor", frame=CHAT, selector=".turn-2", hasText="options: mode=plan model=small fast=true")


def test_chat_queues_a_prompt_behind_the_running_turn_edits_cancels_and_steers(vscode: Workbench, tmp_path: Path) -> None:
    """While a turn runs the composer's button says Queue: what is sent
    waits under the running turn; Edit changes it (an input box), Cancel
    drops it, and it goes as the next turn when the running one settles.
    Steer cancels the running turn and sends the composer's text at once."""
    folder = markdown_folder(tmp_path)
    release = tmp_path / "release"
    vscode.open(
        folder,
        turns=[
            [{"say": "Working on it."}, {"wait_file": str(release)}, {"say": " Finished."}],
            [{"echo_prompt": True}],
            [{"say": "The wrong way."}, {"wait_cancel": 60}, {"say": "never said"}],
            [{"echo_prompt": True}],
        ],
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    drive("waitFor", frame=CHAT, selector=".empty", hasText="No turns yet")
    send_prompt(vscode, "Start the long one")
    drive("waitFor", frame=CHAT, selector="#live", hasText="Working on it.")
    drive("waitFor", frame=CHAT, selector="#send", hasText="Queue")
    send_prompt(vscode, "First follow-up")
    drive("waitFor", frame=CHAT, selector="#queue .queue-entry", hasText="First follow-up")
    send_prompt(vscode, "Second follow-up")
    drive("waitFor", frame=CHAT, selector="#queue .queue-head", hasText="Queued (2)")

    drive("click", frame=CHAT, selector='.queue-entry:has-text("First follow-up") button[data-action="queueEdit"]')
    drive("answer", title="Edit the queued prompt", text="First follow-up, edited")
    drive("waitFor", frame=CHAT, selector="#queue .queue-entry", hasText="First follow-up, edited")
    drive("click", frame=CHAT, selector='.queue-entry:has-text("Second follow-up") button[data-action="queueCancel"]')
    drive("waitFor", frame=CHAT, selector="#queue .queue-head", hasText="Queued (1)")
    assert "Second follow-up" not in " ".join(drive("texts", frame=CHAT, selector="#queue"))

    release.touch()
    drive("waitFor", frame=CHAT, selector=".turn-2 .prompt", hasText="First follow-up, edited")
    drive("waitFor", frame=CHAT, selector=".turn-2 .turn-state", hasText="completed")
    assert drive("count", frame=CHAT, selector="#queue .queue-entry") == 0

    send_prompt(vscode, "Go slowly")
    drive("waitFor", frame=CHAT, selector="#live", hasText="The wrong way.")
    drive("fill", frame=CHAT, selector="#prompt", text="Turn left instead")
    drive("click", frame=CHAT, selector="#steer")
    drive("waitFor", frame=CHAT, selector=".turn-4 .prompt", hasText="Turn left instead")
    drive("waitFor", frame=CHAT, selector=".turn-3", hasText="The wrong way.")
    third = " ".join(drive("texts", frame=CHAT, selector=".turn-3"))
    assert "never said" not in third and "interrupted" in third, third


def test_rewind_and_redo_restore_the_files(vscode: Workbench, tmp_path: Path) -> None:
    """Rewind before a turn from the palette (the turn, the boundary, the
    confirmation) puts back the file the turn wrote; Redo returns to the
    state before the Rewind."""
    folder = markdown_folder(tmp_path)
    vscode.open(
        folder,
        turns=[
            [{"write": {"path": "out.txt", "content": "v1\n"}}],
            [{"write": {"path": "out.txt", "content": "v2\n"}}],
        ],
        settings={"mevedel.permissions": "allow-all"},
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    send_prompt(vscode, "First version")
    drive("waitFor", frame=CHAT, selector=".turn-1", hasText="wrote out.txt")
    send_prompt(vscode, "Second version")
    drive("waitFor", frame=CHAT, selector=".turn-2", hasText="wrote out.txt")
    assert (folder / "out.txt").read_text() == "v2\n"

    drive("command", title="mevedel: Rewind Session…")
    rows = drive("quickItems", title="mevedel: Rewind")
    assert "Second version" in rows[0] and "First version" in rows[1], rows
    drive("pick", title="mevedel: Rewind", label="Second version")
    drive("pick", title="mevedel: Rewind to", label="Before the prompt of turn 2")
    impact = drive("dialog")
    assert "out.txt" in impact, impact
    drive("dialog", button="Rewind")
    wait_until(lambda: (folder / "out.txt").read_text() == "v1\n", "out.txt restored to v1")
    # The Rewind ends showing the transcript, without the rewound turn.
    drive("waitFor", selector=".editor-instance .view-line", hasText="First version")
    assert "Second version" not in " ".join(drive("texts", selector=".editor-instance .view-line"))

    drive("command", title="mevedel: Redo (Return to an Earlier State)…")
    drive("pick", title="mevedel: Redo", label="2 turns")
    drive("dialog", button="Redo")
    wait_until(lambda: (folder / "out.txt").read_text() == "v2\n", "out.txt back at v2")
    drive("waitFor", selector=".editor-instance .view-line", hasText="Second version")


ARTIFACTS = ".pane-header"
TREE_ROWS = '[id="workbench.view.explorer"] .monaco-list-row'


def test_artifacts_view_edit_save_and_a_document_held_elsewhere(vscode: Workbench, tmp_path: Path) -> None:
    """The artifacts tree: a new document is written in its editor and saved
    through the server; a document another server holds opens read-only and
    becomes writable once handed over."""
    folder = markdown_folder(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, str(HARNESS / "hold_artifact.py"), str(folder), "Contested"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(vscode.base / "state")},
    )
    try:
        assert holder.stdout is not None
        contested = holder.stdout.readline().strip()
        assert contested, "the other server did not create its document"
        vscode.open(folder)
        drive = vscode.drive
        connected(vscode)
        drive("click", selector=ARTIFACTS, hasText="Mevedel Artifacts")
        drive("waitFor", selector=TREE_ROWS, hasText="Contested")
        held = " ".join(drive("texts", selector=TREE_ROWS, hasText="Contested"))
        assert "held by" in held, held

        # A new document, written and saved in its editor.
        drive("command", title="mevedel: New Document")
        drive("answer", title="mevedel: New Document", text="Plan")
        drive("waitFor", selector=TREE_ROWS, hasText="Plan")
        drive("notification", text='created document "Plan"')
        drive("click", selector=".editor-instance .view-lines")
        drive("type", text="Hello artifact")
        drive("press", key="Control+s")
        drive("waitFor", selector=".tab.active:not(.dirty)")
        drive("press", key="Control+w")
        drive("click", selector=TREE_ROWS, hasText="Plan")
        drive("waitFor", selector=".editor-instance .view-line", hasText="Hello artifact")

        # The held document opens read-only, saying who holds it; typing
        # changes nothing. Ask for It: once handed over it is writable.
        drive("click", selector=TREE_ROWS, hasText="Contested")
        drive("waitFor", selector=".editor-instance .view-line", hasText="held elsewhere")
        drive("type", text="mine")
        drive("waitFor", selector=".monaco-editor-overlaymessage", hasText="read-only")
        assert "mine" not in " ".join(drive("texts", selector=".editor-instance .view-line"))
        assert "Ask for It" in drive("notification", text='"Contested" is read-only here')
        # Asked for from the palette, the cursor at the end (the palette gives
        # the focus back to the editor): the holder, idle, hands it over at
        # once. The person types the moment the list shows the item free: the
        # open editor is writable by then, the client has said it was handed
        # over, and what was typed is saved.
        drive("click", selector=".editor-instance .view-lines")
        drive("press", key="Control+End")
        drive("command", title="mevedel: Ask for the Artifact (Request Handover)")
        drive("type", text="now mine", when=f"{TREE_ROWS}:not(:has-text('held by'))", whenText="Contested")
        assert drive("count", selector=".notification-toast", hasText='"Contested" was handed over: it is writable here now') == 1
        drive("press", key="Control+s")
        saved = folder / ".mevedel" / "artifacts" / contested / "document.md"
        wait_until(lambda: saved.read_text() == "held elsewhere\nnow mine", "the text typed saved in the store")
        drive("waitFor", selector=".tab.active:not(.dirty)")
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_follow_a_session_the_cli_owns_take_control_and_give_it_back(vscode: Workbench, tmp_path: Path) -> None:
    """The mevedel CLI owns a session: Open Session… joins it read-only and
    its transcript follows the CLI's next turn; once the CLI releases it,
    Take Control makes it writable here, Release Control gives it back, and
    the CLI goes on."""
    folder = markdown_folder(tmp_path)
    environment = {**os.environ, "XDG_STATE_HOME": str(vscode.base / "state")}

    def cli(*args: str) -> dict[str, Any]:
        done = subprocess.run([*cli_command(), *args, "--json"], cwd=folder, env=environment, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"mevedel {' '.join(args)}: {done.stdout} {done.stderr}"
        return json.loads(done.stdout)

    def cli_turn(session: str, prompt: str) -> None:
        cli("turn", "begin", "--session", session, prompt)
        cli("turn", "append", "response", "--text", f"cli answer to {prompt}", "--session", session)
        cli("turn", "settle", "--session", session)

    vscode.open(folder)
    drive = vscode.drive
    connected(vscode)
    # The CLI's lease lasts 60 s past its last command: its session is made
    # once the window is up (a loaded machine took over a minute to open
    # one), so the window finds it owned, as a user who just ran it would.
    session = cli("turn", "begin", "--new", "--beside-held", "--name", "Owned by the CLI", "CLI prompt 1")["session_id"]
    cli("turn", "settle", "--session", session)
    drive("command", title="mevedel: Open Session…")
    drive("pick", title="mevedel: Open Session", label="Owned by the CLI")
    drive("notification", text="joined Owned by the CLI (read-only)")
    drive("waitFor", selector=".editor-instance .view-line", hasText="CLI prompt 1")

    # The CLI's next turn reaches the open transcript.
    cli_turn(session, "CLI prompt 2")
    drive("waitFor", selector=".editor-instance .view-line", hasText="cli answer to CLI prompt 2")

    # The CLI lets go of it; Take Control makes it writable here.
    cli("session", "release-control", "--session", session)
    drive("command", title="mevedel: Take Control of Session")
    drive("notification", text=f"{session}: you have control (writable here)")
    drive("command", title="mevedel: Release Control of Session")
    drive("notification", text=f"released {session}")
    # Given back: the CLI takes its session's next turn.
    cli_turn(session, "CLI prompt 3")
    drive("waitFor", selector=".editor-instance .view-line", hasText="cli answer to CLI prompt 3")


REVIEW = "mevedel: Review Changes"
REVIEWED = "mevedel: Review Changes, turn 1"
#: The Restore button of a path's row in the review's quick pick.
RESTORE_ROW_BUTTON = '.quick-input-widget .monaco-list-row:visible .action-label[aria-label^="Restore this file"]'
#: The diff editor's sides.
BEFORE_SIDE = ".monaco-diff-editor .editor.original .view-line"
AFTER_SIDE = ".monaco-diff-editor .editor.modified .view-line"


def press_restore_on_row(vscode: Workbench, path: str) -> None:
    """Filters the review's path list to PATH and presses that row's
    Restore button (shown on the focused row)."""
    vscode.drive("answer", title=REVIEWED, text=path, enter=False)
    vscode.drive("waitFor", selector=".quick-input-widget .monaco-list-row.focused", hasText=path)
    vscode.drive("click", selector=RESTORE_ROW_BUTTON)


def test_review_a_turn_and_restore_a_file(vscode: Workbench, tmp_path: Path) -> None:
    """A turn writes a file through fs and runs a shell command that chmods
    and renames: Review Changes from the palette lists every path with what
    happened to it; a path's Restore button answered Cancel changes nothing;
    the text file opens in the diff editor before and after, and Restore
    Reviewed File from its title bar, confirmed, puts it back on disk as a
    new turn, which the next review shows; a path's Restore button,
    confirmed, puts its mode back as another turn."""
    folder = markdown_folder(tmp_path)
    (folder / "app.txt").write_text("one\ntwo\n")
    (folder / "run.sh").write_text("#!/bin/sh\necho run\n")
    (folder / "run.sh").chmod(0o644)
    (folder / "old.txt").write_text("the same bytes move\n")
    vscode.open(
        folder,
        turns=[
            [
                {"write": {"path": "app.txt", "content": "one\nTWO\nthree\n"}},
                {"terminal": {"command": "sh", "args": ["-c", "set -e; chmod 755 run.sh; mv old.txt renamed.txt"]}},
                {"say": "Changed things."},
            ]
        ],
        # The diff editor side by side however narrow its group: the test
        # reads each side's lines.
        settings={"mevedel.permissions": "allow-all", "diffEditor.renderSideBySide": True, "diffEditor.useInlineViewWhenSpaceIsLimited": False},
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    send_prompt(vscode, "Change things")
    drive("waitFor", frame=CHAT, selector=".turn-1", hasText="Changed things.")
    assert (folder / "run.sh").stat().st_mode & 0o777 == 0o755 and (folder / "renamed.txt").exists()

    # The review of the turn names every path and what happened to it.
    drive("command", title=REVIEW)
    drive("pick", title=REVIEW, label="Turn 1")
    rows = drive("quickItems", title=REVIEWED)
    # A row shows the path, then what happened to it (and a path the diff
    # editor cannot show says so beneath).
    assert len(rows) == 3, rows
    shown = {label: next((row[len(label) :] for row in rows if row.startswith(label)), None) for label in ("app.txt", "run.sh", "old.txt -> renamed.txt")}
    assert shown["app.txt"] == "modified · +2 -1", rows
    assert shown["run.sh"] == "mode changed (644 -> 755)\nrun.sh: mode changed (644 -> 755)", rows
    assert shown["old.txt -> renamed.txt"] == "renamed", rows

    # run.sh's Restore button: the warning says what the restore does, and
    # Cancel leaves the file as the turn made it.
    press_restore_on_row(vscode, "run.sh")
    warning = drive("dialog")
    assert "Restore run.sh to its state before turn 1?" in warning and "mode changed (755 -> 644)" in warning, warning
    drive("dialog", button="Cancel")
    drive("notification", text="restore of run.sh cancelled; nothing changed")
    assert (folder / "run.sh").stat().st_mode & 0o777 == 0o755

    # app.txt opens in the diff editor, its text before and after the turn.
    drive("command", title=REVIEW)
    drive("pick", title=REVIEW, label="Turn 1")
    drive("pick", title=REVIEWED, label="app.txt")
    drive("waitFor", selector=".tab.active", hasText="app.txt (turn 1: before ↔ after)")
    drive("waitFor", selector=AFTER_SIDE, hasText="three")
    drive("waitFor", selector=BEFORE_SIDE, hasText="two")
    assert [line.strip() for line in drive("texts", selector=BEFORE_SIDE)] == ["one", "two", ""]
    assert [line.strip() for line in drive("texts", selector=AFTER_SIDE)] == ["one", "TWO", "three", ""]

    # Restore Reviewed File on the diff editor's title bar, confirmed: the
    # file is back on disk, and the restore is a turn of its own.
    drive("click", selector='.editor-actions .action-label[aria-label*="Restore Reviewed File"]')
    warning = drive("dialog")
    assert "Restore app.txt to its state before turn 1?" in warning and "+two" in warning and "-TWO" in warning, warning
    drive("dialog", button="Restore")
    drive("notification", text="restored app.txt to its state before turn 1 as turn 2")
    wait_until(lambda: (folder / "app.txt").read_text() == "one\ntwo\n", "app.txt restored")
    assert (folder / "run.sh").stat().st_mode & 0o777 == 0o755 and (folder / "renamed.txt").exists()

    # The review now offers the restore's turn (and no turn of the
    # cancelled one), which changed app.txt alone.
    drive("command", title=REVIEW)
    turns = [row for row in drive("quickItems", title=REVIEW) if row.startswith("Turn ")]
    assert len(turns) == 2 and turns[0].startswith("Turn 2") and turns[1].startswith("Turn 1"), turns
    drive("pick", title=REVIEW, label="Turn 2")
    rows = drive("quickItems", title="mevedel: Review Changes, turn 2")
    assert len(rows) == 1 and rows[0].startswith("app.txt") and "modified" in rows[0], rows
    drive("dismiss")

    # run.sh's Restore button, confirmed: its mode is back, as turn 3, and
    # the review of turn 1 opens again.
    drive("command", title=REVIEW)
    drive("pick", title=REVIEW, label="Turn 1")
    press_restore_on_row(vscode, "run.sh")
    drive("dialog", button="Restore")
    drive("notification", text="restored run.sh to its state before turn 1 as turn 3")
    wait_until(lambda: (folder / "run.sh").stat().st_mode & 0o777 == 0o644, "run.sh's mode restored")
    assert (folder / "run.sh").read_text() == "#!/bin/sh\necho run\n"
    assert len(drive("quickItems", title=REVIEWED)) == 3
    drive("dismiss")


def test_chat_input_up_and_down_recall_the_prompts_sent(vscode: Workbench, tmp_path: Path) -> None:
    folder = markdown_folder(tmp_path)
    (folder / ".mevedel").mkdir(exist_ok=True)
    (folder / ".mevedel" / "input-history").write_text("{not a history")
    vscode.open(folder, turns=[[{"say": "First answer."}], [{"say": "Second answer."}]])
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    drive("waitFor", frame=CHAT, selector=".empty", hasText="No turns yet")
    send_prompt(vscode, "the first prompt")
    # The server found the history file corrupt as it recorded the prompt:
    # renamed aside, and said once.
    drive("notification", text="renamed to .mevedel/input-history.corrupt-")
    drive("waitFor", frame=CHAT, selector=".turn-1", hasText="First answer.")
    send_prompt(vscode, "the second prompt")
    drive("waitFor", frame=CHAT, selector=".turn-2", hasText="Second answer.")
    drive("fill", frame=CHAT, selector="#prompt", text="my draft")
    drive("click", frame=CHAT, selector="#prompt")
    for key, shown in (("ArrowUp", "the second prompt"), ("ArrowUp", "the first prompt"), ("ArrowUp", "the first prompt"),
                       ("ArrowDown", "the second prompt"), ("ArrowDown", "my draft")):
        drive("press", key=key)
        # The page asks the extension for the history (a round trip) and
        # shows the entry when it arrives.
        wait_until(lambda: drive("value", frame=CHAT, selector="#prompt") == shown, f"{shown!r} after {key}")
    assert len(list((folder / ".mevedel").glob("input-history.corrupt-*"))) == 1


STATUS_ITEMS = "#workbench\\.parts\\.statusbar .statusbar-item"


def test_a_sub_agents_work_streams_nested_under_the_call_folds_when_done_and_rewind_names_it(vscode: Workbench, tmp_path: Path) -> None:
    """The agent hands a task to a second agent with the Agent tool: the
    chat streams the sub-agent's work nested under that tool call, open
    while it works; once it is done it is folded, and a click on it
    expands it, which it stays while later turns redraw the chat. Rewind's
    impact names the sub-agent beside the file it changed."""
    folder = markdown_folder(tmp_path)
    (folder / "notes.txt").write_text("original notes\n")
    release = tmp_path / "release-the-helper"
    finish = tmp_path / "let-the-parent-finish"
    helper_script = tmp_path / "helper.json"
    helper_script.write_text(json.dumps({"log": str(tmp_path / "helper.jsonl"), "turns": [[
        {"say": "Reviewing now."},
        {"tool_call": {"id": "h1", "title": "Read notes.txt", "kind": "read", "status": "completed"}},
        {"write": {"path": "notes.txt", "content": "reviewed notes\n"}},
        {"wait_file": str(release)},
        {"say": " Two issues."},
    ]]}))
    ask = {"name": "reviewer", "prompt": "Review the notes", "agent": "helper"}
    vscode.open(
        folder,
        turns=[[{"say": "Asking the helper."}, {"mcp_call": {"id": "call-reviewer", "tool": "Agent", "arguments": ask}},
                {"say": "Thanks, helper."}, {"wait_file": str(finish)}, {"say": " All done."}],
               [{"say": "Nothing more."}]],
        settings={
            "mevedel.agents": {
                "scripted": {"command": [sys.executable, str(AGENT), str(vscode.agent_script)]},
                "helper": {"command": [sys.executable, str(AGENT), str(helper_script)]},
            },
            "mevedel.permissions": "allow-all",
        },
    )
    drive = vscode.drive
    connected(vscode)
    drive("command", title="mevedel: Open Chat")
    send_prompt(vscode, "Get a review")
    # Two agents configured: the chat asks which one answers.
    drive("pick", title="Which agent answers in this session?", label="scripted")

    # While the helper works, its words stream in, open, under the parent's
    # Agent call (not in the parent's own text).
    nested = "#live .tool-agents .subagent[open]"
    drive("waitFor", frame=CHAT, selector=nested, hasText="Reviewing now.")
    drive("waitFor", frame=CHAT, selector=f"{nested} .tool-title", hasText="Read notes.txt")
    call = " ".join(drive("texts", frame=CHAT, selector="#live .tool-agents > .tool"))
    assert "mcp Agent" in call and "Reviewing now." not in call, call
    assert "reviewer (helper)" in " ".join(drive("texts", frame=CHAT, selector=f"{nested} > summary"))
    # The root turn is still running: the sub-agent's activity is not its end.
    assert drive("count", frame=CHAT, selector="#turns .turn-1") == 0
    assert drive("texts", frame=CHAT, selector="#live .turn-head .turn-state") == ["running"]
    # The status bar names the turn's agent, not the sub-agent at work.
    drive("waitFor", selector=STATUS_ITEMS, hasText="mevedel scripted: running")
    assert "reviewer" not in " ".join(drive("texts", selector=STATUS_ITEMS))

    release.touch()
    # Done: folded under the call while the parent's turn goes on (the
    # sub-agent's end is not the turn's: still running, in the status bar too).
    drive("waitFor", frame=CHAT, selector="#live .tool-agents .subagent.settled", hasText="reviewer (helper)")
    drive("waitFor", frame=CHAT, selector="#live", hasText="Thanks, helper.")
    assert drive("texts", frame=CHAT, selector="#live .turn-head .turn-state") == ["running"]
    drive("waitFor", selector=STATUS_ITEMS, hasText="mevedel scripted: running")
    finish.touch()
    drive("waitFor", frame=CHAT, selector="#turns .turn-1", hasText="All done.")
    drive("waitFor", selector=STATUS_ITEMS, hasText="mevedel scripted: running", state="hidden")
    # Its words are hidden until expanded.
    folded = "#turns .turn-1 .tool-agents .subagent.settled"
    drive("waitFor", frame=CHAT, selector=folded, hasText="reviewer (helper)")
    assert drive("attribute", frame=CHAT, selector=folded, name="open") is None
    drive("waitFor", frame=CHAT, selector=f"{folded} .subagent-body", state="hidden")
    drive("click", frame=CHAT, selector=f"{folded} > summary")
    drive("waitFor", frame=CHAT, selector=f"{folded} .subagent-body", hasText="Two issues.")
    assert "done" in " ".join(drive("texts", frame=CHAT, selector=f"{folded} > summary"))
    # Expanded by the user, it stays so while the chat redraws the turns: a
    # next turn runs (turn 1's buttons go) and settles (they come back).
    send_prompt(vscode, "Anything else?")
    drive("waitFor", frame=CHAT, selector="#turns .turn-2 .turn-actions")
    drive("waitFor", frame=CHAT, selector="#turns .turn-1 .turn-actions")
    assert drive("attribute", frame=CHAT, selector=folded, name="open") == ""
    drive("waitFor", frame=CHAT, selector=f"{folded} .subagent-body", hasText="Two issues.")

    # Rewind's impact names the sub-agent beside what it changed.
    drive("command", title="mevedel: Rewind Session…")
    drive("pick", title="mevedel: Rewind", label="Get a review")
    drive("pick", title="mevedel: Rewind to", label="Before the prompt of turn 1")
    impact = drive("dialog")
    assert "notes.txt" in impact and "changed by sub-agent reviewer" in impact, impact
    drive("dialog", button="Rewind")
    wait_until(lambda: (folder / "notes.txt").read_text() == "original notes\n", "notes.txt restored")
