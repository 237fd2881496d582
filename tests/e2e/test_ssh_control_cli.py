"""Control hand-over between two ``mevedel`` CLI clients (separate
identities) on one workspace reached over a real OpenSSH server: the owner
polls nothing between commands, so its ``session list`` and its next
``prompt`` say who asks for its session, since and until when, and the
commands that answer; after ``grant-control`` the asker's ``take-control``
acquires it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ssh_fixtures import ALIAS

from .test_ssh_workspace import ssh_home

AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"


def client(tmp_path: Path, home: Path, name: str) -> dict:
    """The environment of one CLI client: its own state (identity) and config."""
    script = tmp_path / f"{name}-script.json"
    script.write_text(json.dumps({"turns": [[{"say": f"{name} here"}]]}))
    config = tmp_path / f"{name}-config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    return {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / f"{name}-state"),
            "XDG_CONFIG_HOME": str(config.parent.parent)}


def mevedel(env: dict, url: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", url], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_cli_owner_is_told_of_a_waiting_request_and_grants_it(openssh_server, tmp_path):
    project = tmp_path / "remote project"
    project.mkdir()
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    owner, asker = client(tmp_path, home, "owner"), client(tmp_path, home, "asker")

    first = mevedel(owner, url, "prompt", "Start")
    assert first.returncode == 0 and "owner here" in first.stdout, first.stderr
    sid = json.loads(mevedel(owner, url, "session", "list", "--json").stdout)["sessions"][0]["session_id"]
    listed = mevedel(owner, url, "session", "list")
    assert "asks for control" not in listed.stdout  # nobody asked yet

    asked = mevedel(asker, url, "session", "take-control", sid, "--wait", "0")
    assert asked.returncode == 0 and "requested" in asked.stdout, asked.stderr

    listed = mevedel(owner, url, "session", "list")
    line = next(x for x in listed.stdout.splitlines() if "asks for control" in x)
    assert f"asks for control of session {sid} (since " in line and "until your lease runs out at " in line
    assert f"`mevedel session grant-control --session {sid} --workspace '{url}'` hands it over" in line
    assert f"`mevedel session keep-control --session {sid} --workspace '{url}'` refuses" in line
    data = json.loads(mevedel(owner, url, "session", "list", "--json").stdout)
    request = data["sessions"][0]["control_request"]
    assert request["requester_host"] and request["requested_at"] > 0
    # The asker is not the holder: its listing carries no request to answer.
    assert json.loads(mevedel(asker, url, "session", "list", "--json").stdout)["sessions"][0]["control_request"] is None

    again = mevedel(owner, url, "prompt", "Go on")
    assert again.returncode == 0 and "owner here" in again.stdout
    assert f"asks for control of session {sid}" in again.stderr and "grant-control" in again.stderr
    # Naming the session does not hide the request (it was listed only for a bare prompt).
    named = mevedel(owner, url, "prompt", "--session", sid, "And on")
    assert named.returncode == 0 and "owner here" in named.stdout, named.stderr
    assert f"asks for control of session {sid}" in named.stderr and "grant-control" in named.stderr

    granted = mevedel(owner, url, "session", "grant-control")
    assert granted.returncode == 0 and "handed over" in granted.stdout, granted.stderr
    taken = mevedel(asker, url, "session", "take-control", sid, "--wait", "30")
    assert taken.returncode == 0 and "acquired" in taken.stdout, taken.stderr
    # Answered: neither listing shows the request any more.
    assert "asks for control" not in mevedel(owner, url, "session", "list").stdout
    assert "asks for control" not in mevedel(asker, url, "session", "list").stdout
