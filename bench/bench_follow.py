"""Following a session over real server processes on one local workspace.

Latency: the owner settles a turn (``mevedel/turn/settle``); the time from
sending that request to a follower's ``mevedel/session/didPublish`` naming
the turn. Two followers run side by side in the same run: one with the
default settings (filesystem notifications: inotify on Linux) and the
baseline, the same server polling the same workspace
(``sessionWatch.notifications: false``) every ``POLL_SECONDS``. The settle's
own round trip is reported too: the notification cannot precede the commit
inside it. Rounds start at random offsets so the poller's phase is uniform.

Idle cost: CPU time (user + system, from ``/proc``) each server process uses
over ``IDLE_SECONDS`` while nothing is written except the owner's lease
renewals, against a server that has the session open but does not follow it
(``followPublished: false``; it still watches the session for control
transfer requests) and one with no session open. Target (issue 6): notification median under
100 ms; an idle follower's CPU near zero.

Watcher alone: one ``SessionWatcher`` in this process, idle for
``WATCHER_SECONDS``: with Linux inotify on the event loop (the default
there), with the portable watchfiles thread at several debounce steps (it
wakes once per step to look for events), and the baseline, a polling
watcher at the default idle cadence.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from harness import report, summarize
from lsp_wire import WireClient

ROUNDS = 40
POLL_SECONDS = 0.5
IDLE_SECONDS = 60.0
WATCHER_SECONDS = 10.0
DEBOUNCES = (0.02, 0.05, 0.1)


class Editor(WireClient):
    """Keeps every ``didPublish`` with the time it arrived."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.published: list[tuple[float, dict]] = []
        self.arrived = asyncio.Event()
        super().__init__(process)

    def notified(self, notification: dict) -> None:
        if notification.get("method") == "mevedel/session/didPublish":
            # Read as the message is taken off the wire: nothing awaited in between.
            self.published.append((time.perf_counter(), notification["params"]))
            self.arrived.set()

    async def start_session(self, root: Path, options: dict | None = None) -> None:
        await self.initialize(root, {}, options)

    async def turn_arrival(self, turn: int) -> float:
        while True:
            for at, params in self.published:
                if any(t["turn"] == turn for t in params["turns"]):
                    return at
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 60)

    @property
    def pid(self) -> int:
        return self._process.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def settle(editor: Editor, sid: str, prompt: str) -> None:
    await editor.request("mevedel/turn/begin", {"sessionId": sid, "prompt": prompt})
    await editor.request("mevedel/turn/append", {"sessionId": sid, "kind": "response", "text": "done"})
    await editor.request("mevedel/turn/settle", {"sessionId": sid})


async def watcher_idle_cpu() -> list[dict]:
    """CPU of one idle watcher in this process, per debounce, and of a poller."""
    import mevedel_server.targets as targets
    from mevedel_server.store import ClientIdentity
    from mevedel_server.store.service import SessionService
    from mevedel_server.store.watching.watch import SessionWatcher, WatchCadence
    from mevedel_server.targets import LocalTarget

    real_available = targets.inotify_available

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        owner = SessionService(LocalTarget(root), ClientIdentity("bench-owner", "bench"))
        sid = (await owner.sessions.create()).session_id
        await owner.turns.begin_turn(sid, "one turn")
        await owner.turns.settle(sid)
        await owner.sessions.close_all()  # nothing writes from now on
        cases = [("idle watcher, inotify, debounce 20 ms", WatchCadence(), True)]
        cases += [
            (f"idle watcher, watchfiles, debounce {d * 1000:.0f} ms", WatchCadence(debounce_seconds=d), False) for d in DEBOUNCES
        ]
        cases.append(("baseline: idle watcher, polling every 10 s", WatchCadence(notifications=False), True))
        for label, cadence, use_inotify in cases:
            targets.inotify_available = real_available if use_inotify else (lambda: False)
            watcher = SessionWatcher(LocalTarget(root), sid, cadence=cadence)
            watcher.start()
            await asyncio.sleep(0.5)
            start = time.process_time()
            await asyncio.sleep(WATCHER_SECONDS)
            used = time.process_time() - start
            await watcher.stop()
            targets.inotify_available = real_available
            rows.append(
                {
                    "case": f"CPU over {WATCHER_SECONDS:.0f} s: {label}",
                    "cpu_ms": round(used * 1000, 2),
                    "cpu_percent_of_one_core": round(100 * used / WATCHER_SECONDS, 3),
                }
            )
    return rows


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        owner = await Editor.start(sys.executable, "-m", "mevedel_server")
        notified = await Editor.start(sys.executable, "-m", "mevedel_server")
        polled = await Editor.start(sys.executable, "-m", "mevedel_server")
        unfollowing = await Editor.start(sys.executable, "-m", "mevedel_server")
        bare = await Editor.start(sys.executable, "-m", "mevedel_server")
        await owner.start_session(root)
        await bare.start_session(root)
        await notified.start_session(root)
        await polled.start_session(root, {"sessionWatch": {"notifications": False, "idlePollSeconds": POLL_SECONDS}})
        await unfollowing.start_session(root, {"followPublished": False})
        sid = (await owner.request("mevedel/session/create", {"name": "bench"}))["sessionId"]
        await settle(owner, sid, "turn 1")
        modes = {}
        for name, editor in (("notify", notified), ("poll", polled), ("off", unfollowing)):
            await editor.request("mevedel/session/open", {"sessionId": sid, "mode": "join"})
            modes[name] = (await editor.request("mevedel/session/setFollow", {"sessionId": sid, "enabled": name != "off"}))
        assert modes["notify"]["mode"] == "notify" and modes["poll"]["mode"] == "poll", modes
        await asyncio.sleep(1.0)  # every watcher armed

        to_notify: list[float] = []
        to_poll: list[float] = []
        settle_rtt: list[float] = []
        for turn in range(2, ROUNDS + 2):
            await asyncio.sleep(random.uniform(0, POLL_SECONDS))
            await owner.request("mevedel/turn/begin", {"sessionId": sid, "prompt": f"turn {turn}"})
            await owner.request("mevedel/turn/append", {"sessionId": sid, "kind": "response", "text": "done"})
            start = time.perf_counter()
            await owner.request("mevedel/turn/settle", {"sessionId": sid})
            settle_rtt.append(time.perf_counter() - start)
            to_notify.append(await notified.turn_arrival(turn) - start)
            to_poll.append(await polled.turn_arrival(turn) - start)
        for editor in (notified, polled):
            news = [t["turn"] for _, p in editor.published for t in p["turns"]]
            assert news == list(range(2, ROUNDS + 2)), news  # each turn exactly once, whole
        assert unfollowing.published == []

        await asyncio.sleep(2.0)  # the last round's work is over
        published_before = {name: len(e.published) for name, e in (("notify", notified), ("poll", polled))}
        before = {name: cpu_seconds(e.pid) for name, e in (("owner", owner), ("notify", notified), ("poll", polled), ("off", unfollowing), ("bare", bare))}
        await asyncio.sleep(IDLE_SECONDS)
        after = {name: cpu_seconds(e.pid) for name, e in (("owner", owner), ("notify", notified), ("poll", polled), ("off", unfollowing), ("bare", bare))}
        idle_publications = {
            name: len(e.published) - published_before[name] for name, e in (("notify", notified), ("poll", polled))
        }
        for editor in (owner, notified, polled, unfollowing, bare):
            await editor.close()

    notify, poll, rtt = summarize(to_notify), summarize(to_poll), summarize(settle_rtt)
    rows = [
        {"case": "didPublish, filesystem notifications", **notify, "x_poll": round(notify["median_ms"] / poll["median_ms"], 3)},
        {"case": f"baseline: didPublish, polling every {POLL_SECONDS} s", **poll, "x_poll": 1.0},
        {"case": "the owner's settle round trip (commit inside)", **rtt, "x_poll": round(rtt["median_ms"] / poll["median_ms"], 3)},
    ]
    cpu = {name: after[name] - before[name] for name in after}
    for name, label in (
        ("notify", "idle follower, notifications"),
        ("poll", f"idle follower, polling every {POLL_SECONDS} s"),
        ("off", "baseline: session open, not following"),
        ("bare", "a server with no session open"),
        ("owner", "the owner (renewing its lease)"),
    ):
        rows.append(
            {
                "case": f"CPU over {IDLE_SECONDS:.0f} s: {label}",
                "cpu_ms": round(cpu[name] * 1000, 1),
                "cpu_percent_of_one_core": round(100 * cpu[name] / IDLE_SECONDS, 3),
            }
        )
    rows.extend(await watcher_idle_cpu())
    report(
        "follow",
        rows,
        {
            "target": "notification median under 100 ms; idle follower CPU near zero",
            "met_latency": notify["median_ms"] < 100,
            "rounds": ROUNDS,
            "setup": "five server processes on one local workspace (owner, notified follower, polling follower, non-following joiner, idle server without a session)",
            "cpu_resolution_ms": round(1000 / os.sysconf("SC_CLK_TCK"), 1),
            "idle_cpu_notify_minus_not_following_ms": round((cpu["notify"] - cpu["off"]) * 1000, 1),
            "notifications_during_idle": idle_publications,
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
