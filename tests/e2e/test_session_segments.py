"""Compaction and /clear over stdio, the transcript URI a SessionState
carries (read live here, or committed from a server that does not have the
session open), and describe/hover of history://root."""

from __future__ import annotations

from lsprotocol import types

from deadlines import wait_for
from mevedel_protocol import methods

from .conftest import SERVER, collect, initialize_params, open_document, request
from .test_sessions import failure


async def one_turn(client, prompt: str, answer: str) -> None:
    await request(client, methods.TURN_BEGIN, {"prompt": prompt})
    await request(client, methods.TURN_APPEND, {"kind": "response", "text": answer})
    await request(client, methods.TURN_SETTLE, {})


async def read_all(client, params: dict) -> dict:
    return await request(client, methods.RESOURCE_READ, {**params, "view": "plain"})


async def test_compact_and_clear_rotate_segments_that_history_shows(client, workspace):
    changes = collect(client, methods.SESSION_DID_CHANGE)
    created = await request(client, methods.SESSION_CREATE, {"name": "Rotating"})
    sid = created["sessionId"]
    await one_turn(client, "first question", "first answer")

    compacted = await request(client, methods.SESSION_COMPACT, {"summary": "We answered the first question."})
    assert compacted == {"sessionId": sid, "segment": 2, "previousSegment": 1, "committed": True}
    await wait_for(lambda: any(c["reason"] == "compacted" for c in changes), "a compacted didChange")
    assert [c["displayName"] for c in changes if c["reason"] == "compacted"] == ["Rotating"]
    root = (await read_all(client, {"address": "history://root"}))["text"].split("\n")
    assert root[0] == "# Segment 2 (continues segment 1 after compaction)"
    assert "> We answered the first question." in root and "first answer" not in root

    await one_turn(client, "second question", "second answer")
    cleared = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=methods.COMMAND_SESSION_CLEAR, arguments=[{}])
    )
    assert cleared == {"sessionId": sid, "segment": 3, "previousSegment": 2, "committed": True, "chapter": 1}
    await wait_for(lambda: any(c["reason"] == "cleared" for c in changes), "a cleared didChange")
    root = (await read_all(client, {"address": "history://root"}))["text"]
    assert root.split("\n") == ["# Segment 3 (a new chat after /clear)"]
    assert "second answer" not in root

    listing = (await read_all(client, {"address": f"history://saved/{sid}"}))["text"].split("\n")
    assert listing == [f"history://saved/{sid}/segment-000{n}.chat.jsonl" for n in (1, 2, 3)]
    first = (await read_all(client, {"address": listing[0]}))["text"]
    assert "first answer" in first and "*Segment closed by compaction" in first
    second = (await read_all(client, {"address": listing[1]}))["text"]
    assert "## Summary of segment 1" in second and "second answer" in second and "*Segment closed by /clear" in second
    turns = await request(client, methods.TURN_LIST, {})
    assert [(t["turn"], t["segment"]) for t in turns["turns"]] == [(1, 1), (2, 2)]


async def test_rotations_are_refused_in_flight_blank_or_read_only(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await one_turn(client, "settled", "yes")
    await request(client, methods.TURN_BEGIN, {"prompt": "running"})
    for method, params in ((methods.SESSION_COMPACT, {"summary": "s"}), (methods.SESSION_CLEAR, {})):
        refused = await failure(client, method, params)
        assert (refused["kind"], refused["authored"]) == ("conflict", sid)
        assert refused["reason"] == "has turn 2 in flight; settle or abort it before " + (
            "compacting" if method == methods.SESSION_COMPACT else "clearing"
        )
    blank = await failure(client, methods.SESSION_COMPACT, {"summary": " "})
    assert (blank["kind"], blank["authored"]) == ("invalid-params", 'summary " "')
    await request(client, methods.TURN_SETTLE, {})
    second = await SERVER.start()
    try:
        await second.initialize_session(initialize_params(workspace))
        joined = await request(second, methods.SESSION_OPEN, {"sessionId": sid})
        assert joined["session"]["access"] == "read-only"
        for method, params in ((methods.SESSION_COMPACT, {"summary": "s"}), (methods.SESSION_CLEAR, {})):
            assert (await failure(second, method, params))["kind"] == "read-only"
    finally:
        await second.shutdown_session()
    listing = (await read_all(client, {"address": f"history://saved/{sid}"}))["text"].split("\n")
    assert len(listing) == 1  # nothing rotated


async def test_session_state_carries_the_transcript_uri(client, workspace):
    created = await request(client, methods.SESSION_CREATE, {"name": "Has a URI"})
    sid, uri = created["sessionId"], created["transcriptUri"]
    assert uri.startswith("mevedel-resource:/") and uri.endswith(f"/{sid}/history/root")
    await one_turn(client, "what is in the transcript", "this answer")
    live = await read_all(client, {"uri": uri})
    assert live["address"] == "history://root" and "this answer" in live["text"]
    opened = await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    assert opened["session"]["transcriptUri"] == uri

    # A server that has not opened the session reads its committed transcript.
    second = await SERVER.start()
    try:
        await second.initialize_session(initialize_params(workspace))
        await request(client, methods.TURN_BEGIN, {"prompt": "not saved yet"})
        committed = await read_all(second, {"uri": uri})
        assert "this answer" in committed["text"] and "not saved yet" not in committed["text"]
        assert "not open in this server" in committed["notice"] and "read-only" in committed["notice"]
        described = await request(second, methods.ADDRESS_DESCRIBE, {"address": "history://root", "sessionId": sid})
        assert described["status"] == "exists" and "committed transcript" in described["detail"]
    finally:
        await second.shutdown_session()


async def test_describe_and_hover_of_history_root_follow_the_open_session(client, workspace):
    # The fixture's currentSession names a session that was never saved.
    nothing = await request(client, methods.ADDRESS_DESCRIBE, {"address": "history://root"})
    assert nothing["status"] in ("missing", "unavailable")
    assert "not an unavailable family" not in nothing["reason"]
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    described = await request(client, methods.ADDRESS_DESCRIBE, {"address": "history://root"})
    assert (described["status"], described["kind"]) == ("exists", "virtual")
    assert sid in described["detail"] and "live conversation" in described["detail"]
    assert described["uri"].endswith(f"/{sid}/history/root")
    uri = await open_document(client, workspace, "see history://root here\n", "notes.md")
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 6))
    )
    assert hover is not None
    assert "status: exists (virtual)" in hover.contents.value and f"live conversation of session {sid}" in hover.contents.value
    assert "unavailable" not in hover.contents.value
