"""``mevedel prompt`` with no TEXT on a pseudo-terminal: the prompt is
typed on a line editor whose history is the workspace's input history, so
the up arrow recalls what an earlier ``mevedel prompt`` sent (and what an
editor's chat sent: the same file), and the recalled line is what the
agent gets."""

from __future__ import annotations

import json
import subprocess
import sys

from test_cli_prompt import configure, env, mevedel
from test_cli_prompt_terminal import turns

UP = "\x1b[A"


def test_the_up_arrow_recalls_earlier_prompts_and_sends_the_recalled_one(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "done"}]])  # each prompt starts the agent afresh: its first turn
    assert mevedel(workspace, tmp_path, "prompt", "fix the build").returncode == 0
    assert mevedel(workspace, tmp_path, "prompt", "add a test").returncode == 0
    shell = terminal("prompt")
    shell.wait_for("prompt> ")
    shell.type(UP + UP + "\r")  # two steps back: the first prompt
    assert shell.process.wait(timeout=60) == 0, shell.output
    assert [t["prompt"] for t in turns(workspace, tmp_path)] == ["fix the build", "add a test", "fix the build"]
    stored = json.loads((workspace / ".mevedel" / "input-history").read_text())
    assert stored["entries"] == ["add a test", "fix the build"]  # moved to the newest place, not kept twice


def test_an_empty_line_sends_nothing_and_no_terminal_is_refused_with_what_to_do(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "never"}]])
    shell = terminal("prompt")
    shell.wait_for("prompt> ")
    shell.type("\r")
    assert shell.process.wait(timeout=60) == 1, shell.output
    assert "the prompt is blank; nothing was sent" in shell.output and "Traceback" not in shell.output
    piped = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "prompt"], cwd=workspace, env=env(tmp_path),
                           capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert piped.returncode == 1 and "give the prompt as TEXT, or '-'" in piped.stderr
    assert not (workspace / ".mevedel" / "sessions").exists() or turns(workspace, tmp_path) == []


def test_ctrl_c_at_the_line_editor_ends_at_once_and_ctrl_d_ends_its_line(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "never"}]])
    shell = terminal("prompt")
    shell.wait_for("prompt> ")
    shell.type("half a thought")
    shell.type("\x03")  # the first Ctrl-C, as at a shell prompt
    assert shell.process.wait(timeout=60) == 130, shell.output
    # (The test's terminal does not echo what it types.)
    assert "prompt> \nmevedel: interrupted; nothing was sent\n" in shell.output, shell.output
    assert "Traceback" not in shell.output
    eof = terminal("prompt")
    eof.wait_for("prompt> ")
    eof.type("\x04")
    assert eof.process.wait(timeout=60) == 1, eof.output
    # The refusal on a line of its own, not after the prompt.
    assert "prompt> \nmevedel: the prompt is blank; nothing was sent" in eof.output, eof.output
    assert not (workspace / ".mevedel" / "sessions").exists() or turns(workspace, tmp_path) == []
