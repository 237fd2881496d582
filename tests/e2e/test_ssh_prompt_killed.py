"""A ``mevedel prompt`` on a workspace reached over a real OpenSSH server,
killed (SIGKILL) after its agent rewrote a file and ran a command on the
host that made, removed and re-moded files: the turn's baseline was held
on the host, so the next prompt records the turn interrupted with every
change, and a Rewind to before it gives the host's tree back exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from ssh_fixtures import ALIAS
from tree_state import tree_state

from .test_ssh_control_cli import AGENT, mevedel
from .test_ssh_workspace import ssh_home

SHELL = "set -e; chmod +x run.sh; mkdir made; echo new > made/file.txt; rm gone.txt; ln -s notes.txt link.txt"


def test_a_prompt_killed_mid_turn_on_an_ssh_workspace_leaves_every_change_to_the_next(openssh_server, tmp_path):
    project = tmp_path / "remote project"
    project.mkdir()
    (project / "notes.txt").write_text("what the user wrote\n")
    (project / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(project / "run.sh", 0o644)
    (project / "gone.txt").write_text("bye\n")
    before = tree_state(project)
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://{ALIAS}{project}"
    script = tmp_path / "script.json"
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    script.write_text(json.dumps({"turns": [[
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
        {"say": "all written"},
        {"wait_file": str(tmp_path / "never-released")},
    ]]}))
    process = subprocess.Popen([sys.executable, "-m", "mevedel_server.cli", "prompt", "Change things", "--workspace", url],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    seen = ""
    while "all written" not in seen:
        char = process.stdout.read(1)
        assert char, (seen, process.stderr.read() if process.stderr else "")
        seen += char
    assert "ran: exit 0" in seen, seen
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    (tmp_path / "never-released").touch()

    script.write_text(json.dumps({"turns": [[{"say": "carrying on"}]]}))
    again = mevedel(env, url, "prompt", "Carry on")
    assert again.returncode == 0 and "recorded as interrupted" in again.stderr, again.stderr
    shown = json.loads(mevedel(env, url, "diff", "1", "--json").stdout)
    assert {f["path"]: f["change"] for f in shown["files"]} == {
        "notes.txt": "modified",
        "run.sh": "mode changed",
        "made": "directory created",
        "made/file.txt": "added",
        "gone.txt": "deleted",
        "link.txt": "link created",
    }
    rewound = mevedel(env, url, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert tree_state(project) == before
