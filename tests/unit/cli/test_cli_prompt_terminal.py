"""``mevedel prompt`` on a pseudo-terminal, as a person at a shell uses it:
the agent's permission question is answered (or not) by typing, Ctrl-C is
the terminal's own interrupt character. The process must end when the turn
ends, and never keep reading the terminal behind the shell's back."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from test_cli_prompt import configure, env, mevedel

OPTIONS = [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}]
ASK = {"permission": {"tool_call_id": "c1", "title": "Write a.txt", "kind": "edit", "options": OPTIONS}}


class Terminal:
    """``mevedel ARGS`` with a pseudo-terminal as its controlling terminal
    and its stdin, stdout and stderr; what it writes is collected."""

    def __init__(self, workspace: Path, tmp_path: Path, *args: str) -> None:
        self.master, self.slave = pty.openpty()
        attributes = termios.tcgetattr(self.slave)
        attributes[3] &= ~termios.ECHO  # what the test types is not output
        termios.tcsetattr(self.slave, termios.TCSANOW, attributes)
        self.output = ""
        self.changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env(tmp_path),
            stdin=self.slave, stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            with self.changed:
                self.output += data.decode("utf-8", "replace").replace("\r\n", "\n")
                self.changed.notify_all()

    def wait_for(self, text: str, count: int = 1, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        with self.changed:
            while self.output.count(text) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{text!r} never appeared:\n{self.output}"
                self.changed.wait(left)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.slave)
        os.close(self.master)


@pytest.fixture
def terminal(workspace, tmp_path):
    opened: list[Terminal] = []

    def start(*args: str) -> Terminal:
        opened.append(Terminal(workspace, tmp_path, *args))
        return opened[-1]

    yield start
    for each in opened:
        each.close()


def turns(workspace: Path, tmp_path: Path) -> list[dict]:
    return json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)["turns"]


def test_an_unanswered_question_ends_with_the_turn_and_leaves_the_terminal_alone(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "Asking."}, ASK, {"say": "Finished."}]], permissionTimeoutSeconds=2)
    shell = terminal("prompt", "Write a")
    shell.wait_for("choose a number (empty: refuse):")
    # Nobody answers: the question times out, the turn ends, the process
    # exits by itself -- no Enter needed.
    assert shell.process.wait(timeout=60) == 0, shell.output
    shell.wait_for("Finished.")
    assert "refused: no answer within 2 s" in shell.output and "Traceback" not in shell.output
    # The next line typed goes to whoever reads the terminal next (the
    # shell), not to a thread of the exited prompt.
    shell.type("echo next\n")
    assert os.read(shell.slave, 100) == b"echo next\n"


def test_a_typo_asks_again_and_only_an_empty_answer_refuses(workspace, tmp_path, terminal):
    configure(tmp_path, [[ASK, ASK, {"say": "Both asked."}]])
    shell = terminal("prompt", "Write a")
    shell.wait_for("choose a number (empty: refuse):")
    shell.type("y\n")
    shell.wait_for("'y' is not one of 1-2; choose a number (empty: refuse):")
    shell.type("7\n")
    shell.wait_for("'7' is not one of 1-2")
    shell.type("1\n")
    shell.wait_for("[permission Write a.txt: Allow once]")
    shell.wait_for("choose a number (empty: refuse):", count=4)
    shell.type("\n")
    assert shell.process.wait(timeout=60) == 0, shell.output
    shell.wait_for("Both asked.")
    assert "[permission Write a.txt: refused: declined]" in shell.output, shell.output


def test_ctrl_c_during_a_question_cancels_it_and_exits(workspace, tmp_path, terminal):
    configure(tmp_path, [[ASK, {"wait_cancel": 60}, {"say": "never"}]])
    shell = terminal("prompt", "Write a")
    shell.wait_for("choose a number (empty: refuse):")
    shell.type("1")  # typed, not sent: dropped with the question
    shell.type("\x03")
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("interrupted")
    assert "never" not in shell.output and "Traceback" not in shell.output
    assert [t["state"] for t in turns(workspace, tmp_path)] == ["interrupted"]


def test_a_second_ctrl_c_stops_an_agent_that_ignores_the_cancel(workspace, tmp_path, terminal):
    configure(tmp_path, [[{"say": "Working."}, {"ignore_cancel": True}, {"wait_cancel": 120}, {"say": "never"}]],
              cancelTimeoutSeconds=600)
    shell = terminal("prompt", "Work")
    shell.wait_for("Working.")
    shell.type("\x03")
    shell.wait_for("waiting for the agent to stop; Ctrl-C again stops its process")
    assert shell.process.poll() is None
    shell.type("\x03")
    shell.wait_for("[stopping the agent's process]")
    assert shell.process.wait(timeout=60) == 130, shell.output
    shell.wait_for("interrupted")
    assert "never" not in shell.output and "Traceback" not in shell.output
    assert [t["state"] for t in turns(workspace, tmp_path)] == ["interrupted"]
