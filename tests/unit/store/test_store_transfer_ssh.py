"""Control transfer with the owner on SshTarget (a real OpenSSH server) and
the requester on LocalTarget, reading the same directory: the request,
grant, drain, fenced release and the requester's acquisition work through
the remote executor unchanged, and the prompt timeout is the target's."""

from __future__ import annotations

import asyncio

import pytest

from deadlines import ticks
from mevedel_server.store import ClientIdentity, observe_lease
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.control import SessionControl
from mevedel_server.targets import LocalTarget
from mevedel_server.targets.ssh import SshTarget


@pytest.fixture
async def ssh_target(openssh_server, tmp_path):
    target = await SshTarget.connect(openssh_server.url(tmp_path), **openssh_server.options())
    yield target
    await target.close()


async def test_a_remote_owner_hands_over_to_a_local_requester(ssh_target, tmp_path):
    owner = SessionService(ssh_target, ClientIdentity("remote-owner", "server-room"))
    owner_ctl = SessionControl(owner)
    owner_ctl.configure(prompt_timeout=1)
    owner_events: list = []
    owner_ctl.on_event.append(owner_events.append)
    sid = (await owner.sessions.create()).session_id
    await owner.turns.begin_turn(sid, "first")
    await owner.turns.append(sid, EvidenceInput("response", text="done remotely"))
    await owner.turns.settle(sid)

    asker = SessionService(LocalTarget(tmp_path), ClientIdentity("local-asker", "laptop"))
    asker_ctl = SessionControl(asker)
    asker_events: list = []
    asker_ctl.on_event.append(asker_events.append)
    assert (await asker_ctl.take(sid)).outcome == "requested"
    for _ in ticks():  # nobody answers: the owner's poll grants on the target clock
        await owner_ctl.poll()
        if owner_events and owner_events[-1].phase == "released":
            break
        await asyncio.sleep(0.05)
    assert [e.phase for e in owner_events] == ["asking", "released"]
    await asker_ctl.poll()
    assert [e.phase for e in asker_events] == ["requested", "acquired"]
    info = asker.info(sid)
    assert info.access.value == "writable" and info.settled_turns == 1
    head = (await observe_lease(ssh_target, sid)).record
    assert head.client_id == "local-asker" and head.transfer_generation == 2  # the claim consumed the grant
    await owner.sessions.detach()
    await asker.sessions.detach()
