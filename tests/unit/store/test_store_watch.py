"""The session watcher: filesystem notifications on a local session's
``.lease/`` (arming on an ancestor while it is absent, creating nothing),
polling on other targets at the idle or active cadence, serial coalesced
delivery, and the explicit refresh."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.store import ClientIdentity, allocate_session_id
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.watching.watch import (
    LEASE,
    REFRESH,
    REQUESTS,
    SessionWatcher,
    Wake,
    WatchCadence,
    WatchMode,
)
from mevedel_server.targets import (
    ControlProgram,
    FaultInjectingTarget,
    LocalTarget,
    TargetError,
)
from mevedel_server.targets.target import ProgramTarget

OWNER = ClientIdentity("client-owner", "owner-box")


@pytest.fixture(params=["inotify", "watchfiles"])
def backend(request, monkeypatch) -> str:
    """Both notification sources: inotify on the loop (Linux) and the
    portable watchfiles thread."""
    import mevedel_server.targets as targets

    if request.param == "inotify" and not targets.inotify_available():
        pytest.skip("inotify is Linux-only")
    if request.param == "watchfiles":
        monkeypatch.setattr(targets, "inotify_available", lambda: False)
    return request.param


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


class Wakes:
    def __init__(self) -> None:
        self.seen: list[Wake] = []

    def __call__(self, wake: Wake) -> None:
        self.seen.append(wake)

    def reasons(self) -> set[str]:
        return set().union(*(w.reasons for w in self.seen)) if self.seen else set()

    async def until(self, reason: str, after: int = 0) -> None:
        for _ in ticks():
            if any(reason in w.reasons for w in self.seen[after:]):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {reason!r} wake; saw {self.seen[after:]}")


async def settled_session(root: Path, prompt: str = "first") -> tuple[SessionService, str]:
    owner = SessionService(LocalTarget(root), OWNER)
    sid = (await owner.sessions.create()).session_id
    await settle(owner, sid, prompt)
    return owner, sid


async def settle(owner: SessionService, sid: str, prompt: str) -> None:
    await owner.turns.begin_turn(sid, prompt)
    await owner.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await owner.turns.settle(sid)


async def test_a_local_watcher_is_woken_by_a_publication(root, backend):
    owner, sid = await settled_session(root)
    wakes = Wakes()
    watcher = SessionWatcher(LocalTarget(root), sid)
    watcher.subscribe(wakes)
    watcher.start()
    try:
        assert watcher.mode is WatchMode.NOTIFY
        await wakes.until("armed")
        seen = len(wakes.seen)
        await settle(owner, sid, "second")
        await wakes.until(LEASE, seen)
        assert watcher.polls == 0  # nothing was read to notice it
    finally:
        await watcher.stop()
        await owner.sessions.close_all()


async def test_watching_an_absent_session_creates_nothing_and_picks_it_up(root, backend):
    target = LocalTarget(root)
    sid = await allocate_session_id(target)
    wakes = Wakes()
    watcher = SessionWatcher(target, sid)
    watcher.subscribe(wakes)
    watcher.start()
    try:
        await wakes.until("armed")
        assert not (root / ".mevedel").exists()  # watching created no directory
        # The session's directories appear one level at a time, as a
        # materialization makes them.
        (root / ".mevedel").mkdir()
        (root / ".mevedel" / "sessions").mkdir()
        (root / ".mevedel" / "sessions" / sid).mkdir()
        (root / ".mevedel" / "sessions" / sid / ".lease").mkdir()
        await wakes.until(LEASE)
        # Now armed on .lease itself: a request mailbox appearing is reported,
        # and so is a record created inside it.
        for _ in ticks():
            if watcher._arm is not None and watcher._arm.path.endswith("/.lease"):
                break
            await asyncio.sleep(0.01)
        seen = len(wakes.seen)
        (root / ".mevedel" / "sessions" / sid / ".lease" / "requests").mkdir()
        await wakes.until(REQUESTS, seen)
        await asyncio.sleep(0.1)  # the new directory is watched from its creation on
        seen = len(wakes.seen)
        (root / ".mevedel" / "sessions" / sid / ".lease" / "requests" / "request-00000000000000000001.json").write_text("{}")
        await wakes.until(REQUESTS, seen)
        # The session removed: the watch falls back to its parent and says so.
        import shutil

        seen = len(wakes.seen)
        shutil.rmtree(root / ".mevedel" / "sessions" / sid)
        await wakes.until(LEASE, seen)
        for _ in ticks():
            if watcher._arm is not None and watcher._arm.path.endswith("/sessions"):
                break
            await asyncio.sleep(0.01)
        assert watcher._arm.path.endswith("/sessions")
    finally:
        await watcher.stop()


async def test_probes_and_temporary_files_are_not_changes(root, backend):
    owner, sid = await settled_session(root)
    await owner.sessions.close_all()
    lease = root / ".mevedel" / "sessions" / sid / ".lease"
    wakes = Wakes()
    watcher = SessionWatcher(LocalTarget(root), sid)
    watcher.subscribe(wakes)
    watcher.start()
    try:
        await wakes.until("armed")
        seen = len(wakes.seen)
        (lease / ".clock-probe-0011223344556677").write_bytes(b"")
        (lease / ".generation-x.json.abcdef.tmp").write_bytes(b"x")
        (lease / "requests").mkdir()
        await wakes.until(REQUESTS, seen)
        assert all(LEASE not in w.reasons for w in wakes.seen[seen:])
    finally:
        await watcher.stop()


async def test_wakes_during_a_call_become_one_more_call(root, backend):
    owner, sid = await settled_session(root)
    await owner.sessions.close_all()
    calls: list[frozenset[str]] = []
    release = asyncio.Event()
    entered = asyncio.Event()

    async def slow(wake: Wake) -> None:
        calls.append(wake.reasons)
        entered.set()
        await release.wait()

    watcher = SessionWatcher(LocalTarget(root), sid)
    watcher.subscribe(slow)
    watcher.start()
    try:
        await entered.wait()  # the armed wake is being handled
        for _ in range(5):
            watcher.refresh()
        release.set()
        for _ in ticks():
            if len(calls) >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert calls == [frozenset({"armed"}), frozenset({REFRESH})]
    finally:
        await watcher.stop()


async def test_a_failing_subscriber_does_not_stop_the_others(root):
    owner, sid = await settled_session(root)
    await owner.sessions.close_all()
    wakes = Wakes()

    def broken(_wake: Wake) -> None:
        raise RuntimeError("subscriber bug")

    watcher = SessionWatcher(LocalTarget(root), sid)
    watcher.subscribe(broken)
    watcher.subscribe(wakes)
    watcher.start()
    try:
        await wakes.until("armed")
        watcher.refresh()
        await wakes.until(REFRESH)
    finally:
        await watcher.stop()


async def test_an_unsubscribed_callback_is_not_called(root):
    owner, sid = await settled_session(root)
    await owner.sessions.close_all()
    kept, dropped = Wakes(), Wakes()
    watcher = SessionWatcher(LocalTarget(root), sid)
    watcher.subscribe(kept)
    unsubscribe = watcher.subscribe(dropped)
    unsubscribe()
    watcher.start()
    try:
        await kept.until("armed")
        assert dropped.seen == []
    finally:
        await watcher.stop()


async def test_a_non_local_target_polls_and_reports_changed_listings(root):
    owner, sid = await settled_session(root)
    # Any Target that is not a LocalTarget is polled (this one runs locally).
    remote_like = FaultInjectingTarget(LocalTarget(root))
    wakes = Wakes()
    watcher = SessionWatcher(remote_like, sid, cadence=WatchCadence(idle_seconds=0.05, active_seconds=0.05))
    watcher.subscribe(wakes)
    watcher.start()
    try:
        assert watcher.mode is WatchMode.POLL
        await wakes.until("armed")
        polls = watcher.polls
        for _ in ticks():
            if watcher.polls >= polls + 3:
                break
            await asyncio.sleep(0.01)
        assert wakes.reasons() == {"armed"}  # unchanged listings wake nobody
        seen = len(wakes.seen)
        await settle(owner, sid, "second")
        await wakes.until(LEASE, seen)
        seen = len(wakes.seen)
        (root / ".mevedel" / "sessions" / sid / ".lease" / "requests").mkdir()
        (root / ".mevedel" / "sessions" / sid / ".lease" / "requests" / "request-1.json").write_text("{}")
        await wakes.until(REQUESTS, seen)
    finally:
        await watcher.stop()
        await owner.sessions.close_all()


async def test_the_active_predicate_picks_the_cadence_every_tick(root):
    owner, sid = await settled_session(root)
    in_flight = False
    wakes = Wakes()
    # Idle is an hour: a change seen at all was seen at the active cadence.
    cadence = WatchCadence(idle_seconds=3600, active_seconds=0.05)
    watcher = SessionWatcher(FaultInjectingTarget(LocalTarget(root)), sid, cadence=cadence, active=lambda: in_flight)
    watcher.subscribe(wakes)
    watcher.start()
    try:
        await wakes.until("armed")
        assert not watcher.active
        in_flight = True
        watcher.refresh()  # ends the hour-long wait; the next tick is active
        await wakes.until(REFRESH)
        seen = len(wakes.seen)
        await settle(owner, sid, "second")
        await wakes.until(LEASE, seen)
        assert watcher.active
    finally:
        await watcher.stop()
        await owner.sessions.close_all()


async def test_a_failing_poll_keeps_polling(root):
    owner, sid = await settled_session(root)
    faulty = Unreachable(LocalTarget(root), failures=3)
    wakes = Wakes()
    watcher = SessionWatcher(faulty, sid, cadence=WatchCadence(idle_seconds=0.05))
    watcher.subscribe(wakes)
    watcher.start()
    try:
        await wakes.until("armed")
        seen = len(wakes.seen)
        await settle(owner, sid, "second")
        await wakes.until(LEASE, seen)
    finally:
        await watcher.stop()
        await owner.sessions.close_all()


class Unreachable(ProgramTarget):
    """A non-local target whose first ``failures`` programs fail like a
    dropped connection."""

    def __init__(self, inner: LocalTarget, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    async def run(self, program: ControlProgram):
        if self.failures:
            self.failures -= 1
            raise TargetError(".mevedel", "the connection dropped")
        return await self.inner.run(program)


def test_cadences_must_be_positive():
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="idle_seconds"):
            WatchCadence(idle_seconds=bad)
    with pytest.raises(ValueError, match="local target"):
        SessionWatcher(FaultInjectingTarget(LocalTarget(".")), "2026-07-19T09-47-bf87b5dd793a", mode=WatchMode.NOTIFY)


async def test_a_local_target_can_be_polled_instead(root):
    owner, sid = await settled_session(root)
    wakes = Wakes()
    watcher = SessionWatcher(LocalTarget(root), sid, cadence=WatchCadence(idle_seconds=0.05, notifications=False))
    watcher.subscribe(wakes)
    watcher.start()
    try:
        assert watcher.mode is WatchMode.POLL
        await wakes.until("armed")
        seen = len(wakes.seen)
        await settle(owner, sid, "second")
        await wakes.until(LEASE, seen)
        assert watcher.polls > 1
    finally:
        await watcher.stop()
        await owner.sessions.close_all()
