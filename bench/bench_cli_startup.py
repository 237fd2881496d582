"""What a person waits for at the command line: process start to exit of
``mevedel --help``, ``mevedel session list`` (a workspace of 50 sessions)
and ``mevedel read mevedel://`` against ``python3 -c pass``, and
``mevedel prompt`` against a bare ACP SDK client (``bare_acp_client.py``)
driving the same scripted agent (``tests/agents/scripted_agent.py``, 20
message chunks): start to the first chunk on stdout, and the last chunk to
the process's exit. All interleaved round by round, so load drifts on both
sides alike; medians. Each start's CPU time (user + system, from
``wait4``) is reported beside its wall time, with its own ratio: on a loaded
machine the wall clock mostly measures the wait for a core.

Byte code is compiled first (``PYTHONPYCACHEPREFIX`` into a scratch
directory, one warm-up run of each command): ``PYTHONDONTWRITEBYTECODE=1``
would otherwise make every start compile every module again.

``MEVEDEL_BENCH_SOURCE=DIR`` runs the commands from another checkout's
source (``DIR/server`` and ``DIR/protocol`` first on ``PYTHONPATH``): the
code before a change, measured the same way.

Targets: ``--help`` <= 8x, ``session list`` <= 10x, ``read mevedel://``
<= 10x the bare interpreter; ``prompt`` start to first chunk <= +100 ms and
last chunk to exit <= +50 ms over the bare client.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import report

HERE = Path(__file__).resolve().parent
AGENT = HERE.parent / "tests" / "agents" / "scripted_agent.py"
MEVEDEL = str(Path(sys.executable).parent / "mevedel")
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "15"))
CHUNKS = 20
SESSIONS = 50


def timed(command: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """Wall seconds, and the process's CPU seconds (user + system): on a
    loaded machine the wall clock mostly measures the queue for a core."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stderr is not None
    stderr = process.stderr.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command} failed ({process.returncode}): {stderr.decode()[-2000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime


def streamed(command: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """Start -> first byte of the answer on stdout, and the answer's last
    chunk (``END``) -> exit, in seconds."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    first = last = None
    seen = b""
    while True:
        data = os.read(process.stdout.fileno(), 65536)
        if not data:
            break
        now = time.perf_counter()
        if first is None and data.strip():
            first = now
        seen += data
        if last is None and b"END" in seen:
            last = now
    stderr = process.stderr.read() if process.stderr else b""
    code = process.wait()
    ended = time.perf_counter()
    if code != 0 or first is None or last is None:
        raise SystemExit(f"{command} failed ({code}): {seen[-500:]!r} {stderr.decode()[-2000:]}")
    return first - started, ended - last


async def make_sessions(root: Path, state: Path) -> None:
    from mevedel_server.store import ClientIdentity
    from mevedel_server.store.service import SessionService
    from mevedel_server.targets import LocalTarget

    service = SessionService(LocalTarget(root), ClientIdentity.generate())
    for index in range(SESSIONS):
        session_id = (await service.create(f"session {index}")).session_id
        await service.begin_turn(session_id, f"prompt {index}")
        await service.settle(session_id)
        await service.close(session_id)


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        root, state, config = scratch / "ws", scratch / "state", scratch / "config"
        for path in (root, state, config / "mevedel"):
            path.mkdir(parents=True)
        script = scratch / "script.json"
        steps = [{"say": f"c{index} "} for index in range(CHUNKS - 1)] + [{"say": "END"}]
        script.write_text(json.dumps({"turns": [steps]}))
        agent = [sys.executable, str(AGENT), str(script)]
        (config / "mevedel" / "config.json").write_text(json.dumps({"agents": {"scripted": {"command": agent}}, "defaultAgent": "scripted"}))
        asyncio.run(make_sessions(root, state))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=str(scratch / "pycache"), XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(config))
        source = os.environ.get("MEVEDEL_BENCH_SOURCE")
        if source:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(source) / "server"), str(Path(source) / "protocol")])

        starts = {
            "python3 -c pass": [sys.executable, "-c", "pass"],
            "mevedel --help": [MEVEDEL, "--help"],
            f"mevedel session list ({SESSIONS} sessions)": [MEVEDEL, "session", "list"],
            "mevedel read mevedel://": [MEVEDEL, "read", "mevedel://"],
        }
        prompts = {
            "bare ACP SDK client": [sys.executable, str(HERE / "bare_acp_client.py"), "go", "--", *agent],
            "mevedel prompt": [MEVEDEL, "prompt", "--new", "go"],
        }
        listed = subprocess.run([MEVEDEL, "session", "list", "--json"], env=env, cwd=root, capture_output=True, text=True)
        assert len(json.loads(listed.stdout)["sessions"]) == SESSIONS, listed.stdout[-2000:] + listed.stderr[-2000:]
        for _ in range(2):  # compile the byte code, warm the page cache
            for command in starts.values():
                timed(command, env, root)
            for command in prompts.values():
                streamed(command, env, root)
        times: dict[str, list[float]] = {name: [] for name in starts}
        cpu: dict[str, list[float]] = {name: [] for name in starts}
        first: dict[str, list[float]] = {name: [] for name in prompts}
        tail: dict[str, list[float]] = {name: [] for name in prompts}
        for _ in range(ROUNDS):
            for name, command in starts.items():
                wall, used = timed(command, env, root)
                times[name].append(wall)
                cpu[name].append(used)
            for name, command in prompts.items():
                to_first, to_exit = streamed(command, env, root)
                first[name].append(to_first)
                tail[name].append(to_exit)

        base = statistics.median(times["python3 -c pass"])
        cpu_base = statistics.median(cpu["python3 -c pass"])
        goals = {"mevedel --help": 8, f"mevedel session list ({SESSIONS} sessions)": 10, "mevedel read mevedel://": 10}
        rows = []
        for name in starts:
            ratio = round(statistics.median(times[name]) / base, 2)
            row = {"case": name, "median_ms": median_ms(times[name]), "min_ms": round(min(times[name]) * 1000, 1), "ratio": ratio,
                   "cpu_ms": median_ms(cpu[name]), "cpu_ratio": round(statistics.median(cpu[name]) / cpu_base, 2)}
            if name in goals:
                row["goal"] = f"<= {goals[name]}x"
                row["met"] = ratio <= goals[name]
            rows.append(row)
        bare, ours = "bare ACP SDK client", "mevedel prompt"
        added_first = median_ms(first[ours]) - median_ms(first[bare])
        added_tail = median_ms(tail[ours]) - median_ms(tail[bare])
        for name in prompts:
            rows.append({"case": f"{name}: start -> first chunk", "median_ms": median_ms(first[name]), "min_ms": round(min(first[name]) * 1000, 1)})
            rows.append({"case": f"{name}: last chunk -> exit", "median_ms": median_ms(tail[name]), "min_ms": round(min(tail[name]) * 1000, 1)})
        rows.append({"case": "prompt: added start -> first chunk", "median_ms": round(added_first, 1), "goal": "<= +100 ms", "met": added_first <= 100})
        rows.append({"case": "prompt: added last chunk -> exit", "median_ms": round(added_tail, 1), "goal": "<= +50 ms", "met": added_tail <= 50})
    name = "cli_startup" + ("_source" if os.environ.get("MEVEDEL_BENCH_SOURCE") else "")
    report(name, rows, {"rounds": ROUNDS, "load": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
                        "source": os.environ.get("MEVEDEL_BENCH_SOURCE") or "this checkout"})


if __name__ == "__main__":
    main()
