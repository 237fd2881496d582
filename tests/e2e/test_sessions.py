"""Sessions and turns over stdio: create, the turn lifecycle, listing turns,
history://root through mevedel/resource/read, rename, didChange, the
takeover question through window/showMessageRequest, commands, and a second
server that can only join."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from deadlines import wait_for
from holder_process import holding_process, kill
from lease_expiry import lease_expired
from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity, observe_lease
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

from .conftest import (
    SERVER,
    answering,
    collect,
    initialize_params,
    never_answering,
    request,
)


async def failure(client, method: str, params) -> dict:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, method, params)
    return caught.value.data


async def expired_session_of_another_client(workspace: Path, prompt: str) -> str:
    """A saved session whose owner (another client) stopped without
    releasing its lease, and whose lease has expired by the target clock."""
    other = SessionService(LocalTarget(workspace), ClientIdentity("gone-client", "old-laptop"), lease_seconds=1)
    sid = (await other.sessions.create()).session_id
    await other.turns.begin_turn(sid, prompt)
    await other.turns.append(sid, EvidenceInput("response", text="an answer"))
    await other.turns.settle(sid)
    await other.sessions.detach()
    await lease_expired(workspace, sid)
    return sid


async def test_create_run_turns_and_read_history(client, workspace):
    changes = collect(client, methods.SESSION_DID_CHANGE)
    created = await request(client, methods.SESSION_CREATE, {"name": "E2E session"})
    sid = created["sessionId"]
    assert created["displayName"] == "E2E session" and created["current"] and not created["materialized"]
    listed = await request(client, methods.SESSION_LIST, {})
    rows = {s["sessionId"]: s for s in listed["sessions"]}
    assert (rows[sid]["action"], rows[sid]["published"], rows[sid]["current"]) == ("Switch", False, True)

    begun = await request(client, methods.TURN_BEGIN, {"prompt": "Tidy notes.md"})
    assert begun == {"sessionId": sid, "turn": 1, "turnId": begun["turnId"], "reminder": False}
    (workspace / "tracked.txt").write_text("before\n")
    captured = await request(client, methods.TURN_CAPTURE, {"path": "tracked.txt"})
    assert captured == {"path": "tracked.txt", "state": "present", "size": 7}
    await request(client, methods.TURN_APPEND, {"kind": "tool_call", "callId": "c1", "name": "edit", "arguments": "{}"})
    await request(client, methods.TURN_APPEND, {"kind": "tool_result", "callId": "c1", "output": "edited"})
    appended = await request(client, methods.TURN_APPEND, {"kind": "response", "text": "Tidied the notes."})
    assert appended == {"sessionId": sid, "turn": 1, "kind": "response"}

    live = await request(client, methods.RESOURCE_READ, {"address": "history://root", "view": "plain"})
    assert "> Tidy notes.md" in live["text"] and "Tidied the notes." in live["text"]  # unsaved, live
    hits = await request(client, methods.RESOURCE_GREP, {"address": "history://root", "pattern": "Tidied"})
    assert [m["address"] for m in hits["matches"]] == ["history://root"]
    assert not (workspace / ".mevedel" / "sessions" / sid).exists()

    (workspace / "tracked.txt").write_text("after\n")
    settled = await request(client, methods.TURN_SETTLE, {})
    assert settled == {"sessionId": sid, "committed": True, "materialized": True, "turn": 1}
    await wait_for(lambda: any(c["reason"] == "settled" for c in changes), "a settled didChange")
    assert changes[-1] == {
        "workspaceFolder": workspace.as_uri(),
        "sessionId": sid,
        "displayName": "E2E session",
        "reason": "settled",
        "settledTurns": 1,
        "access": "writable",
    }

    turns = await request(client, methods.TURN_LIST, {})
    assert [(t["turn"], t["state"], t["prompt"], t["toolCalls"]) for t in turns["turns"]] == [
        (1, "completed", "Tidy notes.md", 1)
    ]
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    assert [item["kind"] for item in shown["items"]] == ["tool_call", "tool_result", "response"]
    assert shown["prompt"] == "Tidy notes.md" and "**Tool call** `edit`" in shown["markdown"]

    renamed = await request(client, methods.SESSION_RENAME, {"name": "  Notes   tidy-up "})
    assert renamed["displayName"] == "Notes tidy-up"
    await wait_for(lambda: any(c["reason"] == "renamed" for c in changes), "a renamed didChange")
    assert [c["displayName"] for c in changes if c["reason"] == "renamed"] == ["Notes tidy-up"]

    saved = await request(client, methods.RESOURCE_READ, {"address": "history://saved", "view": "plain"})
    assert saved["text"] == f"history://saved/{sid}/segment-0001.chat.jsonl"
    segment = await request(client, methods.RESOURCE_READ, {"address": f"history://saved/{sid}/segment-0001.chat.jsonl"})
    assert "Tidied the notes." in segment["text"]

    # work:// session scope resolves against the open session's directory.
    patch = "*** Begin Patch\n*** Add File: work://plans/next.md\n+next step\n*** End Patch\n"
    await request(client, methods.RESOURCE_APPLY_PATCH, {"patch": patch})
    assert (workspace / ".mevedel" / "sessions" / sid / "local" / "plans" / "next.md").read_text() == "next step\n"

    closed = await request(client, methods.SESSION_CLOSE, {})
    assert closed == {"sessionId": sid, "saved": False}
    await wait_for(lambda: any(c["reason"] == "closed" for c in changes), "a closed didChange")
    error = await failure(client, methods.TURN_BEGIN, {"prompt": "more", "sessionId": sid})
    assert error["kind"] == "owner-missing"


async def test_takeover_is_asked_through_show_message_request(client, workspace):
    questions = answering(client, "Cancel", "Take over")
    sid = await expired_session_of_another_client(workspace, "left behind")
    declined = await failure(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert declined["kind"] == "takeover-declined" and declined["authored"] == sid
    assert "old-laptop" in questions[0].message
    assert [a.title for a in questions[0].actions] == ["Take over", "Cancel"]
    opened = await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert opened["action"] == "takeover" and opened["session"]["access"] == "writable" and opened["session"]["current"]
    assert len(questions) == 2
    begun = await request(client, methods.TURN_BEGIN, {"prompt": "carry on"})
    assert begun["turn"] == 2 and begun["reminder"] is True


async def test_a_dead_holders_session_is_offered_for_takeover_at_once(client, workspace):
    """Another process on this machine held the session mid-turn under a
    ten-minute lease and was killed: the listing offers Take over, the
    question says the holder ended, and the takeover interrupts its turn --
    all long before that lease would expire."""
    questions = answering(client, "Take over")
    with holding_process(workspace) as (holder, sid):
        listed = await request(client, methods.SESSION_LIST, {})
        assert [(s["action"], s["lease"]) for s in listed["sessions"] if s["sessionId"] == sid] == [("Join", "held")]
        kill(holder)
        listed = await request(client, methods.SESSION_LIST, {})
        assert [(s["action"], s["lease"]) for s in listed["sessions"] if s["sessionId"] == sid] == [("Take over", "expired")]
        opened = await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert opened["action"] == "takeover" and opened["interruptedTurn"] == 1 and opened["session"]["access"] == "writable"
    (question,) = questions
    assert "holder-host" in question.message and "process on this machine has ended" in question.message
    assert "in flight" not in question.message


@pytest.mark.parametrize("answer", ["null", "unknown title"])
async def test_no_answer_to_the_takeover_question_means_cancel(client, workspace, answer):
    asked = answering(client, "Maybe later" if answer == "unknown title" else None)  # None: dismissed, the client answers null
    sid = await expired_session_of_another_client(workspace, "left behind")
    declined = await failure(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert declined["kind"] == "takeover-declined" and declined["authored"] == sid and len(asked) == 1
    observed = await observe_lease(LocalTarget(workspace), sid)
    assert observed.record.client_id == "gone-client"  # the lease was not taken
    listed = {s["sessionId"]: s for s in (await request(client, methods.SESSION_LIST, {}))["sessions"]}
    assert listed[sid]["action"] == "Take over"


async def test_no_answer_in_time_to_the_takeover_question_means_cancel(workspace):
    server = await SERVER.start()
    asked, let_go = never_answering(server)
    try:
        await server.initialize_session(initialize_params(workspace, controlTransfer={"promptTimeoutSeconds": 1}))
        sid = await expired_session_of_another_client(workspace, "left behind")
        declined = await failure(server, methods.SESSION_OPEN, {"sessionId": sid})
        assert declined["kind"] == "takeover-declined" and declined["authored"] == sid and len(asked) == 1
        assert (await observe_lease(LocalTarget(workspace), sid)).record.client_id == "gone-client"
    finally:
        let_go()
        await server.shutdown_session()


async def test_commands_reach_the_same_requests(client, workspace):
    created = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=methods.COMMAND_SESSION_CREATE, arguments=[{"name": "By command"}])
    )
    sid = created["sessionId"]
    for command, params in (
        (methods.COMMAND_TURN_BEGIN, {"prompt": "via command"}),
        (methods.COMMAND_TURN_APPEND, {"kind": "response", "text": "ok"}),
        (methods.COMMAND_TURN_ABORT, {"reason": "stopped by the user"}),
        (methods.COMMAND_SESSION_SAVE, {}),
    ):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command=command, arguments=[params]))
    turns = await request(client, methods.TURN_LIST, {"sessionId": sid})
    assert [(t["state"], t.get("reason")) for t in turns["turns"]] == [("interrupted", "stopped by the user")]
    with pytest.raises(JsonRpcException) as caught:
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=methods.COMMAND_SESSION_RENAME, arguments=[])
        )
    assert caught.value.data["kind"] == "invalid-params"


async def test_a_held_lease_refusal_names_its_session_once(client, workspace):
    holder = SessionService(LocalTarget(workspace), ClientIdentity("holding-client", "desk"))
    sid = (await holder.sessions.create()).session_id
    await holder.turns.begin_turn(sid, "mine")
    await holder.turns.settle(sid)
    try:
        with pytest.raises(JsonRpcException) as caught:
            await request(client, methods.SESSION_OPEN, {"sessionId": sid, "mode": "resume"})
    finally:
        await holder.sessions.detach()
    held = caught.value.data
    assert (held["kind"], held["authored"]) == ("lease-held", sid)
    assert held["reason"].startswith("is held by desk until ")
    assert str(caught.value.message) == f"{sid}: {held['reason']}"


async def test_errors_carry_stable_kinds(client, workspace):
    assert (await failure(client, methods.SESSION_OPEN, {"sessionId": "nope"}))["kind"] == "invalid-params"
    missing = await failure(client, methods.SESSION_OPEN, {"sessionId": "2026-01-01T00-00-000000000000"})
    assert missing["kind"] == "missing-target"
    assert (await failure(client, methods.SESSION_OPEN, {"sessionId": 5}))["kind"] == "invalid-params"
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    for method in (methods.TURN_SETTLE, methods.TURN_ABORT):
        no_turn = await failure(client, method, {})
        assert (no_turn["kind"], no_turn["authored"]) == ("conflict", sid)
        assert no_turn["reason"].startswith("has no turn in flight")
    blank = await failure(client, methods.SESSION_RENAME, {"name": "  "})
    assert (blank["kind"], blank["authored"]) == ("invalid-params", 'name "  "') and "is blank" in blank["reason"]
    with pytest.raises(JsonRpcException) as caught:
        await request(client, methods.SESSION_RENAME, {"name": "  "})
    assert str(caught.value.message).startswith('name "  ": is blank')
    assert (await failure(client, methods.TURN_BEGIN, {"prompt": " "}))["kind"] == "invalid-params"
    await request(client, methods.TURN_BEGIN, {"prompt": "x"})
    assert (await failure(client, methods.TURN_CAPTURE, {"path": "../escape"}))["kind"] == "invalid-params"
    await request(client, methods.TURN_APPEND, {"kind": "tool_call", "callId": "c1", "name": "edit", "arguments": "{}"})
    repeated = await failure(client, methods.TURN_APPEND, {"kind": "tool_call", "callId": "c1", "name": "edit"})
    assert (repeated["kind"], repeated["authored"]) == ("conflict", sid) and "c1" in repeated["reason"]
    assert (await failure(client, methods.TURN_SHOW, {"turn": 9}))["kind"] == "missing-target"
    assert str(workspace) not in repr(await failure(client, methods.TURN_APPEND, {"kind": "mail", "text": "x"}))


async def test_a_second_server_joins_read_only_and_its_writes_are_refused(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Held here"}))["sessionId"]
    await request(client, methods.TURN_BEGIN, {"prompt": "first"})
    await request(client, methods.TURN_SETTLE, {})
    second = await SERVER.start()
    try:
        await second.initialize_session(initialize_params(workspace))
        rows = (await request(second, methods.SESSION_LIST, {}))["sessions"]
        assert [(r["sessionId"], r["action"]) for r in rows if r["sessionId"] == sid] == [(sid, "Join")]
        joined = await request(second, methods.SESSION_OPEN, {"sessionId": sid})
        assert joined["action"] == "join" and joined["session"]["access"] == "read-only"
        for method, params in (
            (methods.TURN_BEGIN, {"prompt": "mine"}),
            (methods.SESSION_RENAME, {"name": "Stolen"}),
            (methods.SESSION_SAVE, {}),
        ):
            error = await failure(second, method, params)
            assert error["kind"] == "read-only", (method, error)
        held = await failure(second, methods.SESSION_OPEN, {"sessionId": sid, "mode": "resume"})
        assert held["kind"] == "lease-held"
        # The joined view reads the committed history and follows new turns.
        await request(client, methods.TURN_BEGIN, {"prompt": "second"})
        await request(client, methods.TURN_SETTLE, {})
        turns = await request(second, methods.TURN_LIST, {"sessionId": sid})
        assert [t["turn"] for t in turns["turns"]] == [1, 2]
    finally:
        await second.shutdown_session()


async def test_shutdown_saves_and_releases_open_sessions(workspace):
    server = await SERVER.start()
    await server.initialize_session(initialize_params(workspace))
    sid = (await request(server, methods.SESSION_CREATE, {}))["sessionId"]
    await request(server, methods.TURN_BEGIN, {"prompt": "unfinished at shutdown"})
    await server.shutdown_session()
    observed = await observe_lease(LocalTarget(workspace), sid)
    assert observed.record is not None and observed.record.state.value == "released"
    reader = SessionService(LocalTarget(workspace), ClientIdentity("reader", "elsewhere"))
    assert [t.state for t in await reader.turns.summaries(sid)] == ["in-flight"]


async def test_a_failed_save_is_pending_until_retried_or_abandoned(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await request(client, methods.TURN_BEGIN, {"prompt": "first"})
    await request(client, methods.TURN_SETTLE, {})
    session = workspace / ".mevedel" / "sessions" / sid
    real = session / "publications-moved"

    def break_store() -> None:
        (session / ".publications").rename(real)
        (session / ".publications").symlink_to(real)  # the target refuses symlinks

    def mend_store() -> None:
        (session / ".publications").unlink()
        real.rename(session / ".publications")

    break_store()
    await request(client, methods.TURN_BEGIN, {"prompt": "second"})
    failed = await failure(client, methods.TURN_SETTLE, {})
    assert failed["kind"] == "publication-pending" and str(workspace) not in failed["reason"]
    state = (await request(client, methods.SESSION_OPEN, {"sessionId": sid}))["session"]
    assert state["pendingPublication"] and state["settledTurns"] == 2
    assert (await failure(client, methods.TURN_BEGIN, {"prompt": "blocked"}))["kind"] == "publication-pending"
    assert (await failure(client, methods.SESSION_RETRY_PUBLICATION, {}))["kind"] == "publication-pending"
    mend_store()
    retried = await request(client, methods.SESSION_RETRY_PUBLICATION, {})
    assert retried["committed"] is True
    assert (await failure(client, methods.SESSION_RETRY_PUBLICATION, {}))["kind"] == "conflict"
    reader = SessionService(LocalTarget(workspace), ClientIdentity("reader", "elsewhere"))
    assert [t.state for t in await reader.turns.summaries(sid)] == ["completed", "completed"]

    break_store()
    await request(client, methods.TURN_BEGIN, {"prompt": "third"})
    await failure(client, methods.TURN_SETTLE, {})
    assert (await request(client, methods.SESSION_ABANDON_PUBLICATION, {}))["abandoned"] is True
    mend_store()
    assert [t.turn for t in await reader.turns.summaries(sid)] == [1, 2]  # the committed state stayed
    await request(client, methods.TURN_BEGIN, {"prompt": "fourth"})
    await request(client, methods.TURN_SETTLE, {})
    assert [t.turn for t in await reader.turns.summaries(sid)] == [1, 2, 3, 4]


async def test_a_save_that_failed_in_a_stopped_process_is_offered_after_the_restart(client, workspace):
    from mevedel_server.store import PublicationFailed
    from mevedel_server.targets import FaultInjectingTarget

    answering(client, "Take over")
    target = FaultInjectingTarget(LocalTarget(workspace))
    gone = SessionService(target, ClientIdentity("gone-client", "old-laptop"), lease_seconds=1)
    sid = (await gone.sessions.create()).session_id
    for prompt in ("first", "the pending turn"):
        await gone.turns.begin_turn(sid, prompt)
        await gone.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
        if prompt == "first":
            await gone.turns.settle(sid)
    target.arm(3, "error")  # the second settlement's publication fails
    with pytest.raises(PublicationFailed):
        await gone.turns.settle(sid)
    await gone.sessions.detach()  # the server stops before anyone retries
    await lease_expired(workspace, sid)
    state = (await request(client, methods.SESSION_OPEN, {"sessionId": sid}))["session"]
    assert "old-laptop" in state["pendingPublication"] and state["settledTurns"] == 1
    assert (await failure(client, methods.TURN_BEGIN, {"prompt": "blocked"}))["kind"] == "publication-pending"
    assert (await request(client, methods.SESSION_RETRY_PUBLICATION, {}))["committed"] is True
    reader = SessionService(LocalTarget(workspace), ClientIdentity("reader", "elsewhere"))
    assert [(t.turn, t.state) for t in await reader.turns.summaries(sid)] == [(1, "completed"), (2, "completed")]
    begun = await request(client, methods.TURN_BEGIN, {"prompt": "carry on"})
    assert begun["turn"] == 3


async def unprovable_latch_taken_over(client, workspace: Path) -> str:
    """A session whose owner (another client) armed the unsettled-mutation
    latch and stopped before recording the command's group, opened here by
    takeover once its lease expired; its id."""
    answering(client, "Take over")
    gone = SessionService(LocalTarget(workspace), ClientIdentity("gone-client", "old-laptop"), lease_seconds=1)
    sid = (await gone.sessions.create()).session_id
    await gone.turns.begin_turn(sid, "first")
    await gone.turns.settle(sid)
    session = gone.session(sid)
    await session.latch.arm(session.lease)  # stops before recording the command's group
    await gone.sessions.detach()
    await lease_expired(workspace, sid)
    await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    return sid


async def test_an_unprovable_unsettled_mutation_left_by_a_stopped_owner_is_acknowledged(client, workspace):
    sid = await unprovable_latch_taken_over(client, workspace)
    assert (await observe_lease(LocalTarget(workspace), sid)).record.unsettled_mutation  # the takeover carried it
    assert (await request(client, methods.SESSION_ACKNOWLEDGE_MUTATION, {})) == {"sessionId": sid, "cleared": True}
    assert not (await observe_lease(LocalTarget(workspace), sid)).record.unsettled_mutation
    assert (await request(client, methods.SESSION_ACKNOWLEDGE_MUTATION, {}))["cleared"] is False
