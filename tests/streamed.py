"""Reading a process's answer as it streams: tests that act in the middle
of a turn (a kill, a Ctrl-C, a second client) wait for the words the turn
shows first."""

from __future__ import annotations

import subprocess


def read_until(process: subprocess.Popen, text: str) -> str:
    """What ``process`` wrote to its standard output up to and including
    ``text``; fails, with its standard error, if it ends first."""
    assert process.stdout is not None
    seen = ""
    while text not in seen:
        char = process.stdout.read(1)
        if not char:
            raise AssertionError(f"the process ended before saying {text!r}: {seen!r}\n{process.communicate()[1]}")
        seen += char
    return seen
