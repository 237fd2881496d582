"""Publication collection: retention by reference (head, settled-turn
representatives, newest 3, the files retained manifests name: other
directories are trimmed to those), bounded steps under a proven lease,
orphans, bad manifests, and a crash walk in which every retained generation
still verifies afterwards."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mevedel_server.store import (
    ClientIdentity,
    CommittedSnapshot,
    LeaseRecord,
    LeaseState,
    Publisher,
    SessionPaths,
    acquire_lease,
    encode_record,
    load_manifest,
    materialize_session,
    read_committed,
)
from mevedel_server.store.content.sidecar import (
    Layout,
    NamingState,
    PromptEntry,
    Sidecar,
    encode_index_line,
    encode_sidecar,
    prompt_page_path,
)
from mevedel_server.store.layout import publication_id_of
from mevedel_server.store.transactions.redo import redo_states
from mevedel_server.store.workspace_wide.collection import COLLECTING_MARKER, collect
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("collector", "workstation")
PATHS = SessionPaths(SID)
BIG = b"transcript line\n" * 500


def sidecar(turns: int, *, in_flight: bool = False, name: str | None = None, updated: int = 1_000) -> bytes:
    prompts = turns + int(in_flight)
    return encode_sidecar(
        Sidecar(
            session_id=SID,
            workspace_id="b" * 64,
            display_name=name,
            naming_state=NamingState.EXPLICIT if name else NamingState.PENDING,
            created_at=0,
            updated_at=updated,
            total_turn_count=turns,
            in_flight_turn=f"{turns + 1:016x}" if in_flight else None,
            layout=Layout(segment_parts=[1], prompt_pages=1 if prompts else 0, file_pages=0),
            first_user_message="prompt 1" if prompts else None,
            latest_user_message=f"prompt {prompts}" if prompts else None,
        )
    )


def prompts(*turn_ids: str, at: int = 0) -> dict[str, bytes]:
    """The prompt index naming ``turn_ids`` as turns 1, 2...: what tells
    two states of the same length apart."""
    lines = [
        encode_index_line(PromptEntry(turn=n, segment=1, turn_id=tid, preview=f"prompt {n}", at=at))
        for n, tid in enumerate(turn_ids, 1)
    ]
    return {prompt_page_path(1): b"".join(lines)}


def turns(count: int, in_flight: bool = False) -> dict[str, bytes]:
    # A mid-turn index is stamped apart, so no settled one reuses its bytes.
    return prompts(*(f"{n:016x}" for n in range(1, count + int(in_flight) + 1)), at=1 if in_flight else 0)


def pubs_dir(root: Path) -> Path:
    return root / ".mevedel" / "sessions" / SID / ".publications"


def generations(root: Path) -> set[str]:
    """Publication directories that still hold a manifest."""
    return {n for n in os.listdir(pubs_dir(root)) if (pubs_dir(root) / n / "manifest.json").exists()}


def publication_ids(root: Path) -> set[str]:
    """Publication directories; a leftover collection marker fails the test."""
    names = set(os.listdir(pubs_dir(root)))
    assert not any(n.startswith(COLLECTING_MARKER) for n in names), names
    return names


class Series:
    """Publications with distinct, increasing manifest times (the target
    clock has whole seconds; a real session's saves are seconds apart)."""

    def __init__(self, root: Path, publisher: Publisher) -> None:
        self.root = root
        self.publisher = publisher
        self.base = int(time.time()) - 100_000
        self.ids: list[str] = []
        self.heads: list[str] = []

    async def publish(self, artifacts: dict[str, bytes], **kw) -> str:
        outcome = await self.publisher.publish(artifacts, **kw)
        assert outcome.committed
        pid = publication_id_of(outcome.head)
        stamp = self.base + 10 * (len(self.ids) + 1)
        directory = pubs_dir(self.root) / pid
        os.utime(directory / "manifest.json", (stamp, stamp))
        os.utime(directory, (stamp, stamp))
        self.ids.append(pid)
        self.heads.append(outcome.head)
        return pid


async def verify_generation(target, head: str) -> dict[str, bytes]:
    """A fresh verified read of a generation's every byte."""
    manifest = await load_manifest(target, PATHS, head)
    return await CommittedSnapshot(target, PATHS, 0, head, manifest).read_all()


@pytest.fixture
async def session(tmp_path):
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    lease = await acquire_lease(target, SID, ME, duration_seconds=600)
    return target, lease, Series(tmp_path, Publisher(lease))


async def _history(series: Series) -> dict[str, str]:
    """p1: turn 1 with a big segment every later generation reuses;
    p2: turn 1 renamed; p3: turn 2 in flight with a draft; p4 (a replace
    snapshot dropping the draft), p5: turn 2 settled; p6: turn 3; p7: turn 3
    with turn 4 in flight; p8 (head): turn 4."""
    names = {}
    names["p1"] = await series.publish(
        {"session.json": sidecar(1), "segment-0001.chat.jsonl": BIG, "notes": b"p1 notes", **turns(1)}
    )
    names["p2"] = await series.publish({"session.json": sidecar(1, name="renamed")})
    names["p3"] = await series.publish({"session.json": sidecar(2, in_flight=True, name="renamed"), "draft": b"half", **turns(1, True)})
    names["p4"] = await series.publish(
        {"session.json": sidecar(2, name="renamed"), "segment-0001.chat.jsonl": BIG, "notes": b"p1 notes", **turns(2)}, replace=True
    )
    names["p5"] = await series.publish({"session.json": sidecar(2, name="again")})
    names["p6"] = await series.publish({"session.json": sidecar(3, name="again"), **turns(3)})
    names["p7"] = await series.publish({"session.json": sidecar(3, in_flight=True, name="again"), **turns(3, True)})
    names["p8"] = await series.publish({"session.json": sidecar(4, name="again"), **turns(4)})
    return names


async def test_collection_keeps_head_representatives_recent_and_referenced(tmp_path, session):
    target, lease, series = session
    p = await _history(series)
    report = await collect(lease)
    # p3 is a superseded mid-turn head. Everything else is retained.
    assert set(report.removed) == {p["p3"]} and report.remaining == 0
    assert publication_ids(tmp_path) == {p[k] for k in ("p1", "p2", "p4", "p5", "p6", "p7", "p8")}
    reasons = {k.publication_id: k.reasons for k in report.kept}
    assert "current head" in reasons[p["p8"]]
    assert "recent generation" in reasons[p["p7"]] and "recent generation" in reasons[p["p6"]]
    assert "representative of 2 settled turns (offered by Redo)" in reasons[p["p5"]]
    assert "representative of 1 settled turn (offered by Redo)" in reasons[p["p2"]]
    # p1 is no representative (p2 is the same state and newer), but every
    # later manifest names its segment bytes, so its directory keeps them
    # and loses the rest (its manifest first); p4 is the same state as the
    # newer p5, which names p4's prompt index.
    assert set(report.trimmed) == {p["p1"], p["p4"]}
    for key in ("p1", "p4"):
        assert reasons[p[key]][0].startswith("named by a retained manifest (trimmed to the")
    assert generations(tmp_path) == {p[k] for k in ("p2", "p5", "p6", "p7", "p8")}
    retained = [series.heads[series.ids.index(p[k])] for k in ("p2", "p5", "p6", "p7", "p8")]
    named = {entry.published.split("/")[2] for h in retained for entry in (await load_manifest(target, PATHS, h)).entries.values()
             if entry.published.split("/")[1] == p["p1"]}
    assert set(os.listdir(pubs_dir(tmp_path) / p["p1"])) == named
    head = await read_committed(target, SID)
    assert head.head == series.heads[-1]
    assert (await head.read_all())["segment-0001.chat.jsonl"] == BIG
    for index, pid in enumerate(series.ids):
        if pid in generations(tmp_path):
            await verify_generation(target, series.heads[index])
    # Nothing left to do: a second step removes nothing.
    again = await collect(lease)
    assert again.removed == () and again.remaining == 0 and again.removed_entries == 0


async def test_keep_recent_is_configurable(tmp_path, session):
    target, lease, series = session
    p = await _history(series)
    report = await collect(lease, keep_recent=0)
    # p7 (mid-turn, turn 3) is only kept as a recent generation.
    assert set(report.removed) == {p["p3"], p["p7"]}


async def test_bounded_steps_make_progress_and_never_break_a_retained_generation(tmp_path, session):
    target, lease, series = session
    await series.publish({"session.json": sidecar(0), "seg": BIG})
    # Five superseded generations of one turn count, one of them large.
    for n in range(5):
        extra = {f"file-{i}": f"{n}-{i}".encode() for i in range(6)} if n == 2 else {}
        # The generation after the large one drops its files again.
        index = prompts("1" * 16, at=n)  # each its own, so none pins another
        await series.publish({"session.json": sidecar(1, updated=1_000 + n), "seg": BIG, **extra, **index}, replace=(n == 3))
    for n in range(3):
        await series.publish({"session.json": sidecar(2, updated=2_000 + n), **prompts("1" * 16, "2" * 16, at=n)})
    expected_left = {series.ids[0], series.ids[5], series.ids[6], series.ids[7], series.ids[8]}
    steps = 0
    removed: set[str] = set()
    while True:
        report = await collect(lease, max_removals=2)
        steps += 1
        assert report.removed_entries <= 2 and report.stopped is None
        removed |= set(report.removed)
        # After every step the head and each retained generation verify.
        await (await read_committed(target, SID)).read_all()
        for index in (0, 5, 6, 7, 8):
            await verify_generation(target, series.heads[index])
        if report.remaining == 0:
            break
        assert steps < 40
    assert publication_ids(tmp_path) == expected_left
    assert removed == set(series.ids) - expected_left
    # 4 directories; the large one alone has 6 files + sidecar + manifest.
    assert steps >= 8


async def test_orphans_older_than_the_head_are_collected_newer_ones_kept(tmp_path, session):
    target, lease, series = session
    await series.publish({"session.json": sidecar(1)})
    await series.publish({"session.json": sidecar(2)})
    old, fresh = "1" * 32, "2" * 32
    for pid in (old, fresh):
        (pubs_dir(tmp_path) / pid).mkdir()
        (pubs_dir(tmp_path) / pid / "000001.data").write_bytes(b"half a publication")
    stamp = series.base  # older than every committed manifest
    os.utime(pubs_dir(tmp_path) / old, (stamp, stamp))
    report = await collect(lease)
    assert report.removed == (old,)
    assert fresh in publication_ids(tmp_path)
    reasons = {k.publication_id: k.reasons for k in report.kept}
    assert any("in flight" in r for r in reasons[fresh])


async def test_a_stale_lease_removes_nothing(tmp_path, session):
    target, lease, series = session
    await _history(series)
    # Another client's claim lands above our generation.
    newer = LeaseRecord(
        generation=lease.generation + 1,
        state=LeaseState.CLAIMING,
        client_id="someone-else",
        host="elsewhere",
        renewed_at=1,
        expires_at=2,
        publication_head=lease.publication_head,
        unsettled_mutation=False,
        transfer_generation=0,
    )
    lease_dir = tmp_path / ".mevedel" / "sessions" / SID / ".lease"
    (lease_dir / f"generation-{lease.generation + 1:020d}.json").write_bytes(encode_record(newer))
    before = {pid: sorted(os.listdir(pubs_dir(tmp_path) / pid)) for pid in publication_ids(tmp_path)}
    report = await collect(lease)
    assert report.removed == () and report.removed_entries == 0
    assert report.stopped is not None and "lease moved" in report.stopped
    assert {pid: sorted(os.listdir(pubs_dir(tmp_path) / pid)) for pid in publication_ids(tmp_path)} == before


async def test_an_unreadable_old_manifest_is_kept_and_a_recent_one_blocks(tmp_path, session):
    target, lease, series = session
    p = await _history(series)
    bad = pubs_dir(tmp_path) / p["p4"] / "manifest.json"
    stamp = os.stat(bad).st_mtime
    bad.write_bytes(b'{"format_version": 1, "publication_id": ')
    os.utime(bad, (stamp, stamp))
    report = await collect(lease)
    assert set(report.removed) == {p["p3"]}
    reasons = {k.publication_id: k.reasons for k in report.kept}
    assert any("unreadable manifest" in r and "truncated" in r for r in reasons[p["p4"]])
    assert bad.exists()

    recent = pubs_dir(tmp_path) / p["p7"] / "manifest.json"
    stamp = os.stat(recent).st_mtime
    recent.write_bytes(b"not json")
    os.utime(recent, (stamp, stamp))
    before = publication_ids(tmp_path)
    blocked = await collect(lease)
    assert blocked.blocked is not None and "recent manifest is unreadable" in blocked.blocked
    assert blocked.removed == () and publication_ids(tmp_path) == before


async def test_a_generation_whose_turn_count_is_unknown_is_kept(tmp_path, session):
    target, lease, series = session
    p = await _history(series)
    # p4's sidecar is its own file; make its bytes disagree with the manifest.
    manifest = await load_manifest(target, PATHS, series.heads[3])
    (tmp_path / ".mevedel" / "sessions" / SID / manifest.entries["session.json"].published).write_bytes(b"{}")
    report = await collect(lease)
    assert set(report.removed) == {p["p3"]}
    reasons = {k.publication_id: k.reasons for k in report.kept}
    assert any("turn state unknown" in r for r in reasons[p["p4"]])


async def test_nothing_is_collected_before_the_first_commit(tmp_path, session):
    target, lease, series = session
    (pubs_dir(tmp_path) / ("3" * 32)).mkdir()
    report = await collect(lease)
    assert report.removed == () and publication_ids(tmp_path) == {"3" * 32}


async def test_a_released_lease_cannot_collect(tmp_path, session):
    target, lease, series = session
    await series.publish({"session.json": sidecar(1)})
    await lease.release()
    from mevedel_server.store import LeaseLost

    with pytest.raises(LeaseLost):
        await collect(lease)


async def test_a_crash_at_every_write_of_a_step_leaves_every_retained_generation_whole(tmp_path):
    points = 0
    while True:
        points += 1
        root = tmp_path / f"run-{points}"
        root.mkdir()
        base = LocalTarget(root)
        await materialize_session(base, SID)
        faulty = FaultInjectingTarget(base)
        lease = await acquire_lease(faulty, SID, ME, duration_seconds=600)
        series = Series(root, Publisher(lease))
        p = await _history(series)
        faulty.arm(points, "crash")
        try:
            report = await collect(lease, max_removals=100)
        except SimulatedCrash:
            crashed = True
        else:
            crashed = False
            assert not faulty.fired and set(report.removed) == {p["p3"]}
        # A new process: the head and every retained generation verify, and
        # collection resumes to the same end state.
        fresh = LocalTarget(root)
        await (await read_committed(fresh, SID)).read_all()
        for key in ("p2", "p5", "p6", "p7", "p8"):
            await verify_generation(fresh, series.heads[series.ids.index(p[key])])
        # A generation whose manifest survived is whole (its manifest is
        # retired before any of its payloads goes).
        for pid in generations(root):
            await verify_generation(fresh, series.heads[series.ids.index(pid)])
        if not crashed:
            break
        again = await acquire_lease(fresh, SID, ME, duration_seconds=600)
        while (await collect(again)).remaining:
            pass
        assert publication_ids(root) == {p[k] for k in ("p1", "p2", "p4", "p5", "p6", "p7", "p8")}
        assert generations(root) == {p[k] for k in ("p2", "p5", "p6", "p7", "p8")}
    print(f"collection crash points walked: {points - 1}")
    assert points - 1 >= 7  # marker, manifest, three files, directory, marker


async def test_collection_keeps_exactly_the_states_redo_offers(tmp_path, session):
    """Two branches of the same length (a rewind, then another turn 2) are
    two Redo states; collection keeps both, and nothing Redo would not list
    beyond the head and what retained manifests name."""
    target, lease, series = session
    q1 = await series.publish({"session.json": sidecar(1, updated=1), **prompts("a" * 16)})
    q2 = await series.publish({"session.json": sidecar(2, updated=2), **prompts("a" * 16, "b" * 16)})
    q3 = await series.publish({"session.json": sidecar(1, updated=3), **prompts("a" * 16)}, replace=True)  # rewound to 1
    q4 = await series.publish({"session.json": sidecar(2, updated=4), **prompts("a" * 16, "c" * 16)})
    q5 = await series.publish({"session.json": sidecar(3, updated=5), **prompts("a" * 16, "c" * 16, "d" * 16)})
    offered = {state.publication_id for state in (await redo_states(target, SID)).states}
    assert offered == {q2, q3, q4}  # q1 is the same state as the newer q3
    report = await collect(lease, keep_recent=0)
    reasons = {k.publication_id: k.reasons for k in report.kept}
    representatives = {pid for pid, why in reasons.items() if any("offered by Redo" in r for r in why)}
    assert representatives == offered
    assert "current head" in reasons[q5]
    # q1's prompt index bytes are q3's (the same page), so q1's directory is
    # only kept as named by a retained manifest.
    assert set(report.removed) | set(reasons) == {q1, q2, q3, q4, q5}
    assert q1 not in representatives
    assert {s.publication_id for s in (await redo_states(target, SID)).states} == offered


async def test_a_settled_turn_survives_collection_while_the_next_turn_is_in_flight(tmp_path, session):
    """Collection runs after every mid-turn checkpoint: the settled state
    the head continues from must stay, since Redo offers it once the turn
    settles and no other generation holds it settled."""
    target, lease, series = session
    settled = await series.publish({"session.json": sidecar(1), **turns(1)})
    await series.publish({"session.json": sidecar(1, in_flight=True), **turns(1, True)})
    await series.publish({"session.json": sidecar(1, in_flight=True, updated=1_001), **turns(1, True)})
    report = await collect(lease, keep_recent=0)
    reasons = {k.publication_id: k.reasons for k in report.kept}
    assert any("representative of 1 settled turn" in r for r in reasons[settled])
    await series.publish({"session.json": sidecar(2), **turns(2)})
    await collect(lease, keep_recent=0)
    assert [s.publication_id for s in (await redo_states(target, SID)).states] == [settled]
