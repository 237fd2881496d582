"""Starting a session beside a held one (the spec's advisory), in the real
server: while another session of the workspace is open here or another
client's live lease holds it, ``mevedel/session/create`` asks through
``window/showMessageRequest`` (Start anyway / Cancel) -- naming the held
session, saying both share the project's files, pointing to a Worktree
Fork. Start anyway starts it and keeps this server from asking again;
Cancel, a dismissal or no answer in time starts nothing and asks again next
time. A lease that expired, or whose holder process ended, does not warn."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from holder_process import holding_process, kill
from mevedel_protocol import methods

from .conftest import (
    CAPABILITIES,
    SERVER,
    answering,
    initialize_params,
    never_answering,
    request,
)
from .test_sessions import expired_session_of_another_client, failure


def session_directories(workspace: Path) -> set[str]:
    sessions = workspace / ".mevedel" / "sessions"
    return {p.name for p in sessions.iterdir()} if sessions.is_dir() else set()


async def saved_session(client, name: str) -> str:
    """A session created here (nothing else held yet) with one settled turn."""
    sid = (await request(client, methods.SESSION_CREATE, {"name": name}))["sessionId"]
    await request(client, methods.TURN_BEGIN, {"prompt": "first"})
    await request(client, methods.TURN_SETTLE, {})
    return sid


async def test_starting_beside_a_session_open_here_asks_once_and_start_anyway_starts_it(client, workspace):
    held = await saved_session(client, "Fixing the parser")
    questions = answering(client, "Start anyway")
    second = await request(client, methods.SESSION_CREATE, {"name": "Second"})
    assert second["current"] and second["displayName"] == "Second"
    (question,) = questions
    assert [action.title for action in question.actions] == ["Start anyway", "Cancel"]
    assert '"Fixing the parser" is open here' in question.message, question.message
    assert "share this project's files" in question.message and "Worktree Fork" in question.message
    # Accepted once: this server does not ask again, with two held now.
    third = await request(client, methods.SESSION_CREATE, {"name": "Third"})
    assert len(questions) == 1 and third["displayName"] == "Third"
    listed = {s["sessionId"] for s in (await request(client, methods.SESSION_LIST, {}))["sessions"]}
    assert {held, second["sessionId"], third["sessionId"]} <= listed


async def test_cancel_or_a_dismissal_starts_nothing_and_the_next_start_asks_again(client, workspace):
    held = await saved_session(client, "Held here")
    questions = answering(client, "Cancel", None, "Start anyway")  # None: dismissed, the client answers null
    before = session_directories(workspace)
    for _ in range(2):
        declined = await failure(client, methods.SESSION_CREATE, {"name": "Not started"})
        assert declined["kind"] == "beside-held-declined" and declined["authored"] == methods.SESSION_CREATE
        assert '"Held here" is open here' in declined["reason"] and "no new session was started" in declined["reason"]
    assert len(questions) == 2 and session_directories(workspace) == before and held in before
    listed = (await request(client, methods.SESSION_LIST, {}))["sessions"]
    assert [s["sessionId"] for s in listed if s["current"]] == [held]
    assert "Not started" not in [s["displayName"] for s in listed]
    # Unacknowledged: the next start asks again.
    started = await request(client, methods.SESSION_CREATE, {"name": "Started"})
    assert len(questions) == 3 and started["displayName"] == "Started"


async def test_no_answer_in_time_starts_nothing(workspace):
    server = await SERVER.start()
    asked, let_go = never_answering(server)
    try:
        await server.initialize_session(initialize_params(workspace, controlTransfer={"promptTimeoutSeconds": 1}))
        held = await saved_session(server, "Held here")
        before = session_directories(workspace)
        declined = await failure(server, methods.SESSION_CREATE, {})
        assert declined["kind"] == "beside-held-declined" and len(asked) == 1
        assert session_directories(workspace) == before and held in before
    finally:
        let_go()
        await server.shutdown_session()


async def test_another_clients_live_lease_warns_and_stops_warning_once_its_process_ended(client, workspace):
    questions = answering(client, "Cancel")
    with holding_process(workspace) as (holder, sid):
        declined = await failure(client, methods.SESSION_CREATE, {})
        assert declined["kind"] == "beside-held-declined"
        (question,) = questions
        assert '"Held" is held by holder-host' in question.message, question.message
        kill(holder)
        # Its writer is gone: nothing to warn of (the session is offered
        # for takeover instead).
        created = await request(client, methods.SESSION_CREATE, {})
    assert len(questions) == 1 and created["sessionId"] != sid


async def test_an_expired_lease_does_not_warn_where_a_live_one_does(client, workspace):
    expired = await expired_session_of_another_client(workspace, "left behind")
    questions = answering(client, "Cancel")
    with holding_process(workspace) as (_holder, live):
        await failure(client, methods.SESSION_CREATE, {})
    (question,) = questions
    # The live one is named alone: one session held, not two.
    assert question.message.startswith('Session "Held" is held by holder-host'), question.message
    assert expired not in question.message and live not in question.message


async def test_a_prompt_that_would_start_a_session_beside_a_held_one_asks_first(workspace):
    server = await SERVER.start()
    questions = answering(server, "Cancel", "Start anyway")
    try:
        await server.initialize_session(initialize_params(workspace, currentSession=None))
        with holding_process(workspace) as (_holder, _sid):
            declined = await failure(server, methods.TURN_PROMPT, {"text": "Hello"})
            assert declined["kind"] == "beside-held-declined" and declined["authored"] == methods.TURN_PROMPT
            assert '"Held" is held by holder-host' in questions[0].message
            listed = (await request(server, methods.SESSION_LIST, {}))["sessions"]
            assert not any(s["current"] for s in listed)
            # Accepted, the prompt goes on in a new session (and is refused
            # there for want of an agent: none is configured).
            refused = await failure(server, methods.TURN_PROMPT, {"text": "Hello"})
            assert refused["kind"] == "agent-not-configured" and len(questions) == 2
            listed = (await request(server, methods.SESSION_LIST, {}))["sessions"]
            assert len([s for s in listed if s["current"]]) == 1
    finally:
        await server.shutdown_session()


async def test_accepted_once_it_is_not_asked_again_in_another_folder_of_the_server(tmp_path):
    folders = [tmp_path / "one", tmp_path / "two"]
    for folder in folders:
        folder.mkdir()
    server = await SERVER.start()
    questions = answering(server, "Start anyway")
    try:
        await server.initialize_session(types.InitializeParams(
            capabilities=CAPABILITIES, root_uri=folders[0].as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in folders],
        ))
        for folder in folders:
            for _ in range(2):  # the second beside the first
                await request(server, methods.SESSION_CREATE, {"workspaceFolder": folder.as_uri()})
        (question,) = questions  # in the first folder only
        assert "is open here" in question.message
    finally:
        await server.shutdown_session()
