"""Ctrl-C on ``mevedel prompt``, on a pseudo-terminal as a person at a shell
presses it: the CLI says why the turn was interrupted in the sentence the
editors' chats show, and a Ctrl-C while the agent is still starting stops
the prompt before it reaches the agent (a second one ends the agent's
process), so it never runs afterwards. The scripted ACP agent as a
subprocess, real files."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from test_cli_prompt import AGENT, configure, mevedel

from deadlines import ticks
from processes import process_alive


def turns(workspace: Path, tmp_path: Path) -> list[dict]:
    listed = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert "turns" in listed, listed
    return listed["turns"]


def nothing_recorded(workspace: Path, tmp_path: Path) -> bool:
    """No turn was recorded: the prompt's new session, left without one,
    was never written (no session of the workspace lists)."""
    listed = json.loads(mevedel(workspace, tmp_path, "session", "list", "--json").stdout)
    return listed["sessions"] == []


def script(tmp_path: Path, turns: list, on_initialize: list) -> Path:
    """The agent's script with a log of what it was asked, and what its
    ``initialize`` does first."""
    log = tmp_path / "agent-events.jsonl"
    (tmp_path / "script.json").write_text(json.dumps({"log": str(log), "turns": turns, "on_initialize": on_initialize}))
    return log


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def starting(shell, log: Path) -> None:
    """Until the prompt waits on its agent's start: the CLI said so, and
    the agent read its ``initialize`` (which it does not answer yet)."""
    shell.wait_for("[starting scripted]")
    for _ in ticks():
        if "initialize" in [e["event"] for e in events(log)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"the agent never read its initialize:\n{shell.output}")


def test_ctrl_c_mid_turn_says_why_the_turn_was_interrupted(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "Working."}, {"wait_cancel": 60}, {"say": "never"}]])
    shell = terminal("prompt", "Work")
    shell.wait_for("Working.")
    shell.type("\x03")
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("Interrupted: cancelled by the user.\n")
    assert "never" not in shell.output and "Traceback" not in shell.output
    assert [(t["state"], t["reason"]) for t in turns(workspace, tmp_path)] == [("interrupted", "cancelled by the user")]


def test_ctrl_c_while_the_agent_starts_stops_the_prompt_before_it_reaches_the_agent(workspace, tmp_path, terminal):
    release = tmp_path / "release"
    configure(tmp_path, [])
    log = script(tmp_path, [[{"write": {"path": "ran.txt", "content": "ran\n"}}, {"say": "never"}]],
                 [{"wait_file": str(release)}])
    shell = terminal("prompt", "Write ran.txt")
    starting(shell, log)
    shell.type("\x03")
    shell.wait_for("[cancelling: waiting for the agent to stop; Ctrl-C again stops its process]")
    release.touch()  # its start finishes: the prompt still never goes
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("Aborted before it reached the agent: cancelled by the user.\n")
    assert "never" not in shell.output and "Traceback" not in shell.output
    assert "prompt" not in [e["event"] for e in events(log)]
    assert not (workspace / "ran.txt").exists()
    assert nothing_recorded(workspace, tmp_path)


def test_a_second_ctrl_c_while_the_agent_starts_ends_its_process(workspace, tmp_path, terminal):
    configure(tmp_path, [], cancelTimeoutSeconds=600)
    log = script(tmp_path, [[{"say": "never"}]], [{"wait_file": str(tmp_path / "never")}])
    shell = terminal("prompt", "Go")
    starting(shell, log)
    agent = next(e["pid"] for e in events(log) if e["event"] == "start")
    shell.type("\x03")
    shell.wait_for("Ctrl-C again stops its process]")
    assert shell.process.poll() is None  # the start is not cut short by the first
    shell.type("\x03")
    shell.wait_for("[stopping the agent's process]")
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("Aborted before it reached the agent: cancelled by the user")
    assert not process_alive(agent) and "Traceback" not in shell.output
    assert nothing_recorded(workspace, tmp_path)


def test_ctrl_c_says_why_a_sub_agents_task_was_interrupted_under_the_call_that_started_it(workspace, tmp_path, terminal):
    logs, entries = {}, {}
    scripts = {
        "parent": [[{"say": "Asking.\n"}, {"mcp_call": {"id": "call-slow", "tool": "Agent",
                                                         "arguments": {"name": "slow", "prompt": "Take your time", "agent": "helper"}}},
                    {"wait_cancel": 60}, {"say": "never"}]],
        "helper": [[{"say": "Started.\n"}, {"wait_cancel": 60}, {"say": "never either"}]],
    }
    for name, steps in scripts.items():
        logs[name] = tmp_path / f"{name}.jsonl"
        (tmp_path / f"{name}.json").write_text(json.dumps({"log": str(logs[name]), "turns": steps}))
        entries[name] = {"command": [sys.executable, str(AGENT), str(tmp_path / f"{name}.json")]}
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": entries, "defaultAgent": "parent"}))
    shell = terminal("prompt", "Delegate something slow")
    shell.wait_for("    Started.")
    shell.type("\x03")
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("    [agent slow (helper): interrupted: cancelled with its caller's turn]")
    shell.wait_for("Interrupted: cancelled by the user.\n")
    assert "never" not in shell.output and "Traceback" not in shell.output
