"""Rewind, Redo, Fork and Save As over stdio: prepare shows the impact and
a token, commit changes history://root and the session list, a stale token
is refused with stale-head, commits also run as commands."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from deadlines import wait_for
from mevedel_protocol import methods

from .conftest import collect, request


async def edit_turn(client, workspace, prompt: str, content: str) -> None:
    await request(client, methods.TURN_BEGIN, {"prompt": prompt})
    await request(client, methods.TURN_CAPTURE, {"path": "tracked.txt"})
    (workspace / "tracked.txt").write_text(content)
    await request(client, methods.TURN_APPEND, {"kind": "response", "text": f"Answered {prompt}."})
    await request(client, methods.TURN_SETTLE, {})


async def three_turns(client, workspace) -> str:
    (workspace / "tracked.txt").write_text("v0\n")
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Lifecycle"}))["sessionId"]
    for n in (1, 2, 3):
        await edit_turn(client, workspace, f"Step {n}", f"v{n}\n")
    return sid


async def history(client) -> str:
    return (await request(client, methods.RESOURCE_READ, {"address": "history://root", "view": "plain"}))["text"]


async def test_rewind_shows_discarded_prompts_and_commit_changes_history(client, workspace):
    sid = await three_turns(client, workspace)
    changes = collect(client, methods.SESSION_DID_CHANGE)
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1})
    assert [label["preview"] for label in impact["discarded"]] == ["Step 2", "Step 3"]
    assert impact["keptTurns"] == 1 and not impact["empty"]
    assert [r["path"] for r in impact["restores"] if r["changes"]] == ["tracked.txt"]
    assert "Answered Step 3." in await history(client)

    committed = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=methods.COMMAND_REWIND_COMMIT, arguments=[{"token": impact["token"]}])
    )
    assert committed["committed"] and committed["settledTurns"] == 1 and committed["sessionId"] == sid
    assert (workspace / "tracked.txt").read_text() == "v1\n"
    text = await history(client)
    assert "Answered Step 1." in text and "Step 3" not in text
    await wait_for(lambda: any(c["reason"] == "rewound" for c in changes), "a rewound didChange")

    # Redo back to the state the rewind replaced.
    states = await request(client, methods.REDO_LIST, {})
    three = next(s for s in states["states"] if s["turnCount"] == 3)
    redo = await request(client, methods.REDO_PREPARE, {"publicationId": three["publicationId"]})
    assert [label["preview"] for label in redo["restored"]] == ["Step 2", "Step 3"]
    done = await request(client, methods.REDO_COMMIT, {"token": redo["token"]})
    assert done["settledTurns"] == 3
    assert "Answered Step 3." in await history(client)
    assert (workspace / "tracked.txt").read_text() == "v3\n"


async def test_a_stale_token_is_refused(client, workspace):
    await three_turns(client, workspace)
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 2, "boundary": "before"})
    await edit_turn(client, workspace, "Step 4", "v4\n")
    with pytest.raises(JsonRpcException) as refused:
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert refused.value.data["kind"] == "stale-head"
    assert "Answered Step 4." in await history(client)
    with pytest.raises(JsonRpcException) as bad:
        await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "sideways"})
    assert bad.value.data["kind"] == "invalid-params"


async def test_fork_creates_a_listed_session_and_save_as_a_named_copy(client, workspace):
    sid = await three_turns(client, workspace)
    impact = await request(client, methods.FORK_PREPARE, {"turn": 2})
    assert impact["turns"] == 2 and impact["response"]["preview"] == "Step 2"
    forked = await request(client, methods.FORK_COMMIT, {"token": impact["token"], "sessionId": sid})
    child = forked["session"]
    assert child["sessionId"] != sid and child["current"] and child["settledTurns"] == 2
    assert child["access"] == "writable" and forked["sourceId"] == sid
    listed = {s["sessionId"] for s in (await request(client, methods.SESSION_LIST, {}))["sessions"]}
    assert {sid, child["sessionId"]} <= listed
    text = await history(client)  # the child is current now
    assert "Answered Step 2." in text and "Step 3" not in text
    variants = await request(client, methods.FORK_VARIANTS, {"turn": 2, "sessionId": sid})
    assert child["sessionId"] in {v["sessionId"] for v in variants["forks"]}

    prepared = await request(client, methods.SAVE_AS_PREPARE, {"name": "Kept copy", "sessionId": sid})
    assert prepared["name"] == "Kept copy" and prepared["turns"] == 3
    copy = await request(client, methods.SAVE_AS_COMMIT, {"token": prepared["token"], "sessionId": sid})
    assert copy["session"]["displayName"] == "Kept copy" and copy["session"]["settledTurns"] == 3
    rows = {s["sessionId"]: s for s in (await request(client, methods.SESSION_LIST, {}))["sessions"]}
    assert rows[copy["session"]["sessionId"]]["displayName"] == "Kept copy"


async def test_recovery_commands_refuse_when_nothing_is_pending(client, workspace):
    await three_turns(client, workspace)
    with pytest.raises(JsonRpcException) as refused:
        await request(client, methods.SESSION_RETRY_RECOVERY, {})
    assert refused.value.data["kind"] == "missing-target"


async def test_a_session_refusal_names_its_session_once(client, workspace):
    """The answer's ``authored`` is the session and its message says it
    once: ``<id>: <reason>``, whatever the form of the store's own words."""
    sid = await three_turns(client, workspace)
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1})
    await edit_turn(client, workspace, "Step 4", "v4\n")
    with pytest.raises(JsonRpcException) as stale:
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert stale.value.data["authored"] == sid and stale.value.message.count(sid) == 1
    assert stale.value.message.startswith(f"{sid}: the state changed since the impact was prepared")
    missing = "2026-01-01T00-00-0123456789ab"
    with pytest.raises(JsonRpcException) as absent:
        await request(client, methods.SESSION_OPEN, {"sessionId": missing})
    assert absent.value.data["kind"] == "missing-target" and absent.value.data["authored"] == missing
    assert absent.value.message == f"{missing}: does not exist"
