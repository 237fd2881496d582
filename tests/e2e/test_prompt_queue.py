"""Queued prompts and steering through the real server and the scripted ACP
agent (a real subprocess): a prompt sent while a turn runs waits, editable
and cancellable, and goes when the turn settles; steering cancels the turn
and goes at once; what is queued survives a restart, and a restart sends
nothing on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from deadlines import wait_for
from mevedel_protocol import methods

from .conftest import SERVER, collect, initialize_params, request
from .test_agent_turns import Watch, configure, events, prompt


def prompts_received(log: Path) -> list[str]:
    """The last text block of each prompt the agent received (the person's text)."""
    texts = []
    for event in events(log):
        if event["event"] == "prompt":
            blocks = [b for b in event["params"]["prompt"] if b.get("type") == "text"]
            texts.append(blocks[-1]["text"])
    return texts


async def saying(watch: Watch, text: str) -> None:
    """The agent got the prompt and answers (its turn runs)."""
    await wait_for(lambda: text in watch.text(), f"the agent saying {text!r}")


def settled(watch: Watch, turn: int) -> dict | None:
    return next((u for u in watch.updates if u["phase"] == "settled" and u.get("turn") == turn), None)


async def test_a_prompt_sent_while_a_turn_runs_waits_is_edited_or_cancelled_and_goes_when_the_turn_settles(client, workspace):
    release = workspace.parent / "release-first"
    watch = Watch(client)
    queue_seen = collect(client, methods.QUEUE_DID_CHANGE)
    log = configure(client, workspace, [[{"say": "working"}, {"wait_file": str(release)}, {"say": " done"}], [{"echo_prompt": True}]])
    first = asyncio.ensure_future(prompt(client, "first"))
    await saying(watch, "working")

    # A plain prompt now is refused, and says what to do instead.
    with pytest.raises(JsonRpcException) as caught:
        await prompt(client, "too soon")
    assert "already has an agent turn running" in caught.value.message and "queue" in caught.value.message

    second = await request(client, methods.QUEUE_ADD, {"text": "second"})
    third = await request(client, methods.QUEUE_ADD, {"text": "third"})
    assert second["state"] == third["state"] == "queued" and second["kind"] == "follow-up"
    listed = await request(client, methods.QUEUE_LIST, {})
    assert [e["text"] for e in listed["entries"]] == ["second", "third"] and listed["paused"] is False
    # Accepted into the queue, they are in the input history at once.
    assert (await request(client, methods.INPUT_HISTORY, {}))["entries"][-2:] == ["second", "third"]
    assert queue_seen and [e["text"] for e in queue_seen[-1]["entries"]] == ["second", "third"]

    edited = await request(client, methods.QUEUE_EDIT, {"entryId": second["entryId"], "text": "second, edited"})
    assert edited["text"] == "second, edited"
    left = await request(client, methods.QUEUE_CANCEL, {"entryId": third["entryId"]})
    assert [e["text"] for e in left["entries"]] == ["second, edited"]
    with pytest.raises(JsonRpcException) as caught:
        await request(client, methods.QUEUE_EDIT, {"entryId": third["entryId"], "text": "x"})
    assert "is not queued" in caught.value.message
    # Kept durably, one file per entry, before the person was told.
    sid = listed["sessionId"]
    kept = list((workspace / ".mevedel" / "sessions" / sid / ".pending-input").glob("*.json"))
    assert len(kept) == 1 and "second, edited" in kept[0].read_text()

    assert prompts_received(log) == ["first"]  # nothing went while the turn ran
    release.touch()
    assert (await first)["outcome"] == "completed"
    await wait_for(lambda: settled(watch, 2) is not None, "the queued prompt's turn")
    assert settled(watch, 2)["outcome"] == "completed"
    assert prompts_received(log) == ["first", "second, edited"]
    shown = await request(client, methods.TURN_SHOW, {"turn": 2})
    assert shown["prompt"] == "second, edited"
    await wait_for(lambda: queue_seen[-1]["entries"] == [], "the queue emptied")
    assert (await request(client, methods.QUEUE_LIST, {}))["entries"] == []
    assert not list((workspace / ".mevedel" / "sessions" / sid / ".pending-input").glob("*.json"))


async def test_steering_cancels_the_running_turn_and_sends_its_text_at_once(client, workspace):
    watch = Watch(client)
    log = configure(client, workspace, [[{"say": "going the wrong way"}, {"wait_cancel": 60}], [{"echo_prompt": True}]])
    first = asyncio.ensure_future(prompt(client, "first"))
    await saying(watch, "going the wrong way")
    queued = await request(client, methods.QUEUE_ADD, {"text": "after the steering"})
    steer = await request(client, methods.QUEUE_STEER, {"text": "go the other way"})
    assert steer["kind"] == "steer"
    assert (await first)["outcome"] == "interrupted"
    await wait_for(lambda: settled(watch, 2) is not None, "the steering's turn")
    # Steering first, then the follow-up queued before it.
    await wait_for(lambda: settled(watch, 3) is not None, "the follow-up's turn")
    assert prompts_received(log) == ["first", "go the other way", "after the steering"]
    assert settled(watch, 2)["outcome"] == settled(watch, 3)["outcome"] == "completed"
    assert queued["entryId"] != steer["entryId"]


async def test_queued_input_survives_a_restart_which_sends_nothing_on_its_own(workspace):
    release = workspace.parent / "never"
    server = await SERVER.start()
    await server.initialize_session(initialize_params(workspace))
    watch = Watch(server)
    # The turn ignores the cancel the steering sends: the steering is still
    # waiting when the server stops.
    log = configure(server, workspace, [[{"say": "long"}, {"ignore_cancel": True}, {"wait_file": str(release)}], [{"echo_prompt": True}]])
    first = asyncio.ensure_future(prompt(server, "first"))
    await saying(watch, "long")
    follow = await request(server, methods.QUEUE_ADD, {"text": "a follow-up", "attachments": ["notes.txt"]})
    steering = await request(server, methods.QUEUE_STEER, {"text": "steering in flight"})
    assert steering["state"] == "queued"
    sid = (await request(server, methods.QUEUE_LIST, {}))["sessionId"]
    await wait_for(lambda: any(e["event"] == "cancel" for e in events(log)), "the steering's cancel")
    # The server stops while the turn runs and both wait.
    await server.shutdown_session()
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert prompts_received(log) == ["first"]

    again = await SERVER.start()
    try:
        await again.initialize_session(initialize_params(workspace))
        watch = Watch(again)
        configure(again, workspace, [[{"echo_prompt": True}]])
        await request(again, methods.SESSION_OPEN, {"sessionId": sid})
        state = await request(again, methods.QUEUE_LIST, {"sessionId": sid})
        shown = [(e["text"], e["state"]) for e in state["entries"]]
        # Steering not delivered (or sent as the server stopped) needs
        # review; the follow-up is queued as it was, its attachment kept.
        assert shown[-1] == ("a follow-up", "queued") and state["entries"][-1]["attachments"] == ["notes.txt"]
        assert state["entries"][-1]["entryId"] == follow["entryId"]
        assert shown == [("steering in flight", "review"), ("a follow-up", "queued")] and state["paused"] is True
        assert "server stopped" in state["entries"][0]["reason"]
        # Nothing was sent on its own.
        assert prompts_received(log) == ["first"]
        await request(again, methods.QUEUE_CANCEL, {"sessionId": sid, "entryId": state["entries"][0]["entryId"]})
        assert (await request(again, methods.QUEUE_LIST, {"sessionId": sid}))["paused"] is False
        assert prompts_received(log) == ["first"]
        # "Send now" (steering by the entry) sends it.
        sent_before = len(prompts_received(log))
        (workspace / "notes.txt").write_text("attached\n")
        await request(again, methods.QUEUE_STEER, {"sessionId": sid, "entryId": follow["entryId"]})
        await wait_for(lambda: any(u["phase"] == "settled" and u.get("turn") for u in watch.updates), "the sent entry's turn")
        assert prompts_received(log)[sent_before:] == ["a follow-up"]
        await wait_for(lambda: not list((workspace / ".mevedel" / "sessions" / sid / ".pending-input").glob("*.json")), "the entry removed")
    finally:
        await again.shutdown_session()


async def test_a_queued_prompt_the_server_cannot_send_comes_back_for_review_and_pauses_delivery(client, workspace):
    release = workspace.parent / "release"
    watch = Watch(client)
    queue_seen = collect(client, methods.QUEUE_DID_CHANGE)
    log = configure(client, workspace, [[{"say": "working"}, {"wait_file": str(release)}], [{"echo_prompt": True}]])
    first = asyncio.ensure_future(prompt(client, "first"))
    await saying(watch, "working")
    broken = await request(client, methods.QUEUE_ADD, {"text": "with a gone file", "attachments": ["gone.txt"]})
    behind = await request(client, methods.QUEUE_ADD, {"text": "behind it"})
    release.touch()
    assert (await first)["outcome"] == "completed"
    await wait_for(lambda: queue_seen and queue_seen[-1]["paused"], "the refused entry back for review")
    state = await request(client, methods.QUEUE_LIST, {})
    assert [(e["entryId"], e["state"]) for e in state["entries"]] == [(broken["entryId"], "review"), (behind["entryId"], "queued")]
    assert "gone.txt" in state["entries"][0]["reason"] and "does not exist" in state["entries"][0]["reason"]
    assert prompts_received(log) == ["first"]  # nothing behind it went either
    # Fixed by editing? The attachment is the problem: cancel it, and the
    # next turn's settlement sends what waited behind it.
    await request(client, methods.QUEUE_CANCEL, {"entryId": broken["entryId"]})
    assert (await prompt(client, "next"))["outcome"] == "completed"
    await wait_for(lambda: prompts_received(log)[-1:] == ["behind it"], "the follow-up sent after the next turn")


async def test_a_prompt_while_the_agent_still_starts_is_refused_not_run_beside_it(client, workspace):
    watch = Watch(client)
    started = workspace.parent / "started"  # the agent's initialize ends once the test made it
    log = configure(client, workspace, [[{"echo_prompt": True}]], on_initialize=[{"wait_file": str(started)}])
    first = asyncio.ensure_future(prompt(client, "first"))
    await wait_for(lambda: any(u["phase"] == "starting" for u in watch.updates), "the agent starting")
    with pytest.raises(JsonRpcException) as caught:
        await prompt(client, "beside it")
    assert "already has an agent turn running" in caught.value.message
    started.touch()
    assert (await first)["outcome"] == "completed"
    assert prompts_received(log) == ["first"]
    assert sum(1 for e in events(log) if e["event"] == "start") == 1  # one agent process
