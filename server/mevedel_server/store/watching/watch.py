"""Noticing that a session's control state may have changed.

A :class:`SessionWatcher` tells its subscribers "look again" for one session:
the lease head may have moved (a publication, a renewal, a release, a
takeover) or the transfer mailbox ``.lease/requests/`` may have gained a
record. It never says what changed; the subscriber reads that itself, with the
ordinary store reads. A wake is a hint, never authority.

Two sources, one contract:

- ``notify`` (a :class:`~mevedel_server.targets.LocalTarget`): filesystem
  notifications on ``<session>/.lease/`` (Linux inotify on the event loop,
  :mod:`mevedel_server.targets.loop_watch`, which costs nothing until an event arrives; elsewhere
  ``watchfiles`` in a thread, which wakes once per debounce step), recursively,
  so ``requests/`` is covered the moment it exists. Reads never create control
  directories, so while ``.lease/`` (or the session directory) is absent the
  watcher watches the nearest existing ancestor, non-recursively, and re-arms
  one level deeper when the missing child appears. Nothing is read while
  nothing changes. Names starting with ``.`` (clock probes, temporary files of
  an exclusive create) are not changes: the rename that follows them is.
- ``poll`` (any other target, e.g. SSH, and a local one whose cadence turns
  ``notifications`` off: on a network filesystem another machine's writes
  raise no local notification): one pure-read program per tick that
  lists ``.lease/`` and ``.lease/requests/``; a wake only when a listing
  differs from the previous tick. The tick is the *idle* cadence, or the
  *active* one while the ``active`` predicate (evaluated every tick, so a
  transfer's start and end change the cadence at once) says a transfer is in
  flight. Every tick costs the user's own connection a round trip, which is
  why the idle cadence is long.

With inotify a change wakes at once; ``watchfiles`` groups events until the
directory has been quiet for ``debounce_seconds``. Subscriber calls are
serial per watcher, and any number of wakes that arrive during a call become exactly one more
call, carrying the union of their reasons. :meth:`SessionWatcher.start` arms
the source and then sends one ``armed`` wake, so a change that landed between
a subscriber's last read and the arming is not lost;
:meth:`SessionWatcher.refresh` sends a ``refresh`` wake at once.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ...targets import ControlProgram, ListDir, LocalTarget, Status, Target, TargetError
from ..authority.workspace import check_session_id
from ..layout import SESSIONS_DIR, STATE_DIR, SessionPaths

_log = logging.getLogger(__name__)

REQUESTS_DIR = "requests"

#: Wake reasons.
ARMED = "armed"
LEASE = "lease"
REQUESTS = "requests"
REFRESH = "refresh"

#: Longest a burst of filesystem events is grouped before it is reported.
_MAX_GROUPING_MS = 500


class WatchMode(enum.Enum):
    NOTIFY = "notify"
    POLL = "poll"


class WatchCadence(msgspec.Struct, frozen=True):
    """How often a ``poll`` watcher looks (idle, and while a transfer is in
    flight), and how long a ``notify`` watcher groups filesystem events."""

    idle_seconds: float = 10.0
    active_seconds: float = 2.0
    debounce_seconds: float = 0.02
    #: Local targets are watched with filesystem notifications (False: they
    #: are polled like any other).
    notifications: bool = True

    def __post_init__(self) -> None:
        for name in ("idle_seconds", "active_seconds", "debounce_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @classmethod
    def from_settings(cls, settings: Any) -> WatchCadence:
        """From the ``sessionWatch`` setting object (``idle_poll_seconds``,
        ``active_poll_seconds``, ``debounce_ms``, ``notifications``)."""
        return cls(
            settings.idle_poll_seconds, settings.active_poll_seconds, settings.debounce_ms / 1000, settings.notifications
        )


class Wake(msgspec.Struct, frozen=True):
    session_id: str
    #: Why: ``armed``, ``lease``, ``requests``, ``refresh`` (or several).
    reasons: frozenset[str]


Subscriber = Callable[[Wake], Awaitable[None] | None]


class SessionWatcher:
    def __init__(
        self,
        target: Target,
        session_id: str,
        *,
        cadence: WatchCadence | None = None,
        active: Callable[[], bool] | None = None,
        mode: WatchMode | None = None,
    ) -> None:
        self.target = target
        self._place(session_id)
        self.cadence = cadence or WatchCadence()
        self._active = active
        local = isinstance(target, LocalTarget)
        if mode is WatchMode.NOTIFY and not local:
            raise ValueError("filesystem notifications need a local target")
        self._mode = mode or (WatchMode.NOTIFY if local and self.cadence.notifications else WatchMode.POLL)
        self._subscribers: list[Subscriber] = []
        self._pending: set[str] = set()
        self._kick: asyncio.Event | None = None
        self._poke: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # notify mode: the directory watched now and the thread watching it.
        self._arm: _Arm | None = None
        self._arms = 0
        #: Wakes delivered to subscribers (for tests and benchmarks).
        self.deliveries = 0
        #: Poll programs run.
        self.polls = 0

    def _place(self, session_id: str) -> None:
        """What is watched (a subclass watching another directory chain
        overrides this, ``session_id``, ``_chain``, ``_classify`` and
        ``_listing``)."""
        self.paths = SessionPaths(check_session_id(session_id))

    # Facts --------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.paths.session_id

    @property
    def mode(self) -> WatchMode:
        """``notify`` or ``poll`` (a notify watcher that could not arm falls
        back to polling)."""
        return self._mode

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    @property
    def active(self) -> bool:
        """True while the ``active`` predicate says a transfer is in flight."""
        if self._active is None:
            return False
        try:
            return bool(self._active())
        except Exception:  # a predicate that fails must not stop the watch
            _log.exception("session %s: the watcher's active predicate failed", self.session_id)
            return False

    # Use ----------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(wake)`` on every wake; returns the unsubscriber."""
        self._subscribers.append(callback)
        return lambda: self.unsubscribe(callback)

    def unsubscribe(self, callback: Subscriber) -> None:
        if callback in self._subscribers:
            self._subscribers.remove(callback)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def start(self) -> None:
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        self._kick = asyncio.Event()
        self._poke = asyncio.Event()
        self._tasks.append(self._loop.create_task(self._dispatch(), name=f"watch {self.session_id}: dispatch"))
        if self._mode is WatchMode.NOTIFY and self._rearm():
            self._report(ARMED)
            return
        self._mode = WatchMode.POLL
        self._tasks.append(self._loop.create_task(self._poll(), name=f"watch {self.session_id}: poll"))

    def refresh(self) -> None:
        """Wake the subscribers now (and let a poller re-read its cadence)."""
        self._report(REFRESH)
        if self._poke is not None:
            self._poke.set()

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        self._disarm()
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    # Delivery -------------------------------------------------------------------

    def _report(self, reason: str) -> None:
        self._pending.add(reason)
        if self._kick is not None:
            self._kick.set()

    async def _dispatch(self) -> None:
        assert self._kick is not None
        while True:
            await self._kick.wait()
            self._kick.clear()
            reasons, self._pending = frozenset(self._pending), set()
            if not reasons:
                continue
            wake = Wake(self.session_id, reasons)
            self.deliveries += 1
            for callback in list(self._subscribers):
                try:
                    result = callback(wake)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:  # one subscriber's failure must not stop the others or the watch
                    _log.exception("session %s: a watch subscriber failed", self.session_id)

    # notify ---------------------------------------------------------------------

    def _chain(self) -> list[str]:
        """Target paths from the workspace root down to ``.lease/``."""
        return ["", STATE_DIR, SESSIONS_DIR, self.paths.root, self.paths.lease_dir]

    def _local(self, target_path: str) -> str:
        assert isinstance(self.target, LocalTarget)
        return os.path.join(self.target.root, *target_path.split("/")) if target_path else self.target.root

    def _deepest_existing(self) -> str:
        deepest = ""
        for path in self._chain():
            local = self._local(path)
            # A symlinked component is not the session's directory: stop above it.
            if not os.path.isdir(local) or os.path.islink(local):
                break
            deepest = path
        return deepest

    def _not_a_change(self, name: str) -> bool:
        """Clock probes and temporary files (a name starting with ``.`` that
        is no directory of the watched chain): the rename after them counts."""
        return name.startswith(".") and name not in {part for path in self._chain() for part in path.split("/")}

    def _rearm(self) -> bool:
        """Watch the deepest existing directory of the chain; False when no
        watch could be set up (the caller polls instead)."""
        where = self._deepest_existing()
        if self._arm is not None and self._arm.path == where:
            return True
        self._disarm()
        recursive = where == self._chain()[-1]
        self._arms += 1
        arm_id = self._arms
        # ctypes and the libc binding: only once a session is watched
        from ...targets import InotifyWatch, inotify_available

        try:
            if inotify_available():
                watch = InotifyWatch(
                    self._local(where),
                    recursive=recursive,
                    loop=self._loop,
                    deliver=lambda changes: self._notified(arm_id, changes),
                    ignored=self._not_a_change,
                )
                close = watch.close
            else:
                quiet = self.cadence.debounce_seconds
                group = max(quiet, _MAX_GROUPING_MS / 1000)
                close = _start_watchfiles(self._local(where), recursive, quiet, group, self._loop, self._notified, arm_id)
        except Exception as error:  # no notifications, watch limit reached, the directory vanished
            _log.warning("session %s: filesystem notifications unavailable (%s); polling instead", self.session_id, error)
            return False
        self._arm = _Arm(where, arm_id, close)
        return True

    def _disarm(self) -> None:
        arm, self._arm = self._arm, None
        if arm is not None:
            arm.close()

    def _notified(self, arm_id: int, changes: set[tuple[int, str]] | BaseException) -> None:
        arm = self._arm
        if arm is None or arm.arm_id != arm_id or not self._tasks:
            return  # a superseded watch's last report
        if isinstance(changes, BaseException):
            _log.warning("session %s: the filesystem watch failed (%s); re-arming", self.session_id, changes)
            self._arm = None
            if not self._rearm():
                self._fall_back_to_polling()
            self._report(LEASE)
            return
        reasons = self._classify(arm.path, changes)
        moved = self._deepest_existing() != arm.path
        if moved and not self._rearm():
            self._fall_back_to_polling()
        if moved:
            reasons.add(LEASE)
        for reason in reasons:
            self._report(reason)

    def _classify(self, watched: str, changes: set[tuple[int, str]]) -> set[str]:
        reasons: set[str] = set()
        root = self._local(watched)
        chain = self._chain()
        for _kind, path in changes:
            relative = os.path.relpath(path, root)
            parts = [] if relative == "." else relative.split(os.sep)
            if any(self._not_a_change(part) for part in parts):
                continue  # clock probes and temporary files; the rename after them counts
            if watched == self.paths.lease_dir:
                reasons.add(REQUESTS if parts and parts[0] == REQUESTS_DIR else LEASE)
                continue
            # An ancestor: only the next directory of the chain matters.
            below = chain[chain.index(watched) + 1]
            child = below.rsplit("/", 1)[-1]
            if parts and parts[0] == child:
                reasons.add(LEASE)
        return reasons

    def _fall_back_to_polling(self) -> None:
        self._mode = WatchMode.POLL
        assert self._loop is not None
        self._tasks.append(self._loop.create_task(self._poll(), name=f"watch {self.session_id}: poll"))

    # poll -----------------------------------------------------------------------

    async def _listing(self) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None] | None:
        """Both listings, or None when they could not be read."""
        ops = [ListDir(self.paths.lease_dir, optional=True), ListDir(f"{self.paths.lease_dir}/{REQUESTS_DIR}", optional=True)]
        self.polls += 1
        try:
            result = await self.target.run(ControlProgram(ops))
        except TargetError as error:
            _log.info("session %s: watch poll failed: %s", self.session_id, error)
            return None
        out: list[tuple[str, ...] | None] = []
        for op_result in result:
            if op_result.status is Status.OK:
                out.append(tuple(sorted(name for name in op_result.value if not name.startswith("."))))
            elif op_result.status is Status.ABSENT:
                out.append(None)
            else:
                return None  # not comparable: keep the previous listing
        return out[0], out[1]

    async def _poll(self) -> None:
        assert self._poke is not None
        last = await self._listing()
        self._report(ARMED)
        while True:
            delay = self.cadence.active_seconds if self.active else self.cadence.idle_seconds
            try:
                await asyncio.wait_for(self._poke.wait(), delay)
            except asyncio.TimeoutError:
                pass
            self._poke.clear()
            now = await self._listing()
            if now is None:
                continue
            # After a failed look nothing is known: anything may have changed.
            if last is None or now[0] != last[0]:
                self._report(LEASE)
            if last is None or now[1] != last[1]:
                self._report(REQUESTS)
            last = now


class _Arm(msgspec.Struct, frozen=True):
    path: str
    arm_id: int
    close: Callable[[], None]


def _start_watchfiles(path: str, recursive: bool, quiet: float, group: float, loop, deliver, arm_id: int) -> Callable[[], None]:
    """The portable source: ``watchfiles`` in its own thread (a watch blocks
    for as long as nothing changes, so it must not hold a worker of the
    loop's shared executor, where the store's local I/O runs). It wakes once
    per ``quiet`` step to look for events."""
    from watchfiles._rust_notify import RustNotify

    notify = RustNotify([path], False, False, 0, recursive, False)
    stop = threading.Event()
    step_ms = max(1, round(quiet * 1000))
    group_ms = max(step_ms, round(group * 1000))

    def run() -> None:
        try:
            while not stop.is_set():
                result = notify.watch(group_ms, step_ms, 0, stop)
                if result == "stop":
                    return
                if isinstance(result, set) and result:
                    _post(loop, deliver, arm_id, result)
        except Exception as error:  # reported to the loop, which re-arms or polls
            _post(loop, deliver, arm_id, error)
        finally:
            notify.close()

    threading.Thread(target=run, name="session watch", daemon=True).start()
    return stop.set


def _post(loop: asyncio.AbstractEventLoop, deliver, arm_id: int, payload) -> None:
    try:
        loop.call_soon_threadsafe(deliver, arm_id, payload)
    except RuntimeError:  # the loop is closed: nobody is listening any more
        pass
