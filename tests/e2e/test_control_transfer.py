"""Control transfer between real server processes, each one standing for
one machine's editor, on one workspace: request, grant by answer, grant by
timeout, Keep, a drain that waits for the turn in flight, release, a
takeover after the owner was killed with SIGKILL, and control passed back
and forth. After every step the lease records on disk name at most one
writer, at most one server says it may write, and every committed turn is
still there."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from deadlines import wait_for
from mevedel_protocol import methods
from mevedel_server.store import LeaseStanding, observe_lease
from mevedel_server.targets import LocalTarget

from .conftest import SERVER, initialize_params, request

#: Generous on purpose: on a loaded CI machine a 1 s prompt timeout fires
#: before the user's answer is handled, and a 3 s lease can lapse between two
#: renewals. The tests about the timeout and about expiry shorten them.
SETTINGS = {
    "leaseSeconds": 30,
    "controlTransfer": {"promptTimeoutSeconds": 60, "fenceSeconds": 10},
    "sessionWatch": {"idlePollSeconds": 1, "activePollSeconds": 0.2},
}
#: A prompt nobody answers times out within a test.
QUICK_PROMPT = {"controlTransfer": {"promptTimeoutSeconds": 1, "fenceSeconds": 10}}


class Machine:
    """One editor: a server process and the client talking to it."""

    HOLD_SECONDS = 8

    def __init__(self, name: str, client) -> None:
        self.name = name
        self.client = client
        self.events: list[dict] = []
        self.questions: list = []
        #: How this machine's user answers the grant question ("Grant",
        #: "Keep", or None: the question is dismissed).
        self.answer: str | None = "Grant"
        #: How it answers the expired-takeover question.
        self.takeover = "Take over"
        def changed(params: dict) -> None:
            self.events.append(params)

        async def asked(params):
            if self.answer == "hold" and "Grant" in [a.title for a in params.actions]:
                self.questions.append(params)
                await asyncio.sleep(self.HOLD_SECONDS)  # the user is away
                return None
            return self._asked(params)

        #: ``$/cancelRequest`` notifications the server sent (a withdrawn question).
        self.withdrawn: list = []
        handle_cancel = client.protocol._handle_cancel_notification

        def cancelled(msg_id):
            self.withdrawn.append(msg_id)
            return handle_cancel(msg_id)

        client.protocol._handle_cancel_notification = cancelled

        client.feature(methods.CONTROL_DID_CHANGE)(changed)
        client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(asked)

    def _asked(self, params):
        self.questions.append(params)
        titles = [a.title for a in params.actions]
        choice = self.takeover if "Take over" in titles else self.answer
        return types.MessageActionItem(title=choice) if choice is not None else None

    async def call(self, method: str, params: dict):
        return await request(self.client, method, params)

    async def refused(self, method: str, params: dict) -> dict:
        with pytest.raises(JsonRpcException) as caught:
            await self.call(method, params)
        return {**caught.value.data, "message": caught.value.message}

    def phases(self) -> list[str]:
        return [e["phase"] for e in self.events]

    async def writable(self, sid: str) -> bool:
        rows = (await self.call(methods.SESSION_LIST, {}))["sessions"]
        return any(r["sessionId"] == sid and r["action"] == "Switch" for r in rows)

    async def settle_turn(self, sid: str, prompt: str) -> None:
        await self.call(methods.TURN_BEGIN, {"sessionId": sid, "prompt": prompt})
        await self.call(methods.TURN_APPEND, {"sessionId": sid, "kind": "response", "text": f"done: {prompt}"})
        await self.call(methods.TURN_SETTLE, {"sessionId": sid})


async def start(workspace: Path, name: str, started: list, **settings) -> Machine:
    client = await SERVER.start()
    started.append(client)
    await client.initialize_session(initialize_params(workspace, **{**SETTINGS, **settings}))
    return Machine(name, client)


async def one_writer(workspace: Path, sid: str, machines: list[Machine]) -> Machine | None:
    """At most one writer: the lease head on disk, and what the servers
    say. Returns the machine that writes, if any."""
    # The servers are asked one after another, so control may move between
    # two answers: an earlier writer that is still writable after a later
    # one said so was writing at the same time as it.
    writers = [m for m in machines if await m.writable(sid)]
    if len(writers) > 1:
        both = [m.name for m in writers[:-1] if await m.writable(sid)] + [writers[-1].name]
        assert len(both) == 1, f"two writers at once: {both}"
        writers = writers[-1:]
    if not writers:
        return None
    observation = await observe_lease(LocalTarget(workspace), sid)
    if await writers[0].writable(sid):
        assert observation.standing is LeaseStanding.HELD, observation
    return writers[0]


class WriterWatch:
    """Samples :func:`one_writer` continuously while control moves, so a
    moment with two writers between the steps would be caught too."""

    def __init__(self, workspace: Path, sid: str, machines: list[Machine]) -> None:
        self.samples = 0
        self._stopping = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(workspace, sid, machines))

    async def _run(self, workspace, sid, machines) -> None:
        while not self._stopping.is_set():
            await one_writer(workspace, sid, machines)
            self.samples += 1
            try:
                await asyncio.wait_for(self._stopping.wait(), 0.01)
            except asyncio.TimeoutError:
                pass

    async def stop(self) -> None:
        # Never cancel the sampler: a request cancelled while in flight gets
        # its answer later, pygls then fails to set the cancelled future and
        # pytest-lsp treats that as a fatal server error -- it terminates the
        # server (exit -15) and fails every pending request of that client.
        self._stopping.set()
        await self._task  # an assertion inside is the test's failure


async def turns_of(machine: Machine, sid: str) -> list[str]:
    listed = await machine.call(methods.TURN_LIST, {"sessionId": sid})
    return [t["prompt"] for t in listed["turns"]]


async def owned(machine: Machine, prompt: str = "turn 1") -> str:
    sid = (await machine.call(methods.SESSION_CREATE, {"name": "Shared"}))["sessionId"]
    await machine.settle_turn(sid, prompt)
    return sid


async def hand_over(workspace, sid, owner: Machine, asker: Machine, everyone: list[Machine]) -> None:
    """``asker`` takes control; ``owner`` grants by its answer."""
    before = len(asker.events)
    taken = await asker.call(methods.CONTROL_TAKE, {"sessionId": sid})
    assert taken["outcome"] == "requested" and taken["state"]["access"] == "read-only"
    await wait_for(lambda: "acquired" in asker.phases()[before:], f"{asker.name} acquiring")
    assert await one_writer(workspace, sid, everyone) is asker


async def test_request_granted_by_answer_back_and_forth(workspace, machines):
    desk, laptop = await machines("desk"), await machines("laptop")
    sid = await owned(desk)
    await laptop.call(methods.SESSION_OPEN, {"sessionId": sid})
    assert await one_writer(workspace, sid, [desk, laptop]) is desk
    mailbox = workspace / ".mevedel" / "sessions" / sid / ".lease" / "requests"
    await asyncio.sleep(1.5)  # both servers have watched and polled the session
    assert not mailbox.exists()  # reads never create the transfer mailbox
    watch = WriterWatch(workspace, sid, [desk, laptop])
    expected = ["turn 1"]
    for round_ in range(2):
        await hand_over(workspace, sid, desk, laptop, [desk, laptop])
        assert desk.questions and "asks for control" in desk.questions[-1].message
        assert [a.title for a in desk.questions[-1].actions] == ["Grant", "Keep"]
        assert "released" in desk.phases()
        assert await turns_of(laptop, sid) == expected  # reloaded before it became writable
        expected.append(f"laptop {round_}")
        await laptop.settle_turn(sid, expected[-1])
        refused = await desk.refused(methods.TURN_BEGIN, {"sessionId": sid, "prompt": "not mine"})
        assert refused["kind"] == "read-only"
        await hand_over(workspace, sid, laptop, desk, [desk, laptop])
        expected.append(f"desk {round_}")
        await desk.settle_turn(sid, expected[-1])
    await watch.stop()
    assert watch.samples > 0
    assert await turns_of(desk, sid) == expected
    assert await turns_of(laptop, sid) == expected


async def test_keep_rejects_and_a_new_request_can_follow(workspace, machines):
    desk, laptop = await machines("desk"), await machines("laptop")
    sid = await owned(desk)
    desk.answer = "Keep"
    await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    await wait_for(lambda: "rejected" in laptop.phases(), "the rejection reaching the requester")
    # Two servers tell two editors: the requester's may hear of the written
    # answer before the owner's own notice reaches its editor.
    await wait_for(lambda: "kept" in desk.phases(), "the owner told it kept the session")
    status = await laptop.call(methods.CONTROL_STATUS, {"sessionId": sid})
    assert status["role"] == "none"  # the pending state ended
    assert await one_writer(workspace, sid, [desk, laptop]) is desk
    await desk.settle_turn(sid, "turn 2")
    desk.answer = "Grant"
    await hand_over(workspace, sid, desk, laptop, [desk, laptop])
    assert await turns_of(laptop, sid) == ["turn 1", "turn 2"]


async def test_a_second_request_waits_for_the_answer_to_the_first(workspace, machines):
    """One request per transfer generation: while the owner's question is
    up (it times out after a minute here, not within the test), another
    client is told somebody already asked; once that request is answered,
    it may ask the new owner."""
    desk, laptop, tablet = await machines("desk"), await machines("laptop"), await machines("tablet")
    sid = await owned(desk)
    desk.answer = "hold"  # the question stays up: nobody is at the desk
    await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    await wait_for(lambda: "asking" in desk.phases(), "the owner asked")
    busy = await tablet.refused(methods.CONTROL_TAKE, {"sessionId": sid})
    assert busy["kind"] == "conflict" and "already asked" in busy["message"]
    await desk.call(methods.CONTROL_GRANT, {"sessionId": sid})
    await wait_for(lambda: "acquired" in laptop.phases(), "the grant reaching the requester")
    await hand_over(workspace, sid, laptop, tablet, [desk, laptop, tablet])


async def test_an_unanswered_request_is_granted_after_the_prompt_timeout(workspace, machines):
    desk = await machines("desk", **QUICK_PROMPT)
    laptop, tablet = await machines("laptop", **QUICK_PROMPT), await machines("tablet", **QUICK_PROMPT)
    sid = await owned(desk)
    desk.answer = "hold"  # the question stays up: nobody is at the desk
    await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    await wait_for(lambda: "acquired" in laptop.phases(), "the timeout grant")
    # Two servers tell two editors: the requester's may report the hand-over
    # before the owner's own notice of it reaches its editor.
    await wait_for(lambda: desk.questions and "released" in desk.phases(), "the owner told it handed the session over")
    assert "asking" in desk.phases()
    released = next(e for e in desk.events if e["phase"] == "released")
    assert "nobody answered within 1 s" in released["message"]
    await wait_for(lambda: desk.withdrawn, "the unanswered question being withdrawn")
    assert await one_writer(workspace, sid, [desk, laptop, tablet]) is laptop
    await laptop.settle_turn(sid, "turn 2")
    await hand_over(workspace, sid, laptop, tablet, [desk, laptop, tablet])
    assert await turns_of(tablet, sid) == ["turn 1", "turn 2"]


async def test_grant_drains_the_turn_in_flight_first(workspace, machines):
    desk, laptop = await machines("desk"), await machines("laptop")
    sid = await owned(desk)
    await desk.call(methods.TURN_BEGIN, {"sessionId": sid, "prompt": "long turn"})
    await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    await wait_for(lambda: "draining" in desk.phases(), "the owner draining")
    draining = next(e for e in desk.events if e["phase"] == "draining")
    assert draining["waitingFor"] == "turn 2 to settle"
    await wait_for(lambda: "granted" in laptop.phases(), "the requester told it waits")
    assert await one_writer(workspace, sid, [desk, laptop]) is desk
    refused = await desk.refused(methods.SESSION_RENAME, {"sessionId": sid, "name": "New work"})
    assert refused["kind"] == "transfer-draining" and "being handed to" in refused["message"]
    await desk.call(methods.TURN_APPEND, {"sessionId": sid, "kind": "response", "text": "finished"})
    await desk.call(methods.TURN_SETTLE, {"sessionId": sid})
    await wait_for(lambda: "acquired" in laptop.phases(), "the hand-over after the drain")
    assert await one_writer(workspace, sid, [desk, laptop]) is laptop
    assert await turns_of(laptop, sid) == ["turn 1", "long turn"]


async def test_release_leaves_the_owner_following(workspace, machines):
    desk, laptop = await machines("desk"), await machines("laptop")
    sid = await owned(desk)
    released = await desk.call(methods.CONTROL_RELEASE, {"sessionId": sid})
    assert released["committed"] and released["state"]["access"] == "read-only"
    assert await one_writer(workspace, sid, [desk, laptop]) is None
    taken = await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    assert taken["outcome"] == "acquired" and taken["state"]["access"] == "writable"
    await laptop.settle_turn(sid, "turn 2")
    assert await turns_of(desk, sid) == ["turn 1", "turn 2"]  # the old owner reads on
    back = await desk.call(methods.CONTROL_TAKE, {"sessionId": sid})
    assert back["outcome"] == "requested"  # and may ask like anyone else
    await wait_for(lambda: "acquired" in desk.phases(), "control coming back")
    assert await one_writer(workspace, sid, [desk, laptop]) is desk


async def test_an_owner_killed_with_sigkill_is_taken_over_at_once(workspace, machines):
    """The owner's server dies on this machine: its lease (of the default
    minute) is taken over without waiting it out, after the same question."""
    desk, laptop = await machines("desk"), await machines("laptop")
    sid = await owned(desk)
    await desk.settle_turn(sid, "turn 2")
    await laptop.call(methods.SESSION_OPEN, {"sessionId": sid})
    os.kill(desk.client._server.pid, signal.SIGKILL)
    await desk.client._server.wait()
    observed = await observe_lease(LocalTarget(workspace), sid)
    assert observed.now < observed.record.expires_at and observed.standing is LeaseStanding.EXPIRED
    laptop.takeover = "Cancel"
    declined = await laptop.refused(methods.CONTROL_TAKE, {"sessionId": sid})
    assert declined["kind"] == "takeover-declined"
    laptop.takeover = "Take over"
    taken = await laptop.call(methods.CONTROL_TAKE, {"sessionId": sid})
    assert taken["outcome"] == "took-over" and taken["state"]["access"] == "writable"
    assert await one_writer(workspace, sid, [laptop]) is laptop
    assert await turns_of(laptop, sid) == ["turn 1", "turn 2"]
    await laptop.settle_turn(sid, "turn 3")
    assert await turns_of(laptop, sid) == ["turn 1", "turn 2", "turn 3"]
