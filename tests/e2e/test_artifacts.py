"""The workspace artifact store through the real language server over
stdio: items listed by title with the session's attachments marked,
fenced whole-item writes between two server processes on one workspace
(one writer at a time, a hand-over once asked and idle), versions made by
a settling turn, Fork carrying the attachments, the item's own
conversation hidden from the session list, and deletion."""

from __future__ import annotations

import asyncio

import pytest
from pygls.exceptions import JsonRpcException

from deadlines import ticks
from mevedel_protocol import methods

from .conftest import (
    SERVER,
    collect,
    initialize_params,
    one_holding_a_document,
    request,
)


async def _refused(client, method: str, params: dict) -> dict:
    with pytest.raises(JsonRpcException) as refused:
        await request(client, method, params)
    return refused.value.data


async def test_items_attach_to_the_session_and_versions_follow_turns(client, workspace):
    changes = collect(client, methods.ARTIFACT_DID_CHANGE)
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Design"}))["sessionId"]
    doc = await request(client, methods.ARTIFACT_CREATE, {"kind": "document", "title": "Roadmap", "content": "# Roadmap\n"})
    assert doc["attached"] and doc["versions"] == 1 and doc["primary"] == "document.md"
    other = await request(client, methods.ARTIFACT_CREATE, {"kind": "whiteboard", "title": "Architecture"})
    await request(client, methods.ARTIFACT_DETACH, {"id": other["id"]})
    listed = (await request(client, methods.ARTIFACT_LIST, {}))["items"]
    assert [(i["title"], i["attached"]) for i in listed] == [("Architecture", False), ("Roadmap", True)]

    read = await request(client, methods.ARTIFACT_READ, {"id": doc["id"]})
    assert read["content"] == "# Roadmap\n" and read["writable"] and read["encoding"] == "utf-8"
    await request(client, methods.TURN_BEGIN, {"prompt": "Plan Q3"})
    written = await request(client, methods.ARTIFACT_WRITE, {"id": doc["id"], "content": "# Roadmap\n- Q3\n", "baseRevision": read["revision"]})
    stale = await _refused(client, methods.ARTIFACT_WRITE, {"id": doc["id"], "content": "lost?", "baseRevision": read["revision"]})
    assert stale["kind"] == "conflict" and stale["authored"] == doc["id"]
    await request(client, methods.TURN_APPEND, {"kind": "response", "text": "Added Q3."})
    await request(client, methods.TURN_SETTLE, {})
    versions = (await request(client, methods.ARTIFACT_VERSIONS, {"id": doc["id"]}))["versions"]
    assert [(v["reason"], v.get("turn"), v["revision"]) for v in versions][:1] == [("turn", 1, written["revision"])]
    assert versions[-1]["reason"] == "created"

    restored = await request(client, methods.ARTIFACT_RESTORE, {"id": doc["id"], "version": versions[-1]["number"]})
    assert (await request(client, methods.ARTIFACT_READ, {"id": doc["id"]}))["content"] == "# Roadmap\n"
    assert restored["revision"] == read["revision"]
    comment = await request(client, methods.ARTIFACT_COMMENT, {"id": doc["id"], "text": "Add Q4 too"})
    assert comment["sessionId"] == sid and comment["number"] == 1
    assert {n["reason"] for n in changes} >= {"created", "written", "versioned", "restored", "commented", "detached"}

    # Fork carries the attachments; the child is a new session pointing at the same item.
    impact = await request(client, methods.FORK_PREPARE, {"turn": 1})
    child = (await request(client, methods.FORK_COMMIT, {"token": impact["token"], "sessionId": sid}))["session"]
    assert child["sessionId"] != sid
    in_child = {i["id"]: i["attached"] for i in (await request(client, methods.ARTIFACT_LIST, {"sessionId": child["sessionId"]}))["items"]}
    assert in_child == {doc["id"]: True, other["id"]: False}


async def test_bad_input_is_named_and_nothing_is_created(client, workspace):
    await request(client, methods.SESSION_CREATE, {})
    bad = await _refused(client, methods.ARTIFACT_CREATE, {"kind": "whiteboard", "title": "B", "content": "not json"})
    assert bad["kind"] == "invalid-params" and "not a whiteboard scene" in bad["reason"]
    bad = await _refused(client, methods.ARTIFACT_CREATE, {"kind": "artifact", "title": "S", "fileName": "../x.md"})
    assert bad["kind"] == "invalid-params" and bad["authored"] == "../x.md"
    bad = await _refused(client, methods.ARTIFACT_READ, {"id": "../../etc"})
    assert bad["kind"] == "invalid-params"
    gone = await _refused(client, methods.ARTIFACT_READ, {"id": "nosuchitem"})
    assert gone["kind"] == "missing-target"
    assert (await request(client, methods.ARTIFACT_LIST, {}))["items"] == []


async def test_two_servers_one_writer_a_late_write_fenced_and_a_hand_over(workspace):
    # leaseSeconds 3: renewal every second, so the hand-over follows the 10 s idle rule closely.
    async with one_holding_a_document(workspace, leaseSeconds=3) as (one, two, item):
        held = await _refused(two, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "two\n"})
        assert held["kind"] == "item-held" and "requestHandover" in held["reason"]
        seen = await request(two, methods.ARTIFACT_READ, {"id": item["id"]})
        assert not seen["writable"] and seen["holderHost"] and seen["content"] == "one\n"
        asked = await request(two, methods.ARTIFACT_REQUEST_HANDOVER, {"id": item["id"]})
        assert asked["holderHost"] == seen["holderHost"]
        for _ in ticks():
            if (await request(two, methods.ARTIFACT_READ, {"id": item["id"]}))["writable"]:
                break
            await asyncio.sleep(0.5)
        else:
            pytest.fail("the holder never handed the idle item over")
        await request(two, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "two\n"})
        late = await _refused(one, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "late\n"})
        assert late["kind"] == "item-held"
        assert (await request(one, methods.ARTIFACT_READ, {"id": item["id"]}))["content"] == "two\n"


async def test_the_items_conversation_is_hidden_and_deleted_with_it(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Main"}))["sessionId"]
    item = await request(client, methods.ARTIFACT_CREATE, {"kind": "whiteboard", "title": "Board"})
    opened = await request(client, methods.ARTIFACT_CONVERSATION, {"id": item["id"]})
    assert opened["created"]
    again = await request(client, methods.ARTIFACT_CONVERSATION, {"id": item["id"]})
    assert again == {**opened, "created": False}
    listed = {s["sessionId"] for s in (await request(client, methods.SESSION_LIST, {}))["sessions"]}
    assert sid in listed and opened["sessionId"] not in listed
    kept = (workspace / ".mevedel/sessions" / sid).exists()
    deleted = await request(client, methods.ARTIFACT_DELETE, {"id": item["id"]})
    assert deleted == {"id": item["id"]}
    assert not (workspace / ".mevedel/sessions" / opened["sessionId"]).exists()
    assert (await request(client, methods.ARTIFACT_LIST, {}))["items"] == []
    assert (workspace / ".mevedel/sessions" / sid).exists() == kept


async def test_an_open_item_taken_and_written_elsewhere_is_told_naming_the_editor(workspace):
    """Server one has the item open (read); server two, another editor on the
    same machine, writes it: one sends `mevedel/artifact/didChange`
    `elsewhere`, not writable, naming two's editor and pid; a restore in one
    is refused then with nothing recorded; two exits, and one is told the
    item is writable again."""
    from lsprotocol import types

    one = await SERVER.start()
    two = await SERVER.start()
    notes: list[dict] = []
    arrived = asyncio.Event()
    one.feature(methods.ARTIFACT_DID_CHANGE)(lambda params: (notes.append(params), arrived.set()))
    running = [one, two]
    try:
        for client, editor in ((one, "Emacs"), (two, "Neovim")):
            params = initialize_params(workspace)
            params.client_info = types.ClientInfo(name=editor, version="1.0")
            await client.initialize_session(params)
        item = await request(one, methods.ARTIFACT_CREATE, {"kind": "document", "title": "Shared", "content": "v0\n"})
        assert (await request(one, methods.ARTIFACT_READ, {"id": item["id"]}))["writable"]

        async def told(predicate) -> dict:
            while True:
                found = [n for n in notes if n["reason"] == "elsewhere" and predicate(n)]
                if found:
                    return found[0]
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 60)

        await request(two, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "two wrote\n"})
        note = await told(lambda n: not n["writable"])
        assert note["id"] == item["id"] and note["holder"].startswith("Neovim 1.0 (pid ") and note["holder"].endswith(f" on {note['holderHost']}")
        seen = await request(one, methods.ARTIFACT_READ, {"id": item["id"]})
        assert seen["content"] == "two wrote\n" and seen["holder"] == note["holder"]
        held = await _refused(one, methods.ARTIFACT_RESTORE, {"id": item["id"], "version": 1})
        assert held["kind"] == "item-held" and "Neovim 1.0" in held["reason"]
        assert len((await request(one, methods.ARTIFACT_VERSIONS, {"id": item["id"]}))["versions"]) == 1
        running.remove(two)
        await two.shutdown_session()
        await two.stop()
        note = await told(lambda n: n["writable"])
        assert "holder" not in note or note["holder"] is None
        restored = await request(one, methods.ARTIFACT_RESTORE, {"id": item["id"], "version": 1})
        versions = (await request(one, methods.ARTIFACT_VERSIONS, {"id": item["id"]}))["versions"]
        assert [v["reason"] for v in versions] == ["restored", "replaced", "created"]
        assert versions[1]["size"] == len("two wrote\n") and restored["revision"] == versions[0]["revision"]
    finally:
        for client in running:
            await client.shutdown_session()
            await client.stop()
