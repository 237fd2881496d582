"""The closed sidecar schema: exactly the current version and shape loads;
every other byte string is a SidecarError with a kind and a reason, which
inspection turns into an Inspect row rather than a session."""

from __future__ import annotations

import json

import msgspec
import pytest

from mevedel_server.store.content.inspect import InspectRow, classify_sidecar
from mevedel_server.store.content.sidecar import (
    Absent,
    Chapter,
    FileSnapshot,
    ForkOrigin,
    ForkType,
    Layout,
    NameRefused,
    NamingState,
    Present,
    Sidecar,
    SidecarError,
    SidecarErrorKind,
    WorktreeOrigin,
    bound_generated_title,
    encode_sidecar,
    load_sidecar,
    normalize_display_name,
    preview_of,
)

SID = "2026-07-19T09-47-bf87b5dd793a"
WID = "ab" * 32


def full_sidecar() -> Sidecar:
    return Sidecar(
        session_id=SID,
        workspace_id=WID,
        display_name="Refactor parser",
        naming_state=NamingState.ATTEMPTED,
        naming_input="please refactor the parser",
        created_at=100,
        updated_at=200,
        current_segment=3,
        total_turn_count=4,
        in_flight_turn="00000000000000ff",
        file_snapshot_count=2,
        layout=Layout(segment_parts=[1, 2, 1], prompt_pages=1, file_pages=1),
        chapters=[Chapter(last_segment=1, title="Old chat", closed_at=150)],
        fork=ForkOrigin(fork_type=ForkType.WORKTREE, session_id="2026-07-18T08-00-000000000001", turn=7, fork_point_id="0000000000000007"),
        worktree=WorktreeOrigin(source_root="/src/repo", directory="/src/repo-wt", branch="mevedel/fork", base_commit="a" * 40),
        attached_artifacts=["plan-1", "notes.md"],
        settings={"preset": "coder", "effort": 3, "sandbox": True},
        reconciliation_pending=True,
        first_user_message="first",
        latest_user_message="latest",
    )


def encoded(**changes) -> bytes:
    raw = json.loads(encode_sidecar(full_sidecar()))
    raw.update(changes)
    return json.dumps(raw).encode()


def test_round_trip() -> None:
    sidecar = full_sidecar()
    assert load_sidecar(encode_sidecar(sidecar)) == sidecar
    assert sidecar.prompt_count == 5


def test_encoding_is_deterministic() -> None:
    assert encode_sidecar(full_sidecar()) == encode_sidecar(full_sidecar())


def _without(field: str) -> bytes:
    raw = json.loads(encode_sidecar(full_sidecar()))
    del raw[field]
    return json.dumps(raw).encode()


@pytest.mark.parametrize(
    ("data", "kind", "fragment"),
    [
        (b"", SidecarErrorKind.EMPTY, "empty"),
        (encode_sidecar(full_sidecar())[:40], SidecarErrorKind.TRUNCATED, "truncated"),
        (b"{not json}", SidecarErrorKind.MALFORMED, "not valid JSON"),
        (encoded().replace(b'"created_at": 100', b'"created_at": NaN'), SidecarErrorKind.NON_FINITE, "NaN or Infinity"),
        (encoded().replace(b'"created_at": 100', b'"created_at": Infinity'), SidecarErrorKind.NON_FINITE, "NaN or Infinity"),
        (encoded().replace(b'"created_at": 100', b'"created_at": 1e999'), SidecarErrorKind.NON_FINITE, "out of range"),
        (b"[1, 2]", SidecarErrorKind.NOT_AN_OBJECT, "not a JSON object"),
        (_without("format_version"), SidecarErrorKind.MISSING_VERSION, "no format_version"),
        (encoded(format_version=2), SidecarErrorKind.UNSUPPORTED_VERSION, "format_version 2"),
        (encoded(format_version="1"), SidecarErrorKind.UNSUPPORTED_VERSION, "format_version '1'"),
        (encoded(extra=1), SidecarErrorKind.UNKNOWN_FIELD, "unknown field `extra`"),
        (_without("workspace_id"), SidecarErrorKind.MISSING_FIELD, "workspace_id"),
        (_without("chapters"), SidecarErrorKind.MISSING_FIELD, "chapters"),
        (encoded(created_at=1.5), SidecarErrorKind.WRONG_TYPE, "Expected `int`"),
        (encoded(created_at="100"), SidecarErrorKind.WRONG_TYPE, "Expected `int`"),
        (encoded(session_id="not-an-id"), SidecarErrorKind.INVALID_VALUE, "session_id"),
        (encoded(created_at=-1), SidecarErrorKind.INVALID_VALUE, ">= 0"),
        (encoded(updated_at=50), SidecarErrorKind.INVALID_VALUE, "updated_at is earlier"),
        (encoded(naming_state="pending"), SidecarErrorKind.INVALID_VALUE, "only an attempted name"),
        (encoded(naming_state="guessed"), SidecarErrorKind.INVALID_VALUE, "guessed"),
        (encoded(current_segment=2), SidecarErrorKind.INVALID_VALUE, "segment_parts"),
        (encoded(total_turn_count=0), SidecarErrorKind.INVALID_VALUE, "file_snapshot_count exceeds"),
        (encoded(first_user_message=None), SidecarErrorKind.INVALID_VALUE, "previews"),
        (encoded(attached_artifacts=["a", "a"]), SidecarErrorKind.INVALID_VALUE, "repeats"),
        (encoded(settings={"preset": 1.5}), SidecarErrorKind.WRONG_TYPE, "settings"),
        (encoded(chapters=[{"last_segment": 3, "title": None, "closed_at": 1}]), SidecarErrorKind.INVALID_VALUE, "chapters"),
    ],
)
def test_refusals_have_a_kind_and_a_reason(data: bytes, kind: SidecarErrorKind, fragment: str) -> None:
    with pytest.raises(SidecarError) as caught:
        load_sidecar(data)
    assert caught.value.kind is kind
    assert fragment in caught.value.reason
    assert str(caught.value).startswith("session.json: ")
    row = classify_sidecar(data)
    assert isinstance(row, InspectRow)
    assert row.kind is kind and row.reason == caught.value.reason
    # The listing's one decode refuses the same bytes for the same reason.
    assert classify_sidecar(data, read_only=True) == row


def test_inspect_row_reports_the_observed_version() -> None:
    row = classify_sidecar(encoded(format_version=7, new_field="x"))
    assert row == InspectRow(SidecarErrorKind.UNSUPPORTED_VERSION, "format_version 7 is not the supported version 1", 7)


def test_missing_sidecar_is_an_inspect_row() -> None:
    assert classify_sidecar(None).kind is SidecarErrorKind.MISSING


def test_classify_returns_the_sidecar_when_current() -> None:
    assert classify_sidecar(encode_sidecar(full_sidecar())) == full_sidecar()
    read = classify_sidecar(encode_sidecar(full_sidecar()), read_only=True)
    assert msgspec.structs.asdict(read) == msgspec.structs.asdict(full_sidecar())


def test_file_snapshot_is_a_capture_or_a_gap() -> None:
    FileSnapshot(pre=Absent())
    FileSnapshot(pre=Present(sha256="0" * 64, size=3), post=Absent())
    FileSnapshot(pre=None, gap="shell command")
    with pytest.raises(ValueError):
        FileSnapshot(pre=None)
    with pytest.raises(ValueError):
        FileSnapshot(pre=Absent(), gap="both")


def test_file_states_are_tagged_on_disk() -> None:
    data = msgspec.json.encode(FileSnapshot(pre=Absent(), post=Present(sha256="0" * 64, size=3)))
    assert json.loads(data) == {"pre": {"state": "absent"}, "post": {"state": "present", "sha256": "0" * 64, "size": 3}, "gap": None}


@pytest.mark.parametrize(
    ("authored", "normalized"),
    [
        ("  Parser   refactor ", "Parser refactor"),
        ("Tabs\tand\nnewlines", "Tabs and newlines"),
        ("Ünïcødé 名前 🙂", "Ünïcødé 名前 🙂"),
        ("family 👨\u200d👩\u200d👧", "family 👨\u200d👩\u200d👧"),
        ("no\u00a0break", "no break"),
    ],
)
def test_display_names_are_normalized(authored: str, normalized: str) -> None:
    assert normalize_display_name(authored) == normalized


@pytest.mark.parametrize(
    ("authored", "fragment"),
    [
        ("", "empty"),
        (" \t\n ", "empty"),
        ("bell\x07", "U\\+0007"),
        ("bidi\u202eoverride", "U\\+202E"),
        ("private\ue000use", "U\\+E000"),
        ("x" * 1001, "1000 characters"),
    ],
)
def test_unreadable_names_are_refused(authored: str, fragment: str) -> None:
    with pytest.raises(NameRefused, match=fragment):
        normalize_display_name(authored)


def test_generated_titles_are_bounded() -> None:
    assert bound_generated_title("Fix the flaky parser tests now") == "Fix the flaky parser"
    long_words = "Supercalifragilistic " * 4
    title = bound_generated_title(long_words)
    assert len(title) <= 60 and title.count(" ") < 3
    assert len(bound_generated_title("x" * 80)) == 60


def test_previews_are_one_bounded_line() -> None:
    assert preview_of("a\n\n b") == "a b"
    long = preview_of("word " * 100)
    assert len(long) == 200 and long.endswith("…")
