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
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

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


async def _start(tmp_path: Path, turns: list, *, on_initialize: list | None = None, **options):
    project = tmp_path / "project"
    project.mkdir()
    prepare(project)
    (project / "keep.txt").write_text("kept\n")
    log, script = tmp_path / "agent-events.jsonl", tmp_path / "script.json"
    script.write_text(json.dumps({"log": str(log), "turns": turns, "on_initialize": on_initialize or []}))
    client = await SERVER.start()
    chat = Chat(client)
    await client.initialize_session(
        initialize_params(
            project,
            agents={"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
            defaultAgent="scripted",
            **options,
        )
    )
    return project, log, script, client, chat


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []




async def _until(what: str, check) -> None:
    for _ in ticks():
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} never happened")


async def _diff(client) -> dict[str, str]:
    diff = await request(client, methods.TURN_DIFF, {"first": 1, "last": 1})
    return {f["path"]: f["change"] for f in diff["files"]}


async def _rewound(client, project: Path) -> dict:
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    return tree_state(project)


async def test_aborting_a_running_turn_cancels_its_agent_then_settles_it_with_what_it_changed(tmp_path):
    never, later = tmp_path / "never", tmp_path / "later"
    project, log, _script, client, chat = await _start(tmp_path, [
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
    before = tree_state(project)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's write and command", lambda: "all written" in chat.said())
        aborted = await request(client, methods.TURN_ABORT, {})
        assert aborted["committed"] is True and aborted["turn"] == 1
        # The agent was asked to end its turn, and ended it, before the abort answered.
        assert [e["event"] for e in _events(log)].count("cancel") == 1
        answered = await running
        assert answered["outcome"] == "interrupted" and answered["stopReason"] == "cancelled"
        assert chat.told_interrupted() and chat.updates[-1]["reason"] == "aborted"
        listed = (await request(client, methods.TURN_LIST, {}))["turns"]
        assert [(t["state"], t.get("reason")) for t in listed] == [("interrupted", "aborted")]
        assert await _diff(client) == CHANGED

        later.touch()  # the agent's write once the turn settled is refused
        await _until("the agent's late write answered", lambda: any(
            e["event"] == "client_response" and e["method"] == "fs/write_text_file" and "late.txt" in e["params"]["path"]
            for e in _events(log)))
        refused = next(e for e in _events(log) if e["event"] == "client_response" and "late.txt" in str(e["params"]))
        assert "error" in refused and not (project / "late.txt").exists()
        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 2 and nxt["outcome"] == "completed" and "the next turn" in chat.said()
        assert await _rewound(client, project) == before
    finally:
        await client.shutdown_session()


async def test_aborting_a_turn_whose_agent_ignores_the_cancel_ends_its_process_and_its_command_first(tmp_path):
    release, command_pid = tmp_path / "release", tmp_path / "command.pid"
    # The command makes its changes, then runs until the test says so.
    slow = f"{SHELL}; echo $$ > {command_pid}; while [ ! -e {release} ]; do sleep 0.05; done; echo late > late.txt"
    project, log, script, client, chat = await _start(tmp_path, [[
        {"ignore_cancel": True},
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", slow]}},
        {"write": {"path": "after.txt", "content": "after the command\n"}},
    ]], cancelTimeoutSeconds=1)
    before = tree_state(project)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the command's changes", lambda: command_pid.exists() and command_pid.read_text().strip())
        agent = next(e["pid"] for e in _events(log) if e["event"] == "start")
        command = int(command_pid.read_text())
        aborted = await request(client, methods.TURN_ABORT, {"reason": "the user stopped it"})
        assert aborted["committed"] is True and aborted["turn"] == 1
        # The command's changes were recorded though it never exited.
        assert await _diff(client) == CHANGED
        # Asked to cancel, it did not answer: its process and its command were ended.
        assert "cancel" in [e["event"] for e in _events(log)]
        assert not process_alive(agent) and not process_alive(command)
        answered = await running
        assert answered["outcome"] == "interrupted"
        assert chat.told_interrupted()
        (listed,) = (await request(client, methods.TURN_LIST, {}))["turns"]
        assert listed["state"] == "interrupted" and listed["reason"].startswith("the user stopped it")
        # The chat is told why, as the settlement recorded it.
        assert chat.updates[-1]["reason"] == listed["reason"]

        release.touch()  # nothing of the agent's runs any more to act on it
        script.write_text(json.dumps({"log": str(log), "turns": [[{"say": "the next turn"}]]}))
        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 2 and nxt["outcome"] == "completed"
        assert not (project / "late.txt").exists() and not (project / "after.txt").exists()
        assert await _rewound(client, project) == before
    finally:
        await client.shutdown_session()


async def test_what_an_agent_ignoring_the_cancel_writes_before_it_stops_is_the_aborted_turns(tmp_path):
    release = tmp_path / "release"
    project, log, _script, client, chat = await _start(tmp_path, [[
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
    before = tree_state(project)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's write and command", lambda: "all written" in chat.said())
        aborting = asyncio.ensure_future(request(client, methods.TURN_ABORT, {}))
        await _until("the cancel reaching the agent, or the abort answering",
                     lambda: aborting.done() or "cancel" in [e["event"] for e in _events(log)])
        # The turn is settled only once the agent stopped.
        assert not aborting.done(), aborting.result()
        release.touch()
        aborted = await aborting
        assert aborted["committed"] is True and aborted["turn"] == 1
        assert (await running)["outcome"] == "interrupted" and "done anyway" in chat.said()
        assert chat.told_interrupted()
        (listed,) = (await request(client, methods.TURN_LIST, {}))["turns"]
        assert listed["state"] == "interrupted" and listed["reason"] == "aborted"
        assert await _diff(client) == CHANGED | {"late.txt": "added", "keep.txt": "deleted"}
        assert await _rewound(client, project) == before
    finally:
        await client.shutdown_session()



async def test_settling_by_hand_a_turn_this_servers_agent_runs_is_refused_and_the_turn_goes_on(tmp_path):
    release = tmp_path / "release"
    project, log, _script, client, chat = await _start(tmp_path, [[
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"say": "written"},
        {"wait_file": str(release)},
        {"terminal": {"command": "sh", "args": ["-c", "rm keep.txt"]}},
    ]])
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's write", lambda: "written" in chat.said())
        with pytest.raises(JsonRpcException) as refused:
            await request(client, methods.TURN_SETTLE, {"outcome": "completed"})
        assert refused.value.data["kind"] == "conflict"
        assert "mevedel/turn/abort" in refused.value.data["reason"]
        release.touch()
        answered = await running
        assert answered["outcome"] == "completed" and answered["turn"] == 1
        (listed,) = (await request(client, methods.TURN_LIST, {}))["turns"]
        assert listed["state"] == "completed"
        assert await _diff(client) == {"notes.txt": "modified", "keep.txt": "deleted"}
    finally:
        await client.shutdown_session()


async def test_appending_by_hand_to_a_turn_this_servers_agent_runs_is_refused_and_records_nothing(tmp_path):
    release = tmp_path / "release"
    project, log, _script, client, chat = await _start(tmp_path, [[
        {"say": "the agent's words"},
        {"wait_file": str(release)},
        {"say": " and the rest"},
    ]])
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's words", lambda: "the agent's words" in chat.said())
        with pytest.raises(JsonRpcException) as refused:
            await request(client, methods.TURN_APPEND, {"kind": "response", "text": "words the agent never said"})
        assert refused.value.data["kind"] == "conflict"
        assert "mevedel/turn/cancel" in refused.value.data["reason"] and "mevedel/turn/abort" in refused.value.data["reason"]
        release.touch()
        answered = await running
        assert answered["outcome"] == "completed" and answered["turn"] == 1
        shown = await request(client, methods.TURN_SHOW, {"turn": 1})
        said = "".join(item.get("text") or "" for item in shown["items"] if item["kind"] == "response")
        assert said == "the agent's words and the rest"
    finally:
        await client.shutdown_session()


def _aborted_before_its_turn(chat: Chat) -> dict:
    """The chat's last word on a prompt aborted while its agent started:
    cancelling, then settled interrupted with the abort's reason, no turn."""
    phases = [u["phase"] for u in chat.updates]
    last = chat.updates[-1]
    assert phases[0] == "starting" and "cancelling" in phases and phases.count("settled") == 1, phases
    assert last["phase"] == "settled" and last["outcome"] == "interrupted" and last.get("turn") is None, last
    assert last["error"]["kind"] == "prompt-aborted", last
    return last


async def test_a_prompt_aborted_while_its_agent_starts_never_reaches_it_and_the_started_agent_serves_the_next(tmp_path):
    release = tmp_path / "release"
    project, log, _script, client, chat = await _start(
        tmp_path, [[{"say": "the next turn"}]], on_initialize=[{"wait_file": str(release)}], cancelTimeoutSeconds=600)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Write dispatched.txt"}))
        await _until("the agent's initialize", lambda: "initialize" in [e["event"] for e in _events(log)])
        aborting = asyncio.ensure_future(request(client, methods.TURN_ABORT, {}))
        await _until("the abort reaching the server, or answering",
                     lambda: aborting.done() or "cancelling" in [u["phase"] for u in chat.updates])
        # The abort waits for the agent's start, which it does not cut short.
        assert not aborting.done(), aborting.result()
        release.touch()
        aborted = await aborting
        assert aborted["committed"] is False and aborted.get("turn") is None and "aborted" in aborted["note"]
        with pytest.raises(JsonRpcException) as stopped:
            await running
        assert stopped.value.data["kind"] == "prompt-aborted"
        assert _aborted_before_its_turn(chat)["reason"] == "aborted"
        assert "prompt" not in [e["event"] for e in _events(log)]
        assert (await request(client, methods.TURN_LIST, {}))["turns"] == []

        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 1 and nxt["outcome"] == "completed" and "the next turn" in chat.said()
        # The agent started for the aborted prompt answered this one.
        events = [e["event"] for e in _events(log)]
        assert events.count("start") == 1 and events.count("prompt") == 1
        assert not (project / "dispatched.txt").exists()
    finally:
        await client.shutdown_session()


async def test_a_prompt_aborted_while_its_agent_never_finishes_starting_ends_that_agent(tmp_path):
    never = tmp_path / "never"
    project, log, script, client, chat = await _start(
        tmp_path, [[{"say": "never asked"}]], on_initialize=[{"wait_file": str(never)}], cancelTimeoutSeconds=1)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's initialize", lambda: "initialize" in [e["event"] for e in _events(log)])
        agent = next(e["pid"] for e in _events(log) if e["event"] == "start")
        aborted = await request(client, methods.TURN_ABORT, {"reason": "the user gave up"})
        assert aborted["committed"] is False and aborted.get("turn") is None
        with pytest.raises(JsonRpcException) as stopped:
            await running
        assert stopped.value.data["kind"] == "prompt-aborted" and "the user gave up" in stopped.value.data["reason"]
        assert _aborted_before_its_turn(chat)["reason"] == "the user gave up"
        # Its start outlasted the cancel timeout: the agent was ended.
        assert not process_alive(agent)
        assert "prompt" not in [e["event"] for e in _events(log)]

        script.write_text(json.dumps({"log": str(log), "turns": [[{"say": "the next turn"}]]}))
        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 1 and nxt["outcome"] == "completed" and "the next turn" in chat.said()
        assert [e["event"] for e in _events(log)].count("start") == 2
    finally:
        await client.shutdown_session()


async def test_a_prompt_cancelled_while_its_agent_starts_never_reaches_it_and_the_next_prompt_runs(tmp_path):
    release = tmp_path / "release"
    project, log, _script, client, chat = await _start(
        tmp_path, [[{"say": "the next turn"}]], on_initialize=[{"wait_file": str(release)}], cancelTimeoutSeconds=600)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Write dispatched.txt"}))
        await _until("the agent's initialize", lambda: "initialize" in [e["event"] for e in _events(log)])
        # C-g, Esc, the stop button: answered while the agent still starts.
        cancelled = await request(client, methods.TURN_CANCEL, {})
        assert cancelled["cancelled"] is True
        assert not running.done()
        release.touch()
        with pytest.raises(JsonRpcException) as stopped:
            await running
        assert stopped.value.data["kind"] == "prompt-aborted"
        assert _aborted_before_its_turn(chat)["reason"] == "cancelled by the user"
        assert "prompt" not in [e["event"] for e in _events(log)]
        assert (await request(client, methods.TURN_LIST, {}))["turns"] == []
        # Nothing is left to cancel.
        assert (await request(client, methods.TURN_CANCEL, {}))["cancelled"] is False

        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 1 and nxt["outcome"] == "completed" and "the next turn" in chat.said()
        events = [e["event"] for e in _events(log)]
        assert events.count("start") == 1 and events.count("prompt") == 1
        assert not (project / "dispatched.txt").exists()
    finally:
        await client.shutdown_session()


async def test_a_prompt_cancelled_while_its_agent_never_finishes_starting_ends_that_agent(tmp_path):
    never = tmp_path / "never"
    project, log, script, client, chat = await _start(
        tmp_path, [[{"say": "never asked"}]], on_initialize=[{"wait_file": str(never)}], cancelTimeoutSeconds=1)
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's initialize", lambda: "initialize" in [e["event"] for e in _events(log)])
        agent = next(e["pid"] for e in _events(log) if e["event"] == "start")
        assert (await request(client, methods.TURN_CANCEL, {}))["cancelled"] is True
        with pytest.raises(JsonRpcException) as stopped:
            await running
        assert stopped.value.data["kind"] == "prompt-aborted"
        assert _aborted_before_its_turn(chat)["reason"] == "cancelled by the user"
        # Its start outlasted the cancel timeout: the agent was ended.
        assert not process_alive(agent)
        assert "prompt" not in [e["event"] for e in _events(log)]

        script.write_text(json.dumps({"log": str(log), "turns": [[{"say": "the next turn"}]]}))
        nxt = await request(client, methods.TURN_PROMPT, {"text": "Again"})
        assert nxt["turn"] == 1 and nxt["outcome"] == "completed" and "the next turn" in chat.said()
    finally:
        await client.shutdown_session()


async def test_capturing_by_hand_in_a_turn_this_servers_agent_runs_is_refused_and_rewind_gives_back_the_file(tmp_path):
    release = tmp_path / "release"
    # The agent's command rewrites keep.txt and runs on: its change is not
    # recorded before the command ends.
    command = f"echo 'the agent rewrote it' > keep.txt; while [ ! -e {release} ]; do sleep 0.05; done"
    project, log, _script, client, chat = await _start(tmp_path, [[
        {"terminal": {"command": "sh", "args": ["-c", command]}},
        {"say": "done"},
    ]])
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))
        await _until("the agent's command rewriting keep.txt", lambda: (project / "keep.txt").read_text() != "kept\n")
        with pytest.raises(JsonRpcException) as refused:
            await request(client, methods.TURN_CAPTURE, {"path": "keep.txt"})
        assert refused.value.data["kind"] == "conflict"
        assert "mevedel/turn/cancel" in refused.value.data["reason"] and "mevedel/turn/abort" in refused.value.data["reason"]
        release.touch()
        answered = await running
        assert answered["outcome"] == "completed" and answered["turn"] == 1
        assert await _diff(client) == {"keep.txt": "modified"}
        # The turn's checkpoint holds keep.txt as it was before the turn.
        assert (await _rewound(client, project))["keep.txt"][2] == b"kept\n"
    finally:
        await client.shutdown_session()
