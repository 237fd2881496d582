"""Transcript segments: record codec, append-only encoding, ordering checks,
bounded parts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.store.content.transcript import (
    PART_LIMIT,
    LineLog,
    Mail,
    Outcome,
    Prompt,
    Reasoning,
    Response,
    SegmentClose,
    SegmentClosing,
    SegmentError,
    SegmentHeader,
    SegmentOpening,
    Settle,
    Summary,
    ToolCall,
    ToolResult,
    TranscriptError,
    TurnBegin,
    append_bytes,
    decode_segment,
    encode_records,
    parse_segment_part,
    segment_name,
    segment_number,
    segment_part_path,
)

SID = "2026-07-19T09-47-bf87b5dd793a"
T1 = "00000000000000a1"
T2 = "00000000000000a2"


def header(segment: int = 1, opened_by: SegmentOpening = SegmentOpening.START) -> SegmentHeader:
    return SegmentHeader(format_version=1, session_id=SID, segment=segment, opened_at=10, opened_by=opened_by)


def one_turn(turn_id: str = T1, turn: int = 1) -> list:
    return [
        TurnBegin(turn_id=turn_id, turn=turn, at=11),
        Prompt(turn_id=turn_id, text="Rename the module"),
        Reasoning(turn_id=turn_id, text="think"),
        ToolCall(turn_id=turn_id, call_id="c1", name="edit", arguments='{"path": "a.py"}'),
        ToolResult(turn_id=turn_id, call_id="c1", output="ok"),
        Response(turn_id=turn_id, text="Done."),
        Settle(turn_id=turn_id, outcome=Outcome.COMPLETED, at=12),
    ]


def test_round_trip_of_a_segment() -> None:
    records = [header(), *one_turn()]
    assert decode_segment(encode_records(records)) == records


def test_append_keeps_the_old_bytes_and_adds_only_new_lines() -> None:
    first = encode_records([header(), *one_turn()])
    grown = append_bytes(first, one_turn(T2, 2))
    assert grown[: len(first)] == first
    assert grown[len(first) :] == encode_records(one_turn(T2, 2))
    assert len(decode_segment(grown)) == 1 + 2 * len(one_turn())


def test_append_refuses_an_unterminated_segment() -> None:
    with pytest.raises(TranscriptError):
        append_bytes(b'{"kind":"segment"', [])


def test_text_that_is_not_unicode_is_refused_at_encoding() -> None:
    with pytest.raises(TranscriptError, match="Response record holds text that is not valid Unicode"):
        encode_records([Response(turn_id=T1, text="\udc80")])


@pytest.mark.parametrize(
    ("data", "line", "reason"),
    [
        (b"", None, "empty"),
        (encode_records([header()])[:-1], 1, "truncated"),
        (encode_records([header()]) + b'{"kind":"turn_begin"', 2, "truncated"),
        (encode_records([header()]) + b"not json\n", 2, "malformed"),
        (encode_records([header()]) + b'{"kind":"poem","text":"x"}\n', 2, "Invalid value 'poem'"),
        (encode_records([header()]) + b'{"kind":"turn_begin","turn_id":"' + T1.encode() + b'","turn":1,"at":1,"x":1}\n', 2, "unknown field `x`"),
        (encode_records([header()]) + b'{"kind":"turn_begin","turn_id":"' + T1.encode() + b'","turn":1,"at":1.5}\n', 2, "Expected `int`, got `float`"),
        (encode_records([header()]) + b'{"kind":"turn_begin","turn_id":"' + T1.encode() + b'","turn":1,"at":NaN}\n', 2, "malformed"),
        (b'{"kind":"segment","session_id":"' + SID.encode() + b'","segment":1,"opened_at":1,"opened_by":"start"}\n', 1, "missing required field `format_version`"),
        (b'{"kind":"segment","format_version":2,"session_id":"' + SID.encode() + b'","segment":1,"opened_at":1,"opened_by":"start"}\n', 1, "format_version"),
    ],
)
def test_bad_bytes_name_the_line_and_the_reason(data: bytes, line: int | None, reason: str) -> None:
    with pytest.raises(SegmentError) as caught:
        decode_segment(data, label="segment-0001.chat.jsonl")
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith("segment-0001.chat.jsonl")


@pytest.mark.parametrize(
    ("records", "line", "reason"),
    [
        ([*one_turn()], 1, "first line must be the segment header"),
        ([header(), Prompt(turn_id=T1, text="x")], 2, "outside any turn"),
        ([header(), TurnBegin(turn_id=T1, turn=1, at=1), Response(turn_id=T1, text="x")], 3, "before its prompt"),
        ([header(), *one_turn()[:2], Prompt(turn_id=T1, text="again")], 4, "second prompt"),
        ([header(), *one_turn()[:2], Response(turn_id=T2, text="x")], 4, "names turn"),
        ([header(), *one_turn()[:2], TurnBegin(turn_id=T2, turn=2, at=1)], 4, "before turn"),
        ([header(), *one_turn()[:2], SegmentClose(reason=SegmentClosing.CLEAR, at=1)], 4, "unsettled"),
        ([header(), SegmentClose(reason=SegmentClosing.CLEAR, at=1), *one_turn()], 3, "follows the segment_close"),
        ([header(2, SegmentOpening.COMPACTION), *one_turn()], 2, "must begin with its summary"),
        ([header(), Summary(summarized_segment=1, text="s", at=1)], 2, "compacted segment"),
        ([header(), TurnBegin(turn_id=T1, turn=1, at=1)], 2, "has no prompt"),
    ],
)
def test_out_of_order_segments_are_refused(records: list, line: int, reason: str) -> None:
    with pytest.raises(SegmentError) as caught:
        decode_segment(encode_records(records))
    assert caught.value.line == line
    assert reason in caught.value.reason


def test_header_must_match_the_expected_segment_number() -> None:
    with pytest.raises(SegmentError, match="names segment 1, not 2"):
        decode_segment(encode_records([header()]), expected=2)


def test_a_compacted_segment_opens_with_the_summary_of_its_predecessor() -> None:
    records = [header(3, SegmentOpening.COMPACTION), Summary(summarized_segment=2, text="so far", at=5), *one_turn()]
    assert decode_segment(encode_records(records)) == records
    wrong = [header(3, SegmentOpening.COMPACTION), Summary(summarized_segment=1, text="so far", at=5)]
    with pytest.raises(SegmentError, match="not the predecessor"):
        decode_segment(encode_records(wrong))


def test_segment_names_and_part_paths() -> None:
    assert segment_name(1) == "segment-0001.chat.jsonl"
    assert segment_number("segment-0042.chat.jsonl") == 42
    assert segment_number("segment-0000.chat.jsonl") is None
    assert segment_number("segment-1.chat.jsonl") is None
    assert segment_part_path(2, 3) == "segment-0002/part-000003.chat.jsonl"
    assert parse_segment_part("segment-0002/part-000003.chat.jsonl") == (2, 3)
    assert parse_segment_part("segment-0002/part-000000.chat.jsonl") is None
    assert parse_segment_part("segment-0002.chat.jsonl") is None
    with pytest.raises(ValueError):
        segment_name(10000)


def test_line_log_closes_parts_at_the_limit_and_never_rewrites_them() -> None:
    log = LineLog(part_limit=100)
    line = b"x" * 59 + b"\n"
    log.append(line)
    log.append(line)  # the part now holds 120 bytes: closed
    first = log.parts()
    log.append(line)
    after = log.parts()
    assert len(after) == 2
    assert after[0] is first[0]  # the closed part is the very same object
    assert after[1] == line
    log.replace_last(b"y\n")
    assert log.parts()[0] is first[0]
    assert log.parts()[1] == b"y\n"
    assert log.lines() == [line, line, b"y\n"]


def test_line_log_keeps_stored_part_boundaries() -> None:
    parts = [b"a\nb\n", b"c\n"]
    log = LineLog.from_parts(parts, label="segment-0001.chat.jsonl")
    assert log.parts()[0] is parts[0] and log.parts()[1] is parts[1]
    assert len(log) == 3
    with pytest.raises(SegmentError, match="part 2 does not end with a complete line"):
        LineLog.from_parts([b"a\n", b"b"], label="segment-0001.chat.jsonl")


def test_default_part_limit_is_bounded() -> None:
    assert 4 * 1024 <= PART_LIMIT <= 1024 * 1024


# Property: every record survives encoding and decoding unchanged.

turn_ids = st.from_regex(r"\A[0-9a-f]{16}\Z")
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
seconds = st.integers(min_value=0, max_value=2**53)

records = st.one_of(
    st.builds(TurnBegin, turn_id=turn_ids, turn=st.integers(1, 2**53), at=seconds, reminder=st.booleans()),
    st.builds(Prompt, turn_id=turn_ids, text=texts),
    st.builds(Response, turn_id=turn_ids, text=texts),
    st.builds(Reasoning, turn_id=turn_ids, text=texts),
    st.builds(ToolCall, turn_id=turn_ids, call_id=names, name=names, arguments=texts),
    st.builds(ToolResult, turn_id=turn_ids, call_id=names, output=texts, is_error=st.booleans()),
    st.builds(Mail, turn_id=turn_ids, mail_id=names, sender=names, text=texts),
    st.builds(Summary, summarized_segment=st.integers(1, 9999), text=texts, at=seconds),
    st.builds(Settle, turn_id=turn_ids, outcome=st.sampled_from(Outcome), at=seconds, reason=st.none() | texts),
    st.builds(SegmentClose, reason=st.sampled_from(SegmentClosing), at=seconds),
    st.builds(SegmentHeader, format_version=st.just(1), session_id=st.just(SID), segment=st.integers(1, 9999), opened_at=seconds, opened_by=st.sampled_from(SegmentOpening)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(records, max_size=8))
def test_records_round_trip(items: list) -> None:
    from mevedel_server.store.content.transcript import decode_lines

    data = encode_records(items)
    assert data.count(b"\n") == len(items)  # one line per record, whatever the text
    assert decode_lines(data.split(b"\n")[:-1]) == items
