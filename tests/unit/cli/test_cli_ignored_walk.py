"""A directory a ``.gitignore`` comes to ignore between two ``mevedel
prompt`` processes (each a new process, whose file-state record starts
from the index the last one kept): the next turn is charged only with what
it changed, and Rewind never writes back bytes from before the user's own
edit between the sessions."""

from __future__ import annotations

import json

from test_cli_prompt import configure, mevedel

from killed_turn import tree_state

FIRST = b"built by the first session\n"
USERS = b"built by the user between the sessions\n"
COMMAND = "printf 'new\\n' > notes.txt; printf 'turn 2\\n' > build/out.txt; printf n > build/new.txt; rm build/old.txt"


def test_a_directory_ignored_between_sessions_is_not_charged_to_the_next_turn(workspace, tmp_path):
    (workspace / "build").mkdir()
    (workspace / "build" / "out.txt").write_bytes(FIRST)
    (workspace / "build" / "old.txt").write_text("old\n")
    (workspace / "app.py").write_text("print('v1')\n")
    configure(tmp_path, [[{"write": {"path": "app.py", "content": "print('v2')\n"}}, {"say": "done"}]])
    first = mevedel(workspace, tmp_path, "prompt", "Edit the app")
    assert first.returncode == 0, first.stderr

    # Between the sessions the user ignores build/ and builds again.
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build" / "out.txt").write_bytes(USERS)
    before = tree_state(workspace)

    configure(tmp_path, [[{"terminal": {"command": "sh", "args": ["-c", COMMAND]}}, {"say": "done"}]])
    second = mevedel(workspace, tmp_path, "prompt", "Take notes and build")
    assert second.returncode == 0, second.stderr
    assert "ran: exit 0" in second.stdout, second.stdout
    after = tree_state(workspace)

    # What is inside an ignored directory is not checkpointed (docs/
    # architecture.md: what Rewind cannot give back); the first session's
    # bytes are never the turn's "before" (they were, by a first walk built
    # before the kept record was loaded: Rewind wrote them over the user's).
    shown = json.loads(mevedel(workspace, tmp_path, "diff", "2", "--json").stdout)
    assert {f["path"]: f["change"] for f in shown["files"]} == {"notes.txt": "added"}
    rewound = mevedel(workspace, tmp_path, "rewind", "2", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert "build/" not in rewound.stdout, rewound.stdout
    assert (workspace / "build" / "out.txt").read_bytes() != FIRST
    ignored = {path: state for path, state in after.items() if path.startswith("build/")}
    kept = {path: state for path, state in before.items() if not path.startswith("build/")}
    assert tree_state(workspace) == {**kept, **ignored}
