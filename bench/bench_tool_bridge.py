"""The tool bridge's cost: an agent's MCP tool call through ``mevedel mcp``
in relay mode (a real subprocess copying bytes to the ``ToolHost`` that
runs in this process, as in the LSP server) against the same call to a
standalone ``mevedel mcp`` over stdio (the server in the subprocess) and
the same call made directly in this process (the baseline) -- what the
relay hop adds per call -- and the time an agent waits for the server to
start (spawn to ``initialize`` answered) in both modes.

Interleaved round by round (the order alternating) so load drifts on every
side alike; wall clock, median and minimum. Cases: Read of a small file,
Read of a 2,000-line page (about 150 KB through the relay), Grep of 100
lines over 1,000 files.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from harness import compiling_env, report, summarize
from mevedel_server.resources import ResolverContext
from mevedel_server.tool_server.host import ToolHost
from mevedel_server.tool_server.standalone import StandaloneContext
from mevedel_server.tool_server.tools import call

RUNS = int(os.environ.get("MEVEDEL_BENCH_RUNS", "20"))
STARTS = int(os.environ.get("MEVEDEL_BENCH_STARTS", "5"))

CASES = [
    ("read-small", "Read", {"path": "src/pkg1/file1.py"}),
    ("read-2000-lines", "Read", {"path": "big.txt"}),
    ("grep-100", "Grep", {"pattern": "^marker 7 "}),
]


def build(root: Path) -> None:
    for a in range(10):
        directory = root / "src" / f"pkg{a}"
        directory.mkdir(parents=True)
        for c in range(100):
            lines = [f"marker {c % 10} in pkg{a}\n"] + [f"    value_{n} = compute({n}, {c})\n" for n in range(20)]
            (directory / f"file{c}.py").write_text("".join(lines))
    (root / "big.txt").write_text("".join(f"line {n}: " + "x" * 60 + "\n" for n in range(2000)))


class Bound:
    """The context an agent's connection is bound to (no session: reads)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def resolver_context(self) -> ResolverContext:
        return StandaloneContext(self.root, None, None).resolver_context()

    async def before_project_write(self, paths) -> None:
        return None


async def started(stack: AsyncExitStack, params: StdioServerParameters) -> tuple[ClientSession, float]:
    begun = time.perf_counter()
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session, time.perf_counter() - begun


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="mevedel-bench-bridge-"))
    host = ToolHost()
    try:
        root = scratch / "workspace"
        build(root)
        context = Bound(root)
        socket_path, token = await host.register(context)
        env = compiling_env(scratch, XDG_STATE_HOME=str(scratch / "state"))
        relay_env = {**env, "MEVEDEL_TOOL_SOCKET": socket_path, "MEVEDEL_TOOL_TOKEN": token}
        standalone_env = {k: v for k, v in env.items() if not k.startswith("MEVEDEL_TOOL_")}
        mevedel = [sys.executable, "-m", "mevedel_server.cli", "mcp"]
        relay = StdioServerParameters(command=mevedel[0], args=mevedel[1:], env=relay_env)
        standalone = StdioServerParameters(command=mevedel[0], args=[*mevedel[1:], "--workspace", str(root)], env=standalone_env)
        # The relay alone, without the CLI's imports (what a fast path in
        # the CLI's entry point would give).
        bare = StdioServerParameters(
            command=sys.executable,
            args=["-c", "import os, sys; from mevedel_server.tool_server.relay import relay_stdio; "
                        "sys.exit(relay_stdio(os.environ['MEVEDEL_TOOL_SOCKET'], os.environ['MEVEDEL_TOOL_TOKEN']))"],
            env=relay_env,
        )

        # Untimed, once each: byte code compiled (PYTHONPYCACHEPREFIX), so
        # the first round does not time compiling.
        for params in (relay, standalone, bare):
            async with AsyncExitStack() as stack:
                await started(stack, params)
        starts: dict[str, list[float]] = {}
        for round_ in range(STARTS):
            kinds = [("relay", relay), ("standalone", standalone), ("relay-bare", bare)]
            for name, params in kinds if round_ % 2 == 0 else reversed(kinds):
                async with AsyncExitStack() as stack:
                    _session, took = await started(stack, params)
                    starts.setdefault(name, []).append(took)

        samples: dict[tuple[str, str], list[float]] = {}
        answers: dict[tuple[str, str], str] = {}
        async with AsyncExitStack() as stack:
            sessions = {"relay": (await started(stack, relay))[0], "standalone": (await started(stack, standalone))[0]}
            for round_ in range(RUNS):
                for name, tool, arguments in CASES:
                    sides = ["relay", "standalone", "direct"]
                    for side in sides if round_ % 2 == 0 else reversed(sides):
                        begun = time.perf_counter()
                        if side == "direct":
                            text = await call(tool, dict(arguments), context)
                        else:
                            result = await sessions[side].call_tool(tool, arguments)
                            assert not result.isError, result.content
                            text = result.content[0].text  # type: ignore[union-attr]
                        samples.setdefault((name, side), []).append(time.perf_counter() - begun)
                        answers[(name, side)] = text
        rows = []
        for name, _tool, _arguments in CASES:
            assert answers[(name, "relay")] == answers[(name, "direct")] == answers[(name, "standalone")], name
            relay_ms = summarize(samples[(name, "relay")])["median_ms"]
            standalone_ms = summarize(samples[(name, "standalone")])["median_ms"]
            direct_ms = summarize(samples[(name, "direct")])["median_ms"]
            rows.append({
                "case": name,
                "relay_median_ms": relay_ms,
                "relay_min_ms": round(min(samples[(name, "relay")]) * 1000, 3),
                "standalone_median_ms": standalone_ms,
                "direct_median_ms": direct_ms,
                "relay/direct": round(relay_ms / direct_ms, 2),
                "relay-standalone_ms": round(relay_ms - standalone_ms, 3),
            })
        for name, taken in starts.items():
            stats = summarize(taken)
            rows.append({"case": f"start:{name}", "relay_median_ms": stats["median_ms"],
                         "relay_min_ms": round(min(taken) * 1000, 3)})
        notes = {
            "runs": RUNS,
            "starts": STARTS,
            "start rows": "spawn to initialize answered; relay = 'python -m mevedel_server.cli mcp' (as agents start it), "
                          "relay-bare = the relay module alone, standalone = 'mevedel mcp --workspace'",
            "load": " ".join(f"{value:.2f}" for value in os.getloadavg()),
            "cpus": os.cpu_count(),
        }
        report("tool_bridge", rows, notes)
    finally:
        await host.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
