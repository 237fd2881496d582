"""The agent engine's pure parts: how an ACP update stream becomes a turn's
records and live events, how the live feed coalesces and bounds its rate,
how an agent is chosen from the configuration, and the transcript excerpt a
new native conversation starts from."""

from __future__ import annotations

import asyncio
import json
import time

import acp
import pytest
from acp import schema

from mevedel_server.agents.config import (
    AgentConfig,
    AgentSpec,
    agents_problem,
    config_from_settings,
    load_cli_config,
)
from mevedel_server.agents.errors import AgentError
from mevedel_server.agents.excerpt import transcript_excerpt
from mevedel_server.agents.live import LiveEvent, LiveFeed
from mevedel_server.agents.recorder import TurnRecorder
from mevedel_server.store.content.transcript import (
    Outcome,
    Prompt,
    Response,
    Settle,
    ToolCall,
    TurnBegin,
)

TURN = "0123456789abcdef"


def recorder() -> tuple[TurnRecorder, list, list]:
    records: list = []
    batches: list = []
    feed = LiveFeed(batches.append, interval=0)
    return TurnRecorder(records.append, feed), records, batches


def start(call_id: str, **fields) -> schema.ToolCallStart:
    return schema.ToolCallStart(session_update="tool_call", tool_call_id=call_id, title=fields.pop("title", "Edit"), **fields)


def progress(call_id: str, **fields) -> schema.ToolCallProgress:
    return schema.ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id, **fields)


async def test_text_runs_coalesce_into_one_record_per_kind_and_order_is_kept():
    rec, records, _ = recorder()
    for update in (acp.update_agent_thought_text("think "), acp.update_agent_thought_text("more"),
                   acp.update_agent_message_text("Hel"), acp.update_agent_message_text("lo"),
                   acp.update_agent_thought_text("again")):
        rec.on_update(update)
    rec.finish("end")
    assert [(r.kind, r.text) for r in records] == [("reasoning", "think more"), ("response", "Hello"), ("reasoning", "again")]


async def test_a_native_call_id_is_admitted_once_and_its_first_final_status_is_its_result():
    rec, records, _ = recorder()
    rec.on_update(start("c1", kind="execute", raw_input={"cmd": "ls"}))
    rec.on_update(start("c1", title="Edit again"))  # a repeated start is an update
    rec.on_update(progress("c1", status="in_progress"))
    rec.on_update(progress("c1", status="completed", content=[schema.ContentToolCallContent(type="content", content=schema.TextContentBlock(type="text", text="out"))]))
    rec.on_update(progress("c1", status="failed"))  # after the result: live only
    rec.on_update(progress("c2", status="failed", title="Unannounced"))
    rec.on_update(start("x" * 300))
    rec.finish("the agent crashed")
    kinds = [(r.kind, r.call_id) for r in records]
    assert kinds[:4] == [("tool_call", "c1"), ("tool_result", "c1"), ("tool_call", "c2"), ("tool_result", "c2")]
    assert json.loads(records[0].arguments) == {"cmd": "ls"} and records[1].output == "out" and not records[1].is_error
    assert records[3].is_error
    long_call = records[4].call_id
    assert long_call.startswith("sha256-") and len(long_call) <= 256
    assert records[5].kind == "tool_result" and records[5].is_error and "the agent crashed" in records[5].output


async def test_a_sub_agent_task_is_matched_to_the_call_that_asked_for_it_once():
    """The caller's tool call a sub-agent's live activity nests under: by
    the call's reported arguments (however the agent wraps them), else the
    open call of the Agent tool not taken yet; each call is matched once, a
    settled one never. The match names the call's native id (the live
    events') and its record id (its tool_call record's)."""
    rec, _, _ = recorder()
    rec.on_update(start("a1", title="mcp__mevedel__Agent", status="in_progress", raw_input={"name": "one", "prompt": "First"}))
    rec.on_update(start("a2", title="Run a tool", status="in_progress",
                        raw_input={"server": "mevedel", "tool": "Agent", "arguments": {"name": "two", "prompt": "Second"}}))
    rec.on_update(start("a3", title="mevedel.Agent", status="in_progress"))
    rec.on_update(start("done", title="Agent", status="completed"))
    rec.on_update(start("other", title="Agents list", status="in_progress"))
    assert rec.delegating_call("two", "Second") == ("a2", "a2")
    assert rec.delegating_call("one", "First") == ("a1", "a1")
    # No arguments fit: the open Agent call that is not taken yet.
    assert rec.delegating_call("three", "Third") == ("a3", "a3")
    assert rec.delegating_call("one", "First") is None  # a1 is taken, "done" settled, "Agents" is another tool


async def test_parallel_agent_calls_without_their_arguments_are_matched_in_the_order_they_were_made():
    """Two Agent calls open at once whose reports carry no arguments: the
    tasks reach the tool in the order the calls were made, so the first
    task is the older call's, the second the newer's; a native id too long
    for a record is named by its record id for the task's record."""
    rec, records, _ = recorder()
    first, second = "a" * 300, "b2"
    rec.on_update(start(first, title="mcp__mevedel__Agent", status="in_progress"))
    rec.on_update(start(second, title="mcp__mevedel__Agent", status="in_progress"))
    matched = rec.delegating_call("one", "First")
    assert matched is not None and matched[0] == first
    assert matched[1] == records[0].call_id and matched[1].startswith("sha256-")
    assert rec.delegating_call("two", "Second") == (second, second)


async def test_plans_and_permissions_are_records_and_events():
    rec, records, batches = recorder()
    entries = [schema.PlanEntry(content="first  step", status="completed", priority="high"), schema.PlanEntry(content="second", status="pending", priority="low")]
    rec.on_update(schema.AgentPlanUpdate(session_update="plan", entries=entries))
    rec.record_permission("c9", "Run rm", "refused: declined", False)
    await asyncio.sleep(0)
    assert records[0].kind == "plan" and records[0].text == "- [x] first step\n- [ ] second"
    assert (records[1].kind, records[1].call_id, records[1].output, records[1].is_error) == ("permission", "c9", "refused: declined", True)
    events = [e for batch in batches for e in batch]
    assert [e.kind for e in events] == ["plan", "permission"]


async def test_the_live_feed_merges_a_burst_and_bounds_its_rate():
    sent: list = []  # (when, batch)
    feed = LiveFeed(lambda batch: sent.append((time.monotonic(), batch)), interval=0.05)
    feed.push(LiveEvent("response", text="a"))
    await asyncio.sleep(0)  # a lone event goes out on the next loop turn
    assert [[e.text for e in b] for _, b in sent] == [["a"]]
    for piece in "bcd":
        feed.push(LiveEvent("response", text=piece))
    feed.push(LiveEvent("tool_call", call_id="t", status="pending", title="T"))
    feed.push(LiveEvent("tool_call", call_id="t", status="completed"))
    for _ in range(500):  # bounded: a few seconds however loaded the machine
        if len(sent) == 2:
            break
        await asyncio.sleep(0.01)
    # The burst went out once, merged, and no sooner than one interval after
    # the batch before it (a loaded machine only makes it later).
    assert len(sent) == 2
    assert sent[1][0] - sent[0][0] >= 0.05
    merged = sent[1][1]
    assert [e.kind for e in merged] == ["response", "tool_call"] and merged[0].text == "bcd"
    assert merged[1].status == "completed" and merged[1].title == "T"


def test_choosing_an_agent_names_what_to_configure():
    spec = AgentSpec("one", ("prog",))
    assert AgentConfig(agents={"one": spec}).choose(None) is spec
    with pytest.raises(AgentError) as none:
        AgentConfig().choose(None)
    assert none.value.kind == "agent-not-configured" and '"agents"' in none.value.action
    two = AgentConfig(agents={"one": spec, "two": AgentSpec("two", ("p2",))}, default_agent="two")
    assert two.choose(None).name == "two" and two.choose(None, remembered="one").name == "one"
    with pytest.raises(AgentError) as unknown:
        two.choose("three")
    assert "configured: one, two" in unknown.value.reason
    assert AgentSpec("a", ("x", "y")).fingerprint != AgentSpec("a", ("x", "z")).fingerprint


@pytest.mark.parametrize("agents, problem", [
    ([], "must be an object"),
    ({"": {"command": ["x"]}}, "agent name"),
    ({"a": {"command": []}}, "a.command must be a non-empty list"),
    ({"a": {"command": ["x", 3]}}, "a.command must be a non-empty list"),
    ({"a": {"command": ["x"], "env": {"A=B": "c"}}}, "a.env must map"),
])
def test_bad_agent_settings_are_refused_naming_the_entry(agents, problem):
    assert problem in agents_problem(agents)


def test_the_cli_config_file(tmp_path):
    assert load_cli_config(tmp_path / "absent.json").agents == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(AgentError) as broken:
        load_cli_config(bad)
    assert str(bad) in broken.value.authored
    with pytest.raises(AgentError) as policy:
        config_from_settings({"permissions": "sometimes"}, where="f")
    assert "permissions" in policy.value.authored


def test_an_excerpt_keeps_the_newest_turns_within_its_budget():
    records = []
    for turn in range(1, 6):
        tid = f"{turn:016x}"
        records += [TurnBegin(turn_id=tid, turn=turn, at=1), Prompt(turn_id=tid, text=f"question {turn}"),
                    ToolCall(turn_id=tid, call_id="c", name="Edit", arguments=""),
                    Response(turn_id=tid, text=f"answer {turn}"),
                    Settle(turn_id=tid, outcome=Outcome.INTERRUPTED if turn == 5 else Outcome.COMPLETED, at=2)]
    text = transcript_excerpt(records, budget=120)
    assert "question 5" in text and "question 1" not in text and "earlier turn(s) omitted" in text
    assert "(this turn was interrupted)" in text and "do not repeat its actions" in text
    assert transcript_excerpt([]) is None
