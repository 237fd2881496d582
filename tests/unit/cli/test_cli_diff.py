"""``mevedel diff`` after real agent turns (the scripted ACP agent as a
subprocess of ``mevedel prompt``): every change a turn made -- through
``fs/write_text_file`` and through a shell command -- named exactly, as text
and as ``--json``; ``--stat``; a range; ``session turn N`` ends with the
turn's stat."""

from __future__ import annotations

import json
import os

from test_cli_prompt import configure, mevedel

SHELL = (
    "set -e; chmod +x run.sh; mkdir -p new/deep; rmdir emptydir; mv old.txt renamed.txt; "
    "ln -s target.txt link.txt; printf '\\000\\001\\002binary' > blob.bin; rm gone.txt"
)


def prepare(root) -> None:
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o644)
    (root / "emptydir").mkdir()
    (root / "old.txt").write_text("the same bytes move\n")
    (root / "target.txt").write_text("t\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "app.py").write_text("print('one')\nprint('two')\n")


def test_diff_names_every_change_of_a_turn(workspace, tmp_path):  # noqa: F811
    prepare(workspace)
    configure(
        tmp_path,
        [
            [
                {"write": {"path": "app.py", "content": "print('one')\nprint('TWO')\nprint('three')\n"}},
                {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
                {"say": "done"},
            ],
        ],
    )
    first = mevedel(workspace, tmp_path, "prompt", "Change things")
    assert first.returncode == 0, first.stderr
    assert "ran: exit 0" in first.stdout, first.stdout

    shown = mevedel(workspace, tmp_path, "diff")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    for line in (
        "=== app.py: modified",
        "=== run.sh: mode changed (644 -> 755)",
        "=== new: directory created",
        "=== new/deep: directory created",
        "=== emptydir: directory removed",
        "=== old.txt -> renamed.txt: renamed",
        "=== link.txt: link created -> target.txt",
        "=== blob.bin: added",
        "=== gone.txt: deleted",
    ):
        assert line in text, (line, text)
    assert "-print('two')\n+print('TWO')\n+print('three')" in text
    assert "binary file: 0 -> 9 bytes" in text
    assert "\033[" not in text  # piped: no colour

    data = json.loads(mevedel(workspace, tmp_path, "diff", "1", "--json").stdout)
    changes = {f["path"]: f["change"] for f in data["files"]}
    assert changes == {
        "app.py": "modified",
        "run.sh": "mode changed",
        "new": "directory created",
        "new/deep": "directory created",
        "emptydir": "directory removed",
        "renamed.txt": "renamed",
        "link.txt": "link created",
        "blob.bin": "added",
        "gone.txt": "deleted",
    }
    run = next(f for f in data["files"] if f["path"] == "run.sh")
    assert (run["before"]["mode"], run["after"]["mode"]) == (0o644, 0o755)

    stat = mevedel(workspace, tmp_path, "diff", "--stat")
    assert "9 paths changed, 2 insertions(+), 2 deletions(-)" in stat.stdout, stat.stdout

    # Each prompt is a new agent process, which runs the script's first turn.
    configure(tmp_path, [[{"write": {"path": "later.txt", "content": "second turn\n"}}, {"say": "again"}]])
    second = mevedel(workspace, tmp_path, "prompt", "More")
    assert second.returncode == 0, second.stderr
    latest = json.loads(mevedel(workspace, tmp_path, "diff", "--json").stdout)
    assert [f["path"] for f in latest["files"]] == ["later.txt"] and (latest["first"], latest["last"]) == (2, 2)
    every = json.loads(mevedel(workspace, tmp_path, "diff", "--all", "--json").stdout)
    assert len(every["files"]) == 10 and (every["first"], every["last"]) == (1, 2)
    assert json.loads(mevedel(workspace, tmp_path, "diff", "1..2", "--json").stdout)["files"] == every["files"]

    turn = mevedel(workspace, tmp_path, "session", "turn", "1")
    assert "Changes (mevedel diff 1 shows them line by line):" in turn.stdout
    assert "9 paths changed" in turn.stdout


def test_a_bad_range_is_refused_naming_it(workspace, tmp_path):  # noqa: F811
    configure(tmp_path, [[{"write": {"path": "a.txt", "content": "a\n"}}]])
    assert mevedel(workspace, tmp_path, "prompt", "One").returncode == 0
    for given, reason in (("x", "expected N, N..M"), ("3", "no turn 3"), ("2..1", "no turn 2")):
        refused = mevedel(workspace, tmp_path, "diff", given)
        assert refused.returncode == 1 and reason in refused.stderr, (given, refused.stderr)
        assert "Traceback" not in refused.stderr


def test_restore_puts_one_file_back_as_a_turn_that_can_be_rewound(workspace, tmp_path):  # noqa: F811
    (workspace / "tool.sh").write_text("#!/bin/sh\necho one\n")
    os.chmod(workspace / "tool.sh", 0o755)
    (workspace / "other.txt").write_text("other\n")
    configure(tmp_path, [[
        {"write": {"path": "tool.sh", "content": "#!/bin/sh\necho two\n"}},
        {"write": {"path": "other.txt", "content": "changed too\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "chmod 600 tool.sh; mkdir -p deep/er; echo new > deep/er/made.txt"]}},
    ]])
    assert mevedel(workspace, tmp_path, "prompt", "Edit").returncode == 0

    shown = mevedel(workspace, tmp_path, "restore", "tool.sh", "--before", "1")
    assert shown.returncode == 0, shown.stderr
    assert "restore tool.sh: modified, mode 600 -> 755" in shown.stdout and "-echo two\n+echo one" in shown.stdout
    assert "mevedel restore tool.sh --before 1 --yes" in shown.stdout
    assert (workspace / "tool.sh").read_text() == "#!/bin/sh\necho two\n"  # nothing changed yet

    done = json.loads(mevedel(workspace, tmp_path, "restore", str(workspace / "tool.sh"), "--before", "1", "--yes", "--json").stdout)
    assert done["restored"] and done["turn"] == 2
    assert (workspace / "tool.sh").read_text() == "#!/bin/sh\necho one\n"
    assert os.stat(workspace / "tool.sh").st_mode & 0o7777 == 0o755
    assert (workspace / "other.txt").read_text() == "changed too\n"  # the rest is left alone
    again = mevedel(workspace, tmp_path, "restore", "tool.sh", "--before", "1", "--yes")
    assert "already as it was before turn 1; nothing to do" in again.stdout

    # A file the turn made, in directories it made: restoring it removes the file.
    made = json.loads(mevedel(workspace, tmp_path, "restore", "deep/er/made.txt", "--before", "1", "--yes", "--json").stdout)
    assert made["turn"] == 3 and not (workspace / "deep/er/made.txt").exists()

    # Each restore is a turn: rewinding them puts the turn's result back.
    assert mevedel(workspace, tmp_path, "rewind", "2", "--before", "--yes").returncode == 0
    assert (workspace / "tool.sh").read_text() == "#!/bin/sh\necho two\n"
    assert os.stat(workspace / "tool.sh").st_mode & 0o7777 == 0o600
    assert (workspace / "deep/er/made.txt").read_text() == "new\n"

    refused = mevedel(workspace, tmp_path, "restore", "never.txt", "--before", "1")
    assert refused.returncode == 1 and "no turn from 1 on changed it" in refused.stderr
    outside = mevedel(workspace, tmp_path, "restore", "/etc/passwd", "--before", "1")
    assert outside.returncode == 1 and "is not inside the workspace" in outside.stderr


def test_restoring_a_renamed_file_moves_it_back(workspace, tmp_path):  # noqa: F811
    (workspace / "old.txt").write_text("the same bytes\n")
    os.chmod(workspace / "old.txt", 0o640)
    configure(tmp_path, [[{"terminal": {"command": "sh", "args": ["-c", "mkdir -p sub && mv old.txt sub/new.txt"]}}]])
    assert mevedel(workspace, tmp_path, "prompt", "Move it").returncode == 0
    shown = mevedel(workspace, tmp_path, "restore", "sub/new.txt", "--before", "1")
    assert "restore sub/new.txt: deleted" in shown.stdout and "and old.txt: added (mode 640)" in shown.stdout, shown.stdout
    done = json.loads(mevedel(workspace, tmp_path, "restore", "sub/new.txt", "--before", "1", "--yes", "--json").stdout)
    assert done["restored"] and done["moved_back"]["path"] == "old.txt"
    assert (workspace / "old.txt").read_text() == "the same bytes\n" and os.stat(workspace / "old.txt").st_mode & 0o777 == 0o640
    assert not (workspace / "sub" / "new.txt").exists()
    # One turn did both, and its Rewind puts the move back.
    assert mevedel(workspace, tmp_path, "rewind", str(done["turn"]), "--before", "--yes").returncode == 0
    assert (workspace / "sub" / "new.txt").exists() and not (workspace / "old.txt").exists()
