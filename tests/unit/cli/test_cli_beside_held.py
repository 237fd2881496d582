"""A new session beside a held one on the command line: while another
client's live lease holds a session of the workspace (a real process
holding it mid-turn), ``mevedel session create`` and ``mevedel prompt``
say that both would share the project's files and point to a Worktree Fork.
On a terminal they ask, and only ``y`` starts the session (an empty
answer, end of input or Ctrl-C starts nothing); without one they refuse,
naming ``--beside-held``, which starts it. Once the holder's process
ended, nothing is said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_prompt import configure, mevedel

from holder_process import holding_process, kill


def session_directories(workspace: Path) -> set[str]:
    sessions = workspace / ".mevedel" / "sessions"
    return {p.name for p in sessions.iterdir()} if sessions.is_dir() else set()


@pytest.fixture
def held(workspace):
    """A session of the workspace another client holds mid-turn, from a
    process that is still running: (that process, the session)."""
    with holding_process(workspace) as holding:
        yield holding


def test_without_a_terminal_a_start_beside_a_held_session_is_refused_naming_the_flag(workspace, tmp_path, held):
    _holder, sid = held
    refused = mevedel(workspace, tmp_path, "session", "create", "--prompt", "Beside it")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    said = refused.stderr
    assert 'session "Held" is held by holder-host' in said and "share this project's files" in said, said
    assert f"mevedel fork TURN --worktree --session {sid}" in said and "--beside-held starts a new session anyway" in said
    assert session_directories(workspace) == {sid}
    as_json = mevedel(workspace, tmp_path, "session", "create", "--prompt", "Beside it", "--json")
    assert json.loads(as_json.stdout)["error"]["kind"] == "beside-held-needs-confirmation"
    started = mevedel(workspace, tmp_path, "session", "create", "--prompt", "Beside it", "--beside-held", "--json")
    assert started.returncode == 0, started.stderr
    assert session_directories(workspace) == {sid, json.loads(started.stdout)["session_id"]}


def test_a_prompt_in_a_new_session_beside_a_held_one_is_refused_then_runs_with_the_flag(workspace, tmp_path, held):
    _holder, sid = held
    configure(tmp_path, [[{"say": "Hello."}]])
    # This client has no session here yet: the prompt would start one.
    refused = mevedel(workspace, tmp_path, "prompt", "Hi")
    assert refused.returncode == 1 and '"Held" is held by holder-host' in refused.stderr, refused.stderr
    assert "--beside-held" in refused.stderr and session_directories(workspace) == {sid}
    ran = mevedel(workspace, tmp_path, "prompt", "Hi", "--beside-held")
    assert ran.returncode == 0 and "Hello." in ran.stdout, ran.stderr


def test_a_holder_whose_process_ended_is_not_warned_of(workspace, tmp_path, held):
    holder, sid = held
    assert mevedel(workspace, tmp_path, "session", "create", "--prompt", "Beside it").returncode == 1
    kill(holder)
    started = mevedel(workspace, tmp_path, "session", "create", "--prompt", "After it", "--json")
    assert started.returncode == 0, started.stderr
    assert "share this project's files" not in started.stderr


def test_on_a_terminal_y_starts_the_session(workspace, tmp_path, held, terminal):
    _holder, sid = held
    shell = terminal("session", "create", "--prompt", "Beside it")
    shell.wait_for("start a new session anyway? [y/N] ")
    assert '"Held" is held by holder-host' in shell.output and "Worktree Fork" in shell.output
    shell.type("y\n")
    assert shell.process.wait(timeout=60) == 0, shell.output
    assert len(session_directories(workspace) - {sid}) == 1


@pytest.mark.parametrize("answer", ["\n", "no\n", "\x04"], ids=["empty", "no", "end-of-input"])
def test_on_a_terminal_anything_but_y_starts_nothing(workspace, tmp_path, held, terminal, answer):
    _holder, sid = held
    shell = terminal("session", "create", "--prompt", "Beside it")
    shell.wait_for("start a new session anyway? [y/N] ")
    shell.type(answer)
    assert shell.process.wait(timeout=60) == 1, shell.output
    shell.wait_for("no new session was started")
    assert session_directories(workspace) == {sid}


def test_on_a_terminal_ctrl_c_starts_nothing(workspace, tmp_path, held, terminal):
    _holder, sid = held
    shell = terminal("session", "create", "--prompt", "Beside it")
    shell.wait_for("start a new session anyway? [y/N] ")
    shell.type("\x03")  # the terminal's interrupt character
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("interrupted; no new session was started")
    assert "Traceback" not in shell.output and session_directories(workspace) == {sid}
