"""``mevedel/turn/diff`` through the real server after a scripted agent's
turn: every path the turn changed (its fs writes and its shell command's
changes), each side's whole text for a diff view, and a refusal that names
the turn asked for."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import request
from .test_agent_turns import configure, prompt


async def test_a_turns_diff_names_every_change_and_carries_both_texts(client, workspace):
    (workspace / "notes.md").write_text("one\ntwo\n")
    (workspace / "tool.sh").write_text("#!/bin/sh\n")
    (workspace / "old.txt").write_text("moving\n")
    configure(client, workspace, [[
        {"write": {"path": "notes.md", "content": "one\n2\nthree\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "chmod 755 tool.sh; mv old.txt new.txt; mkdir built; ln -s notes.md link"]}},
        {"say": "done"},
    ]])
    result = await prompt(client, "Change things")
    assert result["outcome"] == "completed"
    diff = await request(client, methods.TURN_DIFF, {"contents": True})
    assert (diff["first"], diff["last"]) == (1, 1)
    changes = {f["path"]: f for f in diff["files"]}
    assert {p: f["change"] for p, f in changes.items()} == {
        "notes.md": "modified",
        "tool.sh": "mode changed",
        "new.txt": "renamed",
        "built": "directory created",
        "link": "link created",
    }
    notes = changes["notes.md"]
    assert notes["before"]["text"] == "one\ntwo\n" and notes["after"]["text"] == "one\n2\nthree\n"
    assert "-two\n+2\n+three\n" in notes["diff"] and (notes["insertions"], notes["deletions"]) == (2, 1)
    assert changes["new.txt"]["renamedFrom"] == "old.txt"
    assert changes["tool.sh"]["description"] == "tool.sh: mode changed (644 -> 755)"
    assert diff["stat"][-1].startswith(" 5 paths changed")
    plain = await request(client, methods.TURN_DIFF, {"first": 1, "last": 1})
    assert "text" not in plain["files"][0]["before"] or plain["files"][0]["before"]["text"] is None

    with pytest.raises(JsonRpcException) as caught:
        await request(client, methods.TURN_DIFF, {"first": 4})
    assert caught.value.data["kind"] == "missing-target" and "no turn 4" in caught.value.message


async def test_restore_file_says_what_it_does_then_does_it_as_a_turn(client, workspace):
    (workspace / "notes.md").write_text("first\n")
    configure(client, workspace, [[{"write": {"path": "notes.md", "content": "second\n"}}, {"say": "ok"}]])
    assert (await prompt(client, "Edit"))["outcome"] == "completed"
    shown = await request(client, methods.TURN_RESTORE_FILE, {"path": "notes.md", "beforeTurn": 1})
    assert shown["change"]["description"] == "notes.md: modified" and "turn" not in shown
    assert "-second\n+first\n" in shown["change"]["diff"]
    assert (workspace / "notes.md").read_text() == "second\n"
    done = await request(client, methods.TURN_RESTORE_FILE, {"path": "notes.md", "beforeTurn": 1, "commit": True})
    assert done["turn"] == 2 and (workspace / "notes.md").read_text() == "first\n"
    turns = await request(client, methods.TURN_LIST, {})
    assert turns["turns"][-1]["prompt"].startswith("Restore notes.md to its state before turn 1")
