"""``mevedel session open`` by display name, and the takeover refusal that
says how to take over."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from lease_expiry import lease_expired
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget


def mevedel(workspace: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=60)


async def saved_session(workspace: Path, name: str, client: ClientIdentity, lease_seconds: int = 60) -> str:
    service = SessionService(LocalTarget(workspace), client, lease_seconds=lease_seconds)
    sid = (await service.sessions.create(name)).session_id
    await service.turns.begin_turn(sid, "hello")
    await service.turns.append(sid, EvidenceInput("response", text="hi"))
    await service.turns.settle(sid)
    await service.sessions.detach()
    return sid


def test_a_session_opens_by_its_display_name_when_that_is_unambiguous(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    first = asyncio.run(saved_session(workspace, "spike", ClientIdentity.generate()))
    opened = mevedel(workspace, tmp_path, "session", "open", "spike", "--json")
    assert json.loads(opened.stdout)["session_id"] == first
    missing = mevedel(workspace, tmp_path, "session", "open", "nothing like it")
    assert missing.returncode == 1 and "no session has that name or id" in missing.stderr
    second = asyncio.run(saved_session(workspace, "spike", ClientIdentity.generate()))
    twice = mevedel(workspace, tmp_path, "session", "open", "spike")
    assert twice.returncode == 1 and "2 sessions have that name" in twice.stderr and first in twice.stderr and second in twice.stderr
    assert "Traceback" not in missing.stderr + twice.stderr


def test_the_takeover_refusal_names_the_flag_that_confirms_it(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()

    async def expired() -> str:
        sid = await saved_session(workspace, "left", ClientIdentity("gone-client", "old-laptop"), lease_seconds=1)
        await lease_expired(workspace, sid)
        return sid

    sid = asyncio.run(expired())
    refused = mevedel(workspace, tmp_path, "session", "open", sid, "--mode", "takeover")
    assert refused.returncode == 1 and f"mevedel session open {sid} --confirm-takeover" in refused.stderr
    taken = mevedel(workspace, tmp_path, "session", "open", sid, "--mode", "takeover", "--confirm-takeover")
    assert taken.returncode == 0, taken.stderr


def test_read_defaults_to_the_session_this_cli_holds_as_turn_does(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    begun = json.loads(mevedel(workspace, tmp_path, "turn", "begin", "Plan it", "--new", "--json").stdout)
    history = mevedel(workspace, tmp_path, "read", "history://root")
    assert history.returncode == 0, history.stderr
    assert "Plan it" in history.stdout
    assert begun["session_id"]
