"""CLI commands on an SSH workspace: remote programs per command and wall
time against the same command on a local workspace, in one run.

Each command runs as a user runs it, a ``mevedel`` process of its own
(through ``ssh_counted_cli.py``, which counts every remote program and
agent command it sends), once on a workspace reached as
``ssh://ALIAS/path`` through a throwaway OpenSSH server on 127.0.0.1 (its
sessions source no rc files) and once on a local twin workspace, rounds
interleaved. Cases: ``mevedel prompt`` with the scripted agent (a line, a
file written through ``fs/write_text_file``, a line: the first prompt of a
session, a later one, and one after ``mevedel session close``, which finds
the client's last session free and continues it), ``mevedel rewind --yes``
of the last turn, ``mevedel session turns`` and ``mevedel session list``.

Baselines measured in the same run: ``ssh ALIAS true`` (process start,
one connection set-up and one command: what "plus one connection set-up"
means) and the local command. ``over_local`` is (ssh - connection) / local:
the goal for a prompt is <= 1.5. Goals for programs: prompt <= 6, rewind
<= 4, session turns <= 3, session list <= 3.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import compiling_env, report, summarize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from ssh_fixtures import ALIAS, sshd_missing, throwaway_sshd  # noqa: E402

AGENT = HERE.parent / "tests" / "agents" / "scripted_agent.py"
STEPS = [
    ("prompt (first)", ["prompt", "Write step one", "--new"]),
    ("prompt (later)", ["prompt", "Write step two"]),
    ("session turns", ["session", "turns"]),
    ("session list", ["session", "list"]),
    ("rewind --yes", ["rewind", "1", "--yes"]),
    ("session close", ["session", "close"]),
    # The client holds no session now: the prompt finds its last one free
    # (as after a lease lapsed between two commands) and continues it.
    ("prompt (after close)", ["prompt", "Write step three"]),
]
GOALS = {"prompt (first)": 6, "prompt (later)": 6, "prompt (after close)": 6, "rewind --yes": 4, "session turns": 3,
         "session list": 3}


def turn_script(n: int) -> list:
    return [{"say": f"Working on step {n}. "}, {"write": {"path": f"step-{n}.txt", "content": f"step {n}\n"}}, {"say": "Done."}]


class Cli:
    """``mevedel`` processes for one workspace spelling, with their own
    state and configuration directories."""

    def __init__(self, scratch: Path, name: str, workspace: str, home: Path, rounds: int) -> None:
        self.workspace = workspace
        self.dir = scratch / name
        script = self.dir / "script.json"
        self.dir.mkdir()
        # Enough turns for every prompt of the run (the scripted agent plays
        # them in order, one agent process per CLI run: so turn 1 each time).
        script.write_text(json.dumps({"turns": [turn_script(1)]}))
        config = self.dir / "config" / "mevedel" / "config.json"
        config.parent.mkdir(parents=True)
        agent = [sys.executable, str(AGENT), str(script)]
        config.write_text(json.dumps({"agents": {"scripted": {"command": agent}}, "defaultAgent": "scripted"}))
        self.env = compiling_env(
            scratch,
            HOME=str(home),
            XDG_STATE_HOME=str(self.dir / "state"),
            XDG_CONFIG_HOME=str(self.dir / "config"),
            MEVEDEL_BENCH_PROGRAMS=str(self.dir / "programs.jsonl"),
        )

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(HERE / "ssh_counted_cli.py"), *args, "--workspace", self.workspace],
            env={**self.env, "MEVEDEL_BENCH_PROGRAMS": str(self.dir / "started.jsonl")},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )

    def run(self, *args: str) -> tuple[float, list[dict]]:
        log = Path(self.env["MEVEDEL_BENCH_PROGRAMS"])
        log.unlink(missing_ok=True)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(HERE / "ssh_counted_cli.py"), *args, "--workspace", self.workspace],
            env=self.env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"mevedel {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        programs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return elapsed, programs


def ssh_true(home: Path) -> float:
    start = time.perf_counter()
    # OpenSSH reads the passwd home's config, not $HOME's: name the file.
    config = home / ".ssh" / "config"
    subprocess.run(["ssh", "-F", str(config), ALIAS, "true"], check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def hand_over(owner: Cli, requester: Cli) -> tuple[float, float, list[dict]]:
    """``owner`` holds the session; ``requester`` asks for it with
    ``take-control`` and waits. Returns the seconds from the owner's
    ``grant-control`` starting to the requester printing ``acquired``
    (writable), the grant command's own seconds and its programs."""
    sid = json.loads(subprocess.run(
        [sys.executable, str(HERE / "ssh_counted_cli.py"), "session", "list", "--json", "--workspace", owner.workspace],
        env=owner.env, capture_output=True, text=True, check=True,
    ).stdout)["sessions"][0]["session_id"]
    waiting = requester.start("session", "take-control", sid, "--wait", "120")
    assert waiting.stderr is not None
    said = []
    # Warnings a library prints at import (asyncssh's DSA deprecation under
    # cryptography 51) come before the line that says whom it asked.
    while not said or "asked" not in said[-1] and said[-1]:
        said.append(waiting.stderr.readline())
    if "asked" not in said[-1]:
        waiting.kill()
        out, err = waiting.communicate()
        raise SystemExit(f"take-control did not ask (exit {waiting.returncode}): {out}{''.join(said)}{err}")
    start = time.perf_counter()
    granted, programs = owner.run("session", "grant-control")
    out, err = waiting.communicate(timeout=120)
    writable = time.perf_counter() - start
    if waiting.returncode != 0 or "acquired" not in out:
        raise SystemExit(f"take-control failed ({waiting.returncode}): {out}{err}")
    return writable, granted, programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--show", action="store_true", help="print every program of the last SSH round with its caller")
    args = parser.parse_args()
    missing = sshd_missing()
    if missing:
        raise SystemExit(f"cannot run: {missing}")
    with tempfile.TemporaryDirectory(prefix="bench-ssh-cli-") as scratch_name:
        scratch = Path(scratch_name)
        (scratch / "sshd").mkdir()
        with throwaway_sshd(scratch / "sshd") as server:
            home = scratch / "home"
            (home / ".ssh").mkdir(parents=True)
            (home / ".ssh" / "config").write_text(server.config.read_text())
            samples: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
            counts: dict[str, list[int]] = collections.defaultdict(list)
            commands: dict[str, list[int]] = collections.defaultdict(list)
            shown: dict[str, list[dict]] = {}
            connection: list[float] = []
            # Untimed, once: every step's byte code compiled (shared by the
            # timed processes through PYTHONPYCACHEPREFIX), so the first
            # round's first side does not pay for compiling.
            for side, spelling in (("local", ""), ("ssh", f"ssh://{ALIAS}")):
                (scratch / f"warm-{side}").mkdir()
                warm = Cli(scratch, f"warm-{side}-cli", f"{spelling}{scratch / f'warm-{side}'}", home, args.rounds)
                for _case, argv in STEPS:
                    warm.run(*argv)
            for round_ in range(args.rounds):
                remote_dir = scratch / f"remote-ws-{round_}"
                local_dir = scratch / f"local-ws-{round_}"
                remote_dir.mkdir()
                local_dir.mkdir()
                sides = {
                    "ssh": Cli(scratch, f"ssh-{round_}", f"ssh://{ALIAS}{remote_dir}", home, args.rounds),
                    "local": Cli(scratch, f"local-{round_}", str(local_dir), home, args.rounds),
                }
                connection.append(ssh_true(home))
                for case, argv in STEPS:
                    for side in ("local", "ssh") if round_ % 2 else ("ssh", "local"):
                        elapsed, programs = sides[side].run(*argv)
                        samples[case][side].append(elapsed)
                        if side == "ssh":
                            counts[case].append(sum(1 for p in programs if p["kind"] != "command"))
                            commands[case].append(sum(1 for p in programs if p["kind"] == "command"))
                            shown[case] = programs
                for side in ("local", "ssh"):
                    requester = Cli(scratch, f"{side}-asker-{round_}", sides[side].workspace, home, args.rounds)
                    writable, granted, programs = hand_over(sides[side], requester)
                    samples["grant-control -> requester writable"][side].append(writable)
                    samples["grant-control alone"][side].append(granted)
                    if side == "ssh":
                        counts["grant-control alone"].append(sum(1 for p in programs if p["kind"] != "command"))
                        commands["grant-control alone"].append(0)
                        shown["grant-control alone"] = programs
    setup = statistics.median(connection)
    rows = [{"case": "ssh ALIAS true (one connection set-up)", **summarize(connection)}]
    notes: dict = {"rounds": args.rounds}
    for case, sides in samples.items():
        local, ssh = statistics.median(sides["local"]), statistics.median(sides["ssh"])
        rows.append({
            "case": case,
            "programs": max(counts[case], default=""),
            "goal": GOALS.get(case, ""),
            "local_ms": round(local * 1000, 1),
            "ssh_ms": round(ssh * 1000, 1),
            "over_local": round((ssh - setup) / local, 2),
        })
        if counts[case]:
            notes[f"programs_{case}"] = f"{min(counts[case])}..{max(counts[case])} (goal <= {GOALS.get(case, '-')}); agent commands {max(commands[case])}"
    notes["load_average_1_5_15"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.show:
        for case, programs in shown.items():
            print(f"\n-- {case}: {len(programs)} --")
            for program in programs:
                print(f"  {program['kind']:8} {','.join(program['operations'])[:70]:70} {program['caller']}")
    report("ssh_cli", rows, notes)


if __name__ == "__main__":
    main()
