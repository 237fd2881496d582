"""The file-state record around an agent's shell command (target: refresh of
a 10,000-file workspace under 50 ms through ``LocalTarget``, nothing changed
and 10 files changed): walking every time, and kept current by inotify.

Builds a workspace of ``MEVEDEL_BENCH_FILES`` (10,000) files in 10 x 10
directories of 100 (40 B to 4 KiB each), a root ``.gitignore`` of the usual
kind, 500 ignored ``*.pyc`` files among them (flagged, never read) and an
ignored ``node_modules/`` of 5,000 more files (never entered), then leaves
it to age past the record's racy window (files changed within 2 s of a walk
are read again at the next one), as a checkout has. Then, interleaved so
that load drifts on both sides alike:

- ``refresh()`` with nothing changed;
- ``refresh()`` after 10 files were rewritten (others each time; those of
  the round before are read once more, being racy);
- ``changes()`` after a command rewrote 10 files (their content read back);
- the same three through a record kept current by inotify (``watch=``, as
  a ``LocalTarget`` workspace has it: no walk, the event queue drained and
  only the paths its events name looked at), with a blob store of its own;
- the ``ScanTree`` program alone (the walk on the target);
- the baseline: ``os.walk`` + ``os.lstat`` of every file in the directories
  the scan enters (no ``.gitignore``, no record, nothing kept);
- the floor: a bare ``os.scandir`` + ``DirEntry.stat`` loop over the same
  directories, the least any Python walk of the tree costs (profiling the
  scan shows its time is these ``lstat`` calls plus per-entry bookkeeping).

The first ``refresh()`` (every file read and stored as a blob) is timed
once per run on a fresh record and blob store.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time

from harness import report, summarize
from mevedel_server.agents.file_state import RACY_NS, SKIP_NAMES, FileStateRecord
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
    ScanTree,
    wire,
)

FILES = int(os.environ.get("MEVEDEL_BENCH_FILES", "10000"))
RUNS = int(os.environ.get("MEVEDEL_BENCH_RUNS", "30"))
CHANGED = 10
GITIGNORE = b"# build output\n*.pyc\n__pycache__/\nnode_modules/\n/build\n/dist/\n*.log\n.env\n!keep.log\n"
PRUNED = {".git", ".mevedel", "node_modules", "build", "dist"}


def build(root: str) -> list[str]:
    """The workspace; returns the paths of its captured files."""
    paths: list[str] = []
    per_dir = max(1, FILES // 100)
    for a in range(10):
        for b in range(10):
            directory = os.path.join(root, f"pkg{a}", f"mod{b}")
            os.makedirs(directory)
            for c in range(per_dir):
                rel = f"pkg{a}/mod{b}/file{c}.py"
                with open(os.path.join(root, rel), "wb") as f:
                    f.write(b"# %s\n" % rel.encode() + b"# line of source code\n" * (2 + (a * 7 + b * 13 + c * 31) % 186))
                paths.append(rel)
            for c in range(5):
                with open(os.path.join(directory, f"cache{c}.pyc"), "wb") as f:
                    f.write(b"\x00" * 200)
    with open(os.path.join(root, ".gitignore"), "wb") as f:
        f.write(GITIGNORE)
    for n in range(5000):
        directory = os.path.join(root, "node_modules", f"dep{n // 100}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"index{n % 100}.js"), "wb") as f:
            f.write(b"module.exports = 1;\n")
    return paths


def baseline(root: str) -> int:
    count = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in PRUNED]
        for name in files:
            os.lstat(os.path.join(directory, name))
            count += 1
    return count


def floor(root: str) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW

    def walk(fd: int) -> int:
        count = 0
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in PRUNED:
                        continue
                    child = os.open(entry.name, flags, dir_fd=fd)
                    try:
                        count += walk(child)
                    finally:
                        os.close(child)
                else:
                    entry.stat(follow_symlinks=False)
                    count += 1
        return count

    fd = os.open(root, flags)
    try:
        return walk(fd)
    finally:
        os.close(fd)


class CountingTarget(ProgramTarget):
    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs = 0
        self.operations = 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs += 1
        self.operations += len(program)
        return await self.inner.run(program)


def rewrite(root: str, paths: list[str], round_: int) -> list[str]:
    """Rewrite CHANGED files (others each round), same size, new bytes."""
    chosen = [paths[(round_ * CHANGED + i) * 7919 % len(paths)] for i in range(CHANGED)]
    for rel in chosen:
        full = os.path.join(root, rel)
        size = os.path.getsize(full)
        with open(full, "r+b") as f:
            f.write((b"# round %d " % round_).ljust(min(size, 24), b"."))
    return chosen


def age(seconds: float) -> None:
    """Let the files written last pass out of the racy window."""
    time.sleep(seconds)


async def measure(root: str, paths: list[str]) -> None:
    target = LocalTarget(root)
    counting = CountingTarget(target)
    scan_op = ScanTree(".", skip_names=SKIP_NAMES, skip_paths=(".mevedel/file-state",), racy_ns=RACY_NS)

    first: list[float] = []
    for _ in range(3):
        shutil.rmtree(os.path.join(root, ".mevedel"), ignore_errors=True)
        start = time.perf_counter()
        await FileStateRecord(target).refresh()
        first.append(time.perf_counter() - start)
    record = FileStateRecord(counting, watch=False)
    await record.refresh()
    counting_watched = CountingTarget(target)
    watched = FileStateRecord(counting_watched, watch=target, blob_dir=".mevedel/file-state-watched")
    await watched.refresh()
    if watched.unwatched is not None:
        sys.exit(f"the watched record walks: {watched.unwatched}")
    walked = baseline(root)
    if floor(root) != walked:
        sys.exit("the floor and the baseline walked different trees")
    scan = (await target.run(ControlProgram([scan_op])))[0].value
    if len(scan) != walked or scan.unwalked != (("node_modules", "ignored by .gitignore"),):
        sys.exit(f"the scan met {len(scan)} entries and left {scan.unwalked} out; the baseline {walked}")

    keys = ("base", "bare", "scan", "still", "changed", "after", "still_w", "changed_w", "after_w")
    wall: dict[str, list[float]] = {key: [] for key in keys}
    cpu: dict[str, list[float]] = {key: [] for key in wall}
    programs = {"still": 0, "changed": 0, "after": 0, "still_w": 0, "changed_w": 0, "after_w": 0}

    async def timed(key: str, action) -> object:
        # One record per workspace in real use: the other record's blob
        # prune (a program it runs once a sync has answered) is let finish
        # first, so as not to time it with this one.
        for each in (record, watched):
            if each._pruning is not None:
                await asyncio.wait([each._pruning])
        counting.programs = counting_watched.programs = 0
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        outcome = action()
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        wall[key].append(time.perf_counter() - wall_start)
        cpu[key].append(time.process_time() - cpu_start)
        if key in programs:
            # The record's own programs (a blob prune of its own may run
            # in the background meanwhile, counted too).
            programs[key] = max(programs[key], counting_watched.programs if key.endswith("_w") else counting.programs)
        return outcome

    for round_ in range(RUNS):
        await timed("base", lambda: baseline(root))
        await timed("bare", lambda: floor(root))
        await timed("scan", lambda: target.run(ControlProgram([scan_op])))
        await timed("still", record.refresh)
        await timed("still_w", watched.refresh)
        rewrite(root, paths, 2 * round_)
        await timed("changed", record.refresh)
        await timed("changed_w", watched.refresh)
        rewrite(root, paths, 2 * round_ + 1)  # "the command"
        found = await timed("after", record.changes)
        found_w = await timed("after_w", watched.changes)
        if len(found) != CHANGED or any(change.before is None for change in found) or found_w != found:
            sys.exit(f"changes() found {found!r}, watched {found_w!r}")
        age(RACY_NS / 1e9 + 0.1)  # the next "nothing changed" is one
        await record.refresh()
        await watched.refresh()
    if watched.unwatched is not None or watched._watch is None or watched._watch.lost is not None:
        sys.exit("the watched record fell back to walking during the run")
    watches = watched._watch.watched
    watched.close()

    # The answer's cost on the wire, as an SSH target frames and parses it.
    plain = (scan.names, scan.facts, [], [], False, scan.started_ns)
    start = time.perf_counter()
    framed = b"".join(wire.frame_chunks(b"n" * wire.NONCE_SIZE, ["done", [["ok", plain, None, False]], None]))
    wire.read_frame(_reader(framed))
    framing = time.perf_counter() - start

    b = summarize(wall["base"])
    labels = {
        "base": f"baseline: os.walk + lstat, {walked} files",
        "bare": "floor: scandir + DirEntry.stat, same tree",
        "scan": "ScanTree program alone (LocalTarget)",
        "still": "refresh(), nothing changed",
        "changed": f"refresh(), {CHANGED} files changed",
        "after": f"changes() after a command changed {CHANGED}",
        "still_w": "inotify-kept refresh(), nothing changed",
        "changed_w": f"inotify-kept refresh(), {CHANGED} files changed",
        "after_w": f"inotify-kept changes() after a command changed {CHANGED}",
    }
    rows = []
    for key, label in labels.items():
        row = {"what": label, **summarize(wall[key])}
        row["x_baseline"] = round(row["median_ms"] / b["median_ms"], 2)
        row["cpu_median_ms"] = summarize(cpu[key])["median_ms"]
        rows.append(row)
    rows.append({"what": f"first refresh(): read and store {len(paths)} files", **summarize(first)})
    rows[-1]["x_baseline"] = round(rows[-1]["median_ms"] / b["median_ms"], 2)
    still_ms = summarize(wall["still"])["median_ms"]
    changed_ms = summarize(wall["changed"])["median_ms"]
    still_w = summarize(wall["still_w"])
    changed_w = summarize(wall["changed_w"])
    cpu_base = summarize(cpu["base"])["median_ms"]
    report(
        "shell_snapshot",
        rows,
        {
            "files": walked,
            "ignored_entries_not_walked": "node_modules/ (5000 files)",
            "ignored_files_flagged": 500,
            "target": "refresh() of 10,000 files under 50 ms, nothing changed and 10 changed (LocalTarget)",
            "met_nothing_changed": still_ms < 50.0,
            "met_10_changed": changed_ms < 50.0,
            "inotify_met_nothing_changed": still_w["median_ms"] < 50.0 and still_w["p99_ms"] < 50.0,
            "inotify_met_10_changed": changed_w["median_ms"] < 50.0 and changed_w["p99_ms"] < 50.0,
            "inotify_ratio_nothing_changed": round(still_w["median_ms"] / b["median_ms"], 4),
            "inotify_ratio_10_changed": round(changed_w["median_ms"] / b["median_ms"], 3),
            "inotify_directories_watched": watches,
            "programs_per_inotify_refresh_nothing_changed": programs["still_w"],
            "programs_per_inotify_refresh_10_changed": programs["changed_w"],
            "programs_per_inotify_changes_10_changed": programs["after_w"],
            "ratio_nothing_changed": round(still_ms / b["median_ms"], 2),
            "ratio_10_changed": round(changed_ms / b["median_ms"], 2),
            "cpu_ratio_nothing_changed": round(summarize(cpu["still"])["median_ms"] / cpu_base, 2),
            "cpu_ratio_10_changed": round(summarize(cpu["changed"])["median_ms"] / cpu_base, 2),
            "programs_per_refresh_nothing_changed": programs["still"],
            "programs_per_refresh_10_changed": programs["changed"],
            "programs_per_changes_10_changed": programs["after"],
            "scan_answer_bytes": len(scan.names.encode()) + len(scan.facts),
            "scan_answer_wire_frame_and_parse_ms": round(framing * 1000, 2),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    )


def _reader(data: bytes):
    view = memoryview(data)
    position = 0

    def read(size: int) -> bytes:
        nonlocal position
        chunk = bytes(view[position : position + size])
        position += len(chunk)
        return chunk

    return read


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mevedel-bench-shell-") as root:
        started = time.perf_counter()
        paths = build(root)
        print(f"built {len(paths)} files (+ 500 ignored, + 5000 in node_modules/) in {time.perf_counter() - started:.1f} s")
        age(RACY_NS / 1e9 + 0.1)
        asyncio.run(measure(root, paths))


if __name__ == "__main__":
    main()
