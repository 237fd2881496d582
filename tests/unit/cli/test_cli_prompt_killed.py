"""A ``mevedel prompt`` killed (SIGKILL) in the middle of a turn, after its
agent rewrote a file through ``fs/write_text_file`` and ran a shell command
that made, removed, re-moded and linked files, long before the turn's
mid-turn checkpoint: the next prompt records the turn interrupted *with*
what it changed -- ``mevedel diff 1`` names every change -- and a Rewind
to before it gives the tree back exactly (bytes, modes, absence,
directories, links); a file written where no walk looks (an ignored
directory) is a named gap, never missing. The real CLI, the scripted ACP
agent, real files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from test_cli_prompt import configure, env, mevedel

from killed_turn import kill_once_said, tree_state

SHELL = (
    "set -e; chmod +x run.sh; mkdir -p made/deep; echo new > made/deep/file.txt; rmdir emptydir; "
    "ln -s target.txt link.txt; rm gone.txt; echo appended >> app.py"
)


def prepare(root: Path) -> None:
    (root / "notes.txt").write_text("what the user wrote\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o644)
    (root / "emptydir").mkdir()
    (root / "target.txt").write_text("t\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "app.py").write_text("print('one')\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "old.txt").write_text("built before\n")


def killed_mid_turn(workspace: Path, tmp_path: Path) -> None:
    """A ``mevedel prompt`` whose agent changed everything, then waits:
    killed with SIGKILL (nothing of it runs after), its agent with it."""
    release = tmp_path / "never-released"
    configure(tmp_path, [[
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"write": {"path": "build/old.txt", "content": "rebuilt\n"}},
        {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
        {"say": "all written"},
        {"wait_file": str(release)},
    ]])
    seen = kill_once_said([sys.executable, "-m", "mevedel_server.cli", "prompt", "Change things"], "all written",
                          cwd=workspace, env=env(tmp_path))
    assert "ran: exit 0" in seen, seen
    release.touch()  # the orphaned agent, if its stdin's end has not stopped it yet


def test_a_prompt_killed_mid_turn_leaves_its_changes_to_the_next_prompt_and_rewind_gives_the_tree_back(workspace, tmp_path):
    prepare(workspace)
    before = tree_state(workspace)
    killed_mid_turn(workspace, tmp_path)
    changed = tree_state(workspace)
    assert changed["notes.txt"][2] == b"the agent's rewrite\n" and "gone.txt" not in changed

    # Before anyone resumes it, the turn is in flight, not a turn that "changed nothing".
    early = mevedel(workspace, tmp_path, "diff", "1")
    assert "turn 1 is in flight" in early.stdout and "changed nothing" not in early.stdout, early.stdout + early.stderr

    configure(tmp_path, [[{"say": "carrying on"}]])
    again = mevedel(workspace, tmp_path, "prompt", "Carry on")
    assert again.returncode == 0, again.stderr
    assert "turn 1 was left in flight" in again.stderr and "recorded as interrupted" in again.stderr

    turns = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)["turns"]
    assert [t["state"] for t in turns] == ["interrupted", "completed"]
    shown = json.loads(mevedel(workspace, tmp_path, "diff", "1", "--json").stdout)
    assert {f["path"]: f["change"] for f in shown["files"]} == {
        "notes.txt": "modified",
        "app.py": "modified",
        "run.sh": "mode changed",
        "made": "directory created",
        "made/deep": "directory created",
        "made/deep/file.txt": "added",
        "emptydir": "directory removed",
        "link.txt": "link created",
        "gone.txt": "deleted",
        # Where no walk looks: named, its state before not known (never "restored").
        "build/old.txt": "unknown",
    }
    text = mevedel(workspace, tmp_path, "diff", "1").stdout
    assert "-what the user wrote\n+the agent's rewrite" in text, text

    impact = mevedel(workspace, tmp_path, "rewind", "1", "--before")
    assert impact.returncode == 0, impact.stderr
    gap = next(line for line in impact.stdout.splitlines() if "build/old.txt" in line)
    assert gap.lstrip().startswith("not restored build/old.txt: the agent wrote it where"), impact.stdout  # the gap, said
    rewound = mevedel(workspace, tmp_path, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    after = tree_state(workspace)
    assert after.pop("build/old.txt")[2] == b"rebuilt\n"
    assert after == {path: state for path, state in before.items() if path != "build/old.txt"}


def test_a_baseline_that_cannot_be_read_back_is_said_never_shown_as_a_turn_that_changed_nothing(workspace, tmp_path):
    prepare(workspace)
    killed_mid_turn(workspace, tmp_path)
    index = workspace / ".mevedel" / "file-state" / "index"
    index.write_bytes(index.read_bytes()[:-1] + b"\x00")  # torn, as a power loss may leave it

    configure(tmp_path, [[{"say": "carrying on"}]])
    again = mevedel(workspace, tmp_path, "prompt", "Carry on")
    assert again.returncode == 0, again.stderr
    shown = mevedel(workspace, tmp_path, "diff", "1")
    assert "turn 1: no change recorded, and not because none was made:" in shown.stdout, shown.stdout
    assert "what it changed in the files since its last checkpoint is not known" in shown.stdout
    assert "changed nothing" not in shown.stdout
