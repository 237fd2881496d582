"""An item lease whose holder process was killed (SIGKILL) is taken at once
by the next write on the same machine, not after its expiry; while the
holder lives, the write is refused. The holder is a real process running
the store (``DRIVER`` of the two-process tests) under an hour-long lease,
the writer the real ``mevedel artifact write``: a wait for the expiry
would outlast every bounded wait of the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_artifacts_two_processes import (
    ITEM,
    created,
    lease_head,
    next_event,
    primary,
    start,
)

from mevedel_server.artifacts.layout import ItemPaths

HOUR = 3600


def cli(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=root, env=env,
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )


def write(root: Path, tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    source = tmp_path / "new.md"
    source.write_text(text)
    return cli(root, tmp_path, "artifact", "write", ITEM, str(source), "--json")


def refused_held(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["kind"] == "item-held", error
    return error["message"]


def holding(root: Path) -> subprocess.Popen:
    """A process that wrote the item (so holds its lease for an hour) and
    stays, renewing it, until it is killed."""
    process = start(root, "holder", [["write", "held there"], ["stay"]], lease_seconds=HOUR)
    written = next_event(process, "write")
    assert written["ok"], written
    return process


def kill(process: subprocess.Popen) -> None:
    process.kill()  # SIGKILL: nothing of it runs after, its lease is not released
    process.communicate(timeout=30)


def test_an_item_held_by_a_killed_process_is_written_at_once(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    holder = holding(root)
    try:
        message = refused_held(write(root, tmp_path, "too early\n"))
        assert "holder-host" in message
        listed = json.loads(cli(root, tmp_path, "artifact", "list", "--json").stdout)["items"]
        assert [i["holder_host"] for i in listed] == ["holder-host"]
        assert primary(root) == b"held there"
    finally:
        kill(holder)
    assert lease_head(root).expires_at - lease_head(root).renewed_at == HOUR  # its lease is live for an hour yet
    done = write(root, tmp_path, "after the holder died\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert primary(root) == b"after the holder died\n"
    listed = json.loads(cli(root, tmp_path, "artifact", "list", "--json").stdout)["items"]
    assert [i["holder_host"] for i in listed] == [None]


def test_a_generation_without_its_process_waits_for_its_expiry(tmp_path):
    """A generation an older writer wrote names no process: it is read as
    before and judged by its expiry alone, its writer's death or not."""
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    holder = holding(root)
    kill(holder)
    head = lease_head(root)
    assert head.process is not None and head.process.pid == holder.pid
    lease_dir = root / ItemPaths(ITEM).lease_dir
    older = json.loads((lease_dir / f"generation-{head.generation:020d}.json").read_bytes())
    del older["process"]
    older["generation"] = head.generation + 1
    (lease_dir / f"generation-{head.generation + 1:020d}.json").write_text(json.dumps(older))
    refused_held(write(root, tmp_path, "too early\n"))
    assert primary(root) == b"held there"
