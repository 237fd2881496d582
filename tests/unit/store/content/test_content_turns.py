"""The live conversation state machine: turns, file captures, settlement,
checkpoints, resume, rotation, /clear chapters, names, and the save
candidates it hands to the publication layer."""

from __future__ import annotations

import hashlib
import itertools

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.store.content.checkpoints import history_path
from mevedel_server.store.content.sidecar import (
    SIDECAR_PATH,
    Absent,
    Chapter,
    NamingState,
    Present,
    SidecarError,
    encode_sidecar,
    file_page_path,
    load_sidecar,
    prompt_page_path,
)
from mevedel_server.store.content.transcript import (
    Mail,
    Outcome,
    Prompt,
    Reasoning,
    Response,
    SegmentClose,
    SegmentClosing,
    SegmentHeader,
    SegmentOpening,
    Settle,
    Summary,
    ToolCall,
    ToolResult,
    TurnBegin,
    segment_part_path,
)
from mevedel_server.store.content.turns import (
    RESUME_REASON,
    ContentError,
    Conversation,
    ConversationError,
)

SID = "2026-07-19T09-47-bf87b5dd793a"
WID = "0f" * 32


def conversation(**kwargs) -> Conversation:
    ids = (f"{n:016x}" for n in itertools.count(1))
    return Conversation.new(session_id=SID, workspace_id=WID, at=1000, turn_ids=lambda: next(ids), **kwargs)


def restore(artifacts) -> Conversation:
    ids = (f"{n:016x}" for n in itertools.count(100))
    return Conversation.restore(artifacts, turn_ids=lambda: next(ids))


def commit(c: Conversation):
    candidate = c.artifacts_for_save()
    assert candidate is not None
    c.mark_committed(candidate)
    return candidate


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def full_turn(c: Conversation, prompt: str = "Rename parse()", at: int = 1010) -> str:
    turn = c.begin_turn(prompt, at=at)
    c.capture_file("src/parser.py", b"def parse(): ...\n")
    c.append(Reasoning(turn_id=turn, text="the model thinks"))
    c.append(ToolCall(turn_id=turn, call_id="call-1", name="edit", arguments='{"path": "src/parser.py"}'))
    c.append(ToolResult(turn_id=turn, call_id="call-1", output="edited"))
    c.append(Response(turn_id=turn, text="Renamed."))
    c.settle(Outcome.COMPLETED, at=at + 5, current={"src/parser.py": b"def read(): ...\n"})
    return turn


# Materialization ------------------------------------------------------------


def test_a_fresh_conversation_has_nothing_to_save() -> None:
    c = conversation()
    assert c.artifacts_for_save() is None
    assert c.metadata_candidate() is None
    assert c.rename("Named early") is None  # the name goes out with the first save
    c.begin_turn("hello", at=1001)
    candidate = c.artifacts_for_save()
    assert candidate is not None
    assert load_sidecar(candidate.artifacts[SIDECAR_PATH]).display_name == "Named early"


def test_creation_with_a_name_is_explicit_and_without_one_is_pending() -> None:
    assert conversation(display_name="  My   session ").sidecar.naming_state is NamingState.EXPLICIT
    assert conversation(display_name="  My   session ").sidecar.display_name == "My session"
    assert conversation().sidecar.naming_state is NamingState.PENDING
    assert conversation().sidecar.display_name is None


def test_creation_refuses_bad_identities() -> None:
    with pytest.raises(ConversationError, match="session_id"):
        Conversation.new(session_id="nope", workspace_id=WID, at=1)
    with pytest.raises(ConversationError, match="settings"):
        Conversation.new(session_id=SID, workspace_id=WID, at=1, settings={"preset": 1.5})
    with pytest.raises(ConversationError, match="empty"):
        Conversation.new(session_id=SID, workspace_id=WID, at=1, display_name="  ")


# A turn ---------------------------------------------------------------------


def test_begin_turn_reserves_the_identity_and_indexes_the_prompt() -> None:
    c = conversation()
    turn = c.begin_turn("  Fix   the\nbug ", at=1005)
    assert turn == "0000000000000001"
    assert c.open_turn.turn == 1 and c.open_turn.turn_id == turn and c.open_turn.segment == 1
    (entry,) = c.prompt_index()
    assert (entry.turn, entry.segment, entry.turn_id, entry.preview, entry.at) == (1, 1, turn, "Fix the bug", 1005)
    s = c.sidecar
    assert s.in_flight_turn == turn and s.total_turn_count == 0 and s.prompt_count == 1
    assert s.first_user_message == s.latest_user_message == "Fix the bug"
    assert c.records()[-2:] == (TurnBegin(turn_id=turn, turn=1, at=1005), Prompt(turn_id=turn, text="  Fix   the\nbug "))


def test_turn_misuse_is_refused_with_a_reason() -> None:
    c = conversation()
    with pytest.raises(ConversationError, match="no turn is in flight"):
        c.append(Response(turn_id="0000000000000001", text="x"))
    with pytest.raises(ConversationError, match="no turn is in flight"):
        c.capture_file("a", b"")
    with pytest.raises(ConversationError, match="no turn is in flight"):
        c.settle(Outcome.COMPLETED, at=1)
    with pytest.raises(ConversationError, match="empty prompt"):
        c.begin_turn(" \n", at=1001)
    turn = c.begin_turn("go", at=1001)
    with pytest.raises(ConversationError, match="still in flight"):
        c.begin_turn("again", at=1002)
    with pytest.raises(ConversationError, match="names turn"):
        c.append(Response(turn_id="00000000000000ff", text="x"))
    with pytest.raises(ConversationError, match="cannot be appended"):
        c.append(Prompt(turn_id=turn, text="x"))
    with pytest.raises(ConversationError, match="never made"):
        c.append(ToolResult(turn_id=turn, call_id="c9", output="x"))
    c.append(ToolCall(turn_id=turn, call_id="c1", name="read", arguments="{}"))
    with pytest.raises(ConversationError, match="already recorded"):
        c.append(ToolCall(turn_id=turn, call_id="c1", name="read", arguments="{}"))
    with pytest.raises(ConversationError, match="whole target seconds"):
        c.settle(Outcome.COMPLETED, at=1.5)
    with pytest.raises(ConversationError, match="not valid Unicode"):
        c.append(Response(turn_id=turn, text="\udc80"))
    with pytest.raises(ConversationError, match="ToolCall record is invalid"):
        c.append(ToolCall(turn_id=turn, call_id="", name="read", arguments="{}"))
    with pytest.raises(ConversationError, match="Mail record is invalid"):
        c.append(Mail(turn_id=turn, mail_id="m", sender="x" * 300, text=""))
    with pytest.raises(ConversationError, match="whole target seconds"):
        c.settle(Outcome.COMPLETED, at=2**60)
    with pytest.raises(ConversationError, match="not a turn outcome"):
        c.settle("finished", at=1003)
    with pytest.raises(ConversationError, match="Settle record is invalid"):
        c.settle(Outcome.COMPLETED, at=1003, reason=42)
    assert c.open_turn is not None
    with pytest.raises(ConversationError, match="cannot compact"):
        c.rotate_segment("summary", at=1003)
    with pytest.raises(ConversationError, match="cannot clear"):
        c.clear(at=1003)


def test_settle_counts_the_turn_and_records_the_outcome() -> None:
    c = conversation()
    turn = c.begin_turn("go", at=1001)
    c.append(Response(turn_id=turn, text="partial"))
    c.settle("errored", at=1002, reason="provider returned 500")
    assert c.records()[-1] == Settle(turn_id=turn, outcome=Outcome.ERRORED, at=1002, reason="provider returned 500")
    s = c.sidecar
    assert (s.total_turn_count, s.in_flight_turn, s.updated_at) == (1, None, 1002)
    assert not s.reconciliation_pending
    assert c.open_turn is None


def test_an_interrupted_turn_queues_the_reconciliation_reminder() -> None:
    c = conversation()
    c.begin_turn("go", at=1001)
    c.settle(Outcome.INTERRUPTED, at=1002, reason="aborted by the user")
    assert c.sidecar.reconciliation_pending
    turn = c.begin_turn("next", at=1003)
    assert c.open_turn.reminder
    assert c.records()[-2] == TurnBegin(turn_id=turn, turn=2, at=1003, reminder=True)
    assert not c.sidecar.reconciliation_pending  # delivered with this turn


# File captures ----------------------------------------------------------------


def test_capture_keeps_the_first_content_of_a_turn() -> None:
    c = conversation()
    c.begin_turn("edit", at=1001)
    c.capture_file("a.py", b"original")
    c.capture_file("a.py", b"after a first edit")
    c.settle(Outcome.COMPLETED, at=1002, current={"a.py": b"final"})
    (record,) = c.file_snapshots()
    snapshot = record.files["a.py"]
    assert snapshot.pre == Present(sha256=sha(b"original"), size=8)
    assert snapshot.post == Present(sha256=sha(b"final"), size=5)
    candidate = commit(c)
    assert candidate.artifacts[history_path(sha(b"original"))] == b"original"
    assert candidate.artifacts[history_path(sha(b"final"))] == b"final"
    assert history_path(sha(b"after a first edit")) not in candidate.artifacts


def test_absent_files_are_markers_not_blobs() -> None:
    c = conversation()
    c.begin_turn("create", at=1001)
    c.capture_file("new.py", None)
    c.capture_file("gone.py", b"x")
    c.settle(Outcome.COMPLETED, at=1002, current={"new.py": b"made", "gone.py": None})
    files = c.file_snapshots()[0].files
    assert files["new.py"].pre == Absent() and files["new.py"].post == Present(sha256=sha(b"made"), size=4)
    assert files["gone.py"].post == Absent()


def test_capture_gaps() -> None:
    c = conversation()
    c.begin_turn("run the build", at=1001)
    c.capture_file("kept.py", b"k")
    c.capture_gap("kept.py", "bash ran")  # already captured before any mutation
    c.capture_gap("build/out.bin", "  bash   ran `make` ")
    c.capture_file("build/out.bin", b"too late to be a pre-turn capture")
    with pytest.raises(ConversationError, match="needs a reason"):
        c.capture_gap("x", "  ")
    with pytest.raises(ConversationError, match="may not be empty"):
        c.capture_file("", b"")
    c.settle(Outcome.COMPLETED, at=1002, current={"build/out.bin": b"built"})
    files = c.file_snapshots()[0].files
    assert files["kept.py"].pre == Present(sha256=sha(b"k"), size=1) and files["kept.py"].gap is None
    gap = files["build/out.bin"]
    assert gap.pre is None and gap.gap == "bash ran `make`"
    assert gap.post == Present(sha256=sha(b"built"), size=5)


def test_post_turn_content_for_an_untracked_file_is_refused() -> None:
    c = conversation()
    c.begin_turn("x", at=1001)
    with pytest.raises(ConversationError, match="does not track"):
        c.settle(Outcome.COMPLETED, at=1002, current={"other.py": b""})
    c.capture_file("a.py", b"")
    with pytest.raises(ConversationError, match="'other.py'"):
        c.settle(Outcome.COMPLETED, at=1002, current={"a.py": b"", "other.py": b""})
    assert c.open_turn is not None  # the refused settle changed nothing


def test_identical_content_is_stored_once() -> None:
    c = conversation()
    for n in range(3):
        c.begin_turn(f"turn {n}", at=1001 + n)
        c.capture_file(f"copy{n}.txt", b"same bytes")
        c.settle(Outcome.COMPLETED, at=1001 + n)
    blobs = [path for path in commit(c).artifacts if path.startswith("file-history/")]
    assert blobs == [history_path(sha(b"same bytes"))]
    assert len(c.file_snapshots()) == 3


def test_turns_without_captures_have_no_file_record() -> None:
    c = conversation()
    c.begin_turn("chat only", at=1001)
    c.settle(Outcome.COMPLETED, at=1002)
    full_turn(c)
    assert [record.turn for record in c.file_snapshots()] == [2]
    assert c.sidecar.file_snapshot_count == 1


# Checkpoints, restore and resume ----------------------------------------------


def test_checkpoint_saves_an_unfinished_turn_without_settling_it() -> None:
    c = conversation()
    full_turn(c)
    turn = c.begin_turn("second", at=1100)
    c.capture_file("b.py", b"before")
    c.append(Response(turn_id=turn, text="half an ans"))
    candidate = c.checkpoint()
    s = candidate.sidecar
    assert (s.total_turn_count, s.in_flight_turn, s.prompt_count) == (1, turn, 2)
    assert history_path(sha(b"before")) in candidate.artifacts  # pre-turn content is durable
    restored = restore(candidate.artifacts)
    assert restored.open_turn is not None and restored.open_turn.turn_id == turn
    assert restored.records()[-1] == Response(turn_id=turn, text="half an ans")
    assert not any(isinstance(r, Settle) and r.turn_id == turn for r in restored.records())
    with pytest.raises(ConversationError, match="no turn is in flight"):
        conversation().checkpoint()


def test_resume_interrupts_the_persisted_turn_and_queues_the_reminder() -> None:
    c = conversation()
    turn = c.begin_turn("long job", at=1001)
    c.capture_file("a.py", b"v1")
    c.append(ToolCall(turn_id=turn, call_id="c1", name="bash", arguments="make"))
    loaded = restore(c.checkpoint().artifacts)
    # The restored in-flight turn still knows its tool call and capture.
    loaded.append(ToolResult(turn_id=turn, call_id="c1", output="lost"))
    loaded = restore(c.checkpoint().artifacts)
    assert loaded.tracked_files() == ["a.py"]
    assert loaded.resume(at=2000, current={"a.py": b"v2"}) is True
    assert loaded.records()[-1] == Settle(turn_id=turn, outcome=Outcome.INTERRUPTED, at=2000, reason=RESUME_REASON)
    s = loaded.sidecar
    assert (s.total_turn_count, s.in_flight_turn, s.reconciliation_pending) == (1, None, True)
    assert loaded.file_snapshots()[0].files["a.py"].post == Present(sha256=sha(b"v2"), size=2)
    next_turn = loaded.begin_turn("what happened?", at=2001)
    assert next_turn not in (turn,)
    assert loaded.open_turn.reminder


def test_resume_of_a_settled_session_only_queues_the_reminder() -> None:
    c = conversation()
    full_turn(c)
    loaded = restore(commit(c).artifacts)
    assert loaded.tracked_files() == []
    with pytest.raises(ConversationError, match="no turn was in flight"):
        loaded.resume(at=3000, current={"a.py": b""})
    assert loaded.resume(at=3000) is False
    assert loaded.sidecar.reconciliation_pending
    assert loaded.sidecar.total_turn_count == 1


def test_restore_round_trips_every_kind_of_state() -> None:
    c = conversation(settings={"preset": "coder", "effort": 2, "sandbox": True}, attached_artifacts=["plan-1"])
    full_turn(c)
    turn = c.begin_turn("mail?", at=1100)
    c.append(Mail(turn_id=turn, mail_id="m1", sender="agent://helper", text="result"))
    c.capture_gap("out.log", "shell")
    c.settle(Outcome.COMPLETED, at=1101)
    c.rotate_segment("We renamed parse().", at=1102)
    full_turn(c, "third", at=1200)
    c.note_naming_attempt("Rename parse()")
    c.apply_generated_title("Parser rename")
    c.clear(at=1300)
    full_turn(c, "fourth", at=1400)
    candidate = commit(c)
    restored = restore(candidate.artifacts)
    assert restored.sidecar == c.sidecar
    assert restored.prompt_index() == c.prompt_index()
    assert restored.file_snapshots() == c.file_snapshots()
    for segment in range(1, 4):
        assert restored.records(segment) == c.records(segment)
    again = restored.artifacts_for_save()
    assert again.unchanged
    assert all(again.artifacts[path] is candidate.artifacts[path] for path in candidate.artifacts)


def test_a_save_changes_only_what_the_turn_touched() -> None:
    c = conversation()
    # Enough turns that segment 1, the prompt index and the file index each
    # hold closed parts (64 KiB each).
    for n in range(400):
        turn = c.begin_turn(f"request {n} " + "detail " * 20, at=1000 + n)
        c.capture_file(f"src/module_{n}.py", f"content {n}".encode())
        c.append(Response(turn_id=turn, text="answer " * 30))
        c.settle(Outcome.COMPLETED, at=1000 + n, current={f"src/module_{n}.py": f"changed {n}".encode()})
    before = commit(c)
    assert c.sidecar.layout.segment_parts[0] > 2
    assert c.sidecar.layout.prompt_pages > 1 and c.sidecar.layout.file_pages > 1
    full_turn(c, "one more", at=5000)
    after = c.artifacts_for_save()
    parts = c.sidecar.layout.segment_parts[0]
    assert set(after.changed) == {
        SIDECAR_PATH,
        segment_part_path(1, parts),
        prompt_page_path(c.sidecar.layout.prompt_pages),
        file_page_path(c.sidecar.layout.file_pages),
        history_path(sha(b"def parse(): ...\n")),
        history_path(sha(b"def read(): ...\n")),
    }
    for path, data in before.artifacts.items():
        if path not in after.changed:
            assert after.artifacts[path] is data
    # The old bytes of the live part are a prefix of its new bytes.
    live_part = segment_part_path(1, parts)
    if live_part in before.artifacts:
        assert after.artifacts[live_part].startswith(before.artifacts[live_part])


def test_restore_refuses_inconsistent_snapshots() -> None:
    c = conversation()
    full_turn(c)
    full_turn(c, "second", at=1100)
    good = dict(commit(c).artifacts)
    sidecar = load_sidecar(good[SIDECAR_PATH])

    def with_sidecar(**changes) -> dict:
        return {**good, SIDECAR_PATH: encode_sidecar(msgspec.structs.replace(sidecar, **changes))}

    blob = history_path(sha(b"def parse(): ...\n"))
    cases = [
        ({k: v for k, v in good.items() if k != SIDECAR_PATH}, "no sidecar"),
        ({k: v for k, v in good.items() if k != segment_part_path(1, 1)}, "layout names it"),
        ({**good, segment_part_path(1, 2): b"{}\n"}, "does not name"),
        ({**good, prompt_page_path(2): b"{}\n"}, "index page the sidecar's layout does not name"),
        ({**good, segment_part_path(1, 1): good[segment_part_path(1, 1)][:-3]}, "truncated"),
        ({**good, prompt_page_path(1): good[prompt_page_path(1)].replace(b"second", b"secxnd")}, "prompt index"),
        (with_sidecar(total_turn_count=1, in_flight_turn="0000000000000002"), "total_turn_count is 1"),
        (with_sidecar(latest_user_message="other"), "previews"),
        (with_sidecar(file_snapshot_count=1), "file_snapshot_count"),
        (with_sidecar(chapters=[Chapter(last_segment=1, title=None, closed_at=5)], current_segment=2, layout=msgspec.structs.replace(sidecar.layout, segment_parts=[1, 1])), "does not end with segment_close"),
        ({k: v for k, v in good.items() if k != blob}, "does not hold it"),
        ({**good, "file-history/xyz": b""}, "not a file history name"),
        ({**good, blob: b"tampered"}, "SHA-256"),
    ]
    for artifacts, fragment in cases:
        with pytest.raises(ContentError, match=fragment):
            restore(artifacts)
    with pytest.raises(SidecarError):
        restore({**good, SIDECAR_PATH: b"{}"})


def test_restore_refuses_chapters_that_do_not_match_the_clears() -> None:
    c = conversation()
    full_turn(c)
    c.clear(at=1100)
    good = dict(commit(c).artifacts)
    sidecar = load_sidecar(good[SIDECAR_PATH])
    forged = encode_sidecar(msgspec.structs.replace(sidecar, chapters=[]))
    with pytest.raises(ContentError, match="chapters do not match"):
        restore({**good, SIDECAR_PATH: forged})


def test_restore_refuses_a_segment_of_another_session() -> None:
    c = conversation()
    full_turn(c)
    good = dict(commit(c).artifacts)
    other = good[segment_part_path(1, 1)].replace(SID.encode(), b"2026-07-19T09-47-000000000000")
    with pytest.raises(ContentError, match="names session 2026-07-19T09-47-000000000000"):
        restore({**good, segment_part_path(1, 1): other})


# Candidates and the committed projection ---------------------------------------


def test_rename_commits_only_display_metadata() -> None:
    c = conversation()
    full_turn(c)
    committed = commit(c)
    turn = c.begin_turn("in flight, not durable yet", at=1100)
    c.append(Response(turn_id=turn, text="streaming"))
    candidate = c.rename("  Parser\twork ")
    assert candidate.kind == "sidecar"
    assert set(candidate.changed) == {SIDECAR_PATH}
    renamed = load_sidecar(candidate.changed[SIDECAR_PATH])
    before = committed.sidecar
    assert (renamed.display_name, renamed.naming_state) == ("Parser work", NamingState.EXPLICIT)
    # The conversation fields stay those of the committed turn.
    assert msgspec.structs.replace(renamed, display_name=None, naming_state=NamingState.PENDING) == before
    for path, data in committed.artifacts.items():
        if path != SIDECAR_PATH:
            assert candidate.artifacts[path] is data
    c.mark_committed(candidate)
    # The next full save still carries the new name and the live turn.
    full = c.checkpoint()
    assert full.sidecar.display_name == "Parser work" and full.sidecar.in_flight_turn == turn
    assert {SIDECAR_PATH, segment_part_path(1, 1), prompt_page_path(1)} <= set(full.changed)


def test_rename_refuses_empty_and_unreadable_names() -> None:
    c = conversation()
    with pytest.raises(ConversationError, match="empty"):
        c.rename("   ")
    with pytest.raises(ConversationError, match="U\\+0000"):
        c.rename("nul\x00name")
    assert c.sidecar.display_name is None


def test_mark_committed_refuses_another_sessions_candidate() -> None:
    a = conversation()
    a.begin_turn("x", at=1001)
    b = Conversation.new(session_id="2026-07-19T09-47-000000000001", workspace_id=WID, at=1)
    with pytest.raises(ConversationError, match="belongs to session"):
        b.mark_committed(a.artifacts_for_save())


def test_changes_of_an_uncommitted_candidate_stay_in_the_next_one() -> None:
    c = conversation()
    full_turn(c)
    commit(c)
    c.begin_turn("one", at=1100)
    c.capture_file("x.py", b"x0")
    lost = c.checkpoint()  # its publication fails: never marked committed
    c.settle(Outcome.COMPLETED, at=1101)
    c.begin_turn("two", at=1102)
    c.settle(Outcome.COMPLETED, at=1103)
    later = c.artifacts_for_save()
    assert set(lost.changed) <= set(later.changed)
    assert history_path(sha(b"x0")) in later.changed
    c.mark_committed(lost)  # an older candidate committing late keeps the newer writes pending
    assert set(c.artifacts_for_save().changed) >= {segment_part_path(1, 1), SIDECAR_PATH}


def test_a_snapshot_does_not_see_later_changes() -> None:
    c = conversation()
    full_turn(c)
    first = c.artifacts_for_save()
    paths = list(first.artifacts)
    size = len(first.artifacts)
    c.begin_turn("more", at=1100)
    c.capture_file("new.py", b"brand new")
    c.settle(Outcome.COMPLETED, at=1101)
    second = c.artifacts_for_save()
    assert list(first.artifacts) == paths and len(first.artifacts) == size
    assert history_path(sha(b"brand new")) not in first.artifacts
    assert second.artifacts[history_path(sha(b"brand new"))] == b"brand new"
    assert len(second.artifacts) == size + 1
    with pytest.raises(KeyError):
        first.artifacts[history_path(sha(b"brand new"))]


def test_records_from_an_index_extend_a_projection() -> None:
    c = conversation()
    full_turn(c)
    seen = len(c.records())
    turn = c.begin_turn("next", at=1100)
    assert c.records(start=seen) == (TurnBegin(turn_id=turn, turn=2, at=1100), Prompt(turn_id=turn, text="next"))
    with pytest.raises(ConversationError, match="no segment 2"):
        c.records(2)


def test_an_unchanged_conversation_produces_an_empty_change_set() -> None:
    c = conversation()
    full_turn(c)
    commit(c)
    assert c.artifacts_for_save().unchanged


# Naming ---------------------------------------------------------------------------


def test_automatic_naming_states() -> None:
    c = conversation()
    c.note_naming_attempt("x" * 5000)
    assert c.sidecar.naming_state is NamingState.ATTEMPTED and len(c.sidecar.naming_input) == 2000
    with pytest.raises(ConversationError, match="not pending"):
        c.note_naming_attempt("again")
    assert c.apply_generated_title("Parser rename work for today") == "Parser rename work for"
    assert c.sidecar.display_name == "Parser rename work for"
    c.rename("Mine")
    assert c.sidecar.naming_input is None and c.sidecar.naming_state is NamingState.EXPLICIT
    with pytest.raises(ConversationError, match="explicit name"):
        c.apply_generated_title("Other")


# Segments ---------------------------------------------------------------------------


def test_rotation_opens_a_segment_with_the_summary() -> None:
    c = conversation()
    full_turn(c)
    c.note_naming_attempt("Rename parse()")
    assert c.rotate_segment("We renamed parse() to read().", at=1100) == 2
    assert c.records(1)[-1] == SegmentClose(reason=SegmentClosing.COMPACTION, at=1100)
    assert c.records(2) == (
        SegmentHeader(format_version=1, session_id=SID, segment=2, opened_at=1100, opened_by=SegmentOpening.COMPACTION),
        Summary(summarized_segment=1, text="We renamed parse() to read().", at=1100),
    )
    assert c.sidecar.current_segment == 2 and c.sidecar.chapters == []
    assert c.sidecar.naming_input == "Rename parse()"  # compaction keeps naming input
    with pytest.raises(ConversationError, match="no turn to compact"):
        c.rotate_segment("again", at=1101)
    with pytest.raises(ConversationError, match="non-empty summary"):
        c.rotate_segment(" ", at=1101)
    full_turn(c, "after compaction", at=1200)
    assert [(e.turn, e.segment) for e in c.prompt_index()] == [(1, 1), (2, 2)]


def test_clear_closes_a_chapter_and_rearms_automatic_naming() -> None:
    c = conversation()
    full_turn(c)
    c.note_naming_attempt("Rename parse()")
    c.apply_generated_title("Parser rename")
    assert c.clear(at=1100) == 2
    s = c.sidecar
    assert s.chapters == [Chapter(last_segment=1, title="Parser rename", closed_at=1100)]
    assert (s.naming_state, s.naming_input, s.display_name) == (NamingState.PENDING, None, "Parser rename")
    assert c.records(1)[-1] == SegmentClose(reason=SegmentClosing.CLEAR, at=1100)
    assert c.records(2)[0].opened_by is SegmentOpening.CLEAR
    with pytest.raises(ConversationError, match="no turns to clear"):
        c.clear(at=1101)
    full_turn(c, "new chat", at=1200)
    assert c.prompt_index()[-1].turn == 2 and c.prompt_index()[-1].segment == 2


def test_clear_under_an_explicit_name_records_no_title() -> None:
    c = conversation(display_name="Mine")
    full_turn(c)
    c.rotate_segment("summary", at=1050)
    c.clear(at=1100)  # the chat spans segments 1 and 2
    assert c.sidecar.chapters == [Chapter(last_segment=2, title=None, closed_at=1100)]
    assert c.sidecar.naming_state is NamingState.EXPLICIT and c.sidecar.display_name == "Mine"


def test_other_owners_artifacts_ride_along_unchanged() -> None:
    c = conversation()
    full_turn(c)
    saved = {**commit(c).artifacts, "tool-results/executions/run-1.log": b"output"}
    restored = restore(saved)
    full_turn(restored, "again", at=2000)
    candidate = restored.artifacts_for_save()
    assert candidate.artifacts["tool-results/executions/run-1.log"] is saved["tool-results/executions/run-1.log"]
    assert "tool-results/executions/run-1.log" not in candidate.changed


# Property: whatever sequence of operations a session goes through, its
# saved snapshot restores to the same state.

operations = st.lists(
    st.one_of(
        st.tuples(st.just("begin"), st.text(min_size=1, max_size=30)),
        st.tuples(st.just("capture"), st.sampled_from(["a.py", "b.py", "c/d.txt"]), st.none() | st.binary(max_size=8)),
        st.tuples(st.just("gap"), st.sampled_from(["a.py", "log.txt"]), st.just("shell")),
        st.tuples(st.just("respond"), st.text(max_size=30)),
        st.tuples(st.just("settle"), st.sampled_from(list(Outcome)), st.none() | st.binary(max_size=8)),
        st.tuples(st.just("rotate"), st.text(min_size=1, max_size=20)),
        st.tuples(st.just("clear")),
        st.tuples(st.just("rename"), st.text(max_size=20)),
        st.tuples(st.just("save")),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_any_reachable_state_round_trips(ops: list) -> None:
    c = conversation()
    at = 1000
    for op in ops:
        at += 1
        try:
            if op[0] == "begin":
                c.begin_turn(op[1], at=at)
            elif op[0] == "capture":
                c.capture_file(op[1], op[2])
            elif op[0] == "gap":
                c.capture_gap(op[1], op[2])
            elif op[0] == "respond":
                c.append(Response(turn_id=c.open_turn.turn_id if c.open_turn else "0" * 16, text=op[1]))
            elif op[0] == "settle":
                c.settle(op[1], at=at, current={path: op[2] for path in c.tracked_files()})
            elif op[0] == "rotate":
                c.rotate_segment(op[1], at=at)
            elif op[0] == "clear":
                c.clear(at=at)
            elif op[0] == "rename":
                candidate = c.rename(op[1])
                if candidate is not None:
                    c.mark_committed(candidate)
            else:
                candidate = c.artifacts_for_save()
                if candidate is not None:
                    c.mark_committed(candidate)
        except ConversationError:
            pass  # refused operations change nothing the snapshot shows
    candidate = c.artifacts_for_save()
    if candidate is None:
        return
    restored = restore(dict(candidate.artifacts))
    assert restored.sidecar == c.sidecar
    assert restored.prompt_index() == c.prompt_index()
    assert restored.file_snapshots() == c.file_snapshots()
    assert restored.open_turn == c.open_turn
    for segment in range(1, c.current_segment + 1):
        assert restored.records(segment) == c.records(segment)


# Retained agents' own transcripts ----------------------------------------------------


def _task(path: str, prompt: str, text: str, paths=()):
    from mevedel_server.store.content.transcript import AgentStep, AgentTask

    return AgentTask(turn_id="0" * 16, path=path, agent="codex", prompt=prompt, outcome=Outcome.COMPLETED,
                     steps=[AgentStep(kind="response", text=text)], paths=list(paths))


def _with_agent_tasks() -> Conversation:
    """Three turns: reviewer works in turns 1 and 2, reviewer/search in 2."""
    c = conversation()
    for turn, tasks in enumerate(([("reviewer", "first look", "Looks fine.")],
                                  [("reviewer", "again", "Still fine."), ("reviewer/search", "find it", "Found.")],
                                  []), start=1):
        c.begin_turn(f"prompt {turn}", at=1000 + turn)
        for path, prompt, text in tasks:
            c.record_agent_task(_task(path, prompt, text, paths=[f"{path.replace('/', '-')}.txt"]))
        c.settle(Outcome.COMPLETED, at=1000 + turn)
    return c


def test_an_agents_task_is_its_own_transcript_and_the_turn_only_names_it():
    from mevedel_server.store.content.transcript import AgentTask, agent_part_path

    c = _with_agent_tasks()
    candidate = c.artifacts_for_save()
    own = candidate.artifacts[agent_part_path("reviewer", 1)].decode()
    assert own.count("\n") == 2 and "Looks fine." in own and "Still fine." in own and '"turn":2' in own
    assert "Found." in candidate.artifacts[agent_part_path("reviewer/search", 1)].decode()
    assert candidate.sidecar.layout.agent_parts == {"reviewer": 1, "reviewer/search": 1}
    # The turn holds one line per task: its place in the agent's transcript, not its records.
    refs = [r for r in c.records() if isinstance(r, AgentTask)]
    assert [(r.path, r.task, r.steps) for r in refs] == [("reviewer", 1, []), ("reviewer", 2, []), ("reviewer/search", 1, [])]
    assert refs[0].paths == ["reviewer.txt"]
    assert not any("Looks fine." in part.decode() for path, part in candidate.artifacts.items() if path.startswith("segment-"))
    # A save after the next task republishes the agent's part, not the others'.
    c.mark_committed(candidate)
    c.begin_turn("prompt 4", at=1010)
    c.record_agent_task(_task("reviewer", "once more", "Done."))
    changed = set(c.checkpoint().changed)
    assert agent_part_path("reviewer", 1) in changed and agent_part_path("reviewer/search", 1) not in changed


def test_agent_transcripts_survive_a_restore_and_a_foreign_part_is_refused():
    from mevedel_server.store.content.transcript import agent_part_path

    c = _with_agent_tasks()
    artifacts = dict(c.artifacts_for_save().artifacts)
    restored = Conversation.restore(artifacts)
    assert [(t.turn, t.prompt) for t in restored.agent_tasks("reviewer")] == [(1, "first look"), (2, "again")]
    assert restored.agent_tasks("nobody") == ()
    with pytest.raises(ContentError, match="agent transcript part the sidecar's layout does not name"):
        Conversation.restore({**artifacts, agent_part_path("other", 1): artifacts[agent_part_path("reviewer", 1)]})
    with pytest.raises(ContentError, match="a task of retained agent reviewer"):
        Conversation.restore({**artifacts, agent_part_path("reviewer/search", 1): artifacts[agent_part_path("reviewer", 1)]})
    truncated = artifacts[agent_part_path("reviewer", 1)][:-1]
    with pytest.raises(ContentError, match="truncated"):
        Conversation.restore({**artifacts, agent_part_path("reviewer", 1): truncated})


def test_a_cut_keeps_each_agents_tasks_of_the_kept_turns_and_a_fork_the_conversations_only():
    from mevedel_server.store.content.sidecar import AgentResult, RetainedAgent
    from mevedel_server.store.content.transcript import agent_part_path
    from mevedel_server.store.transactions.snapshot_cut import (
        Boundary,
        SessionState,
        cut_snapshot,
        locate,
    )

    c = _with_agent_tasks()
    agents = [RetainedAgent(path=p, agent="codex", fingerprint="a" * 64, machine="here", created_turn=n,
                            created_turn_id=c.prompt_index()[n - 1].turn_id,
                            result=AgentResult(turn=2, outcome="completed", text="latest"))
              for p, n in (("reviewer", 1), ("reviewer/search", 2))]
    c.set_agents(agents, at=1020)
    state = SessionState(SID, None, dict(c.artifacts_for_save().artifacts))

    # Rewind before turn 2: reviewer keeps its first task; reviewer/search (made in turn 2) goes.
    cut = cut_snapshot(state, locate(state, Boundary.before(2)), {})
    rewound = Conversation.restore(cut)
    assert [t.prompt for t in rewound.agent_tasks("reviewer")] == ["first look"]
    assert rewound.agent_tasks("reviewer/search") == () and agent_part_path("reviewer/search", 1) not in cut
    assert rewound.sidecar.layout.agent_parts == {"reviewer": 1}
    # Its result is its latest kept task's, not the cut one's.
    (kept,) = rewound.sidecar.agents
    assert (kept.result.turn, kept.result.text) == (1, "Looks fine.")
    # The next task continues the transcript where the cut left it.
    rewound.begin_turn("prompt 2 again", at=1030)
    rewound.record_agent_task(_task("reviewer", "redo", "Redone."))
    assert [t.prompt for t in rewound.agent_tasks("reviewer")] == ["first look", "redo"]
    assert [r.task for r in rewound.records() if getattr(r, "task", None)] == [1, 2]

    # Before turn 1: no task is kept, and no transcript file either.
    empty = cut_snapshot(state, locate(state, Boundary.before(1)), {})
    assert not any(path.startswith("agents/") for path in empty) and Conversation.restore(empty).agent_tasks("reviewer") == ()
    # A Fork drops the retained identities but keeps the conversations its turns name.
    forked = Conversation.restore(cut_snapshot(state, locate(state, Boundary.after(2)), {"agents": []}))
    assert forked.sidecar.agents == [] and [t.prompt for t in forked.agent_tasks("reviewer")] == ["first look", "again"]
    # A new agent the child makes under that name (in turn 3) is another: none of those is its.
    from mevedel_server.store.content.projection import retained_tasks

    assert retained_tasks(forked.records(), "reviewer", forked.agent_tasks("reviewer"), since=3) == []
    assert len(retained_tasks(forked.records(), "reviewer", forked.agent_tasks("reviewer"), since=1)) == 2
    # Everything kept: every transcript, byte for byte.
    kept = cut_snapshot(state, locate(state, Boundary.after(3)), {})
    assert kept[agent_part_path("reviewer", 1)] == state.artifacts[agent_part_path("reviewer", 1)]


def test_detaching_the_engine_detaches_the_retained_agents_native_histories_too():
    from mevedel_server.store.content.sidecar import RetainedAgent

    c = _with_agent_tasks()
    c.set_agents([RetainedAgent(path="reviewer", agent="codex", fingerprint="a" * 64, machine="here", native_session_id="n-1",
                                created_turn=1, created_turn_id=c.prompt_index()[0].turn_id)], at=1020)
    c.detach_engine(at=1021)
    (agent,) = c.sidecar.agents
    assert agent.native_session_id is None and agent.fingerprint == "a" * 64
