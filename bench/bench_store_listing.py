"""Listing 500 sessions (target: under 300 ms).

Builds a workspace of 500 published, released sessions through the real
store (materialize, claim, publish a sidecar and a segment, release), then
times :func:`list_sessions` through ``LocalTarget``.

Baseline, measured in the same run over the same workspace: ``os.scandir``
of ``.mevedel/sessions`` and, per session, a listing of ``.lease/`` and a
plain Python read of the same three files (head lease generation, manifest,
sidecar), finding each next path with ``json.loads`` -- the I/O the listing
needs with none of its validation, descriptor pinning, digest checks or
clock readings.

Each side is timed by the wall clock and by process CPU time (the local
target's worker thread included): on a loaded machine the wall mostly
measures the wait for a core.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

from harness import CountingTarget, report, summarize
from mevedel_server.store import (
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
)
from mevedel_server.store.content.sidecar import (
    Layout,
    NamingState,
    Sidecar,
    encode_sidecar,
)
from mevedel_server.store.workspace_wide.listing import BATCH, list_sessions
from mevedel_server.targets import LocalTarget

SESSIONS = int(os.environ.get("MEVEDEL_BENCH_SESSIONS", "500"))
RUNS = 15
ME = ClientIdentity("bench-client", "bench-host")
OTHER = ClientIdentity("other-client", "other-host")


def sidecar(session_id: str, n: int) -> bytes:
    turns = n % 7
    return encode_sidecar(
        Sidecar(
            session_id=session_id,
            workspace_id="d" * 64,
            display_name=f"Session number {n}" if n % 3 else None,
            naming_state=NamingState.EXPLICIT if n % 3 else NamingState.PENDING,
            created_at=1_000,
            updated_at=1_000 + n,
            total_turn_count=turns,
            layout=Layout(segment_parts=[1], prompt_pages=1 if turns else 0, file_pages=0),
            first_user_message="Please look at the parser" if turns else None,
            latest_user_message=f"And now turn {turns}" if turns else None,
        )
    )


async def build(root: str) -> None:
    target = LocalTarget(root)
    for n in range(SESSIONS):
        session_id = f"2026-07-19T09-47-{n:012x}"
        await materialize_session(target, session_id)
        lease = await acquire_lease(target, session_id, OTHER if n % 5 == 0 else ME)
        await Publisher(lease).publish(
            {"session.json": sidecar(session_id, n), "segment-0001.chat.jsonl": b'{"kind":"prompt"}\n' * 20}
        )
        if n % 5:
            await lease.release()  # every fifth stays held by another client


def baseline(root: str) -> int:
    sessions = os.path.join(root, ".mevedel", "sessions")
    count = 0
    with os.scandir(sessions) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            session = entry.path
            lease_dir = os.path.join(session, ".lease")
            head = max(n for n in os.listdir(lease_dir) if n.startswith("generation-"))
            with open(os.path.join(lease_dir, head), "rb") as f:
                record = json.loads(f.read())
            with open(os.path.join(session, record["publication_head"]), "rb") as f:
                manifest = json.loads(f.read())
            with open(os.path.join(session, manifest["entries"]["session.json"]["published"]), "rb") as f:
                f.read()
            count += 1
    return count




async def measure(root: str) -> None:
    target = LocalTarget(root)
    listing = await list_sessions(target, ME)  # warm-up, and check the result
    if len(listing.rows) != SESSIONS or listing.inspect_rows:
        sys.exit(f"expected {SESSIONS} rows and no Inspect rows, got {len(listing.rows)} and {len(listing.inspect_rows)}")
    if baseline(root) != SESSIONS:
        sys.exit("the baseline did not see every session")
    counting = CountingTarget(target)
    await list_sessions(counting, ME)

    ours: list[float] = []
    base: list[float] = []
    ours_cpu: list[float] = []
    base_cpu: list[float] = []
    for _ in range(RUNS):  # interleaved, so drift affects both sides alike
        start, cpu = time.perf_counter(), time.process_time()
        baseline(root)
        base.append(time.perf_counter() - start)
        base_cpu.append(time.process_time() - cpu)
        start, cpu = time.perf_counter(), time.process_time()
        await list_sessions(target, ME)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - cpu)
    o, b = summarize(ours), summarize(base)
    o_cpu, b_cpu = summarize(ours_cpu), summarize(base_cpu)
    report(
        "store_listing",
        [
            {"what": f"scandir + 3 plain reads per session (baseline), {SESSIONS} sessions", **b, "cpu_median_ms": b_cpu["median_ms"]},
            {"what": f"list_sessions via LocalTarget, {SESSIONS} sessions", **o, "cpu_median_ms": o_cpu["median_ms"]},
        ],
        {
            "sessions": SESSIONS,
            "ratio_median": round(o["median_ms"] / b["median_ms"], 2),
            "cpu_ratio_median": round(o_cpu["median_ms"] / b_cpu["median_ms"], 2),
            "load_average_1_5_15": " ".join(f"{n:.2f}" for n in os.getloadavg()),
            "target": "list 500 sessions in under 300 ms",
            "met": o["median_ms"] < 300.0,
            "programs_per_listing": counting.programs,
            "operations_per_listing": counting.operations,
            "batch": BATCH,
            "per_session_us": round(o["median_ms"] * 1000 / SESSIONS, 1),
        },
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mevedel-bench-listing-") as root:
        started = time.perf_counter()
        asyncio.run(build(root))
        print(f"built {SESSIONS} sessions in {time.perf_counter() - started:.1f} s")
        asyncio.run(measure(root))


if __name__ == "__main__":
    main()
