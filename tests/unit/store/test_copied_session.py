"""A session directory copied from another project is not silently bound to
this workspace: resuming it asks first (``IdentityNeedsConfirmation``,
before anything is written; the CLI's refusal names ``--confirm-identity``),
and once confirmed its next save records this workspace's identity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mevedel_server.store import (
    ClientIdentity,
    IdentityNeedsConfirmation,
    read_committed,
)
from mevedel_server.store.authority.workspace import ensure_workspace_id
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import EvidenceInput, SessionService, error_kind
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("copier", "this-host")


async def made_elsewhere(tmp_path: Path) -> tuple[Path, str]:
    """A session with one turn made in project A, copied into project B
    (which has an identity of its own)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    service = SessionService(LocalTarget(a), ME)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "made in a")
    await service.turns.append(session_id, EvidenceInput("response", text="hello from a"))
    await service.turns.settle(session_id)
    await service.sessions.close(session_id)
    await ensure_workspace_id(LocalTarget(b))
    shutil.copytree(a / ".mevedel" / "sessions" / session_id, b / ".mevedel" / "sessions" / session_id)
    return b, session_id


def lease_files(root: Path, session_id: str) -> list[str]:
    return sorted(os.listdir(root / ".mevedel" / "sessions" / session_id / ".lease"))


async def test_resuming_a_session_copied_from_another_project_asks_first_and_writes_nothing(tmp_path):
    b, session_id = await made_elsewhere(tmp_path)
    before = lease_files(b, session_id)
    service = SessionService(LocalTarget(b), ME)
    with pytest.raises(IdentityNeedsConfirmation) as asked:
        await service.sessions.open(session_id)
    assert error_kind(asked.value) == "identity-needs-confirmation"
    assert "another workspace" in str(asked.value)
    assert lease_files(b, session_id) == before and not service.is_open(session_id)
    # Joining (read-only) binds nothing and needs no question.
    assert (await service.sessions.open(session_id, "join")).action == "join"
    await service.sessions.close(session_id)


async def test_a_confirmed_binding_is_recorded_by_the_next_save(tmp_path):
    b, session_id = await made_elsewhere(tmp_path)
    here = (b / ".mevedel" / "workspace-id").read_bytes()
    service = SessionService(LocalTarget(b), ME)
    opened = await service.sessions.open(session_id, confirm_identity=True)
    assert opened.action == "resume"
    await service.turns.begin_turn(session_id, "continued in b")
    await service.turns.settle(session_id)
    snapshot = await read_committed(LocalTarget(b), session_id)
    conversation = Conversation.restore(await snapshot.read_all())
    recorded = conversation.sidecar.workspace_id
    assert recorded.encode() in here  # the workspace-id record holds the 64 hex digits
    await service.sessions.close(session_id)
    # From now on it belongs here: no question.
    again = SessionService(LocalTarget(b), ME)
    assert (await again.sessions.open(session_id)).action == "resume"
    await again.sessions.close(session_id)


async def test_the_cli_refuses_naming_confirm_identity_and_binds_with_it(tmp_path):
    b, session_id = await made_elsewhere(tmp_path)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--json"], cwd=b, env=env,
                              capture_output=True, text=True, timeout=120)

    refused = cli("session", "open", session_id)
    assert refused.returncode == 1, refused.stdout
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "identity-needs-confirmation"
    assert f"mevedel session open {session_id} --confirm-identity" in error["message"]
    bound = cli("session", "open", session_id, "--confirm-identity")
    assert bound.returncode == 0, bound.stderr
    assert json.loads(bound.stdout)["action"] == "resume"
