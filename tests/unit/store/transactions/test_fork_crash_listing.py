"""A Fork killed at any write before its one publication leaves no session
behind: at every crash point, no listing shows a child without a committed
head (a 0-turn session to Resume or Join), and once the dead process's lease
on it lapses the next listing -- or cleanup -- removes its directory; a
child that did commit is a session like any other."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import msgspec
from test_txn_crash import _fork_act, _fork_prepare
from txn_sessions import ClientIdentity

from mevedel_server.store import LeaseRecord, decode_record, encode_record
from mevedel_server.store.service import SessionService
from mevedel_server.store.workspace_wide.cleanup import remove_expired_sessions
from mevedel_server.store.workspace_wide.listing import list_sessions
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

OTHER = ClientIdentity("another-client", "elsewhere")


def children(root: Path, source: str) -> set[str]:
    return {n for n in os.listdir(root / ".mevedel" / "sessions") if n != source}


def lapse_leases(root: Path, session_ids: set[str]) -> None:
    """Time passes: the crashed process's leases run out, and a directory
    it never claimed is older than the grace a creation in progress gets."""
    for session_id in session_ids:
        directory = root / ".mevedel" / "sessions" / session_id
        os.utime(directory, (1, 1))
        lease = directory / ".lease"
        names = [n for n in os.listdir(lease) if n.startswith("generation-")] if lease.exists() else []
        if not names:
            continue
        head = lease / max(names)
        record = decode_record(LeaseRecord, head.read_bytes(), "test")
        head.write_bytes(encode_record(msgspec.structs.replace(record, renewed_at=1, expires_at=2)))


async def _walk(tmp_path: Path, remove_with: str) -> Counter[str]:
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    target = FaultInjectingTarget(LocalTarget(baseline))
    s, token = await _fork_prepare(baseline, target)
    target.arm(None)
    await _fork_act(s, token)
    total = target.writes
    outcomes: Counter[str] = Counter()
    for point in range(1, total + 1):
        root = tmp_path / f"{remove_with}-{point}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root))
        s, token = await _fork_prepare(root, target)
        target.arm(point, "crash")
        try:
            await _fork_act(s, token)
        except SimulatedCrash:
            pass
        left = children(root, s.session_id)
        listing = await list_sessions(LocalTarget(root), OTHER)
        unpublished = [row.session_id for row in listing.rows if not row.published]
        assert unpublished == [], f"#{point}: listed without a head: {unpublished}"
        committed = {row.session_id for row in listing.rows} - {s.session_id}
        unfinished = {u.session_id for u in listing.unfinished}
        assert committed | unfinished == left, f"#{point}: {left} on disk, {committed} listed, {unfinished} unfinished"
        # While the dead process's lease lasts the remains stay (a live
        # lease may be a Fork still running); once it lapses they go.
        assert all(not u.removable for u in listing.unfinished), f"#{point}"
        lapse_leases(root, unfinished)
        if remove_with == "listing":
            rows = (await SessionService(LocalTarget(root), OTHER).sessions.list()).rows
        else:
            await remove_expired_sessions(LocalTarget(root), OTHER)
            rows = (await list_sessions(LocalTarget(root), OTHER)).rows
        assert children(root, s.session_id) == committed, f"#{point}: {children(root, s.session_id)} left, {committed} committed"
        assert {row.session_id for row in rows} == committed | {s.session_id}
        outcomes["removed" if unfinished else "committed" if committed else "nothing"] += 1
    print(f"\nfork crash walk ({remove_with}): {total} points, {dict(outcomes)}")
    return outcomes


async def test_a_fork_killed_before_its_publication_is_never_listed_and_the_next_listing_removes_it(tmp_path):
    outcomes = await _walk(tmp_path, "listing")
    assert outcomes["removed"] >= 3 and outcomes["committed"] >= 1


async def test_cleanup_removes_an_interrupted_forks_remains_whatever_their_age(tmp_path):
    outcomes = await _walk(tmp_path, "cleanup")
    assert outcomes["removed"] >= 3
