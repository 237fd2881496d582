"""Agents delegate to agents: the real server drives a scripted ACP agent
(the parent) whose ``Agent`` tool call, made through the official ``mcp``
client over ``mevedel mcp``, runs a second configured scripted agent (the
sub-agent) as a real subprocess, in the same session and the same turn.
What the sub-agent changes is the parent turn's: Rewind restores it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from lsprotocol import types

from deadlines import ticks
from mevedel_protocol import methods

from .conftest import request
from .test_agent_turns import AGENT, Watch, events, prompt


def agents(client, workspace: Path, parent: list, helper: list, helper_script: dict | None = None, **settings) -> tuple[Path, Path]:
    """Configure two scripted agents, ``parent`` (the default) and
    ``helper``; their event logs."""
    logs = {}
    entries = {}
    for name, turns in (("parent", parent), ("helper", helper)):
        log = workspace.parent / f"{name}-events.jsonl"
        script = workspace.parent / f"{name}-script.json"
        extra = helper_script or {} if name == "helper" else {}
        script.write_text(json.dumps({"log": str(log), "turns": turns, **extra}), encoding="utf-8")
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
        logs[name] = log
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"agents": entries, "defaultAgent": "parent", **settings}))
    return logs["parent"], logs["helper"]


def delegate(name: str, text: str, agent: str | None = "helper") -> dict:
    arguments = {"name": name, "prompt": text} | ({"agent": agent} if agent else {})
    return {"mcp_call": {"id": f"call-{name}", "tool": "Agent", "arguments": arguments}}


def results(log: Path, tool: str = "Agent") -> list[str]:
    return [e["text"] for e in events(log) if e["event"] == "mcp_result" and e["tool"] == tool]


async def until_logged(log: Path, event: str, what: str) -> None:
    """Waits until the agent's log holds ``event``; fails saying ``what``."""
    for _ in ticks():
        if any(e["event"] == event for e in events(log)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


def shown_turn(workspace: Path, session_id: str, number: int) -> str:
    """``mevedel session turn NUMBER`` of the session, as a person reads it."""
    import subprocess

    cli = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "session", "turn", str(number), "--session", session_id],
                         cwd=workspace, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cli.returncode == 0, cli.stderr
    return cli.stdout


async def test_a_sub_agent_works_in_the_parents_turn_and_rewind_restores_what_it_changed(client, workspace):
    (workspace / "notes.txt").write_text("original notes\n")
    (workspace / "build.txt").write_text("old build\n")
    options = [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}]
    watch = Watch(client, answers=["Allow once"])
    parent_log, helper_log = agents(client, workspace, parent=[
        [{"say": "Asking the helper. "}, delegate("reviewer", "Review the notes and rebuild"), {"say": "Thanks, helper."}],
        [delegate("reviewer", "And once more", agent=None)],
    ], helper=[
        [
            {"permission": {"tool_call_id": "p1", "title": "Rewrite notes.txt", "options": options}},
            {"write": {"path": "notes.txt", "content": "reviewed notes\n"}},
            {"terminal": {"command": "sh", "args": ["-c", "echo new build > build.txt; echo made > made.txt"]}},
            {"tool_call": {"id": "t1", "title": "Check the build", "kind": "read", "status": "completed"}},
            {"say": "Review done: "}, {"say": "two issues."},
        ],
        [{"echo_prompt": True}],
    ])
    result = await prompt(client, "Get a review")
    assert result["outcome"] == "completed", result

    # The sub-agent's final message is the parent's tool answer.
    (answer,) = results(parent_log)
    assert answer == "mcp Agent: Review done: two issues.", answer
    # It ran as its own process, given the tools with a token of its own.
    created = [e for e in events(helper_log) if e["event"] == "new_session"]
    assert len(created) == 1 and created[0]["params"]["cwd"] == str(workspace)
    assert any(s["name"] == "mevedel" for s in created[0]["params"]["mcpServers"])
    # Its permission question reached the user naming it and its agent.
    assert len(watch.questions) == 1 and watch.questions[0].message.startswith("reviewer (helper) asks permission: Rewrite notes.txt")
    assert (workspace / "notes.txt").read_text() == "reviewed notes\n"
    assert (workspace / "build.txt").read_text() == "new build\n" and (workspace / "made.txt").exists()

    # The parent's turn records the call and its answer, not the sub-agent's transcript.
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    calls = [i for i in shown["items"] if i["kind"] == "tool_call" and i.get("name") == "mcp Agent"]
    assert len(calls) == 1
    outputs = [i["output"] for i in shown["items"] if i["kind"] == "tool_result" and i.get("callId") == calls[0]["callId"]]
    assert outputs == ["mcp Agent: Review done: two issues."]
    assert not any("reviewed notes" in json.dumps(i) for i in shown["items"] if i["kind"] == "response")
    # The sub-agent's own conversation is one record of the turn, and history://root/reviewer.
    (task,) = [i for i in shown["items"] if i["kind"] == "agent_task"]
    assert task["name"] == "reviewer" and task["sender"] == "helper" and task["text"] == "Review the notes and rebuild"
    assert "Review done: two issues." in task["output"] and "Check the build" in task["output"]
    conversation = (await request(client, methods.RESOURCE_READ, {"address": "history://root/reviewer"}))["text"]
    assert "Task 1 · reviewer (helper) in turn 1" in conversation and "Review done: two issues." in conversation
    assert "Rewrite notes.txt" in conversation  # its permission decision, in its own conversation
    found = await request(client, methods.RESOURCE_GREP, {"address": "history://root/reviewer", "pattern": "two issues"})
    assert [m["address"] for m in found["matches"]] == ["history://root/reviewer"]
    # The CLI shows the turn with the task nested under it.
    text = shown_turn(workspace, result["sessionId"], 1)
    assert "[agent reviewer (helper): completed]\n" in text and "    Review done: two issues." in text, text

    # A second call with the same name continues the same conversation.
    again = await prompt(client, "Ask it again")
    assert again["outcome"] == "completed", again
    assert len([e for e in events(helper_log) if e["event"] == "new_session"]) == 1
    prompts = [e for e in events(helper_log) if e["event"] == "prompt"]
    assert [p["params"]["sessionId"] for p in prompts] == ["scripted-1", "scripted-1"] and prompts[1]["turn"] == 1
    (_, second) = results(parent_log)
    assert second == "mcp Agent: And once more", second

    # Rewind of the parent's first turn restores every file the sub-agent changed.
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    restored = {r["path"] for r in impact["restores"] if r["changes"]}
    assert {"notes.txt", "build.txt", "made.txt"} <= restored, impact["restores"]
    # The impact names the sub-agent beside what it changed (its write and its command).
    by = {r["path"]: r.get("agents", []) for r in impact["restores"]}
    assert by["notes.txt"] == ["reviewer"] and by["build.txt"] == ["reviewer"] and by["made.txt"] == ["reviewer"], by
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert (workspace / "notes.txt").read_text() == "original notes\n"
    assert (workspace / "build.txt").read_text() == "old build\n"
    assert not (workspace / "made.txt").exists()


async def test_cancelling_the_parent_turn_cancels_its_sub_agent(client, workspace):
    parent_log, helper_log = agents(client, workspace, parent=[
        [delegate("slow", "Take your time"), {"wait_cancel": 5}, {"say": "never said"}],
    ], helper=[
        [{"say": "Started. "}, {"wait_cancel": 60}, {"say": "never said either"}],
    ])
    watch = Watch(client)
    running = asyncio.ensure_future(prompt(client, "Delegate something slow"))
    await until_logged(helper_log, "prompt", "the sub-agent never got its prompt")
    assert await request(client, methods.TURN_CANCEL, {}) == {"cancelled": True}
    result = await running
    assert result["outcome"] == "interrupted", result
    # The sub-agent got the cancel and ended its turn; the parent was told so.
    assert any(e["event"] == "cancel" for e in events(helper_log))
    (answer,) = results(parent_log)
    assert answer.startswith("mcp Agent error: slow (helper) was interrupted: cancelled with its caller's turn"), answer
    assert "Started." in answer
    # The chat is told why, for the sub-agent's task as for the turn.
    await request(client, methods.AGENT_LIST, {})  # notifications sent before it are in
    settled = [u for u in watch.updates if u.get("agentPath") == "slow" and u["phase"] == "settled"]
    assert [(u["outcome"], u.get("reason")) for u in settled] == [("interrupted", "cancelled with its caller's turn")], settled
    root = [u for u in watch.updates if u.get("agentPath") is None and u["phase"] == "settled"]
    assert [(u["outcome"], u.get("reason")) for u in root] == [("interrupted", "cancelled by the user")], root
    # Read back, the task says so too.
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    (task,) = [i for i in shown["items"] if i["kind"] == "agent_task"]
    assert (task["outcome"], task["reason"]) == ("interrupted", "cancelled with its caller's turn"), task
    text = shown_turn(workspace, result["sessionId"], 1)
    assert "[agent slow (helper): interrupted: cancelled with its caller's turn]\n" in text, text


async def test_a_sub_agents_failed_task_read_back_says_why(client, workspace):
    agents(client, workspace, parent=[
        [delegate("broken", "Try this"), {"say": "Carried on."}],
    ], helper=[
        [{"say": "Trying. "}, {"error": {"code": -32603, "message": "the model is overloaded"}}],
    ])
    watch = Watch(client)
    result = await prompt(client, "Delegate to a failing helper")
    assert result["outcome"] == "completed", result
    await request(client, methods.AGENT_LIST, {})  # notifications sent before it are in
    (live,) = [u for u in watch.updates if u.get("agentPath") == "broken" and u["phase"] == "settled"]
    assert live["outcome"] == "errored" and "the model is overloaded" in live["reason"], live
    # Read back, the task says how it ended and why, as the live update did.
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    (task,) = [i for i in shown["items"] if i["kind"] == "agent_task"]
    assert (task["isError"], task["outcome"], task["reason"]) == (True, "errored", live["reason"]), task
    # And the CLI says it in the line mevedel prompt prints when it settles.
    text = shown_turn(workspace, result["sessionId"], 1)
    assert f"[agent broken (helper): errored: {live['reason']}]\n    " in text, text


async def test_a_sub_agent_cancelled_while_it_starts_is_never_sent_its_task(client, workspace):
    started = workspace.parent / "helper-may-start"  # the helper's initialize ends once the test made it
    parent_log, helper_log = agents(client, workspace, parent=[
        [delegate("slow", "Take your time"), {"say": "never said"}],
    ], helper=[
        [{"say": "Started. "}, {"wait_cancel": 60}],
    ], helper_script={"on_initialize": [{"wait_file": str(started)}]})
    running = asyncio.ensure_future(prompt(client, "Delegate something slow"))
    await until_logged(helper_log, "initialize", "the sub-agent never started")
    assert await request(client, methods.TURN_CANCEL, {}) == {"cancelled": True}
    started.touch()
    result = await running
    assert result["outcome"] == "interrupted", result
    # The task settled interrupted at once: no prompt reached the sub-agent
    # (it would have waited for a cancel nobody sends, until the cancel timeout).
    assert not any(e["event"] == "prompt" for e in events(helper_log))
    (answer,) = results(parent_log)
    assert answer.startswith("mcp Agent error: slow (helper) was interrupted: cancelled with its caller's turn"), answer


async def test_limits_and_bad_arguments_are_refused_naming_what(client, workspace):
    parent_log, helper_log = agents(client, workspace, parent=[[
        delegate("Bad Name", "x"),
        delegate("ok", "x", agent="nobody"),
        delegate("outer", "Delegate further"),
    ]], helper=[[
        delegate("inner", "Go deeper"),
        {"say": "I tried."},
    ]], subagentMaxDepth=1)
    result = await prompt(client, "Try the limits")
    assert result["outcome"] == "completed", result
    bad_name, unknown, outer = results(parent_log)
    assert bad_name.startswith("mcp Agent error: Agent: name 'Bad Name' is not a retained agent's name"), bad_name
    assert unknown.startswith("mcp Agent error: Agent: agent 'nobody' is not configured (configured: helper, parent)"), unknown
    assert outer.startswith("mcp Agent: ") and outer.endswith("I tried."), outer
    (inner,) = results(helper_log)
    assert "outer/inner would be a sub-agent at depth 2" in inner and "subagentMaxDepth" in inner, inner
    # Nothing was started for the refused calls: one sub-agent process only.
    assert len({e["pid"] for e in events(helper_log)}) == 1


async def test_concurrent_sub_agents_are_bounded(client, workspace):
    parent_log, helper_log = agents(client, workspace, parent=[[delegate("outer", "Delegate further")]],
                                    helper=[[delegate("inner", "Go deeper"), {"say": "I tried."}]],
                                    subagentMaxConcurrent=1)
    result = await prompt(client, "Try the limits")
    assert result["outcome"] == "completed", result
    (inner,) = results(helper_log)
    assert "1 sub-agents are already running in this session" in inner and "subagentMaxConcurrent" in inner, inner


async def read(client, address: str, **params) -> dict:
    return await request(client, methods.RESOURCE_READ, {"address": address, **params})


async def test_the_registry_is_kept_addressable_continued_after_resume_copied_and_dropped(client, workspace):
    parent_log, helper_log = agents(client, workspace, parent=[
        [delegate("reviewer", "First task"), {"mcp_call": {"tool": "Read", "arguments": {"path": "agent://root/reviewer"}}}],
    ], helper=[[{"echo_prompt": True}]], helper_script={"load_session": True})
    first = await prompt(client, "Delegate")
    assert first["outcome"] == "completed", first
    sid = first["sessionId"]

    # The parent read the result through its tools, in the same turn.
    (tool_read,) = results(parent_log, "Read")
    assert "status: completed" in tool_read and "First task" in tool_read, tool_read
    # The CLI reads the committed registry of the session this server holds.
    import subprocess

    cli = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "read", "agent://root/reviewer", "--session", sid],
                         cwd=workspace, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cli.returncode == 0 and "status: completed" in cli.stdout and "First task" in cli.stdout, cli.stderr
    listing = await read(client, "agent://")
    assert "agent://root/reviewer" in listing["text"]
    result = (await read(client, "agent://root/reviewer"))["text"]
    assert "status: completed" in result and "agent: helper" in result and "First task" in result

    # Closed and opened again: the helper's process is gone, the registry is not.
    await request(client, methods.SESSION_CLOSE, {"sessionId": sid})
    await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert "agent://root/reviewer" in (await read(client, "agent://"))["text"]
    second = await prompt(client, "Delegate again", sessionId=sid)
    assert second["outcome"] == "completed", second.get("error")
    # A new helper process continued the agent's own conversation (session/load of its id).
    loads = [e for e in events(helper_log) if e["event"] == "load_session"]
    assert len(loads) == 1 and loads[0]["params"]["sessionId"] == "scripted-1", loads
    # (The restarted parent runs its script from the start: the same task again.)
    assert results(parent_log)[-1] == "mcp Agent: First task"  # no excerpt: its history was its own
    assert "turn: 2" in (await read(client, "agent://root/reviewer"))["text"]

    # Save As keeps the registry; a Fork drops retained identities.
    prepared = await request(client, methods.SAVE_AS_PREPARE, {"name": "Copy", "sessionId": sid})
    copy = (await request(client, methods.SAVE_AS_COMMIT, {"token": prepared["token"], "sessionId": sid}))["session"]["sessionId"]
    assert "agent://root/reviewer" in (await read(client, "agent://", sessionId=copy))["text"]
    impact = await request(client, methods.FORK_PREPARE, {"turn": 2, "sessionId": sid})
    forked = (await request(client, methods.FORK_COMMIT, {"token": impact["token"], "sessionId": sid}))["session"]["sessionId"]
    empty = await read(client, "agent://", sessionId=forked)
    assert empty["text"] == "" and "no retained agents" in empty["notice"]

    # Rewind to before the turn that created it removes it.
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", "sessionId": sid})
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"], "sessionId": sid})
    gone = await read(client, "agent://", sessionId=sid)
    assert gone["text"] == "", gone


def test_mevedel_prompt_prints_a_sub_agents_work_indented(tmp_path):
    """The CLI runs the engine in its own process: the sub-agent runs there
    too, and its activity is printed indented under the parent's."""
    import os
    import subprocess

    project = tmp_path / "project"
    project.mkdir()
    logs = {}
    entries = {}
    scripts = {
        "parent": [[{"say": "Asking.\n"}, delegate("reviewer", "Review it"), {"say": "Done asking.\n"}]],
        "helper": [[{"say": "Looking\nat it.\n"}, {"write": {"path": "made.txt", "content": "x\n"}}]],
    }
    for name, turns in scripts.items():
        logs[name] = tmp_path / f"{name}.jsonl"
        script = tmp_path / f"{name}.json"
        script.write_text(json.dumps({"log": str(logs[name]), "turns": turns}))
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": entries, "defaultAgent": "parent"}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "prompt", "Get a review"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "    Looking\n    at it.\n" in done.stdout and "Asking.\n" in done.stdout, done.stdout
    assert "    [agent reviewer (helper) started]" in done.stderr and "    [agent reviewer (helper): completed]" in done.stderr, done.stderr
    assert (project / "made.txt").read_text() == "x\n"
    (answer,) = results(logs["parent"])
    assert "wrote made.txt" in answer, answer


async def test_on_an_ssh_workspace_the_sub_agent_works_there_and_its_results_are_addressable(openssh_server, tmp_path):
    from ssh_fixtures import ALIAS

    from .test_ssh_workspace import remote_params, server_config, ssh_home

    project = tmp_path / "remote project"
    project.mkdir()
    (project / "kept.txt").write_text("remote before\n")
    url = f"ssh://{ALIAS}{project}"
    logs = {}
    entries = {}
    scripts = {
        "parent": [[delegate("reviewer", "Change it over there")]],
        "helper": [[
            {"write": {"path": "kept.txt", "content": "written by the helper\n"}},
            {"terminal": {"command": "sh", "args": ["-c", "echo made > made.txt"]}},
            {"tool_call": {"id": "t1", "title": "Check", "kind": "read", "status": "completed"}},
            {"say": "Changed remotely."},
        ]],
    }
    for name, turns in scripts.items():
        logs[name] = tmp_path / f"{name}.jsonl"
        script = tmp_path / f"{name}.json"
        script.write_text(json.dumps({"log": str(logs[name]), "turns": turns}))
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    client = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await client.initialize_session(remote_params(url, agents=entries, defaultAgent="parent"))
        result = await prompt(client, "Delegate over ssh", workspaceFolder=url)
        assert result["outcome"] == "completed", result
        assert results(logs["parent"]) == ["mcp Agent: Changed remotely."]
        assert (project / "kept.txt").read_text() == "written by the helper\n" and (project / "made.txt").exists()
        where = {"workspaceFolder": url}
        assert "agent://root/reviewer" in (await read(client, "agent://", **where))["text"]
        assert "Changed remotely." in (await read(client, "agent://root/reviewer", **where))["text"]
        assert "Changed remotely." in (await read(client, "history://root/reviewer", **where))["text"]
        # Closed and resumed, its transcript is read back over SSH: the agent's
        # next task continues from it (a new process, which cannot load its
        # old conversation: the excerpt).
        sid = result["sessionId"]
        await request(client, methods.SESSION_CLOSE, {"sessionId": sid, **where})
        # Not open in this server: its committed records, read through the SSH target.
        closed = {"sessionId": sid, **where}
        assert "Changed remotely." in (await read(client, "history://root/reviewer", **closed))["text"]
        assert "Changed remotely." in (await read(client, "agent://root/reviewer", **closed))["text"]
        assert "agent://root/reviewer" in (await read(client, "agent://", **closed))["text"]
        assert "history://root/reviewer" in (await read(client, "history://root", **closed))["text"]
        await request(client, methods.SESSION_OPEN, {"sessionId": sid, **where})
        assert "Changed remotely." in (await read(client, "history://root/reviewer", **where))["text"]
        again = await prompt(client, "Delegate again", sessionId=sid, **where)
        assert again["outcome"] == "completed", again
        sent = helper_prompts(logs["helper"])[-1]
        assert "You are the retained agent reviewer" in sent and "Changed remotely." in sent, sent
        assert "Task 2 · reviewer (helper) in turn 2" in (await read(client, "history://root/reviewer", **where))["text"]
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", **where})
        assert {"kept.txt", "made.txt"} <= {r["path"] for r in impact["restores"] if r["changes"]}
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"], **where})
        assert (project / "kept.txt").read_text() == "remote before\n" and not (project / "made.txt").exists()
        assert (await read(client, "agent://", **where))["text"] == ""
    finally:
        await client.shutdown_session()


async def test_the_owner_sees_a_sub_agents_work_live_nested_under_the_call_that_started_it(client, workspace):
    """``mevedel/turn/didUpdate`` carries each sub-agent's activity with its
    path and its caller's tool call (the root's, or the calling
    sub-agent's); the root turn's own phases are untouched by it."""
    watch = Watch(client)
    logs, entries = {}, {}
    scripts = {
        "parent": [[
            {"say": "Asking. "}, delegate("outer", "Delegate further"),
            # Called without reporting an ACP tool call: no call to nest under.
            {"mcp_call": {"tool": "Agent", "arguments": {"name": "quiet", "prompt": "Say little", "agent": "searcher"}}},
            {"say": "All answered."},
        ]],
        "helper": [[
            {"tool_call": {"id": "look", "title": "Look around", "kind": "read", "status": "completed"}},
            {"say": "Outer at work. "}, delegate("inner", "Go deeper", agent="searcher"), {"say": "Outer done."},
        ]],
        "searcher": [[{"say": "Inner found it."}]],
    }
    for name, turns in scripts.items():
        logs[name] = workspace.parent / f"{name}-events.jsonl"
        script = workspace.parent / f"{name}-script.json"
        script.write_text(json.dumps({"log": str(logs[name]), "turns": turns}), encoding="utf-8")
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"agents": entries, "defaultAgent": "parent"}))
    result = await prompt(client, "Delegate twice")
    assert result["outcome"] == "completed", result
    await request(client, methods.AGENT_LIST, {})  # notifications sent before it are in

    root = [u for u in watch.updates if u.get("agentPath") is None]
    phases = [u["phase"] for u in root]
    assert phases[0] == "starting" and phases[-1] == "settled" and phases.count("settled") == 1, phases
    assert root[-1]["outcome"] == "completed" and all(u["agent"] == "parent" for u in root)

    def nested(path: str) -> list[dict]:
        return [u for u in watch.updates if u.get("agentPath") == path]

    def text(updates: list[dict]) -> str:
        return "".join(e.get("text") or "" for u in updates for e in u.get("events", []) if e["kind"] == "response")

    outer, inner, quiet = nested("outer"), nested("outer/inner"), nested("quiet")
    for updates, label, parent_call in ((outer, "outer (helper)", "call-outer"), (inner, "outer/inner (searcher)", "call-inner"),
                                        (quiet, "quiet (searcher)", None)):
        assert updates, label
        assert [u["phase"] for u in updates][0] == "starting" and [u["phase"] for u in updates][-1] == "settled", updates
        assert {u["phase"] for u in updates[1:-1]} <= {"running"}, updates
        assert updates[-1]["outcome"] == "completed", updates[-1]
        assert all(u["agent"] == label and u.get("parentCallId") == parent_call for u in updates), (label, updates)
        # The parent's turn, not a turn of its own.
        assert all(u["turn"] == result["turn"] and u["turnId"] == result["turnId"] for u in updates)
    assert text(outer) == "Outer at work. mcp Agent: Inner found it.Outer done.", text(outer)
    assert text(inner) == "Inner found it." and text(quiet) == "Inner found it."
    assert "Look around" in [e.get("title") for u in outer for e in u.get("events", [])]
    # Nothing of the sub-agents' is in the root's own events.
    assert "Outer at work." not in text(root) and text(root).startswith("Asking. "), text(root)
    # Each caller's call is sent before anything nested under it, and every
    # sub-agent settles inside its root turn.
    order = watch.updates.index

    def first_call(path: str | None, call_id: str) -> int:
        return next(order(u) for u in watch.updates if u.get("agentPath") == path and any(e.get("callId") == call_id for e in u.get("events", [])))

    assert first_call(None, "call-outer") < order(outer[0]) and first_call("outer", "call-inner") < order(inner[0])
    assert order(inner[-1]) < order(outer[-1]) < order(root[-1]) and order(quiet[-1]) < order(root[-1])


def configured(client, workspace: Path, scripts: dict[str, list]) -> dict[str, Path]:
    """Configure one scripted agent per entry of ``scripts`` (the first is
    the default); their event logs."""
    logs, entries = {}, {}
    for name, turns in scripts.items():
        logs[name] = workspace.parent / f"{name}-events.jsonl"
        script = workspace.parent / f"{name}-script.json"
        script.write_text(json.dumps({"log": str(logs[name]), "turns": turns}), encoding="utf-8")
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"agents": entries, "defaultAgent": next(iter(scripts))}))
    return logs


#: The parent calls Agent twice at once. The first task ends once the
#: second one started (its call matched, so recorded), and the second
#: ends after the first's answer: the first task is recorded while both
#: calls are open (read back by placement alone, both would nest under the
#: newer call).
PARALLEL = {
    "parent": [[
        {"say": "Asking both. "},
        {"together": [
            [delegate("first", "First task"), {"write": {"path": "first-answered.txt", "content": "yes\n"}}],
            [delegate("second", "Second task", agent="searcher")],
        ]},
        {"say": "Both answered."},
    ]],
    "helper": [[{"wait_file": "second-started.txt"}, {"say": "First done."}]],
    "searcher": [[{"write": {"path": "second-started.txt", "content": "yes\n"}}, {"wait_file": "first-answered.txt"},
                  {"say": "Second done."}]],
}


async def test_parallel_agent_calls_each_nest_their_own_task_live_and_read_back(client, workspace):
    """Two Agent calls open at once: each task's live updates name its own
    call, and read back each agent_task item names that call too, though
    the first task was recorded while both calls waited for their answers."""
    watch = Watch(client)
    logs = configured(client, workspace, PARALLEL)
    result = await prompt(client, "Delegate two at once")
    assert result["outcome"] == "completed", result
    await request(client, methods.AGENT_LIST, {})  # notifications sent before it are in
    assert results(logs["parent"]) == ["mcp Agent: First done.", "mcp Agent: wrote second-started.txtSecond done."]

    live = {u["agentPath"]: u.get("parentCallId") for u in watch.updates if u.get("agentPath")}
    assert live == {"first": "call-first", "second": "call-second"}, watch.updates

    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    items = shown["items"]
    kinds = [(i["kind"], i.get("callId") or i.get("name")) for i in items if i["kind"] != "response"]
    # Both calls were open when the first task was recorded.
    assert kinds[:3] == [("tool_call", "call-first"), ("tool_call", "call-second"), ("agent_task", "first")], kinds
    tasks = {i["name"]: i.get("parentCallId") for i in items if i["kind"] == "agent_task"}
    assert tasks == {"first": "call-first", "second": "call-second"}, items


def helper_prompts(log: Path) -> list[str]:
    """The text of each prompt the helper agents were sent, in order."""
    return ["\n".join(block.get("text", "") for block in e["params"]["prompt"]) for e in events(log) if e["event"] == "prompt"]


async def test_a_rewind_that_keeps_a_retained_agent_continues_it_from_its_kept_transcript(client, workspace):
    """The agent's native conversation holds the rewound turn's task too:
    after the Rewind it is not loaded again; a new conversation continues
    from the labelled excerpt of the tasks the session kept."""
    parent_log, helper_log = agents(client, workspace, parent=[[delegate("reviewer", "Review it")]],
                                    helper=[[{"say": "Answer one"}], [{"say": "Answer two"}]],
                                    helper_script={"load_session": True})
    first = await prompt(client, "First")
    sid = first["sessionId"]
    assert (await prompt(client, "Second"))["outcome"] == "completed"
    # Turn 2's task continued the same native conversation in the same process.
    assert [e["event"] for e in events(helper_log) if e["event"] in ("new_session", "load_session")] == ["new_session"]
    assert "Answer two" in (await read(client, "history://root/reviewer"))["text"]

    # Rewind before turn 2: the agent (made in turn 1) stays, its turn-2 task goes.
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 2, "boundary": "before"})
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    kept = (await read(client, "history://root/reviewer"))["text"]
    assert "Answer one" in kept and "Answer two" not in kept
    assert "agent://root/reviewer" in (await read(client, "agent://"))["text"]
    # Its result is the kept task's, not the rewound one's.
    result = (await read(client, "agent://root/reviewer"))["text"]
    assert "turn: 1" in result and "Answer one" in result and "Answer two" not in result, result

    again = await prompt(client, "Second, again", sessionId=sid)
    assert again["outcome"] == "completed", again
    # A new native conversation (no session/load of the one holding the rewound task)...
    opened = [e for e in events(helper_log) if e["event"] in ("new_session", "load_session")]
    assert [e["event"] for e in opened] == ["new_session", "new_session"], opened
    # ... seeded with the excerpt of the kept task only.
    last = helper_prompts(helper_log)[-1]
    assert "You are the retained agent reviewer" in last and "Answer one" in last and "Answer two" not in last, last
    assert last.rstrip().endswith("Review it")
    conversation = (await read(client, "history://root/reviewer"))["text"]
    assert "Task 1 · reviewer (helper) in turn 1" in conversation and "Task 2 · reviewer (helper) in turn 2" in conversation


async def test_another_client_reads_the_agents_transcript_and_continues_its_conversation(client, workspace, tmp_path):
    """A session the language server wrote, continued by ``mevedel`` (a
    second client identity, its own agent processes): it reads
    history://root/NAME from the committed transcript, and the next task of
    that name continues the conversation from it."""
    import os
    import subprocess

    parent_log, helper_log = agents(client, workspace, parent=[[delegate("reviewer", "Review it")]],
                                    helper=[[{"say": "Found two issues in the parser."}]])
    result = await prompt(client, "Get a review")
    assert result["outcome"] == "completed", result
    sid = result["sessionId"]
    await request(client, methods.SESSION_CLOSE, {"sessionId": sid})

    # The CLI: another client identity (its own state directory) with the same agents.
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    scripts = {"parent": [[delegate("reviewer", "Now fix them")]], "helper": [[{"say": "Fixed both."}]]}
    entries, logs = {}, {}
    for name, turns in scripts.items():
        logs[name] = tmp_path / f"cli-{name}.jsonl"
        script = tmp_path / f"cli-{name}.json"
        script.write_text(json.dumps({"log": str(logs[name]), "turns": turns}))
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    config.write_text(json.dumps({"agents": entries, "defaultAgent": "parent"}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "cli-state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def mevedel(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    read_back = mevedel("read", "history://root/reviewer", "--session", sid)
    assert read_back.returncode == 0, read_back.stderr
    assert "Task 1 · reviewer (helper) in turn 1" in read_back.stdout and "Found two issues in the parser." in read_back.stdout
    continued = mevedel("prompt", "--session", sid, "Get them fixed")
    assert continued.returncode == 0, continued.stderr
    # Its own helper process started a conversation seeded with the transcript's excerpt.
    (sent,) = helper_prompts(logs["helper"])
    assert "You are the retained agent reviewer" in sent and "Found two issues in the parser." in sent, sent
    assert "Caller: Review it" in sent and sent.rstrip().endswith("Now fix them")
    assert results(logs["parent"]) == ["mcp Agent: Fixed both."]
    both = mevedel("read", "history://root/reviewer", "--session", sid)
    assert "Found two issues in the parser." in both.stdout and "Task 2 · reviewer (helper) in turn 2" in both.stdout, both.stdout
    assert "Fixed both." in both.stdout
