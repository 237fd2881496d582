"""What exact Rewind costs, against the code before it, in the same run.

Exact Rewind records each path's whole state -- permission bits, directories
and link targets as well as bytes -- and restores it through ``PutEntry``.
Two targets, each measured on this tree and on a baseline tree (by default
``main``'s commit, checked out with ``git worktree`` at bench time; or
``MEVEDEL_BENCH_BASELINE``, a directory holding another checkout), each
side in its own process, the sides interleaved round by round so that load
drifts on both alike:

1. The shell pre-command snapshot of a 10,000-file workspace
   (``FileStateRecord.refresh()`` walking the tree with nothing changed, as
   before every command on an SSH workspace): recording modes and
   directories costs < 5%.
2. Rewind of a 200-file turn (``prepare_rewind`` + ``commit_rewind``
   before the turn, through ``SessionService`` on a ``LocalTarget``; Redo
   puts the turn back between samples, untimed): within 1.1x.

Every side builds the same workspace of its own (the snapshot: 10,000
files in 10 x 10 directories and a ``.gitignore``; the turn: 200 files in
20 directories, each rewritten by the turn).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import report

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FILES = int(os.environ.get("MEVEDEL_BENCH_FILES", "10000"))
TURN_FILES = int(os.environ.get("MEVEDEL_BENCH_TURN_FILES", "200"))
ROUNDS = int(os.environ.get("MEVEDEL_BENCH_ROUNDS", "6"))
PER_ROUND = int(os.environ.get("MEVEDEL_BENCH_PER_ROUND", "5"))

#: The side's own code runs this, in its own process (only APIs both have).
CHILD = r'''
import asyncio, json, os, sys, time
from mevedel_server.agents.file_state import FileStateRecord
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

mode, root, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
ME = ClientIdentity("bench", "bench")

async def snapshot():
    record = FileStateRecord(LocalTarget(root), watch=False, blob_dir=".mevedel/file-state-bench")
    await record.refresh()  # primed (the first walk reads every file): not timed
    samples = []
    for _ in range(count):
        start, cpu = time.perf_counter(), time.process_time()
        await record.refresh()
        samples.append((time.perf_counter() - start, time.process_time() - cpu))
    record.close()
    return samples

async def rewind():
    svc = SessionService(LocalTarget(root), ME)
    marker = os.path.join(root, "..", "sid")
    files = sorted(os.path.join(d, f) for d in os.listdir(root) if d.startswith("dir") for f in os.listdir(os.path.join(root, d)))
    if os.path.exists(marker):
        sid = open(marker).read()
        await svc.sessions.open(sid, "resume")
    else:
        sid = (await svc.sessions.create()).session_id
        await svc.turns.begin_turn(sid, "edit every file")
        for rel in files:
            await svc.turns.capture_file(sid, rel)
            with open(os.path.join(root, rel), "ab") as f:
                f.write(b"# the turn's line\n")
        await svc.turns.settle(sid)
        with open(marker, "w") as f:
            f.write(sid)
    samples = []
    for _ in range(count):
        start, cpu = time.perf_counter(), time.process_time()
        impact = await svc.history.prepare_rewind(sid, "before", 1)
        await svc.history.commit_rewind(sid, impact.token.text)
        samples.append((time.perf_counter() - start, time.process_time() - cpu))
        states = await svc.history.redo_states(sid)
        head = next(s for s in states.states if s.turn_count == 1)
        redo = await svc.history.prepare_redo(sid, head.publication_id)
        await svc.history.commit_redo(sid, redo.token.text)
    await svc.sessions.close_all()
    return samples

print(json.dumps(asyncio.run(snapshot() if mode == "snapshot" else rewind())))
'''


def build_tree(root: Path) -> None:
    per_dir = max(1, FILES // 100)
    for a in range(10):
        for b in range(10):
            directory = root / f"pkg{a}" / f"mod{b}"
            directory.mkdir(parents=True)
            for c in range(per_dir):
                (directory / f"file{c}.py").write_bytes(b"# line of source code\n" * (2 + (a * 7 + b * 13 + c * 31) % 186))
            os.chmod(directory / "file0.py", 0o755)
    (root / ".gitignore").write_bytes(b"*.pyc\n__pycache__/\nnode_modules/\n")


def build_turn(root: Path) -> None:
    for n in range(TURN_FILES):
        directory = root / f"dir{n % 20:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.txt").write_bytes(b"content of a file the turn edits\n" * (1 + n % 40))


def baseline_checkout(scratch: Path) -> tuple[Path, str, bool]:
    """(checkout, what it is, whether this run made it)."""
    given = os.environ.get("MEVEDEL_BENCH_BASELINE")
    if given:
        return Path(given), given, False
    commit = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    checkout = scratch / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(checkout), commit], cwd=REPO, check=True)
    return checkout, f"main's commit {commit[:12]}", True


def run_side(tree: Path, mode: str, root: Path, count: int) -> list[list[float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "server"), str(tree / "protocol")])}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(root), str(count)], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {mode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="mevedel-bench-exact-"))
    baseline, label, made = baseline_checkout(scratch)
    sides = {"baseline": baseline, "exact": REPO}
    try:
        roots = {}
        for side in sides:
            roots[side, "snapshot"] = scratch / side / "tree" / "ws"
            build_tree(roots[side, "snapshot"])
            roots[side, "rewind"] = scratch / side / "turn" / "ws"
            build_turn(roots[side, "rewind"])
        #: (wall, CPU) seconds per sample.
        samples: dict[tuple[str, str], list[list[float]]] = {key: [] for key in roots}
        for round_ in range(ROUNDS):
            for mode in ("snapshot", "rewind"):
                order = ("baseline", "exact") if round_ % 2 == 0 else ("exact", "baseline")
                for side in order:
                    samples[side, mode] += run_side(sides[side], mode, roots[side, mode], PER_ROUND)
        rows = []
        notes: dict[str, object] = {"baseline": label, "files": FILES, "turn_files": TURN_FILES}
        titles = {
            "snapshot": f"shell pre-command snapshot, {FILES} files, nothing changed",
            "rewind": f"Rewind of a {TURN_FILES}-file turn (prepare + commit)",
        }
        for mode, limit in (("snapshot", 1.05), ("rewind", 1.10)):
            base = statistics.median(wall for wall, _cpu in samples["baseline", mode])
            base_cpu = statistics.median(cpu for _wall, cpu in samples["baseline", mode])
            for side in ("baseline", "exact"):
                values = sorted(wall for wall, _cpu in samples[side, mode])
                median = statistics.median(values)
                cpu = statistics.median(c for _wall, c in samples[side, mode])
                rows.append({
                    "what": f"{titles[mode]}: {side}",
                    "n": len(values),
                    "median_ms": round(median * 1000, 3),
                    "p90_ms": round(values[int(0.9 * (len(values) - 1))] * 1000, 3),
                    "x_baseline": round(median / base, 3),
                    "cpu_median_ms": round(cpu * 1000, 3),
                    "cpu_x_baseline": round(cpu / base_cpu, 3),
                })
            # CPU time is what the change adds (the walls here swing with the
            # machine's load and the disk's flushes); both are reported.
            ratio = statistics.median(c for _wall, c in samples["exact", mode]) / base_cpu
            notes[f"{mode}_cpu_ratio"] = round(ratio, 3)
            notes[f"{mode}_wall_ratio"] = round(statistics.median(w for w, _c in samples["exact", mode]) / base, 3)
            notes[f"{mode}_target"] = f"<= {limit}x"
            notes[f"{mode}_met"] = ratio <= limit
        report("exact_rewind", rows, notes)
    finally:
        if made:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=REPO, check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
