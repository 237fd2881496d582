"""Snapshots cut at every boundary of a session with compactions, a /clear
and parts that rotate restore as exactly the prefix conversation, and the
structural check refuses broken snapshots."""

from __future__ import annotations

import msgspec
import pytest

from mevedel_server.store.content.sidecar import (
    SIDECAR_PATH,
    encode_sidecar,
    load_sidecar,
)
from mevedel_server.store.content.transcript import Outcome, Response, segment_part_path
from mevedel_server.store.content.turns import ContentError, Conversation
from mevedel_server.store.transactions.snapshot_cut import (
    Boundary,
    SessionState,
    check_snapshot,
    cut_snapshot,
    locate,
    whole,
)

SID = "2026-07-19T09-47-0000000000aa"
CHILD = "2026-07-19T09-48-0000000000bb"


def long_session() -> Conversation:
    c = Conversation.new(session_id=SID, workspace_id="f" * 64, at=100)
    for n in range(1, 13):
        turn_id = c.begin_turn(f"prompt {n}", at=100 + n)
        if n % 3 == 0:
            c.capture_file(f"f{n % 4}.txt", f"before {n}".encode())
        # Long responses make the segment rotate through several parts.
        c.append(Response(turn_id=turn_id, text="x" * 40_000))
        c.settle(Outcome.INTERRUPTED if n == 5 else Outcome.COMPLETED, at=100 + n, current={p: f"after {n}".encode() for p in c.tracked_files()})
        if n == 4:
            c.rotate_segment("summary of 1-4", at=200)
        if n == 8:
            c.clear(at=300)
    return c


@pytest.fixture(scope="module")
def state() -> SessionState:
    conversation = long_session()
    return SessionState(SID, None, dict(conversation.artifacts_for_save().artifacts))


def test_the_fixture_spans_segments_and_parts(state):
    assert state.sidecar.current_segment == 3
    assert max(state.sidecar.layout.segment_parts) >= 3


@pytest.mark.parametrize("side", ["after", "before"])
def test_every_boundary_restores_as_the_prefix(state, side):
    full = Conversation.restore(state.artifacts)
    for turn in range(1, state.sidecar.total_turn_count + 1):
        boundary = Boundary.after(turn) if side == "after" else Boundary.before(turn)
        cut = locate(state, boundary)
        kept = boundary.kept_turns
        artifacts = cut_snapshot(state, cut, {"updated_at": 999})
        restored = Conversation.restore(artifacts)
        assert restored.prompt_index() == full.prompt_index()[:kept], boundary
        assert restored.file_snapshots() == [r for r in full.file_snapshots() if r.turn <= kept], boundary
        assert restored.sidecar.total_turn_count == kept
        assert [c.last_segment for c in restored.sidecar.chapters] == [c for c in [2] if c < cut.segment]
        # Unchanged parts keep their exact bytes.
        for number in range(1, cut.segment):
            for part in range(1, state.sidecar.layout.segment_parts[number - 1] + 1):
                path = segment_part_path(number, part)
                assert artifacts[path] is state.artifacts[path]
        # The restored conversation takes a new turn at once.
        restored.begin_turn("next", at=1000)


def test_a_renamed_whole_snapshot_names_the_child_everywhere(state):
    artifacts = cut_snapshot(state, whole(state), {"session_id": CHILD, "updated_at": 999})
    restored = Conversation.restore(artifacts)
    assert restored.session_id == CHILD
    assert all(restored.records(n)[0].session_id == CHILD for n in (1, 2, 3))
    assert restored.prompt_index() == Conversation.restore(state.artifacts).prompt_index()


def test_the_structural_check_refuses_broken_snapshots(state):
    good = cut_snapshot(state, locate(state, Boundary.after(6)), {})
    check_snapshot(good)
    missing = dict(good)
    del missing[segment_part_path(2, 1)]
    with pytest.raises(ContentError, match="does not hold it"):
        check_snapshot(missing)
    stray = dict(good, **{segment_part_path(3, 1): good[segment_part_path(2, 1)]})
    with pytest.raises(ContentError, match="does not name"):
        check_snapshot(stray)
    foreign = dict(good)
    sidecar = load_sidecar(good[SIDECAR_PATH])
    foreign[SIDECAR_PATH] = encode_sidecar(msgspec.structs.replace(sidecar, session_id=CHILD))
    with pytest.raises(ContentError, match="header does not name"):
        check_snapshot(foreign)
    counted = dict(good)
    counted[SIDECAR_PATH] = encode_sidecar(msgspec.structs.replace(sidecar, file_snapshot_count=sidecar.file_snapshot_count - 1))
    with pytest.raises(ContentError, match="index lengths"):
        check_snapshot(counted)
    history = next(p for p in good if p.startswith("file-history/"))
    corrupt = dict(good, **{history: b"not the content"})
    with pytest.raises(ContentError, match="SHA-256"):
        check_snapshot(corrupt)
    closed = dict(good)
    last = segment_part_path(2, sidecar.layout.segment_parts[1])
    closed[last] = good[last] + b'{"kind":"segment_close","reason":"compaction","at":5}\n'
    with pytest.raises(ContentError, match="closed"):
        check_snapshot(closed)
