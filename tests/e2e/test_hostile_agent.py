"""A hostile agent (the scripted ACP agent on the official SDK, a real
subprocess) sends what no honest agent would: paths that are not Unicode
text, commands the OS refuses to start, floods. Each is answered with an
error naming the input, no traceback reaches the user, and the session
stays usable: the next prompt works and Rewind restores the turn."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from lsprotocol import types

from deadlines import ticks
from mevedel_protocol import methods
from processes import process_alive

from .conftest import request
from .test_agent_turns import Watch, configure, events, prompt


def _answers(log: Path, method: str) -> list[dict]:
    return [e for e in events(log) if e["event"] == "client_response" and e["method"] == method]


#: The turn after a hostile one (the agent reads its script once).
NEXT = [{"write": {"path": "after.txt", "content": "next turn\n"}}]


async def _usable(client, workspace: Path, turn: int) -> None:
    """The next prompt works (the script's :data:`NEXT` turn), and Rewind
    before ``turn`` undoes both turns' writes."""
    again = await prompt(client, "Go on")
    assert again["outcome"] == "completed" and (workspace / "after.txt").exists(), again
    impact = await request(client, methods.REWIND_PREPARE, {"turn": turn, "boundary": "before"})
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert not (workspace / "after.txt").exists() and not (workspace / "ok.txt").exists()


async def test_a_path_that_is_not_unicode_text_is_refused_naming_it_and_the_turn_goes_on(client, workspace):
    watch = Watch(client)
    (workspace / "dir").mkdir()
    log = configure(client, workspace, [[
        {"write": {"path": "bad\udcff.txt", "content": "stray\n"}},
        {"read": {"path": "bad\ud800.txt"}},
        {"terminal": {"command": "true", "cwd": "dir\udcff"}},
        {"write": {"path": "ok.txt", "content": "written\n"}},
        {"say": "done"},
    ], NEXT])
    result = await prompt(client, "Write odd names")
    assert result["outcome"] == "completed", result
    said = watch.text()
    # What the agent says with a lone surrogate is shown with U+FFFD.
    assert "write bad\ufffd.txt failed" in said and "read bad\ufffd.txt failed" in said and "terminal failed" in said
    assert "wrote ok.txt" in said and said.endswith("done")
    written = _answers(log, "fs/write_text_file")
    refusal = written[0]["error"]
    assert refusal["code"] == -32602 and "\\udcff" in refusal["data"]["path"] and "not valid Unicode" in refusal["data"]["reason"]
    created = _answers(log, "terminal/create")[0]["error"]
    assert "\\udcff" in json.dumps(created["data"]) and "not valid Unicode" in json.dumps(created["data"])
    assert sorted(os.listdir(workspace)) == sorted([".mevedel", "dir", "memory", "ok.txt"])  # no stray file
    await _usable(client, workspace, 1)


async def test_a_command_the_os_refuses_to_start_is_an_error_and_leaves_no_terminal_running(client, workspace):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"agentIdleTimeoutSeconds": 5}))
    watch = Watch(client)
    log = configure(client, workspace, [[
        {"terminal": {"command": "echo", "args": ["a\u0000b"]}},
        {"terminal": {"command": "echo", "args": ["x"], "env": {"A=B": "1"}}},
        {"terminal": {"command": "echo", "args": ["x"], "env": {"A\u0000": "1"}}},
        {"terminal": {"command": "echo", "args": ["x"], "env": {"A": "1\u0000"}}},
        {"terminal": {"command": "echo", "args": ["x"], "env": {"": "1"}}},
        {"terminal": {"command": "/no/such/program"}},
        {"write": {"path": "ok.txt", "content": "written\n"}},
        {"terminal": {"command": "echo", "args": ["still runs"]}},
    ], NEXT])
    result = await prompt(client, "Start odd commands")
    assert result["outcome"] == "completed", result
    said = watch.text()
    assert said.count("terminal failed") == 6 and "ran: exit 0\nstill runs" in said, said
    refusals = [a["error"] for a in _answers(log, "terminal/create") if "error" in a]
    assert len(refusals) == 6 and all(r["code"] == -32602 for r in refusals)
    reasons = [json.dumps(r["data"]) for r in refusals]
    assert "NUL" in reasons[0] and "A=B" in reasons[1] and "NUL" in reasons[2] and "NUL" in reasons[3]
    assert "/no/such/program" in reasons[5]
    await _usable(client, workspace, 1)


async def test_an_agent_chosen_output_limit_is_capped_and_the_agent_is_told(client, workspace):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"terminalOutputMaxBytes": 4096}))
    watch = Watch(client)
    log = configure(client, workspace, [[
        {"terminal": {"command": "sh", "args": ["-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo END"],
                      "output_byte_limit": 2**40}},
        {"write": {"path": "ok.txt", "content": "written\n"}},
    ], NEXT])
    result = await prompt(client, "Print a lot")
    assert result["outcome"] == "completed", result
    created = _answers(log, "terminal/create")[0]["result"]
    assert created["_meta"]["mevedel"]["outputByteLimit"] == 4096 and "2199023255552" not in json.dumps(created)
    output = _answers(log, "terminal/output")[0]["result"]
    assert output["truncated"] and output["output"].endswith("xxxEND\n")
    assert output["output"].startswith(f"[mevedel: only the last 4096 bytes of output are kept, not the {2**40} asked for]")
    assert len(output["output"].encode()) < 4096 + 200
    assert "ran: exit 0" in watch.text()
    await _usable(client, workspace, 1)


async def test_a_message_over_the_size_limit_is_answered_at_once_and_the_turn_goes_on(client, workspace):
    watch = Watch(client)
    log = configure(client, workspace, [[
        {"write": {"path": "big.txt", "content": "x" * 1024 * 1024, "repeat": 51}},
        {"garbage": "{this is not json"},
        {"garbage": json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "x", "update": {"sessionUpdate": "bogus"}}})},
        {"write": {"path": "ok.txt", "content": "written\n"}},
    ], NEXT])
    result = await prompt(client, "Write a huge file")
    assert result["outcome"] == "completed", result
    refusal = _answers(log, "fs/write_text_file")[0]["error"]
    assert "fs/write_text_file is longer than the 50 MiB message limit" in refusal["data"]["reason"]
    assert not (workspace / "big.txt").exists() and "wrote ok.txt" in watch.text()
    await _usable(client, workspace, 1)


async def test_on_an_ssh_workspace_the_same_refusals_hold_and_the_session_stays_usable(openssh_server, tmp_path):
    from ssh_fixtures import ALIAS

    from .test_agent_turns import AGENT
    from .test_ssh_workspace import remote_params, server_config, ssh_home

    project = tmp_path / "remote project"
    project.mkdir()
    url = f"ssh://{ALIAS}{project}"
    script = tmp_path / "script.json"
    log = tmp_path / "agent-events.jsonl"
    script.write_text(json.dumps({"log": str(log), "turns": [[
        {"write": {"path": "bad\udcff.txt", "content": "stray\n"}},
        {"terminal": {"command": "echo", "args": ["a\u0000b"]}},
        {"terminal": {"command": "echo", "args": ["x"], "env": {"A=B": "1"}}},
        {"terminal": {"command": "echo", "args": ["x"], "cwd": "d\udcff"}},
        {"write": {"path": "ok.txt", "content": "written\n"}},
        {"terminal": {"command": "echo", "args": ["still runs"]}},
    ], NEXT]}))
    settings = {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, "defaultAgent": "scripted"}
    client = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await client.initialize_session(remote_params(url, **settings))
        watch = Watch(client)
        result = await prompt(client, "Odd inputs over there", workspaceFolder=url)
        assert result["outcome"] == "completed", result
        said = watch.text()
        assert "write bad\ufffd.txt failed" in said and said.count("terminal failed") == 3 and "ran: exit 0\nstill runs" in said, said
        assert sorted(os.listdir(project)) == [".mevedel", "ok.txt"]
        again = await prompt(client, "Go on", workspaceFolder=url)
        assert again["outcome"] == "completed" and (project / "after.txt").exists()
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", "workspaceFolder": url})
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"], "workspaceFolder": url})
        assert sorted(os.listdir(project)) == [".mevedel"]
    finally:
        await client.shutdown_session()




async def test_what_a_command_leaves_in_the_background_is_killed_with_its_terminal(client, workspace, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    log = configure(client, workspace, [[
        # Released: the background child dies with the terminal's process group.
        {"terminal": {"command": "sh", "args": ["-c", f"sleep 300 >/dev/null 2>&1 & echo $! > {pids}/released"]}},
        {"write": {"path": "ok.txt", "content": "written\n"}},
    ], NEXT])
    result = await prompt(client, "Leave something running")
    assert result["outcome"] == "completed", result
    assert _answers(log, "terminal/release")
    pid = int((pids / "released").read_text())
    for _ in ticks():
        if not process_alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not process_alive(pid), "a background child outlived its terminal"
    await _usable(client, workspace, 1)
