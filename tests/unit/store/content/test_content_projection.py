"""The history projection: concise Markdown whose lines never move as the
conversation grows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.store.content.projection import Projection, project
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
)

SID = "2026-07-19T09-47-bf87b5dd793a"
T = "00000000000000a1"
U = "00000000000000a2"

CONVERSATION = [
    SegmentHeader(format_version=1, session_id=SID, segment=1, opened_at=1784454420, opened_by=SegmentOpening.START),
    TurnBegin(turn_id=T, turn=1, at=1784454432),
    Prompt(turn_id=T, text="Rename parse() to read().\n\nKeep tests green."),
    Reasoning(turn_id=T, text="private chain of thought"),
    ToolCall(turn_id=T, call_id="call-1", name="edit", arguments='{"path": "src/parser.py"}'),
    ToolResult(turn_id=T, call_id="call-1", output="```py\ndef read(): ...\n```\n"),
    Response(turn_id=T, text="# Done\nRenamed it."),
    Settle(turn_id=T, outcome=Outcome.COMPLETED, at=1784454440),
    TurnBegin(turn_id=U, turn=2, at=1784454500),
    Prompt(turn_id=U, text="Run the tests"),
    ToolCall(turn_id=U, call_id="call-2", name="bash", arguments='{"command": "pytest"}'),
    Mail(turn_id=U, mail_id="m-1", sender="agent://reviewer", text="Looks fine."),
    ToolResult(turn_id=U, call_id="call-2", output="boom", is_error=True),
    Settle(turn_id=U, outcome=Outcome.INTERRUPTED, at=1784454510, reason="the session was resumed\nwhile in flight"),
    SegmentClose(reason=SegmentClosing.COMPACTION, at=1784454600),
]

EXPECTED = """\
# Segment 1

## Turn 1 · 2026-07-19 09:47:12 UTC

**Prompt**

> Rename parse() to read().
>
> Keep tests green.

**Tool call** `edit` (call-1)

```
{"path": "src/parser.py"}
```

**Tool result** (call-1)

````
```py
def read(): ...
```
````

**Response**

\\# Done
Renamed it.

## Turn 2 · 2026-07-19 09:48:20 UTC

**Prompt**

> Run the tests

**Tool call** `bash` (call-2)

```
{"command": "pytest"}
```

**Mail** from agent://reviewer (m-1)

> Looks fine.

**Tool error** (call-2)

```
boom
```

*Turn 2 interrupted: the session was resumed while in flight*

*Segment closed by compaction · 2026-07-19 09:50:00 UTC*
"""


def test_snapshot_of_a_small_conversation() -> None:
    assert project(CONVERSATION) == EXPECTED


def test_reasoning_is_left_out() -> None:
    assert "private chain of thought" not in project(CONVERSATION)


def test_completed_turns_carry_no_outcome_line_and_errors_do() -> None:
    errored = [*CONVERSATION[:7], Settle(turn_id=T, outcome=Outcome.ERRORED, at=1784454440, reason="HTTP 500")]
    assert project(errored).endswith("*Turn 1 errored: HTTP 500*\n")
    assert "completed" not in project(CONVERSATION[:8])


def test_compacted_and_cleared_segments_say_where_they_come_from() -> None:
    compacted = [
        SegmentHeader(format_version=1, session_id=SID, segment=2, opened_at=1, opened_by=SegmentOpening.COMPACTION),
        Summary(summarized_segment=1, text="We renamed parse().", at=1),
    ]
    assert project(compacted) == "# Segment 2 (continues segment 1 after compaction)\n\n## Summary of segment 1\n\n> We renamed parse().\n"
    cleared = [SegmentHeader(format_version=1, session_id=SID, segment=3, opened_at=1, opened_by=SegmentOpening.CLEAR)]
    assert project(cleared) == "# Segment 3 (a new chat after /clear)\n"


def test_labels_stay_on_one_line() -> None:
    odd = [ToolCall(turn_id=T, call_id="a\nb", name="x\n# y", arguments="")]
    assert project(odd).split("\n")[0] == "**Tool call** `x # y` (a b)"


def test_times_beyond_the_calendar_still_render() -> None:
    assert project([TurnBegin(turn_id=T, turn=1, at=2**53)]) == f"## Turn 1 · target second {2**53}\n"


def test_projection_extends_in_place() -> None:
    projection = Projection()
    for record in CONVERSATION:
        projection.extend([record])
    assert projection.text == EXPECTED


turn_ids = st.sampled_from([T, U])
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
records = st.one_of(
    st.builds(TurnBegin, turn_id=turn_ids, turn=st.integers(1, 50), at=st.integers(0, 2**53)),
    st.builds(Prompt, turn_id=turn_ids, text=texts),
    st.builds(Response, turn_id=turn_ids, text=texts),
    st.builds(Reasoning, turn_id=turn_ids, text=texts),
    st.builds(ToolCall, turn_id=turn_ids, call_id=st.just("c"), name=st.just("n"), arguments=texts),
    st.builds(ToolResult, turn_id=turn_ids, call_id=st.just("c"), output=texts, is_error=st.booleans()),
    st.builds(Mail, turn_id=turn_ids, mail_id=st.just("m"), sender=st.just("s"), text=texts),
    st.builds(Settle, turn_id=turn_ids, outcome=st.sampled_from(Outcome), at=st.integers(0, 2**53), reason=st.none() | texts),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(records, max_size=12), st.lists(records, max_size=6))
def test_appending_records_never_moves_an_earlier_line(head: list, tail: list) -> None:
    before = project(head).split("\n")[:-1]
    after = project(head + tail).split("\n")[:-1]
    assert after[: len(before)] == before
    assert project(head + tail) == project(list(head + tail))  # deterministic
