"""One workspace directory, two spellings, two server processes at once: a
local-target server names it by its path, an SSH-target server by
``ssh://127.0.0.1:PORT/...`` through the real sshd fixture. They see one set
of sessions, because identity is the workspace id and the lease records in
the directory, never the path string: listing gives each the other's open
session as Join (or Take over once its lease expired), one writer at a time,
and a takeover after the other side is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from lease_expiry import lease_expired
from mevedel_protocol import methods

from .conftest import answering, collect, request
from .test_ssh_workspace import failure, remote_params, server_config, ssh_home

#: A killed server's lease expires within the takeover test; the others
#: keep a generous lease, as an SSH renewal on a loaded CI machine can take
#: longer than a 3 s lease allows and the writer would then look expired.
SHORT_LEASE = 3
LEASE = 30


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shared project"
    root.mkdir()
    return root


async def both(openssh_server, tmp_path: Path, project: Path, lease: int = LEASE):
    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://127.0.0.1:{openssh_server.port}{project}"
    local = await server_config(home).start()
    await local.initialize_session(remote_params(local=project, leaseSeconds=lease))
    remote = await server_config(home).start()
    await remote.initialize_session(remote_params(url, leaseSeconds=lease))
    return local, {"workspaceFolder": project.as_uri()}, remote, {"workspaceFolder": url}


async def actions(client, ws: dict) -> dict[str, str]:
    return {r["sessionId"]: r["action"] for r in (await request(client, methods.SESSION_LIST, ws))["sessions"]}


async def settled_turn(client, ws: dict, prompt: str) -> None:
    await request(client, methods.TURN_BEGIN, {**ws, "prompt": prompt})
    await request(client, methods.TURN_APPEND, {**ws, "kind": "response", "text": f"answer to {prompt}"})
    assert (await request(client, methods.TURN_SETTLE, ws))["committed"] is True


async def test_local_and_ssh_servers_share_sessions_and_one_writer(openssh_server, tmp_path, project):
    local, lws, remote, rws = await both(openssh_server, tmp_path, project)
    try:
        by_ssh = (await request(remote, methods.SESSION_CREATE, {**rws, "name": "Started over SSH"}))["sessionId"]
        await settled_turn(remote, rws, "remote first")
        # The SSH server's session is held: the local one asks, and is told.
        asked = answering(local, "Start anyway")
        by_local = (await request(local, methods.SESSION_CREATE, {**lws, "name": "Started locally"}))["sessionId"]
        assert len(asked) == 1 and '"Started over SSH" is held by ' in asked[0].message
        await settled_turn(local, lws, "local first")

        assert await actions(local, lws) == {by_ssh: "Join", by_local: "Switch"}
        assert await actions(remote, rws) == {by_ssh: "Switch", by_local: "Join"}
        rows = {r["sessionId"]: r for r in (await request(local, methods.SESSION_LIST, lws))["sessions"]}
        assert rows[by_ssh]["displayName"] == "Started over SSH" and rows[by_ssh]["turns"] == 1

        # Each joins the other's session read-only and cannot write it.
        joined = await request(local, methods.SESSION_OPEN, {**lws, "sessionId": by_ssh})
        assert joined["action"] == "join" and joined["session"]["access"] == "read-only"
        assert (await failure(local, methods.TURN_BEGIN, {**lws, "prompt": "mine now"}))["kind"] == "read-only"
        held = await failure(local, methods.SESSION_OPEN, {**lws, "sessionId": by_ssh, "mode": "resume"})
        assert held["kind"] == "lease-held"
        joined = await request(remote, methods.SESSION_OPEN, {**rws, "sessionId": by_local})
        assert joined["session"]["access"] == "read-only"
        assert (await failure(remote, methods.SESSION_RENAME, {**rws, "name": "Stolen"}))["kind"] == "read-only"

        # The writer's new turn is what the reader on the other spelling reads.
        await request(remote, methods.SESSION_OPEN, {**rws, "sessionId": by_ssh})
        await settled_turn(remote, rws, "remote second")
        turns = await request(local, methods.TURN_LIST, {**lws, "sessionId": by_ssh})
        assert [t["turn"] for t in turns["turns"]] == [1, 2]
    finally:
        await remote.shutdown_session()
        await local.shutdown_session()


async def test_a_killed_ssh_server_s_session_is_taken_over_locally(openssh_server, tmp_path, project):
    local, lws, remote, rws = await both(openssh_server, tmp_path, project, lease=SHORT_LEASE)
    try:
        sid = (await request(remote, methods.SESSION_CREATE, {**rws, "name": "Doomed writer"}))["sessionId"]
        await settled_turn(remote, rws, "before the kill")
        assert (await actions(local, lws))[sid] == "Join"

        remote._server.send_signal(signal.SIGKILL)  # no shutdown, no release: the lease is left to expire
        await remote._server.wait()
        await lease_expired(project, sid, "the killed server's")

        assert (await actions(local, lws))[sid] == "Take over"
        unconfirmed = await failure(local, methods.SESSION_OPEN, {**lws, "sessionId": sid, "mode": "takeover"})
        assert unconfirmed["kind"] in ("takeover-needs-confirmation", "takeover-declined"), unconfirmed
        taken = await request(local, methods.SESSION_OPEN, {**lws, "sessionId": sid, "mode": "takeover", "confirmTakeover": True})
        assert taken["session"]["access"] == "writable" and taken["session"]["settledTurns"] == 1
        await settled_turn(local, lws, "after the takeover")
        assert [t["turn"] for t in (await request(local, methods.TURN_LIST, {**lws, "sessionId": sid}))["turns"]] == [1, 2]
    finally:
        await local.shutdown_session()


# -- following and control transfer across the two spellings -------------------


async def machine_pair(openssh_server, tmp_path: Path, project: Path, started: list):
    from .test_control_transfer import SETTINGS, Machine

    home = ssh_home(tmp_path, openssh_server)
    url = f"ssh://127.0.0.1:{openssh_server.port}{project}"
    local = await server_config(home).start()
    started.append(local)
    await local.initialize_session(remote_params(local=project, **SETTINGS))
    remote = await server_config(home).start()
    started.append(remote)
    # The SSH server's only folder is the ssh:// one, so requests without a
    # workspaceFolder run there.
    await remote.initialize_session(remote_params(url, **SETTINGS))
    return Machine("local", local), Machine("ssh", remote)


@pytest.fixture
async def started():
    clients: list = []
    yield clients
    for client in clients:
        if client._server.returncode is None:
            try:
                await asyncio.wait_for(client.shutdown_session(), 60)
            except Exception:
                client._server.kill()


@pytest.mark.parametrize("owner_side", ["local", "ssh"])
async def test_following_across_spellings(openssh_server, tmp_path, project, started, owner_side):
    from deadlines import wait_for

    from .test_control_transfer import owned

    local, ssh = await machine_pair(openssh_server, tmp_path, project, started)
    owner, follower = (local, ssh) if owner_side == "local" else (ssh, local)
    published = collect(follower.client, methods.SESSION_DID_PUBLISH)
    sid = await owned(owner)
    opened = await follower.call(methods.SESSION_OPEN, {"sessionId": sid})
    assert opened["action"] == "join" and opened["session"]["access"] == "read-only"

    await owner.settle_turn(sid, "seen across")
    await wait_for(lambda: any(n["sessionId"] == sid and n["settledTurns"] == 2 for n in published), "the new turn")
    note = next(n for n in published if n["settledTurns"] == 2)
    assert [(t["turn"], t["change"], t["prompt"]) for t in note["turns"]] == [(2, "new", "seen across")]
    listed = await follower.call(methods.TURN_LIST, {"sessionId": sid})
    assert [t["prompt"] for t in listed["turns"]] == ["turn 1", "seen across"]


async def test_control_transfer_local_to_ssh_and_back(openssh_server, tmp_path, project, started):
    from .test_control_transfer import hand_over, one_writer, owned, turns_of

    local, ssh = await machine_pair(openssh_server, tmp_path, project, started)
    sid = await owned(local)
    await ssh.call(methods.SESSION_OPEN, {"sessionId": sid})
    assert await one_writer(project, sid, [local, ssh]) is local

    await hand_over(project, sid, local, ssh, [local, ssh])
    assert [a.title for a in local.questions[-1].actions] == ["Grant", "Keep"]
    await ssh.settle_turn(sid, "written over SSH")
    assert (await local.refused(methods.TURN_BEGIN, {"sessionId": sid, "prompt": "not mine"}))["kind"] == "read-only"

    await hand_over(project, sid, ssh, local, [local, ssh])
    await local.settle_turn(sid, "written locally")
    expected = ["turn 1", "written over SSH", "written locally"]
    assert await turns_of(local, sid) == expected
    assert await turns_of(ssh, sid) == expected
