"""What an editor waits for when it opens a workspace, and what the test
suite pays for each of the hundreds of servers it starts: ``mevedel-lsp``
from process start to its ``initialize`` answer, and to ``initialized``
handled (a request sent right after it answered: messages are handled in
order), against a bare pygls server (``bare_pygls_server.py``) started and
driven the same way; one workspace folder, default settings. CPU (the
process's threads' time on a core, ``/proc/PID/task/*/schedstat``, in
nanoseconds) and wall, side by side: on a loaded machine the wall mostly
measures the wait for a core, so the goal is judged on CPU. Also the CPU
after half a second idle (work ``initialized`` started in the background)
and in all, to the exit after ``shutdown`` (``wait4``).

Rounds are interleaved, the sides taking turns going first; medians, and
each round's CPU ratio (ours / the bare server's in the same round) with
its quartiles. Byte code is compiled first (``PYTHONPYCACHEPREFIX`` into a
scratch directory, two warm-up starts of each): ``PYTHONDONTWRITEBYTECODE=1``
would make every start compile every module again.

``MEVEDEL_BENCH_BESIDE=DIR`` starts that checkout's server too (``DIR/server``
and ``DIR/protocol`` first on ``PYTHONPATH``), in the same rounds (rows
marked ``[DIR]``): a change and the code before it under one load.

Target: CPU to the ``initialize`` answer at most 1.3x the bare server's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import checkout_path, compiling_env, report

HERE = Path(__file__).resolve().parent
MEVEDEL_LSP = str(Path(sys.executable).parent / "mevedel-lsp")
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "15"))
SETTLE_SECONDS = 0.5
GOAL = 1.3
BARE = "bare pygls server"



def cpu_seconds(pid: int) -> float:
    """CPU time so far of every live thread of ``pid`` (nanosecond clock,
    not the 10 ms ticks of ``/proc/PID/stat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total / 1e9


class Wire:
    """The client side of one server's stdio, blocking: frames out, frames
    in; a request from the server is answered null (neither side's start
    waits on one, but a server must not be left waiting)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.buffer = b""
        self.next_id = 0

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, method: str, params: object) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def answer_to(self, request_id: int) -> dict:
        """Read until the answer to ``request_id`` arrives."""
        while True:
            message = self._message()
            if message.get("id") == request_id and "method" not in message:
                return message
            if "id" in message and "method" in message:
                self.send({"id": message["id"], "result": None})

    def _message(self) -> dict:
        assert self.process.stdout is not None
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            data = os.read(self.process.stdout.fileno(), 65536)
            if not data:
                raise SystemExit(f"{self.process.args} closed its output before answering")
            self.buffer += data


def start_up(command: list[str], env: dict, root: Path) -> dict[str, float]:
    """One server's start: wall and CPU seconds to the ``initialize``
    answer, to ``initialized`` handled, after ``SETTLE_SECONDS`` idle, and
    in all to its exit."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    wire = Wire(process)
    try:
        initialize = wire.request("initialize", {
            "processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {},
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}], "initializationOptions": {},
        })
        answer = wire.answer_to(initialize)
        figures = {"initialize_wall": time.perf_counter() - started, "initialize_cpu": cpu_seconds(process.pid)}
        if "result" not in answer or "capabilities" not in answer["result"]:
            raise SystemExit(f"{command}: initialize failed: {answer}")
        wire.send({"method": "initialized", "params": {}})
        # Any request answered after initialized was handled; one neither
        # server knows does no work of its own (a method-not-found answer).
        wire.answer_to(wire.request("bench/ping", {}))
        figures |= {"initialized_wall": time.perf_counter() - started, "initialized_cpu": cpu_seconds(process.pid)}
        time.sleep(SETTLE_SECONDS)
        figures["settled_cpu"] = cpu_seconds(process.pid)
        wire.answer_to(wire.request("shutdown", None))
        wire.send({"method": "exit", "params": None})
        assert process.stdin is not None
        process.stdin.close()
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{command} exited with status {process.returncode}")
        figures["total_cpu"] = usage.ru_utime + usage.ru_stime
        return figures
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()


def quartiles(values: list[float]) -> tuple[float, float, float]:
    low, median, high = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (values[0],) * 3
    return low, median, high


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        root, state, config = scratch / "ws", scratch / "state", scratch / "config"
        for path in (root, state, config):
            path.mkdir()
        (root / "README.md").write_text("work://shared/notes.md\n")
        env = compiling_env(scratch, XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(config))
        servers = {BARE: ([sys.executable, str(HERE / "bare_pygls_server.py")], env), "mevedel-lsp": ([MEVEDEL_LSP], env)}
        beside = os.environ.get("MEVEDEL_BENCH_BESIDE")
        if beside:
            servers[f"mevedel-lsp [{beside}]"] = ([MEVEDEL_LSP], env | {"PYTHONPATH": checkout_path(beside)})
        for _ in range(2):  # compile the byte code, warm the page cache
            for command, server_env in servers.values():
                start_up(command, server_env, root)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
        loads = [os.getloadavg()[0]]
        for round_number in range(ROUNDS):
            order = list(servers.items())
            # Each side goes first in turn: none always meets the others'
            # leftovers (a core just freed, a page cache just warmed).
            shift = round_number % len(order)
            for name, (command, server_env) in order[shift:] + order[:shift]:
                samples[name].append(start_up(command, server_env, root))
        loads.append(os.getloadavg()[0])

    def median_ms(name: str, key: str) -> float:
        return round(statistics.median(sample[key] for sample in samples[name]) * 1000, 1)

    rows = []
    for name in servers:
        row = {"case": name}
        for key in ("initialize_cpu", "initialize_wall", "initialized_cpu", "initialized_wall", "settled_cpu", "total_cpu"):
            row[f"{key}_ms"] = median_ms(name, key)
        for key in ("initialize_cpu", "initialized_cpu", "initialize_wall"):
            row[f"{key}_ratio"] = round(row[f"{key}_ms"] / median_ms(BARE, key), 2)
        if name != BARE:
            # Each round's own ratio: the load's drift between rounds cancels.
            paired = [ours["initialize_cpu"] / bare["initialize_cpu"] for ours, bare in zip(samples[name], samples[BARE])]
            low, middle, high = quartiles(paired)
            row |= {"paired_cpu_ratio": round(middle, 2), "paired_p25": round(low, 2), "paired_p75": round(high, 2),
                    "goal": f"<= {GOAL}x CPU to initialize", "met": row["initialize_cpu_ratio"] <= GOAL}
        rows.append(row)
    report("lsp_startup", rows, {"rounds": ROUNDS, "load_before_after": [round(load, 2) for load in loads], "cpus": os.cpu_count(),
                                 **({"beside": beside} if beside else {})})


if __name__ == "__main__":
    main()
