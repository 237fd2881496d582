"""A pending Rewind or Redo recovery shows wherever the session is shown --
``session list``, ``turns`` and ``session open`` -- not only when the next
mutation is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.workspace_wide.listing import list_sessions
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("recovery-viewer", "this-host")
RECOVERY = "ab" * 16


def plant_recovery(root: Path, session_id: str) -> None:
    """What an interrupted Rewind leaves: its marker in ``.recovery/``."""
    journal = root / ".mevedel" / "sessions" / session_id / ".recovery"
    journal.mkdir()
    (journal / f"recovery-{RECOVERY}.json").write_text("{}")


async def test_a_listing_shows_a_pending_recovery(tmp_path):
    service = SessionService(LocalTarget(tmp_path), ME)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "one")
    await service.turns.append(session_id, EvidenceInput("response", text="done"))
    await service.turns.settle(session_id)
    other = (await service.sessions.create()).session_id
    await service.turns.begin_turn(other, "two")
    await service.turns.settle(other)
    await service.sessions.close(session_id)
    await service.sessions.close(other)
    plant_recovery(tmp_path, session_id)
    rows = {row.session_id: row for row in (await list_sessions(LocalTarget(tmp_path), ME)).rows}
    assert rows[session_id].recovery_pending == RECOVERY
    assert rows[other].recovery_pending is None
    viewer = SessionService(LocalTarget(tmp_path), ME)
    assert await viewer.history.recovery_pending(session_id) == RECOVERY
    assert (await viewer.sessions.open(session_id, "join")).info.recovery_pending == RECOVERY


def cli(workspace: Path, state: Path, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args, "--json"],
        cwd=workspace, env={**os.environ, "XDG_STATE_HOME": str(state)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def cli_text(workspace: Path, state: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args],
        cwd=workspace, env={**os.environ, "XDG_STATE_HOME": str(state)}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_session_list_turns_and_open_show_a_pending_recovery(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    state = tmp_path / "state"
    session_id = cli(workspace, state, "turn", "begin", "--new", "first")["session_id"]
    cli(workspace, state, "turn", "settle")
    cli(workspace, state, "session", "close", "--session", session_id)
    plant_recovery(workspace, session_id)
    (row,) = cli(workspace, state, "session", "list")["sessions"]
    assert row["recovery_pending"] == RECOVERY
    assert f"recovery {RECOVERY} pending" in cli_text(workspace, state, "session", "list")
    turns = cli(workspace, state, "session", "turns", "--session", session_id)
    assert turns["recovery_pending"] == RECOVERY
    assert "--retry-recovery" in cli_text(workspace, state, "session", "turns", "--session", session_id)
    opened = cli(workspace, state, "session", "open", session_id)
    assert opened["recovery_pending"] == RECOVERY
