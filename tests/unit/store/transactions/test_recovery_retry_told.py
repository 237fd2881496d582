"""A recovery retried after a file was edited outside the session: the CLI
and the LSP answer name the file it left as it is, and why. The recovery is
a real one -- a Rewind whose rollback failed (``test_txn_rewind``) -- and
the retry runs in a real ``mevedel`` process and a real ``mevedel-lsp``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient
from test_txn_rewind import FILES, Sabotage, rollback_failed
from tests.e2e.conftest import SERVER, initialize_params, request
from txn_sessions import snapshot_files, write

from mevedel_protocol import methods
from mevedel_server.targets import LocalTarget


async def edited_after_a_failed_rollback(root: Path) -> str:
    """A Rewind of three turns whose rollback failed on a.txt (its marker
    left, the lease released), then src/c.txt -- which the Rewind had
    removed -- written by the user: the session's ID."""
    root.mkdir(exist_ok=True)
    sabotage = Sabotage(LocalTarget(root), "a.txt")
    s, _error = await rollback_failed(root, sabotage)
    await s.lease.release()
    write(root, "src/c.txt", b"mine\n")
    return s.session_id


#: a.txt holds again what it held before the Rewind; the user's edit stays.
EXPECTED = {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"mine\n"}


def mevedel(root: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args],
        cwd=root, env={**os.environ, "XDG_STATE_HOME": str(state)}, capture_output=True, text=True, timeout=120,
    )


async def test_the_cli_names_the_file_a_retried_recovery_left_and_why(tmp_path):
    root = tmp_path / "project"
    sid = await edited_after_a_failed_rollback(root)
    done = mevedel(root, tmp_path / "state", "rewind", "--retry-recovery", "--session", sid)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{sid}: recovery ") and lines[0].endswith(" rolled-back")
    assert lines[1] == "left as it is, changed outside the session since the transaction was interrupted: src/c.txt"
    assert snapshot_files(root, FILES) == EXPECTED


async def test_the_cli_json_lists_the_files_left(tmp_path):
    root = tmp_path / "project"
    sid = await edited_after_a_failed_rollback(root)
    done = mevedel(root, tmp_path / "state", "rewind", "--retry-recovery", "--session", sid, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["resolution"] == "rolled-back" and answer["written"] == ["a.txt"] and answer["left"] == ["src/c.txt"]
    assert snapshot_files(root, FILES) == EXPECTED


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "project"


@pytest_lsp.fixture(config=SERVER)
async def lsp(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


async def test_the_lsp_answer_lists_the_files_left(lsp, workspace):
    sid = await edited_after_a_failed_rollback(workspace)
    await lsp.initialize_session(initialize_params(workspace))
    await request(lsp, methods.SESSION_OPEN, {"sessionId": sid, "mode": "resume"})
    answer = await request(lsp, methods.SESSION_RETRY_RECOVERY, {"sessionId": sid})
    assert answer["resolution"] == "rolled-back" and answer["written"] == ["a.txt"] and answer["left"] == ["src/c.txt"]
    # The sentence every editor shows, the CLI's own.
    assert answer["leftNote"] == "left as it is, changed outside the session since the transaction was interrupted: src/c.txt"
    assert snapshot_files(workspace, FILES) == EXPECTED
