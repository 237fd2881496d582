"""``mevedel rewind|redo|fork|save-as`` as subprocesses: a prepare prints the
impact and token and changes nothing, ``commit TOKEN`` and ``--yes`` commit,
a stale token is refused with its kind."""

from __future__ import annotations

import json
import time
from pathlib import Path

from test_cli_session import cli, ok, refused


def turn(workspace: Path, state: Path, prompt: str, content: str, *new: str) -> str:
    begun = ok(cli(workspace, state, "turn", "begin", prompt, *new, "--json"))
    ok(cli(workspace, state, "turn", "capture", "notes.txt", "--json"))
    (workspace / "notes.txt").write_text(content)
    ok(cli(workspace, state, "turn", "append", "response", "--text", f"answer to {prompt}", "--json"))
    ok(cli(workspace, state, "turn", "settle", "--json"))
    return begun["session_id"]


def three_turns(workspace: Path, state: Path) -> str:
    (workspace / "notes.txt").write_text("v0\n")
    sid = turn(workspace, state, "first", "v1\n", "--new")
    turn(workspace, state, "second", "v2\n")
    turn(workspace, state, "third", "v3\n")
    return sid


def test_rewind_prepare_then_commit_and_redo_back(workspace, tmp_path):
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    impact = ok(cli(workspace, state, "rewind", "1", "--json"))
    assert impact["committed"] is False and impact["kept_turns"] == 1
    assert [label["preview"] for label in impact["discarded"]] == ["second", "third"]
    assert (workspace / "notes.txt").read_text() == "v3\n"

    done = ok(cli(workspace, state, "rewind", "commit", impact["token"], "--json"))
    assert done == {
        "session_id": sid, "committed": True, "settled_turns": 1, "written": ["notes.txt"], "actions": {"notes.txt": "restore"}, "warning": None
    }
    assert (workspace / "notes.txt").read_text() == "v1\n"

    again = refused(cli(workspace, state, "rewind", "commit", impact["token"], "--json"), "stale-head")
    assert "prepare again" in again

    states = ok(cli(workspace, state, "redo", "--json"))
    three = next(s for s in states["states"] if s["turn_count"] == 3)
    back = ok(cli(workspace, state, "redo", three["publication_id"], "--yes", "--json"))
    assert back["committed"] and back["settled_turns"] == 3
    assert (workspace / "notes.txt").read_text() == "v3\n"

    text = cli(workspace, state, "rewind", "2", "--before")
    assert text.returncode == 0 and "to commit: mevedel rewind commit mevedel-txn-1." in text.stdout


def test_fork_and_save_as_create_sessions(workspace, tmp_path):
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    prepared = ok(cli(workspace, state, "fork", "2", "--session", sid, "--json"))
    assert prepared["turns"] == 2 and prepared["committed"] is False
    forked = ok(cli(workspace, state, "fork", "commit", prepared["token"], "--json"))
    assert forked["source_id"] == sid and forked["session_id"] != sid and forked["settled_turns"] == 2

    copy = ok(cli(workspace, state, "save-as", "Kept", "copy", "--session", sid, "--yes", "--json"))
    assert copy["display_name"] == "Kept copy" and copy["settled_turns"] == 3
    listed = ok(cli(workspace, state, "session", "list", "--json"))
    text = json.dumps(listed)
    assert forked["session_id"] in text and copy["session_id"] in text


def test_bad_subjects_and_tokens_are_refused_by_kind(workspace, tmp_path):
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    refused(cli(workspace, state, "rewind", "two", "--json"), "invalid-params")
    refused(cli(workspace, state, "rewind", "commit", "not-a-token", "--json"), "invalid-params")
    assert "no settled turn 9" in refused(cli(workspace, state, "rewind", "9", "--session", sid, "--json"), "invalid-params")
    refused(cli(workspace, state, "fork", "1", "--name", "x", "--json"), "invalid-params")


def test_fork_variants_lists_source_first_then_forks_oldest_to_newest(workspace, tmp_path):
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    first = ok(cli(workspace, state, "fork", "2", "--session", sid, "--yes", "--json"))["session_id"]
    time.sleep(1.1)  # creation times are whole seconds; same-second forks order by ID
    second = ok(cli(workspace, state, "fork", "2", "--session", sid, "--yes", "--json"))["session_id"]
    elsewhere = ok(cli(workspace, state, "fork", "1", "--session", sid, "--yes", "--json"))["session_id"]

    group = ok(cli(workspace, state, "fork", "--variants", "2", "--session", first, "--json"))
    assert group["source_id"] == sid and group["turn"] == 2 and group["source_present"]
    assert [v["session_id"] for v in group["variants"]] == [sid, first, second]
    assert [v["role"] for v in group["variants"]] == ["source", "conversation", "conversation"]
    assert [v["is_current"] for v in group["variants"]] == [False, True, False]
    assert group["variants"][0]["latest_preview"] == "third"
    assert elsewhere not in json.dumps(group)

    text = cli(workspace, state, "fork", "--variants", "2", "--session", sid)
    assert text.returncode == 0, text.stderr
    rows = text.stdout.splitlines()
    assert rows[0] == f"variants of {sid} at turn 2:"
    assert rows[1].startswith("* source") and sid in rows[1] and "third" in rows[1]
    assert first in rows[2] and second in rows[3]

    refused(cli(workspace, state, "fork", "--variants", "2", "--worktree", "--json"), "invalid-params")
    refused(cli(workspace, state, "fork", "--variants", "9", "--session", sid, "--json"), "invalid-params")


def test_redo_lists_its_states_with_what_to_type_and_a_wrong_id_points_back_to_the_list(workspace, tmp_path):
    state = tmp_path / "state"
    three_turns(workspace, state)
    ok(cli(workspace, state, "rewind", "1", "--before", "--yes", "--json"))
    listed = cli(workspace, state, "redo")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert rows[-1] == "to return to one: mevedel redo PUBLICATION_ID"
    assert any(" 1 turn  " in row and row.endswith("first") for row in rows), rows  # not "1 turns"
    for typed, kind, said in [("5", "invalid-params", "'5' is not a publication id"),
                              ("0" * 32, "missing-target", f"there is no publication {'0' * 32}")]:
        for extra in ([], ["--yes"]):
            message = refused(cli(workspace, state, "redo", typed, *extra, "--json"), kind)
            assert said in message and message.endswith("; `mevedel redo` lists the states it can return to"), message
            assert "manifest" not in message


def test_a_rewind_to_where_the_session_ends_says_nothing_changes_in_words(workspace, tmp_path):
    """The spec's empty impact: rewinding to after the latest response keeps
    everything, and both the prepare and the commit say so in plain words."""
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    prepared = cli(workspace, state, "rewind", "3")
    assert prepared.returncode == 0, prepared.stderr
    assert f"rewind {sid} to after turn 3: keeps 3 turns, discards 0" in prepared.stdout
    assert "nothing changes: no turn is discarded and no file differs" in prepared.stdout

    done = cli(workspace, state, "rewind", "3", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{sid}: nothing to rewind: no turn discarded and no file changed"
    assert (workspace / "notes.txt").read_text() == "v3\n"

    one = cli(workspace, state, "rewind", "1", "--yes")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[0] == f"{sid}: rewound; 1 turn"  # not "1 turns"


def test_a_fork_impact_names_the_work_files_it_copies_and_what_happens_to_plans(workspace, tmp_path):
    """The CLI's fork impact says what the editors' says: the session-local
    files the child gets, and that local/plans/ is not copied."""
    state = tmp_path / "state"
    sid = three_turns(workspace, state)
    patch = "*** Begin Patch\n*** Add File: work://notes.md\n+mine\n*** Add File: work://plans/current.md\n+draft\n*** End Patch\n"
    applied = cli(workspace, state, "apply-patch", "--session", sid, "-", stdin=patch)
    assert applied.returncode == 0, applied.stderr

    prepared = cli(workspace, state, "fork", "2", "--session", sid)
    assert prepared.returncode == 0, prepared.stderr
    assert "  copies 1 session-local (work://) file: notes.md" in prepared.stdout.splitlines()
    assert "  plans: the source records no accepted plan, so no local/plans/ file was copied" in prepared.stdout.splitlines()

    data = ok(cli(workspace, state, "fork", "2", "--session", sid, "--json"))
    assert data["local_files"] == ["notes.md"]
    assert "no local/plans/ file was copied" in data["plans_note"]
