"""A ``mevedel prompt`` stopped between its last settlement and its exit:
its scripted agent, whose stdin the prompt closes only once its turns
settled (as it stops its agent), freezes it there (SIGSTOP,
``on_stdin_end``'s ``freeze_client``) for the test to kill -- a point no
output of the prompt marks, reached without any sleep. (The prompt gives
its agent half a second from the end of its stdin before it ends its
process group; the agent's SIGSTOP follows that end at once.)"""

from __future__ import annotations

import subprocess
import time

from deadlines import ticks


def settled_then_frozen(turns: list) -> dict:
    """The scripted agent's script: ``turns``, then the client frozen as it
    stops the agent."""
    return {"turns": turns, "on_stdin_end": [{"freeze_client": True}]}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def frozen_after_settlement(argv: list[str], **popen) -> subprocess.Popen:
    """``argv`` (a ``mevedel prompt`` whose agent's script came from
    :func:`settled_then_frozen`) started, once its agent froze it."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, **popen)
    for _ in ticks():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the prompt ended (status {process.returncode}) before its agent froze it:\n{out}\n{err}")
        if _state(process.pid) == "T":
            return process
        time.sleep(0.02)
    process.kill()
    out, err = process.communicate()
    raise AssertionError(f"the prompt was never frozen by its agent:\n{out}\n{err}")
