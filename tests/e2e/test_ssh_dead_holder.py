"""A ``mevedel prompt`` on a workspace over SSH, killed mid-turn or after its
turn settled: its lease lives on the SSH host but names the process on the
client machine that held it, so another client on that machine proves it
dead and takes the session over at once (a real OpenSSH server on
loopback)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from settled_prompt import frozen_after_settlement, settled_then_frozen
from ssh_fixtures import ALIAS
from streamed import read_until

from .test_ssh_control_cli import AGENT, client, mevedel
from .test_ssh_workspace import ssh_home


def test_a_killed_prompt_over_ssh_is_taken_over_at_once_from_its_machine(openssh_server, tmp_path):
    project = tmp_path / "remote project"
    project.mkdir()
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    owner, other = client(tmp_path, home, "owner"), client(tmp_path, home, "other")
    script = tmp_path / "owner-script.json"
    script.write_text(json.dumps({"turns": [[{"say": "working on it"}, {"wait_cancel": 120}]]}))
    config = tmp_path / "owner-config" / "mevedel" / "config.json"
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    prompt = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Work", "--workspace", url], env=owner,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        read_until(prompt, "working on it")
        (row,) = json.loads(mevedel(other, url, "session", "list", "--json").stdout)["sessions"]
        assert row["action"] == "Join"
    finally:
        prompt.send_signal(signal.SIGKILL)
        prompt.communicate()
    sid = row["session_id"]
    head = max((project / ".mevedel" / "sessions" / sid / ".lease").glob("generation-*.json"))
    # The client's process, not anything that ran on the host for it.
    assert json.loads(head.read_bytes())["holder"]["pid"] == prompt.pid
    (row,) = json.loads(mevedel(other, url, "session", "list", "--json").stdout)["sessions"]
    assert row["action"] == "Take over" and row["holder_ended"], row
    taken = mevedel(other, url, "session", "open", sid, "--confirm-takeover", "--json")
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout)["interrupted_turn"] == 1


def test_a_prompt_killed_after_its_turn_settled_over_ssh_is_taken_over_at_once(openssh_server, tmp_path):
    """Killed after its turn settled, while it stopped its agent (before its
    exit handed the lease to its client): another client's prompt on this
    machine is told the holder's process ended and may take the session
    over at once -- not after the lease's minute."""
    project = tmp_path / "remote project"
    project.mkdir()
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    owner, other = client(tmp_path, home, "owner"), client(tmp_path, home, "other")
    (tmp_path / "owner-script.json").write_text(json.dumps(settled_then_frozen([[{"say": "all done"}]])))
    prompt = frozen_after_settlement([sys.executable, "-m", "mevedel_server.cli", "prompt", "Finish it", "--workspace", url], env=owner)
    prompt.send_signal(signal.SIGKILL)
    out, _err = prompt.communicate()
    assert "all done" in out, out
    (row,) = json.loads(mevedel(other, url, "session", "list", "--json").stdout)["sessions"]
    sid = row["session_id"]
    refused = mevedel(other, url, "prompt", "Mine now", "--session", sid, "--json")
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "takeover-needs-confirmation", error
    assert f"whose process there (pid {prompt.pid}) has ended" in error["message"], error
    taken = mevedel(other, url, "session", "take-control", sid, "--confirm-takeover", "--json")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    again = mevedel(other, url, "prompt", "Mine now", "--session", sid, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["turn"] == 2, again.stdout + again.stderr
