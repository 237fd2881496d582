"""Following over stdio with two and three real server processes on one
workspace: followers receive ``mevedel/session/didPublish`` with exactly the
new whole turns, renames and lease holders; a mid-turn save sends nothing;
``setFollow`` opts one session out and ``refresh`` catches it up; a follower
holding uncommitted changes is never advanced."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from lsprotocol import types

from deadlines import wait_for
from lease_expiry import lease_expired
from mevedel_protocol import methods
from ssh_fixtures import ALIAS

from .conftest import SERVER, collect, initialize_params, request


async def start_server(workspace: Path, **options):
    server = await SERVER.start()
    await server.initialize_session(initialize_params(workspace, **options))
    return server


async def settle_turn(server, prompt: str, answer: str = "done") -> None:
    await request(server, methods.TURN_BEGIN, {"prompt": prompt})
    await request(server, methods.TURN_APPEND, {"kind": "response", "text": answer})
    await request(server, methods.TURN_SETTLE, {})


def turns_of(notifications: list[dict]) -> list[list[tuple]]:
    return [[(t["turn"], t["change"], t["state"], t["prompt"]) for t in n["turns"]] for n in notifications]


async def joined(server, sid: str) -> None:
    opened = await request(server, methods.SESSION_OPEN, {"sessionId": sid})
    assert opened["action"] == "join" and opened["session"]["access"] == "read-only"


async def test_a_follower_receives_whole_settled_turns_and_renames(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Pairing"}))["sessionId"]
    await settle_turn(client, "first")
    follower = await start_server(workspace)
    try:
        published = collect(follower, methods.SESSION_DID_PUBLISH)
        await joined(follower, sid)

        await settle_turn(client, "second")
        await wait_for(lambda: len(published) == 1, "the second turn")
        note = published[0]
        assert note["sessionId"] == sid and note["workspaceFolder"] == workspace.as_uri()
        assert turns_of(published) == [[(2, "new", "completed", "second")]]
        assert note["settledTurns"] == 2 and note["removedTurns"] == [] and not note["renamed"]
        assert note["holderHost"] and note["leaseState"] == "active" and note["generation"] > 0
        assert "heldBack" not in note or note["heldBack"] is None

        # The transcript the follower reads is the committed one, whole.
        shown = await request(follower, methods.TURN_SHOW, {"sessionId": sid, "turn": 2})
        assert [item["text"] for item in shown["items"]] == ["done"]

        await request(client, methods.SESSION_RENAME, {"name": "Pairing, day two"})
        await wait_for(lambda: len(published) == 2, "the rename")
        assert published[1]["renamed"] and published[1]["displayName"] == "Pairing, day two"
        assert published[1]["turns"] == []

        # A save mid-turn publishes work in progress: no whole turn changed.
        await request(client, methods.TURN_BEGIN, {"prompt": "third"})
        await request(client, methods.TURN_APPEND, {"kind": "response", "text": "half of it"})
        await request(client, methods.SESSION_SAVE, {})
        refreshed = await request(follower, methods.SESSION_REFRESH, {"sessionId": sid})
        assert refreshed["status"] in ("advanced", "unchanged")
        if refreshed["status"] == "advanced":
            assert refreshed["publication"]["turns"] == []
        listed = await request(follower, methods.TURN_LIST, {"sessionId": sid})
        assert [t["state"] for t in listed["turns"]] == ["completed", "completed", "in-flight"]
        await request(client, methods.TURN_APPEND, {"kind": "response", "text": "the rest"})
        await request(client, methods.TURN_SETTLE, {})
        await wait_for(lambda: len(published) == 3, "the third turn")
        assert turns_of(published)[2] == [(3, "new", "completed", "third")]
        assert len(published) == 3  # nothing for the mid-turn save
    finally:
        await follower.shutdown_session()


async def test_three_servers_two_followers_and_an_opt_out(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    one = await start_server(workspace)
    two = await start_server(workspace)
    try:
        seen_one = collect(one, methods.SESSION_DID_PUBLISH)
        seen_two = collect(two, methods.SESSION_DID_PUBLISH)
        await joined(one, sid)
        await joined(two, sid)

        await settle_turn(client, "second")
        await wait_for(lambda: seen_one and seen_two, "both followers")
        assert turns_of(seen_one) == turns_of(seen_two) == [[(2, "new", "completed", "second")]]

        state = await request(two, methods.SESSION_SET_FOLLOW, {"sessionId": sid, "enabled": False})
        assert state == {"sessionId": sid, "enabled": False, "following": False}
        await settle_turn(client, "third")
        await settle_turn(client, "fourth")
        await wait_for(lambda: len(seen_one) >= 2 and sum(len(n["turns"]) for n in seen_one) == 3, "turns 3 and 4")
        assert [t for n in turns_of(seen_one)[1:] for t in n] == [
            (3, "new", "completed", "third"),
            (4, "new", "completed", "fourth"),
        ]
        # The opted-out server did not move: its refresh brings both turns.
        listed = await request(two, methods.TURN_LIST, {"sessionId": sid})
        assert [t["turn"] for t in listed["turns"]] == [1, 2]
        caught_up = await request(two, methods.SESSION_REFRESH, {"sessionId": sid})
        assert caught_up["status"] == "advanced"
        assert [(t["turn"], t["change"]) for t in caught_up["publication"]["turns"]] == [(3, "new"), (4, "new")]
        again = await request(two, methods.SESSION_REFRESH, {"sessionId": sid})
        assert again == {"sessionId": sid, "status": "unchanged"}

        # Back on: it follows again (the command form of setFollow).
        state = await two.workspace_execute_command_async(
            types.ExecuteCommandParams(command=methods.COMMAND_SESSION_SET_FOLLOW, arguments=[{"sessionId": sid, "enabled": True}])
        )
        assert state == {"sessionId": sid, "enabled": True, "following": True, "mode": "notify"}
        before = len(seen_two)
        await settle_turn(client, "fifth")
        await wait_for(lambda: any(n["turns"] for n in seen_two[before:]), "the fifth turn on the second follower")
        assert [t for n in turns_of(seen_two[before:]) for t in n] == [(5, "new", "completed", "fifth")]
    finally:
        await one.shutdown_session()
        await two.shutdown_session()


async def test_the_owner_refreshes_nothing_and_releasing_is_a_holder_change(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    assert await request(client, methods.SESSION_REFRESH, {}) == {"sessionId": sid, "status": "writable"}
    follower = await start_server(workspace)
    try:
        published = collect(follower, methods.SESSION_DID_PUBLISH)
        await joined(follower, sid)
        await request(client, methods.SESSION_CLOSE, {})  # saves and releases the lease
        await wait_for(lambda: any(n["holderChanged"] for n in published), "the release")
        released = [n for n in published if n["holderChanged"]][-1]
        assert released["leaseState"] == "released" and released.get("holderHost") is None
        assert released["turns"] == []
    finally:
        await follower.shutdown_session()


async def test_follow_setting_off_means_no_following_until_refreshed(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    follower = await start_server(workspace, followPublished=False)
    try:
        published = collect(follower, methods.SESSION_DID_PUBLISH)
        await joined(follower, sid)
        await settle_turn(client, "second")
        caught_up = await request(follower, methods.SESSION_REFRESH, {"sessionId": sid})
        assert caught_up["status"] == "advanced"
        assert [t["turn"] for t in caught_up["publication"]["turns"]] == [2]
        # The refresh's change is also the one notification views see.
        await wait_for(lambda: len(published) == 1, "the refresh's didPublish")
        assert turns_of(published) == [[(2, "new", "completed", "second")]]
    finally:
        await follower.shutdown_session()


async def test_errors_name_the_input(client, workspace):
    failure = await _failure(client, methods.SESSION_SET_FOLLOW, {"enabled": "yes"})
    assert failure["kind"] == "invalid-params" and "enabled" in failure["reason"]
    failure = await _failure(client, methods.SESSION_REFRESH, {"sessionId": "2026-07-19T09-47-000000000000"})
    assert failure["kind"] == "owner-missing"


async def _failure(client, method: str, params) -> dict:
    from pygls.exceptions import JsonRpcException

    with pytest.raises(JsonRpcException) as caught:
        await request(client, method, params)
    return caught.value.data


async def test_releasing_control_leaves_the_old_owner_following(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    other = await start_server(workspace)
    try:
        published = collect(client, methods.SESSION_DID_PUBLISH)
        await joined(other, sid)
        released = await request(client, methods.CONTROL_RELEASE, {"sessionId": sid})
        assert released["state"]["access"] == "read-only"
        taken = await request(other, methods.CONTROL_TAKE, {"sessionId": sid})
        assert taken["outcome"] == "acquired"
        await settle_turn(other, "second, on the other machine")
        await wait_for(lambda: any(n["turns"] for n in published), "the new owner's turn")
        with_turns = [n for n in published if n["turns"]]
        assert turns_of(with_turns) == [[(2, "new", "completed", "second, on the other machine")]]
        # The new owner's claim is seen (each watch event is read as it
        # comes, so a claim in progress may show before the active lease).
        changed = [i for i, n in enumerate(published) if n["holderChanged"] and n.get("leaseState") != "released"]
        assert changed, published
        assert any(n.get("leaseState") == "active" for n in published[changed[0]:]), published
        listed = await request(client, methods.TURN_LIST, {"sessionId": sid})
        assert [t["turn"] for t in listed["turns"]] == [1, 2]
    finally:
        await other.shutdown_session()


async def test_a_follower_never_advances_over_its_own_uncommitted_turn(workspace):
    """The owner's machine is suspended mid-turn (SIGSTOP) until its lease
    expires; another server takes the session over and settles a turn. When
    the first wakes up it has lost the lease, and its unpublished turn is
    kept: the newer publication is reported as held back, never adopted."""
    first = await start_server(workspace, leaseSeconds=3)
    second = None
    try:
        sid = (await request(first, methods.SESSION_CREATE, {}))["sessionId"]
        await settle_turn(first, "first")
        await request(first, methods.TURN_BEGIN, {"prompt": "only on the first machine"})
        await request(first, methods.TURN_APPEND, {"kind": "response", "text": "never published"})
        published = collect(first, methods.SESSION_DID_PUBLISH)
        pid = first._server.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await lease_expired(workspace, sid, "the suspended owner's")
            second = await start_server(workspace)
            opened = await request(second, methods.SESSION_OPEN, {"sessionId": sid, "mode": "takeover", "confirmTakeover": True})
            assert opened["action"] == "takeover"
            await settle_turn(second, "the successor's turn")
        finally:
            os.kill(pid, signal.SIGCONT)
        await wait_for(lambda: any(n.get("heldBack") for n in published), "the held-back report")
        held = [n for n in published if n.get("heldBack")]
        assert len(held) == 1 and held[0]["turns"] == [] and "never committed" in held[0]["heldBack"]
        listed = await request(first, methods.TURN_LIST, {"sessionId": sid})
        assert [(t["turn"], t["state"], t["prompt"]) for t in listed["turns"]] == [
            (1, "completed", "first"),
            (2, "in-flight", "only on the first machine"),
        ]
        refreshed = await request(first, methods.SESSION_REFRESH, {"sessionId": sid})
        assert refreshed["status"] == "held-back" and refreshed["publication"]["heldBack"]
        assert all(not n["turns"] for n in published)
    finally:
        if second is not None:
            await second.shutdown_session()
        await first.shutdown_session()


async def test_polling_a_local_workspace_and_switching_to_notifications(client, workspace):
    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    follower = await start_server(workspace, sessionWatch={"notifications": False, "idlePollSeconds": 0.2})
    try:
        published = collect(follower, methods.SESSION_DID_PUBLISH)
        await joined(follower, sid)
        state = await request(follower, methods.SESSION_SET_FOLLOW, {"sessionId": sid, "enabled": True})
        assert state["mode"] == "poll"
        await settle_turn(client, "second")
        await wait_for(lambda: any(n["turns"] for n in published), "the polled turn")
        assert [t for n in turns_of(published) for t in n] == [(2, "new", "completed", "second")]

        follower.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"mevedel": {"sessionWatch": {"idlePollSeconds": 3600}}})
        )
        state = await request(follower, methods.SESSION_SET_FOLLOW, {"sessionId": sid, "enabled": True})
        assert state["mode"] == "notify"  # an hour-long poll would never see the next turn in time
        before = len(published)
        await settle_turn(client, "third")
        await wait_for(lambda: any(n["turns"] for n in published[before:]), "the notified turn")
        assert [t for n in turns_of(published[before:]) for t in n] == [(3, "new", "completed", "third")]
    finally:
        await follower.shutdown_session()


async def test_a_follower_over_ssh_polls_the_owners_workspace(openssh_server, tmp_path, client, workspace):
    """The same workspace reached as ``ssh://`` (the real OpenSSH fixture):
    the follower polls it at the sessionWatch cadence and still receives
    whole settled turns."""
    from .test_ssh_workspace import remote_params, server_config, ssh_home

    sid = (await request(client, methods.SESSION_CREATE, {}))["sessionId"]
    await settle_turn(client, "first")
    url = f"ssh://{ALIAS}{workspace}"
    follower = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await follower.initialize_session(remote_params(url, sessionWatch={"idlePollSeconds": 0.2}))
        published = collect(follower, methods.SESSION_DID_PUBLISH)
        opened = await request(follower, methods.SESSION_OPEN, {"workspaceFolder": url, "sessionId": sid})
        assert opened["action"] == "join"
        state = await request(follower, methods.SESSION_SET_FOLLOW, {"workspaceFolder": url, "sessionId": sid, "enabled": True})
        assert state["following"] and state["mode"] == "poll"
        await settle_turn(client, "second, seen over ssh")
        await wait_for(lambda: any(n["turns"] for n in published), "the polled turn over ssh")
        note = [n for n in published if n["turns"]][0]
        assert note["workspaceFolder"] == url
        assert turns_of([note]) == [[(2, "new", "completed", "second, seen over ssh")]]
    finally:
        await follower.shutdown_session()
