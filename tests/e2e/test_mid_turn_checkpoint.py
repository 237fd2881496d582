"""A long agent turn is published every ``checkpointIntervalSeconds`` while
it runs, so a crash loses at most that much: the server is killed (SIGKILL)
in the middle of a turn, and the next client finds what the agent had done
before the last checkpoint, in the turn it then settles as interrupted. The
agent engine gets this from the session service without asking for it
(a run of text still streaming becomes a record when it ends, so that is
what a checkpoint holds of it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from deadlines import ticks
from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity, read_committed
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
