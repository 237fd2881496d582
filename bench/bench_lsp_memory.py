"""Idle memory of ``mevedel-lsp``: its resident set after ``initialize``
(one workspace folder, default settings, a moment to settle) against a
bare pygls server (``bare_pygls_server.py``) started and initialized the
same way, in the same run. What an editor pays for every open workspace
before any agent or MCP server is used: the agent and MCP SDKs load when
first used.

Byte code is compiled first (``PYTHONPYCACHEPREFIX`` into a scratch
directory, a warm-up start of each): with ``PYTHONDONTWRITEBYTECODE=1``
every start would compile every module, and the resident set would hold
what compiling left behind, which no installed server carries.

``MEVEDEL_BENCH_BESIDE=DIR`` starts that checkout's server too (``DIR/server``
and ``DIR/protocol`` first on ``PYTHONPATH``), in the same rounds (rows
marked ``[DIR]``). Target: at most 1.5x.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from harness import checkout_path, compiling_env, report
from lsp_wire import WireClient

HERE = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "3"))
SETTLE_SECONDS = 1.0
GOAL = 1.5
BARE = "bare pygls server"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def idle_rss(argv: list[str], env: dict[str, str], root: Path) -> int:
    client = await WireClient.start(*argv, env=env)
    try:
        await client.initialize(root)
        await asyncio.sleep(SETTLE_SECONDS)
        await client.request("shutdown", None)  # a round trip: initialized was handled
        return rss_kib(client._process.pid)
    finally:
        client.notify("exit", None)
        await client._process.wait()
        client._reader.cancel()


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        root = scratch / "ws"
        root.mkdir()
        (root / "README.md").write_text("work://shared/notes.md\n")
        env = compiling_env(scratch)
        ours = [sys.executable, "-m", "mevedel_server"]
        servers = {BARE: ([sys.executable, str(HERE / "bare_pygls_server.py")], env), "mevedel-lsp": (ours, env)}
        beside = os.environ.get("MEVEDEL_BENCH_BESIDE")
        if beside:
            servers[f"mevedel-lsp [{beside}]"] = (ours, env | {"PYTHONPATH": checkout_path(beside)})
        for argv, server_env in servers.values():  # compile the byte code
            await idle_rss(argv, server_env, root)
        samples: dict[str, list[int]] = {name: [] for name in servers}
        loads = [os.getloadavg()[0]]
        for _ in range(ROUNDS):
            for name, (argv, server_env) in servers.items():
                samples[name].append(await idle_rss(argv, server_env, root))
        loads.append(os.getloadavg()[0])
        base = statistics.median(samples[BARE])
        rows = []
        for name in servers:
            median = statistics.median(samples[name])
            row = {"case": f"{name}: RSS after initialize", "median_mib": round(median / 1024, 1), "ratio": round(median / base, 2)}
            if name != BARE:
                row.update(goal=f"<= {GOAL}x", met=median / base <= GOAL)
            rows.append(row)
    report("lsp_memory", rows, {"rounds": ROUNDS, "load_before_after": [round(load, 2) for load in loads],
                                **({"beside": beside} if beside else {})})

if __name__ == "__main__":
    asyncio.run(main())
