"""``mevedel prompt`` starts its agent before its own imports and the
engine adopts that very process (one agent process per prompt, not two);
an early agent the engine does not use (the session remembers another) is
ended when the command ends, never left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deadlines import ticks

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"

# Records its pid, then becomes the scripted agent (same process).
RECORDING = "import os, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"


def _agent(tmp_path: Path, name: str, say: str) -> tuple[list[str], Path]:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps({"turns": [[{"say": say}]]}))
    started = tmp_path / f"{name}.started"
    return [sys.executable, "-c", RECORDING, str(started), str(AGENT), str(script)], started


def _mevedel(workspace: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_the_agent_started_early_is_the_one_spoken_to_and_an_unused_one_ends(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    alpha, alpha_started = _agent(tmp_path, "alpha", "from alpha")
    beta, beta_started = _agent(tmp_path, "beta", "from beta")
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"alpha": {"command": alpha}, "beta": {"command": beta}}, "defaultAgent": "alpha"}))

    first = _mevedel(workspace, tmp_path, "prompt", "--agent", "beta", "Hi")
    assert first.returncode == 0, first.stderr
    assert "from beta" in first.stdout
    assert len(_pids(beta_started)) == 1 and _pids(alpha_started) == []  # one process, started early and adopted

    # The session remembers beta; the early start guessed the default, alpha.
    second = _mevedel(workspace, tmp_path, "prompt", "Again")
    assert second.returncode == 0, second.stderr
    assert "from beta" in second.stdout
    assert len(_pids(beta_started)) == 2
    (unused,) = _pids(alpha_started)
    for _ in ticks():  # ended with the command (its stdin closed), not left running
        if not Path(f"/proc/{unused}").exists():
            break
    else:
        raise AssertionError(f"the unused early agent {unused} is still running")
