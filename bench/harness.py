"""What every benchmark shares: timing statistics, a printed table, and a JSON
result file under bench/results/.

Benchmarks compare against a baseline measured in the same run and report the
ratio, so a slower or faster machine moves both sides together.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from mevedel_server.targets import ProgramTarget

RESULTS = Path(__file__).resolve().parent / "results"


def compiling_env(scratch: Path, **variables: str) -> dict[str, str]:
    """This process's environment (plus ``variables``) for the processes a
    benchmark times: their byte code written to, and read from,
    ``scratch/pycache`` (``PYTHONPYCACHEPREFIX``). With
    ``PYTHONDONTWRITEBYTECODE=1`` (set here) every start would compile
    every module again, and a resident set would hold what compiling left;
    start each process untimed once or twice first, to compile."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPYCACHEPREFIX=str(scratch / "pycache"), **variables)
    return env


def checkout_path(directory: str) -> str:
    """``PYTHONPATH`` that runs a checkout's source instead of this one's."""
    return os.pathsep.join([str(Path(directory) / "server"), str(Path(directory) / "protocol")])


def summarize(samples_s: list[float]) -> dict[str, float]:
    """Milliseconds: median, p90, p99, max, over the given samples (seconds)."""
    ms = sorted(s * 1000.0 for s in samples_s)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(round(p * (len(ms) - 1))))]

    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 4),
        "p90_ms": round(pct(0.90), 4),
        "p99_ms": round(pct(0.99), 4),
        "max_ms": round(ms[-1], 4),
    }


def report(name: str, rows: list[dict], notes: dict | None = None) -> Path:
    """Print ``rows`` as a table and save them with machine facts as JSON."""
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    widths = {k: max(len(k), *(len(_fmt(r.get(k, ""))) for r in rows)) for k in keys}
    print(f"\n== {name} ==")
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(_fmt(row.get(k, "")).ljust(widths[k]) for k in keys))
    for key, value in (notes or {}).items():
        print(f"{key}: {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": name,
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "rows": rows,
                "notes": notes or {},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"saved {out.relative_to(RESULTS.parent.parent)}")
    return out


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class CountingTarget(ProgramTarget):
    """A target wrapper that counts programs (round trips on SSH) and
    operations; its single-operation methods are programs too, so they
    count. Anything else is the wrapped target's."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs = 0
        self.operations = 0

    async def run(self, program):
        self.programs += 1
        self.operations += len(program)
        return await self.inner.run(program)

    def __getattr__(self, name):
        return getattr(self.inner, name)
