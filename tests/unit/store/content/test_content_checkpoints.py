"""File checkpoints: content addressing and the restore plan Rewind reads."""

from __future__ import annotations

import hashlib
import itertools

from mevedel_server.store.content.checkpoints import (
    file_state,
    history_digest,
    history_path,
    restore_plan,
)
from mevedel_server.store.content.sidecar import Absent, Present
from mevedel_server.store.content.transcript import Outcome
from mevedel_server.store.content.turns import Conversation

SID = "2026-07-19T09-47-bf87b5dd793a"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_content_addresses() -> None:
    assert file_state(b"abc") == Present(sha256=sha(b"abc"), size=3)
    assert file_state(None) == Absent()
    assert file_state(b"") == Present(sha256=sha(b""), size=0)  # empty is not absent
    assert history_path(sha(b"abc")) == f"file-history/{sha(b'abc')}"
    assert history_digest(history_path(sha(b"abc"))) == sha(b"abc")
    assert history_digest("file-history/xyz") is None


def session_with_edits() -> Conversation:
    ids = (f"{n:016x}" for n in itertools.count(1))
    c = Conversation.new(session_id=SID, workspace_id="1" * 64, at=1, turn_ids=lambda: next(ids))
    # Turn 1 edits a.py; turn 2 creates b.py and runs a shell over c.txt;
    # turn 3 edits a.py again and deletes b.py.
    c.begin_turn("one", at=2)
    c.capture_file("a.py", b"a0")
    c.settle(Outcome.COMPLETED, at=3, current={"a.py": b"a1"})
    c.begin_turn("two", at=4)
    c.capture_file("b.py", None)
    c.capture_gap("c.txt", "shell command")
    c.settle(Outcome.COMPLETED, at=5, current={"b.py": b"b1"})
    c.begin_turn("three", at=6)
    c.capture_file("a.py", b"a1")
    c.capture_file("b.py", b"b1")
    c.settle(Outcome.COMPLETED, at=7, current={"a.py": b"a2", "b.py": None})
    return c


def test_restore_plan_before_the_first_turn_restores_everything_known() -> None:
    plan = restore_plan(session_with_edits().file_snapshots(), keep=0)
    assert plan.restore == {"a.py": file_state(b"a0"), "b.py": Absent()}
    assert plan.gaps == {"c.txt": "shell command"}
    assert not plan.complete


def test_restore_plan_after_a_turn_uses_the_next_captures() -> None:
    c = session_with_edits()
    plan = restore_plan(c.file_snapshots(), keep=2)
    assert plan.restore == {"a.py": file_state(b"a1"), "b.py": file_state(b"b1")}
    assert plan.complete
    # Every content the plan names is stored.
    for state in plan.restore.values():
        if isinstance(state, Present):
            assert c.file_content(state.sha256) is not None


def test_restore_plan_at_the_latest_turn_is_empty() -> None:
    plan = restore_plan(session_with_edits().file_snapshots(), keep=3)
    assert plan.restore == {} and plan.complete
