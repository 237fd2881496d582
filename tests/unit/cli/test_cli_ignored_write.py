"""A file the agent wrote inside an ignored directory (``build/``) --
through ``fs/write_text_file`` or the tool server's ApplyPatch, one rule
for both writers -- then changed by a shell command in the next
``mevedel prompt`` (a new process, whose file-state record starts from the
index the last one kept): the change is the turn's, ``mevedel diff`` lists
it, and Rewind gives its bytes back -- build/ itself is never walked, so a
file the command makes there is not seen (docs/architecture.md)."""

from __future__ import annotations

import json

import pytest
from test_cli_prompt import configure, mevedel

from killed_turn import tree_state

WRITTEN = "written by the agent in turn 1\n"
KEPT = "made before the session\n"
COMMAND = ("printf 'turn 2\\n' > build/out.txt; chmod 755 build/out.txt; printf n > build/new.txt; "
           "printf 'turn 2\\n' > build/kept.txt")
PATCH = ("*** Begin Patch\n*** Add File: build/out.txt\n+" + WRITTEN +
         "*** Update File: build/kept.txt\n@@\n-" + KEPT + "+" + WRITTEN + "*** End Patch\n")
#: The first turn's writes, by each writer: build/out.txt made, build/kept.txt changed.
WRITES = {
    "fs-write": [{"write": {"path": "build/out.txt", "content": WRITTEN}},
                 {"write": {"path": "build/kept.txt", "content": WRITTEN}}],
    "apply-patch": [{"mcp_tools": {}}, {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": PATCH}}}],
}


@pytest.mark.parametrize("writer", WRITES)
def test_a_shell_change_to_a_file_the_agent_wrote_in_an_ignored_directory_is_checkpointed(workspace, tmp_path, writer):
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "app.py").write_text("print('v1')\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "kept.txt").write_text(KEPT)
    initial = tree_state(workspace)
    configure(tmp_path, [[*WRITES[writer], {"say": "done"}]])
    first = mevedel(workspace, tmp_path, "prompt", "Build it")
    assert first.returncode == 0, first.stderr
    assert (workspace / "build" / "out.txt").read_text() == WRITTEN, first.stdout + first.stderr
    assert (workspace / "build" / "kept.txt").read_text() == WRITTEN
    before = tree_state(workspace)

    configure(tmp_path, [[{"terminal": {"command": "sh", "args": ["-c", COMMAND]}}, {"say": "done"}]])
    second = mevedel(workspace, tmp_path, "prompt", "Build again")
    assert second.returncode == 0, second.stderr
    assert "ran: exit 0" in second.stdout, second.stdout
    assert (workspace / "build" / "out.txt").read_text() == "turn 2\n"

    shown = mevedel(workspace, tmp_path, "diff", "2", "--json")
    assert shown.returncode == 0, shown.stderr
    files = {f["path"]: f["change"] for f in json.loads(shown.stdout)["files"]}
    assert files == {"build/out.txt": "modified", "build/kept.txt": "modified"}, shown.stdout

    rewound = mevedel(workspace, tmp_path, "rewind", "2", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    # Its bytes and mode back; the file the command made in build/ was
    # never seen, so it stays.
    after = tree_state(workspace)
    new = after.pop("build/new.txt")
    assert new is not None
    assert after == before

    # Rewinding the writing turn removes the file it made and puts back
    # the one it changed.
    rewound = mevedel(workspace, tmp_path, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    after = tree_state(workspace)
    assert after.pop("build/new.txt") == new
    assert after == initial
