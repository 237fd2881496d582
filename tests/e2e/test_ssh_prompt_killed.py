"""A ``mevedel prompt`` on a workspace reached over a real OpenSSH server,
killed (SIGKILL) after its agent rewrote a file and ran a command on the
host that made, removed and re-moded files: the turn's baseline was held
on the host, so the next prompt records the turn interrupted with every
change, and a Rewind to before it gives the host's tree back exactly."""

from __future__ import annotations

import json
import os
import sys

from killed_turn import CHANGED, kill_once_said, prepare, steps, tree_state
from ssh_fixtures import ALIAS

from .test_ssh_control_cli import AGENT, mevedel
from .test_ssh_workspace import ssh_home


def test_a_prompt_killed_mid_turn_on_an_ssh_workspace_leaves_every_change_to_the_next(openssh_server, tmp_path):
    project = tmp_path / "remote project"
    project.mkdir()
    prepare(project)
    before = tree_state(project)
    url = f"ssh://{ALIAS}{project}"
    script = tmp_path / "script.json"
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "HOME": str(ssh_home(tmp_path, openssh_server)), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    release = tmp_path / "never-released"
    script.write_text(json.dumps({"turns": [steps(release)]}))
    seen = kill_once_said([sys.executable, "-m", "mevedel_server.cli", "prompt", "Change things", "--workspace", url], "all written", env=env)
    assert "ran: exit 0" in seen, seen
    release.touch()  # the orphaned agent, if its stdin's end has not stopped it yet

    script.write_text(json.dumps({"turns": [[{"say": "carrying on"}]]}))
    again = mevedel(env, url, "prompt", "Carry on")
    assert again.returncode == 0 and "recorded as interrupted" in again.stderr, again.stderr
    shown = json.loads(mevedel(env, url, "diff", "1", "--json").stdout)
    assert {f["path"]: f["change"] for f in shown["files"]} == CHANGED
    rewound = mevedel(env, url, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert tree_state(project) == before
