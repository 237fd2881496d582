"""A full control hand-over between two real server processes on one local
workspace: time from the requester's ``mevedel/control/take`` to its
``mevedel/control/didChange`` ``acquired`` (the session is writable there),
with an idle owner whose user answers the Grant question at once. Control
goes back and forth, so each server is requester half the time.

Baseline, measured in the same run with the same two processes: a plain
claim, ``mevedel/session/open`` (resume) of a session whose lease the other
server has just released, which is the lease work a hand-over cannot avoid.
Target: a hand-over under 1 s.

Both servers run with the default settings (``sessionWatch``: local
workspaces are watched with filesystem notifications, so nobody waits for a
poll interval).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import report, summarize
from lsp_wire import WireClient

ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "30"))


class Editor(WireClient):
    """A wire client that answers the Grant question and keeps the
    control notifications."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        super().__init__(process)

    def answer(self, request: dict) -> object:
        titles = [a["title"] for a in (request.get("params") or {}).get("actions") or []]
        return {"title": "Grant"} if "Grant" in titles else None

    def notified(self, notification: dict) -> None:
        if notification.get("method") == "mevedel/control/didChange":
            self.events.put_nowait(notification["params"])

    async def start_session(self, root: Path) -> None:
        await self.initialize(root, {"window": {"showMessage": {}}})

    async def phase(self, wanted: str) -> dict:
        while True:
            event = await asyncio.wait_for(self.events.get(), 60)
            if event["phase"] == wanted:
                return event
            if event["phase"] in ("rejected", "void", "failed"):
                raise RuntimeError(f"the transfer ended {event['phase']}: {event['message']}")


async def settle(editor: Editor, sid: str, prompt: str) -> None:
    await editor.request("mevedel/turn/begin", {"sessionId": sid, "prompt": prompt})
    await editor.request("mevedel/turn/append", {"sessionId": sid, "kind": "response", "text": "done"})
    await editor.request("mevedel/turn/settle", {"sessionId": sid})


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        desk = await Editor.start(sys.executable, "-m", "mevedel_server")
        laptop = await Editor.start(sys.executable, "-m", "mevedel_server")
        for editor in (desk, laptop):
            await editor.start_session(root)
        sid = (await desk.request("mevedel/session/create", {"name": "bench"}))["sessionId"]
        await settle(desk, sid, "turn 0")
        await laptop.request("mevedel/session/open", {"sessionId": sid, "mode": "join"})
        await asyncio.sleep(0.5)  # both watchers armed
        handover: list[float] = []
        claim: list[float] = []
        owner, asker = desk, laptop
        for round_ in range(ROUNDS):
            start = time.perf_counter()
            taken = await asker.request("mevedel/control/take", {"sessionId": sid})
            assert taken["outcome"] == "requested", taken
            await asker.phase("acquired")
            handover.append(time.perf_counter() - start)
            await settle(asker, sid, f"turn {round_ + 1}")
            owner, asker = asker, owner
        for _ in range(ROUNDS):
            await owner.request("mevedel/control/release", {"sessionId": sid})
            start = time.perf_counter()
            opened = await asker.request("mevedel/session/open", {"sessionId": sid, "mode": "resume"})
            claim.append(time.perf_counter() - start)
            assert opened["session"]["access"] == "writable", opened
            owner, asker = asker, owner
        turns = (await owner.request("mevedel/turn/list", {"sessionId": sid}))["turns"]
        assert len(turns) == ROUNDS + 1, len(turns)
        for editor in (desk, laptop):
            await editor.close()
    hand, base = summarize(handover), summarize(claim)
    rows = [
        {"case": "hand-over (take -> acquired)", **hand, "x_claim": round(hand["median_ms"] / base["median_ms"], 2)},
        {"case": "baseline: claim a released lease", **base, "x_claim": 1.0},
    ]
    report(
        "control_transfer",
        rows,
        {
            "target": "hand-over median under 1000 ms",
            "met": hand["median_ms"] < 1000,
            "rounds": ROUNDS,
            "setup": "two server processes, one local workspace, owner idle and answering Grant at once",
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
