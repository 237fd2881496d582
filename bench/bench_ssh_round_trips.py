"""Round trips and latency of the durable-session store over SshTarget on
loopback SSH.

Counts remote processes (one per control program, so one per round trip)
per lease renewal (target: 1), per publication of a settled turn (target:
at most 2), per turn settlement through ``SessionService`` (the same
publication, as the LSP server makes it; its median is the settle latency,
target under 50 ms on loopback), per listing of N sessions (target at most
2 + N/32, for N = 1, 32 and 100) and per claim of a released session (an
observation and the claim: 2), and times them against two baselines
measured in the same run on the same connection: a plain ``true`` command
(the SSH channel and shell alone) and a one-operation control program in a
process started for it (``spares=0``: the remote interpreter's start and
the framing). Cost over ``true`` is the ratio to watch across machines.

The target keeps warm processes (``SshTarget``'s ``spares``), which a
program finds ready only if the previous ones' replacements had time to
start. Operations are therefore spaced ``--pace`` seconds apart (default
0.1 s, far less than between two real turns or renewals), and the
settlement is measured a second time back to back (``--pace`` 0), the
worst case; ``warm_served`` says how many programs found a warm process.

Runs a throwaway OpenSSH server on 127.0.0.1 (like the tests; its sessions
start with an empty ``HOME``, so no rc file of the user runs per command),
or uses ``--url ssh://...`` with the user's own SSH configuration (then the
``true`` baseline includes whatever the remote shell's rc files cost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from harness import report, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_store_listing import sidecar  # noqa: E402
from mevedel_server.store import (  # noqa: E402
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
)
from mevedel_server.store.service import EvidenceInput, SessionService  # noqa: E402
from mevedel_server.targets import ControlProgram, LocalTarget, Stat  # noqa: E402
from mevedel_server.targets.ssh import SshTarget  # noqa: E402

LISTING_SIZES = (1, 32, 100)

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("bench-client", "bench-host")


async def timed(samples: list[float], factory):
    start = time.perf_counter()
    result = await factory()
    samples.append(time.perf_counter() - start)
    return result


async def measure(target: SshTarget, cold: SshTarget, rounds: int, pace: float) -> tuple[list[dict], dict]:
    conn = await target._connection()  # the target's own connection: same channel costs
    true_s: list[float] = []
    cold_s: list[float] = []
    stat_s: list[float] = []
    renew_s: list[float] = []
    publish_s: list[float] = []
    renew_trips: list[int] = []
    publish_trips: list[int] = []
    claim_s: list[float] = []
    claim_trips: list[int] = []

    await materialize_session(target, SID)
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    transcript = b""
    await publisher.publish({"session.meta.json": b'{"turns": 0}', "segment-0001.chat.jsonl": transcript})
    warm_before, trips_before = target.warm_served, target.round_trips
    for turn in range(1, rounds + 1):
        await timed(true_s, lambda: conn.run("true", check=True))
        await timed(cold_s, lambda: cold.run(ControlProgram([Stat(".")])))
        await asyncio.sleep(pace)
        await timed(stat_s, lambda: target.run(ControlProgram([Stat(".")])))

        await asyncio.sleep(pace)
        before = target.round_trips
        await timed(renew_s, lease.renew)
        renew_trips.append(target.round_trips - before)

        # A settled turn: the transcript grows, the meta record changes.
        transcript += b'{"kind": "response", "turn": %d, "text": "%s"}\n' % (turn, b"x" * 400)
        artifacts = {"session.meta.json": b'{"turns": %d}' % turn, "segment-0001.chat.jsonl": transcript}
        await asyncio.sleep(pace)
        before = target.round_trips
        outcome = await timed(publish_s, lambda: publisher.publish(artifacts))
        assert outcome.committed
        publish_trips.append(target.round_trips - before)

    # Claims of a released session: the observation and the claim program.
    for _ in range(max(1, rounds // 4)):
        await lease.release()
        await asyncio.sleep(pace)
        before = target.round_trips
        lease = await timed(claim_s, lambda: acquire_lease(target, SID, ME))
        claim_trips.append(target.round_trips - before)

    true_median = statistics.median(true_s)
    rows = [
        {"case": "ssh `true` command (baseline)", "round_trips": 1, **summarize(true_s), "x_true": 1.0},
        {
            "case": "one-operation program, process started for it (baseline)",
            "round_trips": 1,
            **summarize(cold_s),
            "x_true": round(statistics.median(cold_s) / true_median, 2),
        },
        {
            "case": "one-operation program",
            "round_trips": 1,
            **summarize(stat_s),
            "x_true": round(statistics.median(stat_s) / true_median, 2),
        },
        {
            "case": "lease renewal",
            "round_trips": max(renew_trips),
            **summarize(renew_s),
            "x_true": round(statistics.median(renew_s) / true_median, 2),
        },
        {
            "case": "turn publication",
            "round_trips": max(publish_trips),
            **summarize(publish_s),
            "x_true": round(statistics.median(publish_s) / true_median, 2),
        },
        {
            "case": "claim of a released session",
            "round_trips": max(claim_trips),
            **summarize(claim_s),
            "x_true": round(statistics.median(claim_s) / true_median, 2),
        },
    ]
    notes = {
        "rounds": rounds,
        "round_trips_per_renewal": f"{min(renew_trips)}..{max(renew_trips)} (target 1)",
        "round_trips_per_publication": f"{min(publish_trips)}..{max(publish_trips)} (target at most 2)",
        "round_trips_per_claim": f"{min(claim_trips)}..{max(claim_trips)} (observation + claim: 2)",
        "publication_median_ms": f"{statistics.median(publish_s) * 1000:.1f}",
        # The `true` baseline carries the remote login shell's start-up (its
        # rc files run for every SSH command); this part is ours alone.
        "publication_over_true_ms": f"{(statistics.median(publish_s) - true_median) * 1000:.1f}",
        "program_over_true_ms": f"{(statistics.median(stat_s) - true_median) * 1000:.1f}",
        "connections": target.connections,
        "warm_served": f"{target.warm_served - warm_before} of {target.round_trips - trips_before} programs",
    }
    return rows, notes


async def measure_settle(target: SshTarget, rounds: int, true_median: float, pace: float) -> tuple[dict, dict]:
    """Turn settlements as the server makes them: begin, append, settle,
    ``pace`` seconds after the turn began (0: back to back)."""
    # A lease far longer than the run: no background renewal is counted.
    service = SessionService(target, ME, lease_seconds=3600)
    sid = (await service.sessions.create("bench settle")).session_id
    settle_s: list[float] = []
    trips: list[int] = []
    warm_before, trips_before = target.warm_served, target.round_trips
    try:
        for turn in range(rounds):
            await service.turns.begin_turn(sid, f"prompt {turn}")
            await service.turns.append(sid, EvidenceInput("response", text="y" * 400))
            await asyncio.sleep(pace)
            before = target.round_trips
            result = await timed(settle_s, lambda: service.turns.settle(sid))
            assert result.committed
            trips.append(target.round_trips - before)
    finally:
        await service.sessions.close_all()
    label = f"{pace:g} s after the turn began" if pace else "back to back"
    row = {
        "case": f"turn settlement (SessionService.settle), {label}",
        "round_trips": max(trips[1:] or trips),
        **summarize(settle_s[1:] or settle_s),
        "x_true": round(statistics.median(settle_s[1:] or settle_s) / true_median, 2),
    }
    suffix = "" if pace else "_back_to_back"
    notes = {
        f"round_trips_per_settlement{suffix}": f"{min(trips[1:] or trips)}..{max(trips[1:] or trips)} (target at most 2; "
        f"the first settlement, which also materialises the session, took {trips[0]})",
        f"settle_median_ms{suffix}": f"{statistics.median(settle_s[1:] or settle_s) * 1000:.1f} (target under 50 ms on loopback)",
        f"settle_warm_served{suffix}": f"{target.warm_served - warm_before} of {target.round_trips - trips_before} programs",
    }
    return row, notes


async def build_sessions(root: Path, count: int, start: int) -> None:
    """``count`` published, released sessions, written locally (setup only)."""
    local = LocalTarget(root)
    for n in range(start, start + count):
        session_id = f"2026-07-19T10-00-{n:012x}"
        await materialize_session(local, session_id)
        lease = await acquire_lease(local, session_id, ME)
        await Publisher(lease).publish(
            {"session.json": sidecar(session_id, n), "segment-0001.chat.jsonl": b'{"kind":"prompt"}\n' * 4}
        )
        await lease.release()


async def measure_listing(target: SshTarget, root: Path, true_median: float) -> tuple[list[dict], dict]:
    service = SessionService(target, ClientIdentity("bench-lister", "bench-host"))
    rows: list[dict] = []
    notes: dict = {}
    built = 0
    for size in LISTING_SIZES:
        await build_sessions(root, size - built, built)
        built = size
        samples: list[float] = []
        trips: list[int] = []
        for _ in range(5):
            before = target.round_trips
            listing = await timed(samples, service.sessions.list)
            trips.append(target.round_trips - before)
            assert len(listing.rows) == size, (len(listing.rows), size)
        budget = 2 + size / 32
        rows.append(
            {
                "case": f"listing of {size} sessions",
                "round_trips": max(trips),
                **summarize(samples),
                "x_true": round(statistics.median(samples) / true_median, 2),
            }
        )
        notes[f"round_trips_per_listing_{size}"] = f"{min(trips)}..{max(trips)} (target at most {budget:g})"
    return rows, notes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="ssh://[user@]host[:port]/empty-directory to use instead of a throwaway sshd")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pace", type=float, default=0.1, help="seconds between measured operations (default 0.1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as scratch:
        listing_root = None
        scratch_dir = Path(scratch)
        if args.url:
            server_cm = nullcontext(None)
        else:
            from ssh_fixtures import sshd_missing, throwaway_sshd

            missing = sshd_missing()
            if missing:
                raise SystemExit(f"cannot run: {missing}")
            (scratch_dir / "sshd").mkdir()
            server_cm = throwaway_sshd(scratch_dir / "sshd")
        with server_cm as server:
            if server is None:
                url, options = args.url, {}
            else:
                workspace = scratch_dir / "workspace"
                workspace.mkdir()
                url, options = server.url(workspace), server.options()
                listing_root = scratch_dir / "listing"
                listing_root.mkdir()
            target = await SshTarget.connect(url, **options)
            cold = await SshTarget.connect(url, **options, spares=0)
            async with target, cold:
                rows, notes = await measure(target, cold, args.rounds, args.pace)
                true_median = rows[0]["median_ms"] / 1000
                for pace in (args.pace, 0.0) if args.pace else (0.0,):
                    settle_row, settle_notes = await measure_settle(target, args.rounds, true_median, pace)
                    rows.append(settle_row)
                    notes.update(settle_notes)
            if listing_root is not None:  # sessions are built locally, so only beside a loopback sshd
                async with await SshTarget.connect(server.url(listing_root), **server.options()) as lister:
                    listing_rows, listing_notes = await measure_listing(lister, listing_root, true_median)
                rows.extend(listing_rows)
                notes.update(listing_notes)
    # Two shared cores: the load says how far absolute times are from a quiet machine's.
    notes["load_average_1_5_15"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report("ssh_round_trips", rows, notes)


if __name__ == "__main__":
    asyncio.run(main())
