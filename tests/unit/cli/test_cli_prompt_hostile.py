"""``mevedel prompt`` against a hostile scripted ACP agent (a real
subprocess on the official SDK): what the agent does wrong never puts a
traceback on the user's terminal -- the ACP SDK's own complaints go to the
agent's log and the user reads one line naming the agent and the fault --
and the agent's log stays bounded however much it writes."""

from __future__ import annotations

import json

from test_cli_prompt import configure, mevedel


def test_malformed_messages_are_one_line_for_the_user_and_the_details_are_in_the_agents_log(workspace, tmp_path):
    bogus = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "x", "update": {"sessionUpdate": "bogus"}}}
    configure(tmp_path, [[{"say": "before "}, {"garbage": "{this is not json"}, {"garbage": "{this is not json either"},
                          {"garbage": json.dumps(bogus)}, {"say": "after"}]])
    done = mevedel(workspace, tmp_path, "prompt", "Misbehave")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("before after")
    assert "Traceback" not in done.stderr and "JSONDecodeError" in done.stderr
    faults = [line for line in done.stderr.splitlines() if "agent scripted sent what the ACP SDK could not handle" in line]
    assert len(faults) == 2, done.stderr  # one line per kind of fault (the two bad JSON lines are one)
    log = (tmp_path / "state" / "mevedel" / "logs" / "agent-scripted.log").read_text()
    assert "Traceback" in log and "Error parsing JSON-RPC message" in log and "session/update" in log


def test_the_agents_log_is_capped_and_rotated(workspace, tmp_path):
    configure(tmp_path, [[{"stderr_flood": 20 * 1024 * 1024}, {"say": "done"}]])
    done = mevedel(workspace, tmp_path, "prompt", "Flood")
    assert done.returncode == 0 and done.stdout.startswith("done"), done.stderr
    logs = tmp_path / "state" / "mevedel" / "logs"
    current, rotated = logs / "agent-scripted.log", logs / "agent-scripted.log.1"
    assert rotated.exists() and current.stat().st_size <= 8 * 1024 * 1024 and rotated.stat().st_size <= 8 * 1024 * 1024
    assert sorted(p.name for p in logs.iterdir()) == ["agent-scripted.log", "agent-scripted.log.1"]


def test_a_file_name_a_command_makes_that_is_not_utf8_is_a_named_gap_not_a_broken_session(workspace, tmp_path):  # noqa: F811
    make = "printf x > \"$(printf 'bad\\377name.txt')\"; echo ok > good.txt"
    configure(tmp_path, [[{"terminal": {"command": "sh", "args": ["-c", make]}}, {"say": "done"}]])
    done = mevedel(workspace, tmp_path, "prompt", "Make files")
    assert done.returncode == 0 and "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert (workspace / "good.txt").exists() and (workspace / b"bad\xffname.txt".decode("utf-8", "surrogateescape")).exists()
    impact = mevedel(workspace, tmp_path, "rewind", "1", "--before")
    assert "not restored bad\\xffname.txt: its name is not UTF-8 text" in impact.stdout, impact.stdout
    assert mevedel(workspace, tmp_path, "rewind", "1", "--before", "--yes").returncode == 0
    assert not (workspace / "good.txt").exists()  # the rest of the turn is undone
    again = mevedel(workspace, tmp_path, "prompt", "Again")
    assert again.returncode == 0, again.stderr
