"""``mevedel/turn/abort`` of a turn no agent of this server runs any more
records what that turn changed since its last checkpoint first, through
the same core entry point as ``mevedel turn abort`` (``Turns.abort`` with
``stopped``): the tree is compared with the baseline the engine held before
it dispatched the agent.

Such a turn reaches the LSP's abort when its agent engine could not record
the turn's settlement: a mid-turn checkpoint failed to publish (the store
refused it), so the session's publication is pending; every capture the
engine tried since was refused, the changes the agent's command made were
not recorded, and the settlement was refused too. Once the publication is
retried, aborting the turn finds those changes, so the diff names them and
Rewind gives the tree back exactly. (A turn whose process died is settled
this way when the next server opens its session: a takeover's resume
repair, ``test_mid_turn_checkpoint``.) The real server over stdio, the
scripted ACP agent, real files."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from deadlines import ticks
from killed_turn import CHANGED, SHELL, prepare, tree_state
from mevedel_protocol import methods
from mevedel_server.store import read_committed
from mevedel_server.store.content.turns import Conversation
from mevedel_server.targets import LocalTarget

from .conftest import SERVER, initialize_params, request

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"

#: The agent's command once the store refuses its saves.
LATE = "set -e; echo late > late.txt; rm keep.txt"


async def _checkpointed(project: Path) -> str | None:
    """The session whose committed head holds the turn in flight (a
    mid-turn checkpoint was published), if one does."""
    sessions = project / ".mevedel" / "sessions"
    for session_id in os.listdir(sessions) if sessions.exists() else ():
        try:
            snapshot = await read_committed(LocalTarget(project), session_id)
            if snapshot.head is not None and Conversation.restore(await snapshot.read_all()).open_turn is not None:
                return session_id
        except Exception:  # a head being written: look again
            continue
    return None


async def _until(what: str, check) -> None:
    for _ in ticks():
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} never happened")


async def test_aborting_a_turn_its_engine_could_not_settle_records_what_its_agent_changed_since_the_last_checkpoint(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    prepare(project)
    (project / "keep.txt").write_text("kept\n")
    before = tree_state(project)
    changed, late = tmp_path / "changed", tmp_path / "late"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
        {"say": "the first half"},
        {"wait_file": str(changed)},
        # A record the next mid-turn checkpoint tries to publish.
        {"tool_call": {"id": "c2", "title": "Thinking it over", "kind": "think", "status": "in_progress"}},
        {"wait_file": str(late)},
        {"terminal": {"command": "sh", "args": ["-c", LATE]}},
        {"say": "all written"},
    ]]}))
    client = await SERVER.start()
    await client.initialize_session(
        initialize_params(
            project,
            checkpointIntervalSeconds=1,
            agents={"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
            defaultAgent="scripted",
        )
    )
    try:
        running = asyncio.ensure_future(request(client, methods.TURN_PROMPT, {"text": "Go"}))

        async def ran_and_checkpointed() -> bool:  # the command's last change, and the session saved
            return (project / "link.txt").is_symlink() and await _checkpointed(project) is not None

        await _until("the command, and a checkpoint of the turn", ran_and_checkpointed)
        sid = await _checkpointed(project)
        assert sid is not None
        # The store refuses what the checkpoints publish from now on.
        session = project / ".mevedel" / "sessions" / sid
        moved = session / "publications-moved"
        (session / ".publications").rename(moved)
        (session / ".publications").symlink_to(moved)  # the target refuses symlinks
        changed.touch()

        async def pending() -> bool:
            state = (await request(client, methods.SESSION_OPEN, {"sessionId": sid}))["session"]
            return bool(state.get("pendingPublication"))

        await _until("a failed checkpoint", pending)
        late.touch()
        with pytest.raises(JsonRpcException, match="an earlier publication is pending"):
            await running  # the settlement refused
        assert (project / "late.txt").exists() and not (project / "keep.txt").exists()
        assert (await request(client, methods.TURN_LIST, {}))["turns"][-1]["state"] == "in-flight"

        (session / ".publications").unlink()
        moved.rename(session / ".publications")
        assert (await request(client, methods.SESSION_RETRY_PUBLICATION, {}))["committed"] is True
        aborted = await request(client, methods.TURN_ABORT, {})
        assert aborted["committed"] is True and aborted["turn"] == 1

        diff = await request(client, methods.TURN_DIFF, {"first": 1, "last": 1})
        # And what the command did once the store refused every capture.
        assert {f["path"]: f["change"] for f in diff["files"]} == CHANGED | {"late.txt": "added", "keep.txt": "deleted"}
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
        assert tree_state(project) == before
        assert not os.listdir(project / ".mevedel" / "file-state" / "turns")  # its baseline let go
    finally:
        await client.shutdown_session()
