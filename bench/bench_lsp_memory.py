"""Idle memory of ``mevedel-lsp``: its resident set after ``initialize``
(one workspace folder, default settings, a moment to settle) against a
bare pygls server (``bare_pygls_server.py``) started and initialized the
same way, in the same run. What an editor pays for every open workspace
before any agent or MCP server is used: the agent and MCP SDKs load when
first used. Target: at most 1.5x.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from harness import report
from lsp_wire import WireClient

HERE = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "3"))
SETTLE_SECONDS = 1.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def idle_rss(argv: list[str], root: Path) -> tuple[int, list[str]]:
    client = await WireClient.start(*argv)
    try:
        await client.initialize(root)
        await asyncio.sleep(SETTLE_SECONDS)
        await client.request("shutdown", None)  # a round trip: initialized was handled
        pid = client._process.pid
        kib = rss_kib(pid)
        modules = []
        return kib, modules
    finally:
        client.notify("exit", None)
        await client._process.wait()
        client._reader.cancel()


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "ws"
        root.mkdir()
        (root / "README.md").write_text("work://shared/notes.md\n")
        servers = {
            "bare pygls server": [sys.executable, str(HERE / "bare_pygls_server.py")],
            "mevedel-lsp": [sys.executable, "-m", "mevedel_server"],
        }
        samples: dict[str, list[int]] = {name: [] for name in servers}
        for _ in range(ROUNDS):
            for name, argv in servers.items():
                kib, _ = await idle_rss(argv, root)
                samples[name].append(kib)
        base = statistics.median(samples["bare pygls server"])
        rows = []
        for name in servers:
            median = statistics.median(samples[name])
            row = {"case": f"{name}: RSS after initialize", "median_mib": round(median / 1024, 1), "ratio": round(median / base, 2)}
            if name == "mevedel-lsp":
                row.update(goal="<= 1.5x", met=median / base <= 1.5)
            rows.append(row)
    report("lsp_memory", rows, {"rounds": ROUNDS, "load": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    asyncio.run(main())
