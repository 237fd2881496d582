"""The agent engine's costs, each against a baseline in the same run.

1. Live view latency: an ACP agent (``chunk_agent.py``, a real subprocess)
   sends 1,000 message chunks a second, each stamped with the monotonic
   clock; the real server turns them into ``mevedel/turn/didUpdate`` and a
   client stamps their arrival. Baseline: the same agent read directly by
   an ACP client (the SDK) in this process, no server between. The target
   is on what the server adds: p99 under 2 ms.
2. A checkpointed ``fs/write_text_file`` (the file's prior bytes read in the
   same program as the write, recorded in the turn's checkpoint) against a
   plain durable write of the same bytes (``Target.replace_atomic``). Target:
   at most 2x.
3. Server memory across a turn of 10,000 chunks: the server's resident set
   after a 1,000-chunk turn, after a 10,000-chunk turn and after a second
   one. Target: flat (what grows is the transcript text itself).

The pre-command shell snapshot has its own benchmark, ``bench_shell_snapshot.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import acp
from acp import schema

from harness import report, summarize
from lsp_wire import WireClient
from mevedel_server.agents.workspace_files import WorkspaceFiles
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

HERE = Path(__file__).resolve().parent
AGENT = [sys.executable, str(HERE / "chunk_agent.py")]
CHUNKS = int(os.environ.get("MEVEDEL_BENCH_CHUNKS", "3000"))
RATE = 1000.0
WRITES = int(os.environ.get("MEVEDEL_BENCH_WRITES", "200"))


def stamps(text: str) -> list[int]:
    return [int(word) for word in text.split()]


# 1. Latency ---------------------------------------------------------------------------


class DirectClient:
    """An ACP client with nothing behind it: the baseline pipe."""

    def __init__(self) -> None:
        self.latencies: list[float] = []

    def on_connect(self, conn) -> None:
        pass

    async def session_update(self, session_id: str, update, **kwargs) -> None:
        now = time.monotonic_ns()
        self.latencies.extend((now - sent) / 1e9 for sent in stamps(update.content.text))


async def direct_latencies() -> list[float]:
    process = await asyncio.create_subprocess_exec(*AGENT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    client = DirectClient()
    conn = acp.connect_to_agent(client, process.stdin, process.stdout)
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=schema.ClientCapabilities())
    session = await conn.new_session(cwd=str(HERE), mcp_servers=[])
    await conn.prompt(session_id=session.session_id, prompt=[schema.TextContentBlock(type="text", text=f"chunks={CHUNKS} rate={RATE}")])
    await conn.close()
    process.stdin.close()
    await process.wait()
    return client.latencies


class LiveClient(WireClient):
    def __init__(self, process) -> None:
        super().__init__(process)
        self.latencies: list[float] = []
        self.notifications = 0

    def notified(self, notification: dict) -> None:
        if notification.get("method") != "mevedel/turn/didUpdate":
            return
        now = time.monotonic_ns()
        self.notifications += 1
        for event in notification["params"].get("events", []):
            if event["kind"] == "response":
                self.latencies.extend((now - sent) / 1e9 for sent in stamps(event["text"]))


async def server(root: Path) -> LiveClient:
    client = await LiveClient.start(sys.executable, "-m", "mevedel_server")
    await client.initialize(root, options={"agents": {"chunks": {"command": AGENT}}, "defaultAgent": "chunks"})
    return client


async def served_latencies(root: Path) -> tuple[list[float], int]:
    client = await server(root)
    try:
        await client.request("mevedel/turn/prompt", {"text": "chunks=10 rate=0"})  # the agent is started
        client.latencies.clear()
        client.notifications = 0
        await client.request("mevedel/turn/prompt", {"text": f"chunks={CHUNKS} rate={RATE}"})
        return client.latencies, client.notifications
    finally:
        await client.close()


# 2. Checkpointed write ------------------------------------------------------------------


async def write_costs(root: Path) -> tuple[list[float], list[float]]:
    target = LocalTarget(root)
    service = SessionService(target, ClientIdentity.generate())
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "bench")
    files = WorkspaceFiles(target, str(root))
    content = "x" * 2000 + "\n"
    for index in range(WRITES):
        (root / f"c{index}.txt").write_text("old content\n")
        (root / f"p{index}.txt").write_text("old content\n")
    plain: list[float] = []
    checkpointed: list[float] = []
    for index in range(WRITES):  # interleaved, so load drifts on both alike
        started = time.perf_counter()
        await target.replace_atomic(f"p{index}.txt", content.encode())
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        relative = f"c{index}.txt"
        outcome = await files.write_text(str(root / relative), content, read_before=not service.turns.captured(sid, relative))
        service.turns.record_pre_state(sid, outcome.relative, outcome.before)
        checkpointed.append(time.perf_counter() - started)
    await service.sessions.close_all()
    return plain, checkpointed


# 3. Memory -----------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def memory(root: Path) -> list[dict]:
    client = await server(root)
    rows = []
    try:
        pid = client._process.pid
        for label, count in (("after 1,000 chunks", 1000), ("after 10,000 chunks", 10000), ("after another 10,000", 10000)):
            await client.request("mevedel/turn/prompt", {"text": f"chunks={count} rate=0"})
            rows.append({"case": f"server RSS {label}", "kib": rss_kib(pid)})
    finally:
        await client.close()
    return rows


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "ws"
        root.mkdir()
        direct = await direct_latencies()
        served, notifications = await served_latencies(root)
        d, s = summarize(direct), summarize(served)
        rows = [
            {"case": f"ACP chunk -> direct SDK client ({CHUNKS} at {RATE:g}/s)", **d},
            {"case": f"ACP chunk -> server -> didUpdate ({notifications} notifications)", **s},
            {"case": "added by the server (p99 difference)", "p99_ms": round(s["p99_ms"] - d["p99_ms"], 4),
             "median_ms": round(s["median_ms"] - d["median_ms"], 4)},
        ]
        wroot = Path(scratch) / "writes"
        wroot.mkdir()
        plain, checkpointed = await write_costs(wroot)
        p, c = summarize(plain), summarize(checkpointed)
        rows += [
            {"case": "plain durable write (replace_atomic)", **p},
            {"case": "checkpointed fs/write_text_file", **c, "ratio_median": round(c["median_ms"] / p["median_ms"], 2)},
        ]
        mroot = Path(scratch) / "memory"
        mroot.mkdir()
        rows += await memory(mroot)
    report("agent_turns", rows, {"load": os.getloadavg()[0], "targets": "added p99 < 2 ms; checkpointed write <= 2x; RSS flat"})


if __name__ == "__main__":
    asyncio.run(main())
