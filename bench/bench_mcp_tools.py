"""The MCP tool server's cost: a tool call made by the official ``mcp``
client to ``mevedel mcp`` over stdio (a real subprocess), against the same
resolver call made directly in this process (prepare + execute + the same
rendering), on a workspace of ``MEVEDEL_BENCH_FILES`` (10,000) plain
project files -- the overhead ratio of the MCP round trip, and Grep over the
whole workspace through the tool.

Files are 0.6-2 KiB of Python-like text in ``src/pkgA/modB/fileC.py``
(10 x 10 directories of 100). Both sides are interleaved round by round
(the order alternating) so that load drifts on both alike, and timed by
the wall clock (median, minimum).

Cases: Read of one file (the round trip dominates), Glob of 100 files,
Grep that matches nothing (every file read and searched), Grep of 100
matching lines, and Grep stopping at its limit of 500.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from harness import report, summarize
from mevedel_server.tool_server.standalone import StandaloneContext
from mevedel_server.tool_server.tools import call

FILES = int(os.environ.get("MEVEDEL_BENCH_FILES", "10000"))
RUNS = int(os.environ.get("MEVEDEL_BENCH_RUNS", "15"))

CASES = [
    ("read", "Read", {"path": "src/pkg5/mod5/file3.py"}),
    ("glob-100", "Glob", {"pattern": "**/file7.py"}),
    ("grep-none", "Grep", {"pattern": "no such text"}),
    ("grep-100", "Grep", {"pattern": "^marker 7 "}),
    ("grep-limit", "Grep", {"pattern": "value"}),
]


def build(root: Path) -> None:
    per_dir = max(1, FILES // 100)
    old = time.time() - 3600
    for a in range(10):
        for b in range(10):
            directory = root / "src" / f"pkg{a}" / f"mod{b}"
            directory.mkdir(parents=True)
            for c in range(per_dir):
                lines = [f"marker {c} in pkg{a}/mod{b}\n"]
                lines += [f"    value_{n} = compute({n}, {c})  # line {n}\n" for n in range(10 + (c % 30))]
                path = directory / f"file{c}.py"
                path.write_text("".join(lines))
                os.utime(path, (old, old))


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="mevedel-bench-mcp-"))
    try:
        root = scratch / "workspace"
        build(root)
        direct = StandaloneContext(root, None, None)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mevedel_server.cli", "mcp", "--workspace", str(root)],
            env={**os.environ, "XDG_STATE_HOME": str(scratch / "state")},
        )
        samples: dict[tuple[str, str], list[float]] = {}
        answers: dict[tuple[str, str], str] = {}
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                for round_ in range(RUNS):
                    for name, tool, arguments in CASES:
                        sides = ("mcp", "direct") if round_ % 2 == 0 else ("direct", "mcp")
                        for side in sides:
                            started = time.perf_counter()
                            if side == "mcp":
                                result = await session.call_tool(tool, arguments)
                                assert not result.isError, result.content
                                text = result.content[0].text  # type: ignore[union-attr]
                            else:
                                text = await call(tool, dict(arguments), direct)
                            samples.setdefault((name, side), []).append(time.perf_counter() - started)
                            answers[(name, side)] = text
        rows = []
        for name, _tool, _arguments in CASES:
            assert answers[(name, "mcp")] == answers[(name, "direct")], name
            over = summarize(samples[(name, "mcp")])
            base = summarize(samples[(name, "direct")])
            rows.append(
                {
                    "case": name,
                    "mcp_median_ms": over["median_ms"],
                    "mcp_min_ms": round(min(samples[(name, "mcp")]) * 1000, 3),
                    "direct_median_ms": base["median_ms"],
                    "direct_min_ms": round(min(samples[(name, "direct")]) * 1000, 3),
                    "added_median_ms": round(over["median_ms"] - base["median_ms"], 3),
                    "mcp/direct": round(over["median_ms"] / base["median_ms"], 2),
                }
            )
        notes = {
            "files": FILES,
            "runs": RUNS,
            "load": " ".join(f"{value:.2f}" for value in os.getloadavg()),
            "cpus": os.cpu_count(),
        }
        report("mcp_tools", rows, notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
