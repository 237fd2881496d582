"""Read, Glob and Grep of work:// on a 10,000-file local workspace through
the resolver, which reaches every file through a ``LocalTarget`` (target:
within 10% of the implementation it replaced, which read the filesystem
directly).

That comparison was measured in one run, both implementations interleaved
(the replaced one loaded from git), and is recorded in
``bench/results/resources_comparison.json``; the replaced implementation is
not kept callable. This benchmark now measures the resolver against the
floor in the same run.

Builds ``MEVEDEL_BENCH_FILES`` (10,000) text files of 0.6-2 KiB under
``.mevedel/shared/`` in 10 x 10 directories of 100, aged past any racy
window. Then, interleaved round by round so that load drifts on both sides
alike, each case runs:

- ``resolver``: a context naming only the workspace directory (the root's
  ``LocalTarget`` is pinned once and reused while it is the same
  directory), and for Read also the context the LSP server builds, which
  names the store's target;
- ``floor``: the least any Python code doing the same costs: ``os.walk``
  with ``fnmatch``, or a read and ``re.search`` of every line, in the
  calling thread.

Each side is timed by the wall clock (median, minimum) and by the CPU time
of the whole process (median).

Cases: Read of one file; Glob of every file (``**/*.py``, limit 100,000),
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
import tempfile
import time
from pathlib import Path

from harness import report, summarize
from mevedel_server.addresses.model import Operation
from mevedel_server.resources.engine import resolver
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.targets import LocalTarget

FILES = int(os.environ.get("MEVEDEL_BENCH_FILES", "10000"))
RUNS = int(os.environ.get("MEVEDEL_BENCH_RUNS", "15"))

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
        plain = ResolverContext(workspace_root=root)
        store = ResolverContext(workspace_root=root, store_target=LocalTarget(root))

        async def resolve(name, operation, address, options):
            context = store if "store" in name else plain
            return await resolver.execute(resolver.prepare(operation, address, options, context))

        samples: dict[tuple[str, str], list[float]] = {}
        sides = ("resolver", "floor")
        for round_ in range(RUNS):
            for name, operation, address, options_type, given in CASES:
                for side in sides[round_ % 2 :] + sides[: round_ % 2]:
                    started, cpu = time.perf_counter(), time.process_time()
                    if side == "resolver":
                        await resolve(name, operation, address, options_type(**given))
                    else:
                        floor(root, name, given)
                    samples.setdefault((name, side), []).append(time.perf_counter() - started)
                    samples.setdefault((name, side + "-cpu"), []).append(time.process_time() - cpu)
        rows = []
        for name, *_rest in CASES:
            mine = summarize(samples[(name, "resolver")])
            least = summarize(samples[(name, "floor")])
            rows.append(
                {
                    "case": name,
                    "resolver_median_ms": mine["median_ms"],
                    "resolver_min_ms": round(min(samples[(name, "resolver")]) * 1000, 4),
                    "resolver_cpu_ms": round(statistics.median(samples[(name, "resolver-cpu")]) * 1000, 3),
                    "floor_median_ms": least["median_ms"],
                    "resolver/floor": round(mine["median_ms"] / least["median_ms"], 2),
                }
            )
        notes = {
            "files": FILES,
            "runs": RUNS,
            "load": " ".join(f"{value:.2f}" for value in os.getloadavg()),
            "cpus": os.cpu_count(),
            "comparison with the replaced implementation": "bench/results/resources_comparison.json",
        }
        report("resources", rows, notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
