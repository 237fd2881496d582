"""Reading a process's answer as it streams: tests that act in the middle
of a turn (a kill, a Ctrl-C, a second client) wait for the words the turn
shows first."""

from __future__ import annotations

import subprocess


def read_until(process: subprocess.Popen, text: str, *, stderr: bool = False) -> str:
    """What ``process`` wrote to its standard output (``stderr``: its
    standard error) up to and including ``text``; fails, with the rest of
    its standard error, if it ends first."""
    stream = process.stderr if stderr else process.stdout
    assert stream is not None
    seen = ""
    while text not in seen:
        char = stream.read(1)
        if not char:
            raise AssertionError(f"the process ended before saying {text!r}: {seen!r}\n{process.communicate()[1]}")
        seen += char
    return seen
