"""A long agent turn is published every ``checkpointIntervalSeconds`` while
it runs, so a crash loses at most that much of its records: the server is
killed (SIGKILL) in the middle of a turn, and the next client finds what the
agent had said before the last checkpoint, in the turn it then settles as
interrupted. The agent engine gets this from the session service without
asking for it (a run of text still streaming becomes a record when it ends,
so that is what a checkpoint holds of it). The files its agent changed are
not lost even since the last checkpoint: the next client finds them against
the baseline the engine held before dispatching the agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from deadlines import ticks
from killed_turn import CHANGED, prepare, steps, tree_state
from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity, observe_lease, read_committed
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

from .conftest import SERVER, initialize_params

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


async def _committed(project: Path) -> tuple[bool, str]:
    """Whether a session's committed head holds a turn in flight, and its records."""
    sessions = project / ".mevedel" / "sessions"
    if not sessions.exists():
        return False, ""
    for session_id in os.listdir(sessions):
        try:
            snapshot = await read_committed(LocalTarget(project), session_id)
            if snapshot.head is None:
                continue
            conversation = Conversation.restore(await snapshot.read_all())
        except Exception:  # a head being written: look again
            continue
        return conversation.open_turn is not None, " ".join(str(r) for r in conversation.records())
    return False, ""


async def test_a_crash_in_the_middle_of_a_long_turn_loses_at_most_the_checkpoint_interval(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    script = tmp_path / "script.json"
    # The answer so far, then a tool call (which ends the run of text, so it
    # is a record), then a long wait: the turn is in flight for minutes.
    steps = [
        {"say": "The first half of a long answer"},
        {"tool_call": {"id": "c1", "title": "Searching the repository", "kind": "search", "status": "in_progress"}},
        {"wait_cancel": 120},
    ]
    script.write_text(json.dumps({"turns": [steps]}))
    client = await SERVER.start()
    await client.initialize_session(
        initialize_params(
            project,
            checkpointIntervalSeconds=1,
            leaseSeconds=3,  # the dead server's lease lapses quickly
            agents={"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
            defaultAgent="scripted",
        )
    )
    running = asyncio.ensure_future(client.protocol.send_request_async(methods.TURN_PROMPT, {"text": "Go"}))
    for _ in ticks():
        in_flight, text = await _committed(project)
        if in_flight and "first half" in text:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the turn in flight was never checkpointed with what the agent said")
    # The server dies without a chance to save anything more.
    os.kill(client._server.pid, signal.SIGKILL)
    running.cancel()
    await client.stop()
    # The next client (a restart: a new identity) resumes it: the turn is
    # interrupted, and what the agent said before the checkpoint is there.
    service = SessionService(LocalTarget(project), ClientIdentity.generate())
    (row,) = (await service.sessions.list()).rows
    for _ in ticks():
        opened = await service.sessions.open(row.session_id, confirm_takeover=True)
        if opened.action == "takeover":
            break
        await service.sessions.close(row.session_id)  # joined: the dead server's lease is still live
        await asyncio.sleep(0.5)
    (turn,) = await service.turns.summaries(row.session_id)
    assert turn.state == "interrupted"
    detail = await service.turns.detail(row.session_id, 1)
    assert "The first half of a long answer" in detail.markdown
    await service.sessions.close(row.session_id)


def _cli(project: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "XDG_STATE_HOME": str(state / "state"), "XDG_CONFIG_HOME": str(state / "config")}
    return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=project, env=environment,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


async def test_a_server_killed_after_its_agent_changed_files_leaves_every_change_to_the_client_that_takes_over(tmp_path):
    """Long before the mid-turn checkpoint: what the agent wrote and what its
    shell command did are found by the next owner (here the CLI, another
    client), recorded in the interrupted turn, and Rewind gives them back."""
    project = tmp_path / "project"
    project.mkdir()
    prepare(project)
    before = tree_state(project)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [steps(tmp_path / "never-released")]}))
    client = await SERVER.start()
    await client.initialize_session(
        initialize_params(
            project,
            leaseSeconds=3,  # the dead server's lease lapses quickly
            agents={"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
            defaultAgent="scripted",
        )
    )
    running = asyncio.ensure_future(client.protocol.send_request_async(methods.TURN_PROMPT, {"text": "Go"}))
    for _ in ticks():
        if (project / "link.txt").is_symlink():  # the command's last change: it ran whole
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the agent's command never ran")
    assert (project / "notes.txt").read_text() == "the agent's rewrite\n"
    # Killed once its server recorded the command's end (the latch it set
    # before launching it cleared): killed sooner, the next owner cannot
    # prove the command gone and rightly asks for an acknowledgement first
    # (a slow recording on a loaded machine made this test fail so).
    (session_id,) = os.listdir(project / ".mevedel" / "sessions")
    for _ in ticks():
        if not (await observe_lease(LocalTarget(project), session_id)).record.unsettled_mutation:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the command's end was never recorded")
    os.kill(client._server.pid, signal.SIGKILL)
    running.cancel()
    await client.stop()
    (tmp_path / "never-released").touch()  # the orphaned agent, if its stdin's end has not stopped it yet

    for _ in ticks():
        taken = _cli(project, tmp_path, "session", "open", session_id, "--mode", "takeover", "--confirm-takeover")
        if taken.returncode == 0:
            break
        await asyncio.sleep(0.5)  # the dead server's lease is still live
    else:
        raise AssertionError(taken.stderr)
    turns = json.loads(_cli(project, tmp_path, "session", "turns", "--json").stdout)["turns"]
    assert [t["state"] for t in turns] == ["interrupted"]
    shown = json.loads(_cli(project, tmp_path, "diff", "1", "--json").stdout)
    assert {f["path"]: f["change"] for f in shown["files"]} == CHANGED
    rewound = _cli(project, tmp_path, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert tree_state(project) == before
