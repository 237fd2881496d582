"""Read, Glob and Grep of work:// on a 10,000-file local workspace through
the resolver, which reaches every file through a ``LocalTarget`` (target:
within 10% of the implementation it replaced, which read the filesystem
directly; measured against it in the same run).

Builds ``MEVEDEL_BENCH_FILES`` (10,000) text files of 0.6-2 KiB under
``.mevedel/shared/`` in 10 x 10 directories of 100, aged past any racy
window. Then, interleaved round by round so that load drifts on every side
alike, each case runs:

- ``after``: the resolver as it is (a context naming only the workspace
  directory: each request pins its own ``LocalTarget``, the costlier way;
  the LSP server passes the store's);
- ``before``: the resolver before it went through the target, loaded from
  the git commit ``MEVEDEL_BENCH_BEFORE`` (``git archive`` into a
  temporary package) -- kept only until this comparison is recorded in
  ``bench/results/resources.json``;
- ``floor``: the least any Python code doing the same costs: ``os.walk``
  with ``fnmatch``, or a read and ``re.search`` of every line, in the
  calling thread.

Each side is timed by the wall clock (median, minimum) and by the CPU time
of the whole process (median): on a loaded machine the wall clock of a
side that waits for a worker thread more often swings with the load, and
the CPU time and the minimum show the cost itself.

Cases: Read of one file (also as the LSP server runs it, with the store's
target in the context instead of one pinned per request); Glob of every file (``**/*.py``, limit 100,000),
of 100 (``**/file7.py``) and the default (``**/*``, limit 1,000: stops
early); Grep that matches nothing (every file read and searched), that
matches 100 lines, and that stops at its limit of 500 after a few files.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import io
import tempfile
import time
from pathlib import Path

from harness import report, summarize

from mevedel_server.addresses.model import Operation
from mevedel_server.resources import resolver
from mevedel_server.resources.context import ResolverContext
from mevedel_server.resources.options import GlobOptions, GrepOptions, ReadOptions
from mevedel_server.targets import LocalTarget

FILES = int(os.environ.get("MEVEDEL_BENCH_FILES", "10000"))
RUNS = int(os.environ.get("MEVEDEL_BENCH_RUNS", "15"))
BEFORE = os.environ.get("MEVEDEL_BENCH_BEFORE", "09d396c142be6783d4ff50325afdb84a9843e7f0")
REPOSITORY = Path(__file__).resolve().parent.parent

CASES = [
    ("read", Operation.READ, "work://shared/pkg5/mod5/file50.py", ReadOptions, {}),
    # As the LSP server runs it: the context names the store's target.
    ("read-store-target", Operation.READ, "work://shared/pkg5/mod5/file50.py", ReadOptions, {}),
    ("glob-all", Operation.GLOB, "work://shared/", GlobOptions, {"pattern": "**/*.py", "limit": 100_000}),
    ("glob-100", Operation.GLOB, "work://shared/", GlobOptions, {"pattern": "**/file7.py"}),
    ("glob-default", Operation.GLOB, "work://shared/", GlobOptions, {}),
    ("grep-none", Operation.GREP, "work://shared/", GrepOptions, {"pattern": "no such text"}),
    ("grep-100", Operation.GREP, "work://shared/", GrepOptions, {"pattern": "^marker 7 "}),
    ("grep-limit", Operation.GREP, "work://shared/", GrepOptions, {"pattern": "value"}),
]


def build(root: Path) -> None:
    shared = root / ".mevedel" / "shared"
    per_dir = max(1, FILES // 100)
    old = time.time() - 3600
    for a in range(10):
        for b in range(10):
            directory = shared / f"pkg{a}" / f"mod{b}"
            directory.mkdir(parents=True)
            for c in range(per_dir):
                lines = [f"marker {c} in pkg{a}/mod{b}\n"]
                lines += [f"    value_{n} = compute({n}, {c})  # line {n}\n" for n in range(10 + (c % 30))]
                path = directory / f"file{c}.py"
                path.write_text("".join(lines))
                os.utime(path, (old, old))


# -- before (temporary: until the comparison is recorded) ----------------------


def load_before(into: Path):
    """The resolver package at commit ``BEFORE``, importable as
    ``mevedel_server_before`` (its imports are relative)."""
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", BEFORE, "server/mevedel_server"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "server" / "mevedel_server").rename(into / "mevedel_server_before")
    sys.path.insert(0, str(into))
    from mevedel_server_before.addresses.model import Operation as OldOperation
    from mevedel_server_before.resources import options as old_options
    from mevedel_server_before.resources import resolver as old_resolver
    from mevedel_server_before.resources.context import ResolverContext as OldContext

    return old_resolver, OldContext, OldOperation, old_options


# -- floor ---------------------------------------------------------------------


def floor(root: Path, name: str, options: dict) -> object:
    shared = root / ".mevedel" / "shared"
    if name.startswith("read"):
        return (shared / "pkg5" / "mod5" / "file50.py").read_bytes().decode().split("\n")
    if name.startswith("glob"):
        import fnmatch

        found = []
        limit = options.get("limit", 1000)
        tail = options.get("pattern", "**/*").rpartition("/")[2]
        for directory, dirs, files in os.walk(shared):
            dirs.sort()
            for file in sorted(files):
                if fnmatch.fnmatchcase(file, tail):
                    found.append(os.path.join(directory, file))
                    if len(found) > limit:
                        return found
        return found
    regex = re.compile(options["pattern"])
    hits = 0
    for directory, dirs, files in os.walk(shared):
        dirs.sort()
        for file in sorted(files):
            with open(os.path.join(directory, file), "rb") as handle:
                for line in handle.read().decode().split("\n"):
                    if regex.search(line):
                        hits += 1
                        if hits > 500:
                            return hits
    return hits


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="mevedel-bench-resources-"))
    try:
        root = scratch / "workspace"
        build(root)
        old_resolver, OldContext, OldOperation, old_options = load_before(scratch / "before")
        after_context = ResolverContext(workspace_root=root)
        store_context = ResolverContext(workspace_root=root, store_target=LocalTarget(root))
        before_context = OldContext(workspace_root=root)

        async def after(operation, address, options, context=after_context):
            return await resolver.execute(resolver.prepare(operation, address, options, context))

        async def before(operation, address, options):
            return await old_resolver.execute(old_resolver.prepare(operation, address, options, before_context))

        samples: dict[tuple[str, str], list[float]] = {}
        for name, operation, address, options_type, given in CASES:
            new = await after(operation, address, options_type(**given))
            old = await before(getattr(OldOperation, operation.name), address, getattr(old_options, options_type.__name__)(**given))
            assert repr(new) == repr(old), f"{name}: the answers differ"
        sides = ("after", "before", "floor")
        for round_ in range(RUNS):
            for name, operation, address, options_type, given in CASES:
                old_type = getattr(old_options, options_type.__name__)
                # Each side goes first in turn: none always follows a heavy case.
                for side in sides[round_ % 3 :] + sides[: round_ % 3]:
                    started, cpu = time.perf_counter(), time.process_time()
                    if side == "after":
                        await after(operation, address, options_type(**given), store_context if "store" in name else after_context)
                    elif side == "before":
                        await before(getattr(OldOperation, operation.name), address, old_type(**given))
                    else:
                        floor(root, name, given)
                    samples.setdefault((name, side), []).append(time.perf_counter() - started)
                    samples.setdefault((name, side + "-cpu"), []).append(time.process_time() - cpu)
        rows = []
        for name, *_rest in CASES:
            after_ms = summarize(samples[(name, "after")])
            before_ms = summarize(samples[(name, "before")])
            floor_ms = summarize(samples[(name, "floor")])
            after_cpu = statistics.median(samples[(name, "after-cpu")]) * 1000
            before_cpu = statistics.median(samples[(name, "before-cpu")]) * 1000
            rows.append(
                {
                    "case": name,
                    "after_median_ms": after_ms["median_ms"],
                    "before_median_ms": before_ms["median_ms"],
                    "floor_median_ms": floor_ms["median_ms"],
                    "after/before": round(after_ms["median_ms"] / before_ms["median_ms"], 3),
                    "after_min_ms": round(min(samples[(name, "after")]) * 1000, 4),
                    "before_min_ms": round(min(samples[(name, "before")]) * 1000, 4),
                    "min after/before": round(min(samples[(name, "after")]) / min(samples[(name, "before")]), 3),
                    "after_cpu_ms": round(after_cpu, 3),
                    "before_cpu_ms": round(before_cpu, 3),
                    "cpu after/before": round(after_cpu / before_cpu, 3) if before_cpu else None,
                }
            )
        notes = {
            "files": FILES,
            "runs": RUNS,
            "before": BEFORE,
            "load": " ".join(f"{value:.2f}" for value in os.getloadavg()),
            "cpus": os.cpu_count(),
            "target": "after/before at most 1.10 for every case",
        }
        report("resources", rows, notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
