"""Settle latency at turn 10 and at turn 6,000 (1 MB of transcript), and
peak memory with the 6,000-turn session open.

Targets: settle median under 20 ms, and the turn-6,000 median at most 1.5x
the turn-10 one (a settle costs its change, not the session's history).

Each measured settle is ``SessionService.turns.settle`` of a turn begun with a
prompt and one response: the transcript append, the save candidate, one
publication program through ``LocalTarget`` (artifacts, manifest,
lease rotation; the publication's writes deferred to one barrier) on a real
directory. The sessions are built in memory through
the conversation state machine and published once, then opened (resumed)
through the service, as a client resuming them would.

Baselines, measured in the same run on the same filesystem, with samples
interleaved (floor, turn 10, turn 6,000, again) so load on a shared disk
moves all of them alike:

- turn 10 is the baseline of turn 6,000 (``ratio_vs_turn_10``);
- ``durable write floor``: one control program that exclusively creates one
  300-byte file (temporary file, fsync, link, directory fsync) -- the
  irreducible cost of any durable write here (``ratio_vs_floor``);
- the same settles with ``os.fsync`` and the executor's ``syncfs`` barrier
  stubbed out: what a settle costs that is not the disk's flushes (the
  ``flushes_per_settle`` note counts those).

A minimal turn (begin, prompt, response, settle records) is about 330 bytes,
so the 6,000-turn session holds about 2 MB of transcript, past the 1 MB the
target names.

Memory is measured in child processes that only open a session: tracemalloc
peak and retained bytes while opening (and holding) it, and the process's
``ru_maxrss``; the 10-turn session is the baseline.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc

from harness import report, summarize
from mevedel_server.store import (
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
)
from mevedel_server.store.authority.workspace import ensure_workspace_id
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    executor,
    read_target_clock,
)

SAMPLES = int(os.environ.get("MEVEDEL_BENCH_SAMPLES", "60"))
LONG_TURNS = 6000
SHORT_TURNS = 10
ME = ClientIdentity("bench-client", "bench-host")
WRITER = ClientIdentity("bench-writer", "bench-host")


def _texts() -> tuple[str, str]:
    # The four records of a minimal turn take about 330 bytes, so 6,000 turns
    # are already past 1 MB: prompts and responses stay short.
    return "please continue", "continued"


async def build(root: str, turns: int) -> tuple[str, int]:
    """A published session of ``turns - 1`` settled turns; returns its ID and
    its transcript size in bytes."""
    target = LocalTarget(root)
    workspace_id = await ensure_workspace_id(target)
    session_id = "2026-07-19T09-47-" + f"{turns:012x}"
    at = await read_target_clock(target, ".mevedel")
    conversation = Conversation.new(session_id=session_id, workspace_id=workspace_id, at=at)
    prompt, answer = _texts()
    for n in range(turns - 1):
        turn_id = conversation.begin_turn(f"{n} {prompt}", at=at)
        conversation.append(Response(turn_id=turn_id, text=answer))
        conversation.settle(Outcome.COMPLETED, at=at)
    candidate = conversation.artifacts_for_save()
    await materialize_session(target, session_id)
    lease = await acquire_lease(target, session_id, WRITER)
    await Publisher(lease).publish(dict(candidate.artifacts))
    await lease.release()
    transcript = sum(len(data) for logical, data in candidate.artifacts.items() if logical.startswith("segment-"))
    return session_id, transcript


async def _open(root: str, session_id: str) -> SessionService:
    service = SessionService(LocalTarget(root), ME, renew_every=3600)
    await service.sessions.open(session_id, "resume")
    return service


async def _one_settle(service: SessionService, session_id: str, n: int) -> float:
    prompt, answer = _texts()
    await service.turns.begin_turn(session_id, f"{n} {prompt}")
    await service.turns.append(session_id, EvidenceInput("response", text=answer))
    start = time.perf_counter()
    await service.turns.settle(session_id)
    return time.perf_counter() - start


async def _floor(target: LocalTarget, n: int) -> float:
    program = ControlProgram([CreateExclusive(f"floor/{n:06d}", b"x" * 300)])
    start = time.perf_counter()
    await target.run(program)
    return time.perf_counter() - start


async def interleaved(root: str, short_id: str, long_id: str, samples: int) -> dict[str, list[float]]:
    """Floor, short and long samples taken in turn, so that load on the shared
    disk changes all three alike."""
    os.makedirs(os.path.join(root, "floor"), exist_ok=True)
    target = LocalTarget(root)
    short, long_ = await _open(root, short_id), await _open(root, long_id)
    for n in range(3):  # warm-up: the first settle after opening loads the committed manifest
        await _one_settle(short, short_id, n)
        await _one_settle(long_, long_id, n)
    times: dict[str, list[float]] = {"floor": [], "short": [], "long": []}
    for n in range(samples):
        times["floor"].append(await _floor(target, n))
        times["short"].append(await _one_settle(short, short_id, n))
        times["long"].append(await _one_settle(long_, long_id, n))
    await short.close(short_id)
    await long_.close(long_id)
    return times


class _CountedFsync:
    """Counts disk flushes (``os.fsync`` and the executor's ``syncfs``
    barriers), or skips them (``skip``) to show the cost left without
    durability."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self.calls = 0
        self.barriers = 0
        self._real = os.fsync
        self._real_syncfs = executor.sync_filesystem

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if not self.skip:
            self._real(fd)

    def _syncfs(self, fd: int) -> bool:
        self.calls += 1
        self.barriers += 1
        return True if self.skip else self._real_syncfs(fd)

    def __enter__(self) -> _CountedFsync:
        os.fsync = self
        executor.sync_filesystem = self._syncfs
        return self

    def __exit__(self, *exc: object) -> None:
        os.fsync = self._real
        executor.sync_filesystem = self._real_syncfs


def memory_child(root: str, session_id: str) -> None:
    """Runs in a child: open the session and report memory."""

    async def main() -> dict:
        service = SessionService(LocalTarget(root), ME, renew_every=3600)
        tracemalloc.start()
        opened = await service.sessions.open(session_id, "join")
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert opened.info.settled_turns > 0
        return {
            "turns": opened.info.settled_turns,
            "traced_peak_mb": round(peak / 2**20, 2),
            "retained_mb": round(current / 2**20, 2),
            "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }

    print(json.dumps(asyncio.run(main())))


def memory_of(root: str, session_id: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, os.path.join(here, "bench_store_settle.py"), "--memory-child", root, session_id],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


async def main() -> None:
    # The machine is shared: say how busy it was, since the disk's flushes
    # and creates slow down with everyone else's writes.
    load_at_start = os.getloadavg()[0]
    base = os.environ.get("MEVEDEL_BENCH_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="settle-", dir=base) as root:
        short_id, short_bytes = await build(root, SHORT_TURNS)
        long_id, long_bytes = await build(root, LONG_TURNS)
        short_memory = memory_of(root, short_id)
        long_memory = memory_of(root, long_id)
        times = await interleaved(root, short_id, long_id, SAMPLES)
        with _CountedFsync(skip=False) as one:
            service = await _open(root, short_id)
            before, barriers = one.calls, one.barriers
            await _one_settle(service, short_id, 10_000)
            fsyncs_per_settle = one.calls - before
            syncfs_per_settle = one.barriers - barriers
            await service.sessions.close(short_id)
        with _CountedFsync(skip=True):
            nodurable = await interleaved(root, short_id, long_id, SAMPLES)
    floor, short, long_ = (summarize(times[k]) for k in ("floor", "short", "long"))
    cpu_short, cpu_long = summarize(nodurable["short"]), summarize(nodurable["long"])

    def settle_row(case: str, turns: str, size: int, stats: dict, baseline: dict) -> dict:
        return {
            "case": case,
            "turns": turns,
            "transcript_kb": round(size / 1000, 1),
            **stats,
            "ratio_vs_floor": round(stats["median_ms"] / floor["median_ms"], 2),
            "ratio_vs_turn_10": round(stats["median_ms"] / baseline["median_ms"], 2),
        }

    short_turns = f"{SHORT_TURNS + 3}-{SHORT_TURNS + 2 + SAMPLES}"
    long_turns = f"{LONG_TURNS + 3}-{LONG_TURNS + 2 + SAMPLES}"
    rows = [
        {"case": "durable write floor (1 create, 2 fsyncs)", **floor, "ratio_vs_floor": 1.0},
        settle_row("settle at turn 10", short_turns, short_bytes, short, short),
        settle_row("settle at turn 6000", long_turns, long_bytes, long_, short),
        settle_row("settle at turn 10, fsync skipped", short_turns, short_bytes, cpu_short, cpu_short),
        settle_row("settle at turn 6000, fsync skipped", long_turns, long_bytes, cpu_long, cpu_short),
        {"case": "memory: open 10-turn session (join)", **short_memory},
        {
            "case": "memory: open 6000-turn session (join)",
            **long_memory,
            "ratio_vs_turn_10": round(long_memory["traced_peak_mb"] / max(short_memory["traced_peak_mb"], 0.01), 1),
        },
    ]
    ratio = long_["median_ms"] / short["median_ms"]
    notes = {
        "target": "settle median < 20 ms; turn-6000 median <= 1.5x turn-10",
        "settle_median_ok": long_["median_ms"] < 20 and short["median_ms"] < 20,
        "history_independent_ok": ratio <= 1.5,
        "flushes_per_settle": f"{fsyncs_per_settle} ({syncfs_per_settle} of them syncfs barriers, the rest fsyncs)",
        "samples": SAMPLES,
        "load_average_1m": f"{load_at_start:.2f} at start, {os.getloadavg()[0]:.2f} at end ({os.cpu_count()} cores)",
        "fsync skipped rows": "the same settles with os.fsync and the syncfs barrier stubbed out: the cost that is not the disk's",
    }
    report("store_settle", rows, notes)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--memory-child":
        memory_child(sys.argv[2], sys.argv[3])
    else:
        asyncio.run(main())
