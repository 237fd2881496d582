"""``mevedel/turn/abort`` of a turn this server's agent is still running
stops the agent first -- ACP ``session/cancel``, and its process ended once
the cancel timeout passes without its answer -- and only then settles the
turn as interrupted, with every change the agent made recorded: its
``fs/write_text_file``, a shell command's changes (one still running when
the abort came, too), and what an agent that ignores the cancel still wrote
before it was stopped. Nothing it does lands outside every turn; the chat
sees the turn cancelling, then interrupted; the next prompt runs. Settling
such a turn by hand (``mevedel/turn/settle``), adding a record to it
(``mevedel/turn/append``) or capturing a file in it (``mevedel/turn/capture``),
is refused. A prompt aborted or cancelled while its
agent still starts never reaches the agent; the user is told, and the next prompt
runs. The real server
over stdio, the scripted ACP agent as a subprocess, real files."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from deadlines import ticks
from killed_turn import CHANGED, SHELL, prepare, tree_state
from mevedel_protocol import methods
from processes import process_alive

from .conftest import SERVER, initialize_params, request

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


class Chat:
    """What the editor's chat is told: ``mevedel/turn/didUpdate``."""

    def __init__(self, client) -> None:
        self.updates: list[dict] = []
        client.feature(methods.TURN_DID_UPDATE)(lambda params: self.updates.append(params))

    def said(self) -> str:
        return "".join(e.get("text") or "" for u in self.updates for e in u.get("events", []) if e["kind"] == "response")

    def told_interrupted(self) -> bool:
        """The turn was shown cancelling, then settled once, interrupted."""
        phases = [u["phase"] for u in self.updates if not u.get("agentPath")]
        return ("cancelling" in phases and phases.count("settled") == 1 and phases[-1] == "settled"
                and self.updates[-1]["outcome"] == "interrupted")


async def _until(what: str, check) -> None:
    for _ in ticks():
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} never happened")


@dataclass
class Run:
    """A server whose default agent is the scripted one: its project, the
    agent's event log and script, the client and the chat."""

    project: Path
    log: Path
    script: Path
    client: LanguageClient
    chat: Chat

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def happened(self) -> list[str]:
        """The agent's events by name, in order."""
        return [e["event"] for e in self.events()]

    def agent_pid(self) -> int:
        return next(e["pid"] for e in self.events() if e["event"] == "start")

    def prompt(self, text: str) -> asyncio.Future:
        """A prompt sent; its answer is the future's."""
        return asyncio.ensure_future(request(self.client, methods.TURN_PROMPT, {"text": text}))

    async def prompt_while_the_agent_starts(self, text: str) -> asyncio.Future:
        """A prompt sent, once its agent is being initialized."""
        running = self.prompt(text)
        await _until("the agent's initialize", lambda: "initialize" in self.happened())
        return running

    def script_next_turn(self) -> None:
        """What the next agent started plays: one turn, saying so."""
        self.script.write_text(json.dumps({"log": str(self.log), "turns": [[{"say": "the next turn"}]]}))

    async def next_prompt_runs(self, turn: int) -> None:
        nxt = await request(self.client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == turn and nxt["outcome"] == "completed" and "the next turn" in self.chat.said()

    async def turns(self) -> list[dict]:
        return (await request(self.client, methods.TURN_LIST, {}))["turns"]

    async def diff(self) -> dict[str, str]:
        diff = await request(self.client, methods.TURN_DIFF, {"first": 1, "last": 1})
        return {f["path"]: f["change"] for f in diff["files"]}

    async def rewound(self) -> dict:
        impact = await request(self.client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
        await request(self.client, methods.REWIND_COMMIT, {"token": impact["token"]})
        return tree_state(self.project)


@pytest.fixture
async def scripted(tmp_path: Path):
    """Starts the server with the scripted agent playing ``turns`` (and
    ``on_initialize`` while it starts), in a project with the killed-turn
    files and ``keep.txt``; shuts it down after the test, however it ended."""
    started: list[LanguageClient] = []

    async def start(turns: list, *, on_initialize: list | None = None, **options) -> Run:
        project = tmp_path / "project"
        project.mkdir()
        prepare(project)
        (project / "keep.txt").write_text("kept\n")
        log, script = tmp_path / "agent-events.jsonl", tmp_path / "script.json"
        script.write_text(json.dumps({"log": str(log), "turns": turns, "on_initialize": on_initialize or []}))
        client = await SERVER.start()
        started.append(client)
        chat = Chat(client)
        await client.initialize_session(
            initialize_params(
                project,
                agents={"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
                defaultAgent="scripted",
                **options,
            )
        )
        return Run(project, log, script, client, chat)

    yield start
    for client in started:
        await client.shutdown_session()


async def test_aborting_a_running_turn_cancels_its_agent_then_settles_it_with_what_it_changed(tmp_path, scripted):
    never, later = tmp_path / "never", tmp_path / "later"
    run = await scripted([
        [
            {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
            {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
            # What the agent tries once its turn is over.
            {"later": {"when_exists": str(later), "steps": [{"write": {"path": "late.txt", "content": "after the abort\n"}}]}},
            {"say": "all written"},
            {"wait_file": str(never)},  # a cancel ends the prompt here
        ],
        [{"say": "the next turn"}],
    ])
    before = tree_state(run.project)
    running = run.prompt("Go")
    await _until("the agent's write and command", lambda: "all written" in run.chat.said())
    aborted = await request(run.client, methods.TURN_ABORT, {})
    assert aborted["committed"] is True and aborted["turn"] == 1
    # The agent was asked to end its turn, and ended it, before the abort answered.
    assert run.happened().count("cancel") == 1
    answered = await running
    assert answered["outcome"] == "interrupted" and answered["stopReason"] == "cancelled"
    assert run.chat.told_interrupted() and run.chat.updates[-1]["reason"] == "aborted"
    assert [(t["state"], t.get("reason")) for t in await run.turns()] == [("interrupted", "aborted")]
    assert await run.diff() == CHANGED

    later.touch()  # the agent's write once the turn settled is refused
    await _until("the agent's late write answered", lambda: any(
        e["event"] == "client_response" and e["method"] == "fs/write_text_file" and "late.txt" in e["params"]["path"]
        for e in run.events()))
    refused = next(e for e in run.events() if e["event"] == "client_response" and "late.txt" in str(e["params"]))
    assert "error" in refused and not (run.project / "late.txt").exists()
    await run.next_prompt_runs(turn=2)
    assert await run.rewound() == before


async def test_aborting_a_turn_whose_agent_ignores_the_cancel_ends_its_process_and_its_command_first(tmp_path, scripted):
    release, command_pid = tmp_path / "release", tmp_path / "command.pid"
    # The command makes its changes, then runs until the test says so.
    slow = f"{SHELL}; echo $$ > {command_pid}; while [ ! -e {release} ]; do sleep 0.05; done; echo late > late.txt"
    run = await scripted([[
        {"ignore_cancel": True},
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", slow]}},
        {"write": {"path": "after.txt", "content": "after the command\n"}},
    ]], cancelTimeoutSeconds=1)
    before = tree_state(run.project)
    running = run.prompt("Go")
    await _until("the command's changes", lambda: command_pid.exists() and command_pid.read_text().strip())
    agent = run.agent_pid()
    command = int(command_pid.read_text())
    aborted = await request(run.client, methods.TURN_ABORT, {"reason": "the user stopped it"})
    assert aborted["committed"] is True and aborted["turn"] == 1
    # The command's changes were recorded though it never exited.
    assert await run.diff() == CHANGED
    # Asked to cancel, it did not answer: its process and its command were ended.
    assert "cancel" in run.happened()
    assert not process_alive(agent) and not process_alive(command)
    answered = await running
    assert answered["outcome"] == "interrupted"
    assert run.chat.told_interrupted()
    (listed,) = await run.turns()
    assert listed["state"] == "interrupted" and listed["reason"].startswith("the user stopped it")
    # The chat is told why, as the settlement recorded it.
    assert run.chat.updates[-1]["reason"] == listed["reason"]

    release.touch()  # nothing of the agent's runs any more to act on it
    run.script_next_turn()
    nxt = await request(run.client, methods.TURN_PROMPT, {"text": "Again"})
    assert nxt["turn"] == 2 and nxt["outcome"] == "completed"
    assert not (run.project / "late.txt").exists() and not (run.project / "after.txt").exists()
    assert await run.rewound() == before


async def test_what_an_agent_ignoring_the_cancel_writes_before_it_stops_is_the_aborted_turns(tmp_path, scripted):
    release = tmp_path / "release"
    run = await scripted([[
        {"ignore_cancel": True},
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
        {"say": "all written"},
        {"wait_file": str(release)},
        # The agent goes on after the cancel.
        {"write": {"path": "late.txt", "content": "after the abort\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "rm keep.txt"]}},
        {"say": "done anyway"},
    ]], cancelTimeoutSeconds=600)  # it ends its turn itself, long before
    before = tree_state(run.project)
    running = run.prompt("Go")
    await _until("the agent's write and command", lambda: "all written" in run.chat.said())
    aborting = asyncio.ensure_future(request(run.client, methods.TURN_ABORT, {}))
    await _until("the cancel reaching the agent, or the abort answering",
                 lambda: aborting.done() or "cancel" in run.happened())
    # The turn is settled only once the agent stopped.
    assert not aborting.done(), aborting.result()
    release.touch()
    aborted = await aborting
    assert aborted["committed"] is True and aborted["turn"] == 1
    assert (await running)["outcome"] == "interrupted" and "done anyway" in run.chat.said()
    assert run.chat.told_interrupted()
    (listed,) = await run.turns()
    assert listed["state"] == "interrupted" and listed["reason"] == "aborted"
    assert await run.diff() == CHANGED | {"late.txt": "added", "keep.txt": "deleted"}
    assert await run.rewound() == before


async def test_settling_by_hand_a_turn_this_servers_agent_runs_is_refused_and_the_turn_goes_on(tmp_path, scripted):
    release = tmp_path / "release"
    run = await scripted([[
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"say": "written"},
        {"wait_file": str(release)},
        {"terminal": {"command": "sh", "args": ["-c", "rm keep.txt"]}},
    ]])
    running = run.prompt("Go")
    await _until("the agent's write", lambda: "written" in run.chat.said())
    with pytest.raises(JsonRpcException) as refused:
        await request(run.client, methods.TURN_SETTLE, {"outcome": "completed"})
    assert refused.value.data["kind"] == "conflict"
    assert "mevedel/turn/abort" in refused.value.data["reason"]
    release.touch()
    answered = await running
    assert answered["outcome"] == "completed" and answered["turn"] == 1
    (listed,) = await run.turns()
    assert listed["state"] == "completed"
    assert await run.diff() == {"notes.txt": "modified", "keep.txt": "deleted"}


async def test_appending_by_hand_to_a_turn_this_servers_agent_runs_is_refused_and_records_nothing(tmp_path, scripted):
    release = tmp_path / "release"
    run = await scripted([[
        {"say": "the agent's words"},
        {"wait_file": str(release)},
        {"say": " and the rest"},
    ]])
    running = run.prompt("Go")
    await _until("the agent's words", lambda: "the agent's words" in run.chat.said())
    with pytest.raises(JsonRpcException) as refused:
        await request(run.client, methods.TURN_APPEND, {"kind": "response", "text": "words the agent never said"})
    assert refused.value.data["kind"] == "conflict"
    assert "mevedel/turn/cancel" in refused.value.data["reason"] and "mevedel/turn/abort" in refused.value.data["reason"]
    release.touch()
    answered = await running
    assert answered["outcome"] == "completed" and answered["turn"] == 1
    shown = await request(run.client, methods.TURN_SHOW, {"turn": 1})
    said = "".join(item.get("text") or "" for item in shown["items"] if item["kind"] == "response")
    assert said == "the agent's words and the rest"


async def _never_reached(run: Run, running: asyncio.Future, reason: str) -> dict:
    """The prompt, aborted or cancelled while its agent started, failed
    prompt-aborted and never reached the agent; the chat's last word on it:
    cancelling, then settled interrupted with ``reason``, no turn. The
    prompt's error data."""
    with pytest.raises(JsonRpcException) as stopped:
        await running
    assert stopped.value.data["kind"] == "prompt-aborted"
    phases = [u["phase"] for u in run.chat.updates]
    last = run.chat.updates[-1]
    assert phases[0] == "starting" and "cancelling" in phases and phases.count("settled") == 1, phases
    assert last["phase"] == "settled" and last["outcome"] == "interrupted" and last.get("turn") is None, last
    assert last["error"]["kind"] == "prompt-aborted", last
    assert last["reason"] == reason
    assert "prompt" not in run.happened()
    return stopped.value.data


async def _the_started_agent_serves_the_next_prompt(run: Run) -> None:
    """The agent started for the stopped prompt answers the next one, the
    only prompt it was sent; the stopped one's file was never written."""
    await run.next_prompt_runs(turn=1)
    events = run.happened()
    assert events.count("start") == 1 and events.count("prompt") == 1
    assert not (run.project / "dispatched.txt").exists()


async def test_a_prompt_aborted_while_its_agent_starts_never_reaches_it_and_the_started_agent_serves_the_next(tmp_path, scripted):
    release = tmp_path / "release"
    run = await scripted([[{"say": "the next turn"}]], on_initialize=[{"wait_file": str(release)}], cancelTimeoutSeconds=600)
    running = await run.prompt_while_the_agent_starts("Write dispatched.txt")
    aborting = asyncio.ensure_future(request(run.client, methods.TURN_ABORT, {}))
    await _until("the abort reaching the server, or answering",
                 lambda: aborting.done() or "cancelling" in [u["phase"] for u in run.chat.updates])
    # The abort waits for the agent's start, which it does not cut short.
    assert not aborting.done(), aborting.result()
    release.touch()
    aborted = await aborting
    assert aborted["committed"] is False and aborted.get("turn") is None and "aborted" in aborted["note"]
    await _never_reached(run, running, "aborted")
    assert await run.turns() == []

    await _the_started_agent_serves_the_next_prompt(run)


async def _prompting_an_agent_that_never_finishes_starting(tmp_path: Path, scripted) -> tuple[Run, asyncio.Future, int]:
    """A prompt sent to an agent whose start outlasts the cancel timeout
    (1 s): the run, the prompt's answer to come and the agent's process."""
    never = tmp_path / "never"
    run = await scripted([[{"say": "never asked"}]], on_initialize=[{"wait_file": str(never)}], cancelTimeoutSeconds=1)
    running = await run.prompt_while_the_agent_starts("Go")
    return run, running, run.agent_pid()


async def test_a_prompt_aborted_while_its_agent_never_finishes_starting_ends_that_agent(tmp_path, scripted):
    run, running, agent = await _prompting_an_agent_that_never_finishes_starting(tmp_path, scripted)
    aborted = await request(run.client, methods.TURN_ABORT, {"reason": "the user gave up"})
    assert aborted["committed"] is False and aborted.get("turn") is None
    assert "the user gave up" in (await _never_reached(run, running, "the user gave up"))["reason"]
    # Its start outlasted the cancel timeout: the agent was ended.
    assert not process_alive(agent)

    run.script_next_turn()
    await run.next_prompt_runs(turn=1)
    assert run.happened().count("start") == 2


async def test_a_prompt_cancelled_while_its_agent_starts_never_reaches_it_and_the_next_prompt_runs(tmp_path, scripted):
    release = tmp_path / "release"
    run = await scripted([[{"say": "the next turn"}]], on_initialize=[{"wait_file": str(release)}], cancelTimeoutSeconds=600)
    running = await run.prompt_while_the_agent_starts("Write dispatched.txt")
    # C-g, Esc, the stop button: answered while the agent still starts.
    cancelled = await request(run.client, methods.TURN_CANCEL, {})
    assert cancelled["cancelled"] is True
    assert not running.done()
    release.touch()
    await _never_reached(run, running, "cancelled by the user")
    assert await run.turns() == []
    # Nothing is left to cancel.
    assert (await request(run.client, methods.TURN_CANCEL, {}))["cancelled"] is False

    await _the_started_agent_serves_the_next_prompt(run)


async def test_a_prompt_cancelled_while_its_agent_never_finishes_starting_ends_that_agent(tmp_path, scripted):
    run, running, agent = await _prompting_an_agent_that_never_finishes_starting(tmp_path, scripted)
    assert (await request(run.client, methods.TURN_CANCEL, {}))["cancelled"] is True
    await _never_reached(run, running, "cancelled by the user")
    # Its start outlasted the cancel timeout: the agent was ended.
    assert not process_alive(agent)

    run.script_next_turn()
    await run.next_prompt_runs(turn=1)


async def test_capturing_by_hand_in_a_turn_this_servers_agent_runs_is_refused_and_rewind_gives_back_the_file(tmp_path, scripted):
    release = tmp_path / "release"
    # The agent's command rewrites keep.txt and runs on: its change is not
    # recorded before the command ends.
    command = f"echo 'the agent rewrote it' > keep.txt; while [ ! -e {release} ]; do sleep 0.05; done"
    run = await scripted([[
        {"terminal": {"command": "sh", "args": ["-c", command]}},
        {"say": "done"},
    ]])
    running = run.prompt("Go")
    await _until("the agent's command rewriting keep.txt", lambda: (run.project / "keep.txt").read_text() != "kept\n")
    with pytest.raises(JsonRpcException) as refused:
        await request(run.client, methods.TURN_CAPTURE, {"path": "keep.txt"})
    assert refused.value.data["kind"] == "conflict"
    assert "mevedel/turn/cancel" in refused.value.data["reason"] and "mevedel/turn/abort" in refused.value.data["reason"]
    release.touch()
    answered = await running
    assert answered["outcome"] == "completed" and answered["turn"] == 1
    assert await run.diff() == {"keep.txt": "modified"}
    # The turn's checkpoint holds keep.txt as it was before the turn.
    assert (await run.rewound())["keep.txt"][2] == b"kept\n"
