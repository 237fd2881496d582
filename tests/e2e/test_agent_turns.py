"""Agents write the turns: the real server drives the scripted ACP agent
(a real subprocess on the official SDK) through ``mevedel/turn/prompt``,
records its work as the turn, checkpoints every file it changes (through
``fs/write_text_file`` and through shell commands), and Rewind and Redo
restore them byte for byte."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from deadlines import wait_for
from killed_turn import tree_state
from mevedel_protocol import methods
from processes import process_alive

from .conftest import request

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


def configure(client, workspace: Path, turns: list, **script) -> Path:
    """Write a script for the scripted agent and make it the default agent."""
    log = workspace.parent / "agent-events.jsonl"
    path = workspace.parent / "script.json"
    path.write_text(json.dumps({"log": str(log), "turns": turns, **script}), encoding="utf-8")
    settings = {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(path)]}}, "defaultAgent": "scripted"}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))
    return log


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


class Watch:
    """``mevedel/turn/didUpdate`` notifications and permission questions."""

    def __init__(self, client, answers: list | None = None) -> None:
        self.updates: list[dict] = []
        self.questions: list = []
        self.answers = list(answers or [])
        self.late_answered = asyncio.Event()
        client.feature(methods.TURN_DID_UPDATE)(lambda params: self.updates.append(params))

        async def ask(params):
            return await self._ask(params)

        client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(ask)

    async def _ask(self, params):
        self.questions.append(params)
        answer = self.answers.pop(0) if self.answers else None
        if answer == "late":  # answered only after the question timed out
            await asyncio.sleep(1.5)
            self.late_answered.set()
            return types.MessageActionItem(title="Allow once")
        return types.MessageActionItem(title=answer) if answer else None

    def text(self, kind: str = "response") -> str:
        return "".join(e.get("text") or "" for u in self.updates for e in u.get("events", []) if e["kind"] == kind)


async def prompt(client, text: str, **params) -> dict:
    return await request(client, methods.TURN_PROMPT, {"text": text, **params})


async def refused(client, text: str, **params) -> dict:
    with pytest.raises(JsonRpcException) as caught:
        await prompt(client, text, **params)
    return caught.value.data


async def test_a_prompt_records_the_agents_work_and_rewind_restores_its_files(client, workspace):
    (workspace / "keep.txt").write_bytes(b"original\x00bytes\n")
    (workspace / "doomed.txt").write_text("delete me\n")
    (workspace / "edited.txt").write_text("before\n")
    watch = Watch(client)
    configure(client, workspace, [[
        {"think": "Let me look."},
        {"say": "Working "}, {"say": "on it."},
        {"plan": [{"content": "edit files", "status": "in_progress", "priority": "high"}]},
        {"tool_call": {"id": "c1", "title": "Write keep.txt", "kind": "edit", "status": "pending"}},
        {"write": {"path": "keep.txt", "content": "agent wrote this\n"}},
        {"tool_update": {"id": "c1", "status": "completed", "text": "done", "diff": {"path": "keep.txt", "old": "original", "new": "agent wrote this"}}},
        {"terminal": {"command": "sh", "args": ["-c", "echo made > made.txt; rm doomed.txt; echo after > edited.txt; mkdir -p d; echo x > d/new.txt"]}},
        {"say": " Done."},
    ]])
    result = await prompt(client, "Change the files")
    assert result["outcome"] == "completed" and result["stopReason"] == "end_turn" and result["turn"] == 1
    sid = result["sessionId"]
    assert (workspace / "keep.txt").read_text() == "agent wrote this\n"
    assert (workspace / "made.txt").exists() and not (workspace / "doomed.txt").exists()

    # The owner saw the turn live, in order, and its end.
    assert "Working on it." in watch.text() and watch.text("reasoning") == "Let me look."
    assert watch.updates[0]["phase"] == "starting" and watch.updates[-1]["phase"] == "settled"
    assert watch.updates[-1]["outcome"] == "completed"
    assert any(e["kind"] == "tool_call" and e.get("diffs") for u in watch.updates for e in u.get("events", []))

    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    kinds = [item["kind"] for item in shown["items"]]
    assert kinds[:3] == ["reasoning", "response", "plan"] and "tool_call" in kinds and "tool_result" in kinds
    assert shown["items"][1]["text"] == "Working on it."  # coalesced into one record

    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    restored = {r["path"] for r in impact["restores"] if r["changes"]}
    assert {"keep.txt", "doomed.txt", "edited.txt", "made.txt", "d/new.txt"} <= restored
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert (workspace / "keep.txt").read_bytes() == b"original\x00bytes\n"
    assert (workspace / "doomed.txt").read_text() == "delete me\n"
    assert (workspace / "edited.txt").read_text() == "before\n"
    assert not (workspace / "made.txt").exists() and not (workspace / "d" / "new.txt").exists()

    heads = await request(client, methods.REDO_LIST, {"sessionId": sid})
    target = next(h for h in heads["states"] if h["turnCount"] == 1)
    redo = await request(client, methods.REDO_PREPARE, {"publicationId": target["publicationId"]})
    await request(client, methods.REDO_COMMIT, {"token": redo["token"]})
    assert (workspace / "keep.txt").read_text() == "agent wrote this\n"
    assert (workspace / "made.txt").read_text() == "made\n" and not (workspace / "doomed.txt").exists()


async def test_permission_questions_are_asked_with_the_agents_options_and_recorded(client, workspace):
    watch = Watch(client, answers=["Allow once", "Reject", "late"])
    options = [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}]
    step = {"permission": {"tool_call_id": "c1", "title": "Run rm -rf build", "options": options}}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"permissionTimeoutSeconds": 1}))
    configure(client, workspace, [[step, step, step]])
    result = await prompt(client, "Clean up")
    assert result["outcome"] == "completed"
    assert [q.actions[0].title for q in watch.questions] == ["Allow once"] * 3
    assert "scripted" in watch.questions[0].message and "Run rm -rf build" in watch.questions[0].message
    said = watch.text()
    assert "permission: selected allow" in said and said.count("permission: selected reject") == 2
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    decisions = [(i["output"], i.get("isError", False)) for i in shown["items"] if i["kind"] == "permission"]
    assert decisions[0] == ("Allow once", False)
    assert decisions[1] == ("Reject", True)
    assert decisions[2][0].startswith("refused: no answer within 1 s") and decisions[2][1]
    await watch.late_answered.wait()  # the late answer changes nothing
    assert len((await request(client, methods.TURN_SHOW, {"turn": 1}))["items"]) == len(shown["items"])


async def test_cancel_keeps_the_partial_transcript_and_settles_interrupted(client, workspace):
    watch = Watch(client)
    configure(client, workspace, [[{"say": "Partial answer"}, {"wait_cancel": 30}, {"say": "never said"}]])
    running = asyncio.ensure_future(prompt(client, "Take your time"))
    await wait_for(lambda: "Partial answer" in watch.text(), "the agent's partial answer")
    cancelled = await request(client, methods.TURN_CANCEL, {})
    assert cancelled == {"cancelled": True}
    result = await running
    assert result["outcome"] == "interrupted" and result["stopReason"] == "cancelled"
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    assert shown["summary"]["state"] == "interrupted"
    assert [i["text"] for i in shown["items"] if i["kind"] == "response"] == ["Partial answer"]
    assert await request(client, methods.TURN_CANCEL, {}) == {"cancelled": False}


async def test_a_crash_mid_turn_fails_the_turn_with_its_cause_and_the_next_prompt_restarts_the_agent(client, workspace):
    log = configure(client, workspace, [[{"say": "About to fall over"}, {"stderr": "out of cheese"}, {"crash": 3}]])
    result = await prompt(client, "Crash please")
    assert result["outcome"] == "errored" and result.get("stopReason") is None
    assert result["error"]["kind"] == "agent-failed" and "status 3" in result["error"]["message"]
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    assert shown["summary"]["state"] == "errored"
    assert [i["text"] for i in shown["items"] if i["kind"] == "response"] == ["About to fall over"]
    assert "out of cheese" in result["error"]["message"]
    configure(client, workspace, [[{"say": "Back again"}]])  # the restarted agent reads its script anew
    again = await prompt(client, "Try again")
    assert again["outcome"] == "completed" and again["turn"] == 2
    starts = [e for e in events(log) if e["event"] == "initialize"]
    assert len({e["pid"] for e in starts}) == 2
    # A new native conversation continues from a labelled excerpt.
    prompts = [e for e in events(log) if e["event"] == "prompt"]
    assert "excerpt" in json.dumps(prompts[-1]["params"]) and "Crash please" in json.dumps(prompts[-1]["params"])
    # After a failed turn the agent is told to check, not replay.
    assert "did not finish cleanly" in json.dumps(prompts[-1]["params"]) and "Do not replay" in json.dumps(prompts[-1]["params"])


async def test_an_agent_that_goes_silent_fails_the_turn_after_the_idle_timeout(client, workspace):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"agentIdleTimeoutSeconds": 1}))
    configure(client, workspace, [[{"say": "thinking"}, {"hang": True}]])
    result = await prompt(client, "Hang")
    assert result["outcome"] == "errored" and "sent nothing for 1 s" in result["error"]["message"]


async def test_prompts_refused_before_dispatch_record_nothing(client, workspace):
    assert (await refused(client, "hello"))["kind"] == "agent-not-configured"
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={
        "agents": {"ghost": {"command": ["mevedel-no-such-agent-program"]}}, "defaultAgent": "ghost"}))
    missing = await refused(client, "hello")
    assert missing["kind"] == "agent-not-installed" and "mevedel-no-such-agent-program" in missing["reason"]
    configure(client, workspace, [[{"say": "hi"}]], auth_required=True,
              auth_methods=[{"id": "login", "name": "Log in", "description": "run `scripted login`"}])
    login = await refused(client, "hello")
    assert login["kind"] == "agent-needs-login" and "scripted login" in login["reason"]
    assert (await refused(client, "hello", agent="nobody"))["kind"] == "agent-not-configured"
    configure(client, workspace, [[{"say": "hi"}]])
    (workspace / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16)
    image = await refused(client, "look", attachments=["pic.png"])
    assert image["kind"] == "attachment-refused" and "does not accept images" in image["reason"]
    listed = await request(client, methods.SESSION_LIST, {})
    assert all(row["turns"] == 0 for row in listed["sessions"])


async def test_attachments_reach_the_agent_as_resources(client, workspace):
    (workspace / "notes.txt").write_text("attached words\n")
    log = configure(client, workspace, [[{"echo_prompt": True}]])
    result = await prompt(client, "Read this", attachments=["notes.txt", "work://shared/notes.md"])
    assert result["outcome"] == "completed"
    sent = json.dumps([e["params"] for e in events(log) if e["event"] == "prompt"])
    assert "attached words" in sent and "alpha line" in sent


async def test_a_new_server_resumes_the_agents_own_session_with_session_load(client, workspace):
    log = configure(client, workspace, [[{"say": "first"}]], load_session=True)
    first = await prompt(client, "One")
    native = next(e for e in events(log) if e["event"] == "new_session")
    await request(client, methods.SESSION_CLOSE, {"sessionId": first["sessionId"]})
    await request(client, methods.SESSION_OPEN, {"sessionId": first["sessionId"]})
    second = await prompt(client, "Two", sessionId=first["sessionId"])
    assert second["turn"] == 2 and second["outcome"] == "completed"
    loads = [e for e in events(log) if e["event"] == "load_session"]
    assert loads, "the second agent process was not asked to load the native session"
    assert native["pid"] != loads[0]["pid"]


async def test_rewind_and_fork_detach_the_agents_history_and_continue_from_an_excerpt(client, workspace):
    log = configure(client, workspace, [[{"say": "Answer about apples"}]], load_session=True)
    first = await prompt(client, "Tell me about apples")
    await prompt(client, "And pears")
    sid = first["sessionId"]

    fork = await request(client, methods.FORK_PREPARE, {"turn": 1})
    assert "does not continue agent scripted's own history" in fork["agentHistory"]
    child = (await request(client, methods.FORK_COMMIT, {"token": fork["token"], "sessionId": sid}))["session"]["sessionId"]
    forked = await prompt(client, "Now about plums", sessionId=child)
    assert forked["turn"] == 2 and forked["outcome"] == "completed"
    sent = [e for e in events(log) if e["event"] == "prompt"][-1]
    text = json.dumps(sent["params"])
    assert "excerpt" in text and "Tell me about apples" in text and "And pears" not in text
    assert not [e for e in events(log) if e["event"] == "load_session"], "a fork must not load the source's native session"

    rewind = await request(client, methods.REWIND_PREPARE, {"turn": 1, "sessionId": sid})
    assert "will be detached" in rewind["agentHistory"]
    await request(client, methods.REWIND_COMMIT, {"token": rewind["token"], "sessionId": sid})
    sessions_before = len([e for e in events(log) if e["event"] == "new_session"])
    again = await prompt(client, "Back to apples", sessionId=sid)
    assert again["turn"] == 2
    assert len([e for e in events(log) if e["event"] == "new_session"]) == sessions_before + 1
    assert "excerpt" in json.dumps([e for e in events(log) if e["event"] == "prompt"][-1]["params"])


async def test_on_an_ssh_workspace_the_agents_writes_and_commands_run_there_and_rewind_restores_them(openssh_server, tmp_path):
    from ssh_fixtures import ALIAS

    from .test_ssh_workspace import remote_params, server_config, ssh_home

    project = tmp_path / "remote project"
    project.mkdir()
    (project / "kept.txt").write_text("remote before\n")
    (project / "doomed.txt").write_text("remote doomed\n")
    url = f"ssh://{ALIAS}{project}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[
        {"read": {"path": "kept.txt"}},
        {"write": {"path": "kept.txt", "content": "agent over ssh\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "echo made > made.txt; rm doomed.txt; pwd"]}},
    ]]}))
    settings = {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, "defaultAgent": "scripted"}
    client = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await client.initialize_session(remote_params(url, **settings))
        watch = Watch(client)
        result = await prompt(client, "Edit over there", workspaceFolder=url)
        assert result["outcome"] == "completed", result
        said = watch.text()
        assert "read kept.txt: remote before" in said and "ran: exit 0" in said and str(project) in said
        assert (project / "kept.txt").read_text() == "agent over ssh\n"
        assert (project / "made.txt").read_text() == "made\n" and not (project / "doomed.txt").exists()
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", "workspaceFolder": url})
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"], "workspaceFolder": url})
        assert (project / "kept.txt").read_text() == "remote before\n"
        assert (project / "doomed.txt").read_text() == "remote doomed\n" and not (project / "made.txt").exists()
    finally:
        await client.shutdown_session()


async def test_malformed_lines_from_the_agent_are_skipped_and_the_turn_goes_on(client, workspace):
    watch = Watch(client)
    configure(client, workspace, [[{"say": "before "}, {"garbage": "this is not json{"}, {"garbage": "[1]"},
                                   {"garbage": "null"}, {"garbage": "{\"jsonrpc\": \"2.0\", \"id\": 99999, \"result\": 1}"},
                                   {"say": "after"}]])
    result = await prompt(client, "Garbage")
    assert result["outcome"] == "completed" and watch.text() == "before after"
    assert (await request(client, methods.SESSION_LIST, {}))["sessions"]  # still serving




async def test_closing_the_session_stops_its_agent(client, workspace):
    log = configure(client, workspace, [[{"say": "hi"}]])
    done = await prompt(client, "Hi")
    pid = next(e["pid"] for e in events(log) if e["event"] == "initialize")
    assert process_alive(pid)
    await request(client, methods.SESSION_CLOSE, {"sessionId": done["sessionId"]})
    await wait_for(lambda: not process_alive(pid), "the agent ending with its session")


async def test_a_cancelled_prompt_request_cancels_the_agents_turn(client, workspace):
    import uuid
    from concurrent.futures import Future

    from pygls.protocol import JsonRPCRequestMessage

    watch = Watch(client)
    log = configure(client, workspace, [[{"say": "Started"}, {"wait_cancel": 30}, {"say": "never said"}]])
    protocol = client.protocol
    msg_id = str(uuid.uuid4())
    protocol._request_futures[msg_id] = Future()
    protocol._send_data(JsonRPCRequestMessage(id=msg_id, method=methods.TURN_PROMPT, jsonrpc="2.0", params={"text": "Go"}))
    await wait_for(lambda: "Started" in watch.text(), "the agent starting its turn")
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    await wait_for(lambda: watch.updates and watch.updates[-1]["phase"] == "settled", "the cancelled turn settling")
    assert watch.updates[-1]["outcome"] == "interrupted"
    assert any(e["event"] == "cancel" for e in events(log))
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    assert shown["summary"]["state"] == "interrupted" and "never said" not in json.dumps(shown)


async def test_a_server_exit_during_a_turn_stops_the_agent_and_settles_the_turn_interrupted(tmp_path):
    from mevedel_server.store import ClientIdentity
    from mevedel_server.store.service import SessionService
    from mevedel_server.targets import LocalTarget

    from .conftest import SERVER, initialize_params

    project = tmp_path / "project"
    project.mkdir()
    client = await SERVER.start()
    watch = Watch(client)
    await client.initialize_session(initialize_params(project))
    log = configure(client, project, [[{"say": "Started"}, {"wait_cancel": 30}]])
    running = asyncio.ensure_future(prompt(client, "Go"))
    # The exit must come during the turn: once the agent has said it started.
    await wait_for(lambda: "Started" in watch.text(), "the agent starting its turn")
    pid = next(e["pid"] for e in events(log) if e["event"] == "initialize")
    await client.shutdown_session()
    running.cancel()
    assert not process_alive(pid)
    service = SessionService(LocalTarget(project), ClientIdentity.generate())
    listed = (await service.sessions.list()).rows
    turns = await service.turns.summaries(listed[0].session_id)
    assert [t.state for t in turns] == ["interrupted"], [t.reason for t in turns]


async def test_allow_all_answers_without_asking_and_records_why(client, workspace):
    watch = Watch(client)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"permissions": "allow-all"}))
    options = [{"id": "yes", "name": "Allow once", "kind": "allow_once"}, {"id": "no", "name": "Reject", "kind": "reject_once"}]
    configure(client, workspace, [[{"permission": {"tool_call_id": "c1", "title": "Run make", "options": options}}]])
    await prompt(client, "Build")
    assert watch.questions == [] and "permission: selected yes" in watch.text()
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    assert [i["output"] for i in shown["items"] if i["kind"] == "permission"] == ["Allow once (allowed by the allow-all setting)"]


async def test_an_agent_that_takes_images_gets_image_blocks_and_resume_is_preferred_to_load(client, workspace):
    (workspace / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16)
    watch = Watch(client)
    log = configure(client, workspace, [[{"echo_prompt": True}]], images=True, load_session=True, resume_session=True)
    first = await prompt(client, "Look", attachments=["pic.png"])
    assert "[image image/png 24 bytes]" in watch.text()
    await request(client, methods.SESSION_CLOSE, {"sessionId": first["sessionId"]})
    await request(client, methods.SESSION_OPEN, {"sessionId": first["sessionId"]})
    await prompt(client, "Again", sessionId=first["sessionId"])
    kinds = [e["event"] for e in events(log)]
    assert "resume_session" in kinds and "load_session" not in kinds


async def test_what_a_command_changes_but_cannot_be_captured_is_a_gap_rewind_names(client, workspace):
    (workspace / ".gitignore").write_text("*.log\n")
    (workspace / "build.log").write_text("old log\n")
    configure(client, workspace, [[{"terminal": {"command": "sh", "args": ["-c", "echo new >> build.log; echo src > src.txt"]}}]])
    await prompt(client, "Build it")
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    gaps = {g["path"]: g["reason"] for g in impact["gaps"]}
    assert "ignored" in gaps["build.log"] and "src.txt" not in gaps
    assert {r["path"] for r in impact["restores"] if r["changes"]} == {"src.txt"}


async def test_a_directory_ignored_while_the_server_was_down_is_not_charged_to_the_next_turn(workspace):
    # The restarted server's file-state record starts from the index the
    # last one kept, which tracks build/out.txt; meanwhile the user ignored
    # build/ and built again. The next turn is charged only with what it
    # changed, and its Rewind never writes the old build over the user's.
    from .conftest import SERVER, initialize_params

    (workspace / "build").mkdir()
    (workspace / "build" / "out.txt").write_text("built before the restart\n")
    (workspace / "build" / "old.txt").write_text("old\n")
    client = await SERVER.start()
    try:
        await client.initialize_session(initialize_params(workspace))
        configure(client, workspace, [[{"write": {"path": "app.py", "content": "print('v2')\n"}}]])
        first = await prompt(client, "Edit the app")
        assert first["outcome"] == "completed"
        await request(client, methods.SESSION_CLOSE, {"sessionId": first["sessionId"]})
    finally:
        await client.shutdown_session()

    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build" / "out.txt").write_text("built by the user meanwhile\n")
    before = tree_state(workspace)
    client = await SERVER.start()
    try:
        await client.initialize_session(initialize_params(workspace))
        command = "echo new > notes.txt; echo turn 2 > build/out.txt; echo n > build/new.txt; rm build/old.txt"
        configure(client, workspace, [[{"terminal": {"command": "sh", "args": ["-c", command]}}]])
        await request(client, methods.SESSION_OPEN, {"sessionId": first["sessionId"]})
        second = await prompt(client, "Take notes and build", sessionId=first["sessionId"])
        assert second["outcome"] == "completed" and second["turn"] == 2
        after = tree_state(workspace)
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 2, "boundary": "before", "sessionId": first["sessionId"]})
        assert {r["path"] for r in impact["restores"] if r["changes"]} == {"notes.txt"}
        assert not impact["gaps"]
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"], "sessionId": first["sessionId"]})
    finally:
        await client.shutdown_session()
    # What is inside an ignored directory is not checkpointed (not seen at
    # all); everything else is as it was before the turn.
    ignored = {path: state for path, state in after.items() if path.startswith("build/")}
    kept = {path: state for path, state in before.items() if not path.startswith("build/")}
    assert tree_state(workspace) == {**kept, **ignored}


async def test_rewind_through_the_server_gives_back_modes_directories_and_links(client, workspace):
    import os

    (workspace / "tool.sh").write_text("echo v1\n")
    os.chmod(workspace / "tool.sh", 0o755)
    (workspace / "plain.txt").write_text("plain\n")
    (workspace / "gone").mkdir()
    (workspace / "gone" / "inner.txt").write_text("inner\n")
    os.symlink("plain.txt", workspace / "alias")
    before = tree_state(workspace)
    configure(client, workspace, [[
        {"write": {"path": "tool.sh", "content": "echo v2\n"}},
        {"write": {"path": "made/by/write.txt", "content": "new\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "chmod 700 plain.txt; rm -r gone; ln -sfn tool.sh alias; mkdir -p x/y"]}},
    ]])
    result = await prompt(client, "Change modes and directories")
    assert result["outcome"] == "completed"
    assert os.stat(workspace / "tool.sh").st_mode & 0o7777 == 0o755  # fs/write_text_file kept the mode
    assert os.stat(workspace / "made").st_mode & 0o777 != 0o700  # made with the default mode, not owner-only

    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    actions = {r["path"]: r["action"] for r in impact["restores"] if r["changes"]}
    assert actions["plain.txt"] == f"chmod {before['plain.txt'][1]:o}"
    assert actions["alias"] == "relink" and actions["gone"] == "create directory"
    assert actions["made"] == "remove directory" and actions["x/y"] == "remove directory"
    assert actions["made/by/write.txt"] == "delete" and actions["tool.sh"] == "restore"
    assert not impact["gaps"]
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert tree_state(workspace) == before
