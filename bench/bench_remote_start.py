"""What an SSH workspace's host pays for each program: the remote process
(one per program, see ``targets/ssh.py``) started the way ``SshTarget``
starts it -- ``sh -c`` with the bootstrap command, the compiled bundle and
one request on standard input (a ``Stat`` of the root) -- vs a bare
interpreter started the same way (``sh -c "python3 -I -S -c pass"``), in
processes on this machine (no sshd: the bundle's own cost, which the host
pays on every program, warm process or not). CPU time (user + system of
the process tree, from ``wait4``) and wall time, interleaved in a random
order each round; medians, and the ratio to the bare interpreter.

``MEVEDEL_BENCH_SOURCE=DIR`` adds the same program with another checkout's
bundle (``DIR/server``), in the same rounds: the code before a change, the
load alike on both.

Target: the remote program's CPU <= 2x the bare interpreter's.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import checkout_path, report

INTERPRETER = os.path.realpath(sys.executable)

#: Prints the bootstrap command and writes the compiled bundle plus one
#: framed request, using the checkout first on ``PYTHONPATH``.
_MAKE = r"""
import sys
from mevedel_server.targets import executor, remote_bundle, wire
root, out, interpreter = sys.argv[1:4]
dev, ino = executor.pin_root(root)
nonce = b"\x00" * 16
frame = b"".join(bytes(c) for c in wire.frame_chunks(nonce, ["program", root, dev, ino, None, [["Stat", ".", False, None]]]))
open(out, "wb").write(remote_bundle.compiled_script() + frame)
print(remote_bundle.remote_command(interpreter, compiled=True))
"""


def _prepared(source: Path, root: Path, scratch: Path, label: str) -> tuple[str, bytes]:
    out = scratch / f"{label}.in"
    env = {**os.environ, "PYTHONPATH": checkout_path(str(source))}
    command = subprocess.run([sys.executable, "-c", _MAKE, str(root), str(out), INTERPRETER], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
    return command, out.read_bytes()


def _timed(command: str, stdin: bytes) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[:60]}...: exit {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        root = scratch / "ws"
        root.mkdir()
        cases = {"bare interpreter": (f"{INTERPRETER} -I -S -c pass", b"")}
        cases["remote program"] = _prepared(here, root, scratch, "this")
        other = os.environ.get("MEVEDEL_BENCH_SOURCE")
        if other:
            cases[f"remote program [{other}]"] = _prepared(Path(other), root, scratch, "other")
        for command, stdin in cases.values():  # untimed: the page cache warmed alike
            _timed(command, stdin)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            order = list(cases)
            random.shuffle(order)
            for name in order:
                samples[name].append(_timed(*cases[name]))
    bare_cpu = statistics.median(cpu for cpu, _ in samples["bare interpreter"])
    bare_wall = statistics.median(wall for _, wall in samples["bare interpreter"])
    rows = []
    for name, measured in samples.items():
        cpu = statistics.median(c for c, _ in measured)
        wall = statistics.median(w for _, w in measured)
        rows.append({
            "case": name,
            "cpu_ms": round(cpu * 1000, 2),
            "wall_ms": round(wall * 1000, 2),
            "cpu_vs_bare": round(cpu / bare_cpu, 2),
            "wall_vs_bare": round(wall / bare_wall, 2),
        })
    load = os.getloadavg()[0]
    report("remote_start", rows, {"rounds": args.rounds, "load": round(load, 1), "target": "remote program CPU <= 2x bare"})


if __name__ == "__main__":
    main()
