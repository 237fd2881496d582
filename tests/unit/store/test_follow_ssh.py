"""Following a session through a real OpenSSH server: the follower's
SessionWatcher on SshTarget polls (one pure-read program per tick), at the
active cadence while its predicate says a transfer is in flight, and the
service's follow step adopts the owner's new turn read over SSH."""

from __future__ import annotations

import asyncio

import pytest

from deadlines import ticks
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.following import FollowUpdate
from mevedel_server.store.watching.watch import (
    LEASE,
    REFRESH,
    SessionWatcher,
    WatchCadence,
    WatchMode,
)
from mevedel_server.targets import LocalTarget
from mevedel_server.targets.ssh import SshTarget


@pytest.fixture
async def ssh_target(openssh_server, tmp_path):
    target = await SshTarget.connect(openssh_server.url(tmp_path), **openssh_server.options())
    yield target
    await target.close()


async def settle(owner: SessionService, sid: str, prompt: str) -> None:
    await owner.turns.begin_turn(sid, prompt)
    await owner.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await owner.turns.settle(sid)


async def test_a_remote_follower_polls_and_adopts_whole_turns(ssh_target, tmp_path):
    owner = SessionService(LocalTarget(tmp_path), ClientIdentity("local-owner", "desk"))
    sid = (await owner.sessions.create()).session_id
    await settle(owner, sid, "first")
    follower = SessionService(ssh_target, ClientIdentity("remote-follower", "laptop"))
    assert (await follower.sessions.open(sid)).action == "join"
    told: list[FollowUpdate] = []
    follower.following.on_follow.append(told.append)
    in_flight = False
    # Idle is an hour: anything seen at all was seen at the active cadence.
    watcher = SessionWatcher(ssh_target, sid, cadence=WatchCadence(idle_seconds=3600, active_seconds=0.2), active=lambda: in_flight)
    wakes: list = []
    handled: list = []

    async def step(wake) -> None:
        wakes.append(wake)
        await follower.following.follow(sid)
        handled.append(wake)

    watcher.subscribe(step)
    watcher.start()
    try:
        assert watcher.mode is WatchMode.POLL
        for _ in ticks():
            if wakes:
                break
            await asyncio.sleep(0.05)
        assert wakes and told == []  # armed, nothing new yet
        in_flight = True
        watcher.refresh()
        # The refresh's own wake is handled before the owner commits: the
        # new turn can then only be seen by a poll (a wake that followed
        # the commit would adopt it without one, and the test raced).
        for _ in ticks():
            if any(REFRESH in w.reasons for w in handled):
                break
            await asyncio.sleep(0.05)
        assert told == []
        await settle(owner, sid, "second")
        for _ in ticks():
            if told and any(LEASE in w.reasons for w in handled):
                break
            await asyncio.sleep(0.05)
        assert any(LEASE in w.reasons for w in wakes)
        assert [(t.turn, t.change) for t in told[0].change.turns] == [(2, "new")]
        assert [t.turn for t in await follower.turns.summaries(sid)] == [1, 2]
    finally:
        await watcher.stop()
        await follower.sessions.detach()
        await owner.sessions.close_all()
