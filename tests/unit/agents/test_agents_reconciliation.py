"""The reconciliation notice an agent gets after a turn that did not finish
cleanly says what the records show of it: the turn and how it ended, the
commands and tool calls with no recorded end, the files it changed."""

from __future__ import annotations

from mevedel_server.agents.excerpt import (
    NOTICE_NAMES,
    RECONCILIATION,
    reconciliation_notice,
)
from mevedel_server.store.content.transcript import (
    Outcome,
    Prompt,
    Settle,
    ToolCall,
    ToolResult,
    TurnBegin,
)


def _turn(turn: int = 2, *, settle: Outcome | None, reason: str | None = None) -> list:
    tid = f"t{turn}"
    records: list = [TurnBegin(turn_id="t1", turn=1, at=1), Settle(turn_id="t1", outcome=Outcome.COMPLETED, at=2),
                     TurnBegin(turn_id=tid, turn=turn, at=3), Prompt(turn_id=tid, text="build"),
                     ToolCall(turn_id=tid, call_id="a", name="Run make", arguments="{}", tool_kind="execute"),
                     ToolCall(turn_id=tid, call_id="b", name="Edit a.py", arguments="{}", tool_kind="edit"),
                     ToolCall(turn_id=tid, call_id="c", name="Run ls", arguments="{}", tool_kind="execute"),
                     ToolResult(turn_id=tid, call_id="c", output="ok")]
    if settle is not None:
        records.append(Settle(turn_id=tid, outcome=settle, at=4, reason=reason))
    return records


def test_an_interrupted_turn_names_its_unfinished_command_call_and_files():
    text = reconciliation_notice(_turn(settle=Outcome.INTERRUPTED), ["a.py", "b/c.txt"])
    assert text.startswith("[mevedel] Turn 2 did not finish cleanly: it was interrupted.")
    assert "'Run make'" in text and "'Run ls'" not in text  # the finished command is not named
    assert "no recorded result: 'Edit a.py'" in text
    assert "a.py, b/c.txt" in text and "Do not replay" in text and "newest user request" in text


def test_a_turn_that_never_settled_is_of_unknown_outcome_and_a_failed_one_says_why():
    assert "its outcome is unknown" in reconciliation_notice(_turn(settle=None))
    assert "Turn 2 did not finish cleanly: it failed (agent exited with status 5)." in reconciliation_notice(
        _turn(settle=Outcome.ERRORED, reason="agent exited with status 5"))


def test_a_resumed_session_after_a_completed_turn_says_so_and_long_lists_are_counted():
    text = reconciliation_notice(_turn(settle=Outcome.COMPLETED), [f"f{i}" for i in range(NOTICE_NAMES + 5)])
    assert "resumed after the process that held it stopped" in text and "turn, 2, had completed" in text
    assert "and 5 more" in text and f"f{NOTICE_NAMES}" not in text


def test_without_a_turn_the_general_notice_stands():
    assert reconciliation_notice([]) == RECONCILIATION
