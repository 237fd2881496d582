"""``mevedel prompt`` as a subprocess against the scripted ACP agent: the
answer streams to stdout, the turn is recorded in the session the CLI
holds, and failures exit non-zero with what to do, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def configure(tmp_path: Path, turns: list, **extra) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, **extra}))
    return config


def env(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def mevedel(workspace: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env(tmp_path),
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )


def test_prompt_streams_the_answer_and_records_the_turn(workspace, tmp_path):
    configure(tmp_path, [[{"say": "Hello "}, {"tool_call": {"id": "t", "title": "Write a", "kind": "edit"}},
                          {"write": {"path": "a.txt", "content": "A\n"}},
                          {"tool_update": {"id": "t", "status": "completed"}}, {"say": "there."}]])
    done = mevedel(workspace, tmp_path, "prompt", "Greet me")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello") and "there." in done.stdout
    assert "[tool Write a" in done.stderr and "Traceback" not in done.stderr
    assert (workspace / "a.txt").read_text() == "A\n"
    again = mevedel(workspace, tmp_path, "prompt", "Again", "--json")
    data = json.loads(again.stdout)
    assert again.returncode == 0 and data["turn"] == 2 and data["outcome"] == "completed"
    turns = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["completed", "completed"]


def test_a_failed_turn_exits_2_and_a_refused_prompt_exits_1_naming_what_to_do(workspace, tmp_path):
    refused = mevedel(workspace, tmp_path, "prompt", "Hi")
    assert refused.returncode == 1 and "no agent is configured" in refused.stderr and "agents" in refused.stderr
    configure(tmp_path, [[{"say": "partial"}, {"crash": 5}]])
    failed = mevedel(workspace, tmp_path, "prompt", "Crash", "--json")
    data = json.loads(failed.stdout)
    assert failed.returncode == 2 and data["outcome"] == "errored" and "status 5" in data["error"]["message"]
    assert "Traceback" not in failed.stderr


def test_ctrl_c_cancels_the_turn_and_exits_130(workspace, tmp_path):
    configure(tmp_path, [[{"say": "waiting for you"}, {"wait_cancel": 30}, {"say": "never"}]])
    process = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Wait"], cwd=workspace, env=env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    seen = ""
    while "waiting for you" not in seen:  # the answer streams before the turn ends
        seen += process.stdout.read(1)
        assert seen or process.poll() is None
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "never" not in seen + out and "interrupted" in err
    turns = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["interrupted"]
