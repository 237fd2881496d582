"""``mevedel read`` of a session's conversation and retained agents
(``history://root[/NAME]``, ``agent://[root/NAME]``) when the session is not
open in the reading process: its committed records, read through the
workspace's target, so an SSH workspace answers exactly as a local one (over
the real loopback sshd)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity
from mevedel_server.store.content.sidecar import (
    AgentActivity,
    AgentResult,
    RetainedAgent,
)
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

WRITER = ClientIdentity("client-writer", "workstation")
ADDRESSES = ("history://root", "history://root/reviewer", "agent://", "agent://root/reviewer", "agent://root/worker")


async def _write_session(workspace: Path, *, close: bool = True) -> str:
    """A session another client wrote and saved: turn 1 made the retained
    agent ``reviewer`` (settled, its task in its transcript); turn 2, still
    in flight when saved, set ``worker`` to work. Closed, or (``close``
    false) still held by that client."""
    svc = SessionService(LocalTarget(workspace), WRITER)
    try:
        sid = (await svc.sessions.create()).session_id
        first = await svc.turns.begin_turn(sid, "Get a review")

        def agent(path: str, **fields) -> RetainedAgent:
            return RetainedAgent(path=path, agent="codex", fingerprint="a" * 64, machine="here",
                                 created_turn=first.turn, created_turn_id=first.turn_id, **fields)

        reviewer = agent("reviewer", result=AgentResult(turn=1, outcome="completed", text="Two issues in the parser."))
        svc.agents.set_retained_agents(sid, [reviewer])
        svc.agents.append_agent_task(sid, "reviewer", "codex", "Review parser.py",
                              [EvidenceInput("response", text="Two issues in the parser.")], "completed")
        await svc.turns.append(sid, EvidenceInput("response", text="The reviewer found two issues."))
        await svc.turns.settle(sid, "completed")
        await svc.turns.begin_turn(sid, "Now fix them")
        svc.agents.set_retained_agents(sid, [reviewer, agent("worker", activity=AgentActivity.ACTIVE)])
        await svc.sessions.save(sid)
        if close:
            await svc.sessions.close(sid)
        return sid
    finally:
        await svc.sessions.detach()


def _read(tmp_path: Path, workspace: str, address: str, *session: str, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "reader-state"), "XDG_CONFIG_HOME": str(tmp_path / "reader-config")}
    if home is not None:
        env["HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", "read", address, "--workspace", workspace, *session],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _check(answers: dict[str, subprocess.CompletedProcess], sid: str) -> None:
    root = answers["history://root"]
    assert root.returncode == 0, root.stderr
    assert "The reviewer found two issues." in root.stdout and "history://root/reviewer" in root.stdout, root.stdout
    assert f"session {sid} is not open in this server" in root.stdout
    transcript = answers["history://root/reviewer"]
    assert transcript.returncode == 0, transcript.stderr
    assert "Task 1 · reviewer (codex) in turn 1" in transcript.stdout and "Review parser.py" in transcript.stdout
    listing = answers["agent://"]
    assert listing.returncode == 0, listing.stderr
    assert [line.split("\t")[1] for line in listing.stdout.strip().splitlines()] == ["agent://root/reviewer", "agent://root/worker"]
    settled = answers["agent://root/reviewer"]
    assert settled.returncode == 0, settled.stderr
    assert "status: completed" in settled.stdout and "Two issues in the parser." in settled.stdout
    working = answers["agent://root/worker"]
    assert working.returncode == 0, working.stderr
    assert "NOT READY: worker (codex) is working on a task" in working.stdout
    nobody = answers["agent://root/nobody"]
    assert nobody.returncode == 1 and "agent://root/nobody: unavailable: the session has no retained agent nobody" in nobody.stderr
    unknown = answers["unknown session"]
    assert unknown.returncode == 1 and "owner-missing" in unknown.stderr and "is not a saved session of this workspace" in unknown.stderr
    alone = answers["no session"]
    assert alone.returncode == 1 and "no session is open" in alone.stderr


def _all(tmp_path: Path, workspace: str, sid: str, home: Path | None = None) -> dict[str, subprocess.CompletedProcess]:
    answers = {address: _read(tmp_path, workspace, address, "--session", sid, home=home) for address in ADDRESSES}
    answers["agent://root/nobody"] = _read(tmp_path, workspace, "agent://root/nobody", "--session", sid, home=home)
    answers["unknown session"] = _read(tmp_path, workspace, "history://root/reviewer", "--session", "0" * 26, home=home)
    answers["no session"] = _read(tmp_path, workspace, "agent://", home=home)
    return answers


def test_a_session_not_open_here_reads_its_conversation_and_agents_from_its_committed_records(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = asyncio.run(_write_session(workspace))
    _check(_all(tmp_path, str(workspace), sid), sid)


@pytest.mark.usefixtures("openssh_server")
def test_over_ssh_the_same_reads_answer_as_on_a_local_workspace(tmp_path, openssh_server):
    from e2e.test_ssh_workspace import ssh_home
    from ssh_fixtures import ALIAS

    workspace = tmp_path / "remote ws"
    workspace.mkdir()
    sid = asyncio.run(_write_session(workspace))
    home = ssh_home(tmp_path, openssh_server)
    remote = _all(tmp_path, f"ssh://{ALIAS}{workspace}", sid, home=home)
    _check(remote, sid)
    local = _all(tmp_path, str(workspace), sid)
    assert {k: (v.returncode, v.stdout, v.stderr) for k, v in remote.items()} == {
        k: (v.returncode, v.stdout, v.stderr) for k, v in local.items()}
