"""Inspection: segments enumerated from a manifest's logical paths alone,
read with precise errors, described for a picker."""

from __future__ import annotations

import itertools

import pytest

from mevedel_server.store.content.inspect import (
    describe_segment,
    list_segments,
    read_segment,
)
from mevedel_server.store.content.transcript import (
    Outcome,
    Response,
    SegmentError,
    segment_part_path,
)
from mevedel_server.store.content.turns import Conversation

SID = "2026-07-19T09-47-bf87b5dd793a"


def saved_artifacts() -> dict[str, bytes]:
    ids = (f"{n:016x}" for n in itertools.count(1))
    c = Conversation.new(session_id=SID, workspace_id="1" * 64, at=1, turn_ids=lambda: next(ids))
    for n in range(3):
        turn = c.begin_turn(f"question {n}", at=10 + n)
        c.append(Response(turn_id=turn, text="answer"))
        c.settle(Outcome.COMPLETED, at=10 + n)
        if n == 0:
            c.rotate_segment("summary 0", at=20)
        elif n == 1:
            c.clear(at=21)
    return dict(c.artifacts_for_save().artifacts)


def test_segments_are_listed_in_order_from_logical_paths() -> None:
    artifacts = saved_artifacts()
    sources = list_segments(reversed(list(artifacts)))
    assert [s.number for s in sources] == [1, 2, 3]
    assert sources[0].name == "segment-0001.chat.jsonl"
    assert sources[0].parts == (segment_part_path(1, 1),)
    assert all(s.contiguous for s in sources)


def test_a_missing_segment_stays_a_visible_gap() -> None:
    paths = [p for p in saved_artifacts() if not p.startswith("segment-0002/")]
    assert [s.number for s in list_segments(paths)] == [1, 3]


def test_reading_and_describing_segments() -> None:
    artifacts = saved_artifacts()
    rows = []
    for source in list_segments(artifacts):
        records = read_segment(source, [artifacts[p] for p in source.parts])
        rows.append(describe_segment(source.number, records))
    assert [(r.status, r.latest_prompt, r.turns, r.closed_by) for r in rows] == [
        ("readable", "question 0", 1, "compaction"),
        ("readable", "question 1", 1, "clear"),
        ("readable", "question 2", 1, None),
    ]
    assert describe_segment(4).status == "missing"
    assert describe_segment(2, error="line 3: malformed").status == "unreadable"


def test_unreadable_segments_report_line_and_reason() -> None:
    artifacts = saved_artifacts()
    (source,) = [s for s in list_segments(artifacts) if s.number == 2]
    data = artifacts[source.parts[0]]
    broken = data.replace(b'"kind":"summary"', b'"kind":"sumary"', 1)
    with pytest.raises(SegmentError) as caught:
        read_segment(source, [broken])
    assert caught.value.line == 2 and "sumary" in caught.value.reason
    with pytest.raises(SegmentError, match="truncated"):
        read_segment(source, [data[:-1]])
    gapped = list_segments([segment_part_path(1, 1), segment_part_path(1, 3)])[0]
    assert not gapped.contiguous
    with pytest.raises(SegmentError, match="part of this segment is missing"):
        read_segment(gapped, [b"", b""])
