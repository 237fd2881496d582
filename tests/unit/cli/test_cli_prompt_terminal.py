"""``mevedel prompt`` on a pseudo-terminal, as a person at a shell uses it:
the agent's permission question is answered (or not) by typing, Ctrl-C is
the terminal's own interrupt character. The process must end when the turn
ends, and never keep reading the terminal behind the shell's back."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from test_cli_prompt import configure, mevedel

OPTIONS = [{"id": "allow", "name": "Allow once", "kind": "allow_once"}, {"id": "reject", "name": "Reject", "kind": "reject_once"}]
ASK = {"permission": {"tool_call_id": "c1", "title": "Write a.txt", "kind": "edit", "options": OPTIONS}}


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


def test_ctrl_d_at_a_question_refuses_it_on_a_line_of_its_own(workspace, tmp_path, terminal):
    configure(tmp_path, [[ASK, {"say": "Went on."}]])
    shell = terminal("prompt", "Write a")
    shell.wait_for("choose a number (empty: refuse):")
    shell.type("\x04")  # end of input: the terminal echoes no newline
    assert shell.process.wait(timeout=60) == 0, shell.output
    assert "choose a number (empty: refuse): \n[permission Write a.txt: refused: declined]" in shell.output, shell.output
    shell.wait_for("Went on.")


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


def test_a_prompt_whose_terminal_closed_mid_turn_leaves_that_turn_interrupted_for_the_next(workspace, tmp_path, terminal):
    release = tmp_path / "release"
    configure(tmp_path, [[{"say": "Working."}, {"wait_file": str(release)}, {"say": "Done."}]])
    first = terminal("prompt", "Long job")
    first.wait_for("Working.")
    # The terminal's window closes: the hangup ends the prompt and its
    # agent before the turn settles.
    os.killpg(first.process.pid, signal.SIGHUP)
    first.process.wait(timeout=60)
    release.touch()  # the next agent goes straight through
    again = terminal("prompt", "Next job")
    # Said and settled, not refused as a turn "begun by hand".
    assert again.process.wait(timeout=60) == 0, again.output
    again.wait_for("Done.")
    assert (f"[turn 1 was left in flight: the `mevedel prompt` running it (pid {first.process.pid}) ended "
            "before it settled; recorded as interrupted]") in again.output, again.output
    assert [t["state"] for t in turns(workspace, tmp_path)] == ["interrupted", "completed"]
