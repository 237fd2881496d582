"""Packed generations: collection moves the generations Redo offers beyond
the recent window into the session's pack; the same states stay offered,
read byte for byte as before, Redo restores one with its files, a session
written before packing reads unchanged and is packed later, a crash at any
write of a packing step loses nothing, and the same holds over SSH."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from txn_sessions import ME, committed_view, open_session, snapshot_files, write

from mevedel_server.store import acquire_lease, load_manifest, read_committed
from mevedel_server.store.authority.packed import is_volume_name, read_pack
from mevedel_server.store.authority.publication import CommittedSnapshot
from mevedel_server.store.layout import SessionPaths
from mevedel_server.store.transactions.fork import commit_fork, prepare_fork
from mevedel_server.store.transactions.redo import (
    commit_redo,
    prepare_redo,
    redo_states,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.save_as import commit_save_as, prepare_save_as
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.store.workspace_wide.collection import collect
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

TURNS = 14
KEEP = 2  # the head and the newest settled state before it
BATCH = 4


class Stamps:
    """Distinct, increasing manifest times (the target clock has whole
    seconds; real turns are seconds apart and collection keeps every
    generation tied with its recent window)."""

    def __init__(self) -> None:
        self.next = int(time.time()) - 100_000
        self.seen: set[str] = set()

    def __call__(self, root: Path, session_id: str) -> None:
        publications = root / ".mevedel" / "sessions" / session_id / ".publications"
        for directory in sorted(publications.iterdir()):
            if directory.name in self.seen or not (directory / "manifest.json").exists():
                continue
            self.seen.add(directory.name)
            self.next += 10
            os.utime(directory / "manifest.json", (self.next, self.next))
            os.utime(directory, (self.next, self.next))


async def long_session(root: Path, target=None):
    write(root, "a.txt", b"a0\n")
    s = await open_session(root, target=target)
    stamp = Stamps()
    for n in range(1, TURNS + 1):
        await s.turn(f"turn {n}: " + "please change it " * 20, {"a.txt": f"a{n}\n".encode()})
        stamp(root, s.session_id)
    return s


def publications(root: Path, session_id: str) -> Path:
    return root / ".mevedel" / "sessions" / session_id / ".publications"


def volumes(root: Path, session_id: str) -> list[str]:
    return sorted(n for n in os.listdir(publications(root, session_id)) if is_volume_name(n))


def loose_generations(root: Path, session_id: str) -> set[str]:
    pubs = publications(root, session_id)
    return {n for n in os.listdir(pubs) if (pubs / n / "manifest.json").exists()}


async def collect_all(lease, **kwargs) -> list:
    reports = []
    while True:
        report = await collect(lease, keep_recent=KEEP, max_removals=200, **kwargs)
        reports.append(report)
        assert report.blocked is None and report.stopped is None, report
        if not report.remaining:
            return reports


async def states_and_bytes(target, session_id: str) -> tuple[list[tuple[str, str]], dict[str, dict[str, bytes]]]:
    """What Redo offers (id, label; newest first) and every byte of each."""
    states = await redo_states(target, session_id)
    assert states.skipped == ()
    paths = SessionPaths(session_id)
    contents = {}
    for state in states.states:
        manifest = await load_manifest(target, paths, state.head)
        contents[state.publication_id] = await CommittedSnapshot(target, paths, 0, state.head, manifest).read_all()
    return [(st.publication_id, st.label) for st in states.states], contents


async def test_packing_keeps_every_redo_state_byte_for_byte(tmp_path):
    s = await long_session(tmp_path)
    # The layout written before packing: collection without it.
    await collect_all(s.lease, pack_batch=None)
    assert volumes(tmp_path, s.session_id) == []
    before_states, before_bytes = await states_and_bytes(s.target, s.session_id)
    assert len(before_states) == TURNS - 1
    loose_before = loose_generations(tmp_path, s.session_id)

    reports = await collect_all(s.lease, pack_batch=BATCH)
    packed = {pid for report in reports for pid in report.packed}
    # Every state but the recent window's went into the pack, and its
    # directory is gone.
    assert len(packed) == TURNS - KEEP
    assert len(volumes(tmp_path, s.session_id)) == 1  # the small volumes were folded
    assert loose_generations(tmp_path, s.session_id) == loose_before - packed
    # What is left of a packed directory is what the loose generations name.
    pubs = publications(tmp_path, s.session_id)
    named = set()
    for pid in loose_generations(tmp_path, s.session_id):
        manifest = await load_manifest(s.target, SessionPaths(s.session_id), f".publications/{pid}/manifest.json")
        named |= {e.published for e in manifest.entries.values()}
    for pid in packed & set(os.listdir(pubs)):
        assert {f".publications/{pid}/{n}" for n in os.listdir(pubs / pid)} <= named

    # A fresh reader sees the same states, in the same order, with the same bytes.
    fresh = LocalTarget(tmp_path)
    after_states, after_bytes = await states_and_bytes(fresh, s.session_id)
    assert after_states == before_states
    assert after_bytes == before_bytes
    # Collection again changes nothing.
    report = await collect(s.lease, keep_recent=KEEP, pack_batch=BATCH)
    assert report.remaining == 0 and report.packed == () and report.removed == ()


async def test_redo_to_a_packed_generation_restores_its_turns_and_files(tmp_path):
    s = await long_session(tmp_path)
    await collect_all(s.lease, pack_batch=BATCH)
    states = (await redo_states(s.target, s.session_id)).states
    third = next(st for st in states if st.turn_count == 3)
    # Packed: no loose manifest, and its own sidecar only in the pack.
    assert not (publications(tmp_path, s.session_id) / third.publication_id / "manifest.json").exists()
    manifest = await load_manifest(s.target, SessionPaths(s.session_id), third.head)
    sidecar = manifest.entries["session.json"].published
    assert not (tmp_path / ".mevedel" / "sessions" / s.session_id / sidecar).exists()

    impact = await prepare_redo(s.target, s.session_id, third.publication_id)
    assert impact.common_turns == 3 and len(impact.discarded) == TURNS - 3
    result = await commit_redo(s.publisher, impact.token)
    s.adopt(result.conversation)
    view = await committed_view(tmp_path, s.session_id)
    assert view is not None and view[0] == 3
    assert view[1][-1].startswith("turn 3:")
    assert snapshot_files(tmp_path, ["a.txt"]) == {"a.txt": b"a3\n"}

    # And back: the 14-turn state is offered (loose or packed alike).
    Stamps()(tmp_path, s.session_id)
    await collect_all(s.lease, pack_batch=BATCH)
    back = next(st for st in (await redo_states(s.target, s.session_id)).states if st.turn_count == TURNS)
    impact = await prepare_redo(s.target, s.session_id, back.publication_id)
    s.adopt((await commit_redo(s.publisher, impact.token)).conversation)
    assert (await committed_view(tmp_path, s.session_id))[0] == TURNS
    assert snapshot_files(tmp_path, ["a.txt"]) == {"a.txt": f"a{TURNS}\n".encode()}


async def test_a_packed_generation_redo_no_longer_offers_leaves_the_pack_when_its_volume_is_folded(tmp_path):
    s = await long_session(tmp_path)
    stamp = Stamps()
    stamp.next += 10_000
    await collect_all(s.lease, pack_batch=BATCH)
    third = next(st for st in (await redo_states(s.target, s.session_id)).states if st.turn_count == 3)
    impact = await prepare_redo(s.target, s.session_id, third.publication_id)
    s.adopt((await commit_redo(s.publisher, impact.token)).conversation)
    stamp(tmp_path, s.session_id)
    # New turns after turn 3: the state "3 turns, ending with turn 3" is now
    # held by the Redo's own head, newer than the packed generation.
    for n in range(4, 4 + BATCH + KEEP):
        await s.turn(f"again {n}", {"a.txt": f"b{n}\n".encode()})
        stamp(tmp_path, s.session_id)
    expected = await states_and_bytes(s.target, s.session_id)
    assert third.publication_id not in {pid for pid, _ in expected[0]}
    reports = await collect_all(s.lease, pack_batch=BATCH)
    assert any(r.packed for r in reports)
    assert len(volumes(tmp_path, s.session_id)) == 1
    pack_after = await read_pack(LocalTarget(tmp_path), SessionPaths(s.session_id))
    assert third.publication_id not in pack_after.generations
    got = await states_and_bytes(LocalTarget(tmp_path), s.session_id)
    assert got[0] == expected[0], (got[0], expected[0])
    assert got == expected


async def test_fork_save_as_and_rewind_of_a_packed_session(tmp_path):
    s = await long_session(tmp_path)
    await collect_all(s.lease, pack_batch=BATCH)
    assert volumes(tmp_path, s.session_id)

    impact = await prepare_fork(s.target, s.session_id, 5)
    child = (await commit_fork(s.target, impact.token, ME)).child.session_id
    view = await committed_view(tmp_path, child)
    assert view is not None and view[0] == 5

    impact = await prepare_save_as(s.target, s.session_id, "Copy")
    copy = (await commit_save_as(s.target, impact.token, ME)).session_id
    assert (await committed_view(tmp_path, copy))[0] == TURNS

    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(2))
    s.adopt((await commit_rewind(s.publisher, impact.token)).conversation)
    assert (await committed_view(tmp_path, s.session_id))[0] == 2
    assert snapshot_files(tmp_path, ["a.txt"]) == {"a.txt": b"a2\n"}
    # The state Rewind moved away from is offered, as are the packed ones.
    offered = {st.turn_count for st in (await redo_states(s.target, s.session_id)).states}
    assert offered == set(range(1, TURNS + 1)) - {2}


async def test_an_altered_volume_is_reported_and_nothing_is_removed(tmp_path):
    s = await long_session(tmp_path)
    await collect_all(s.lease, pack_batch=BATCH)
    (name,) = volumes(tmp_path, s.session_id)
    path = publications(tmp_path, s.session_id) / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    listing = set(os.listdir(publications(tmp_path, s.session_id)))
    report = await collect(s.lease, keep_recent=KEEP, pack_batch=BATCH)
    assert report.removed == () and report.packed == ()
    (kept,) = [k for k in report.kept if k.publication_id == name]
    assert "does not match its own SHA-256" in kept.reasons[0]
    assert set(os.listdir(publications(tmp_path, s.session_id))) == listing
    # Redo names the volume it cannot read and still offers the loose states.
    states = await redo_states(LocalTarget(tmp_path), s.session_id)
    assert [(k.publication_id, "does not match its own SHA-256" in k.reason) for k in states.skipped] == [(name, True)]
    assert [st.turn_count for st in states.states] == [TURNS - 1]
    # The head still reads: it never lives in the pack.
    await (await read_committed(LocalTarget(tmp_path), s.session_id)).read_all()


@pytest.mark.parametrize("power_loss", [False, True], ids=["crash", "power-loss"])
async def test_a_crash_at_any_write_of_packing_loses_no_state(tmp_path, power_loss):
    template = tmp_path / "template"
    s = await long_session(template)
    await collect_all(s.lease, pack_batch=None)
    expected_states, expected_bytes = await states_and_bytes(s.target, s.session_id)
    point = 0
    while True:
        point += 1
        root = tmp_path / f"run-{point}"
        os.system(f"cp -a {template} {root}")
        faulty = FaultInjectingTarget(LocalTarget(root), power_loss=power_loss)
        lease = await acquire_lease(faulty, s.session_id, ME, duration_seconds=3600)
        faulty.arm(point, "crash")
        try:
            await collect_all(lease, pack_batch=BATCH)
        except SimulatedCrash:
            crashed = True
        else:
            crashed = False
        # A new process reads every state Redo offered, byte for byte.
        fresh = LocalTarget(root)
        assert await states_and_bytes(fresh, s.session_id) == (expected_states, expected_bytes)
        again = await acquire_lease(fresh, s.session_id, ME, duration_seconds=3600)
        await collect_all(again, pack_batch=BATCH)
        assert await states_and_bytes(fresh, s.session_id) == (expected_states, expected_bytes)
        assert len(volumes(root, s.session_id)) == 1
        leftovers = [n for n in os.listdir(publications(root, s.session_id)) if n.endswith(".tmp") or n.startswith(".collecting-")]
        assert leftovers == []
        if not crashed:
            break
    print(f"packing crash points walked: {point - 1}")
    assert point - 1 >= 10


async def test_packing_over_ssh(openssh_server, tmp_path):
    from mevedel_server.targets.ssh import SshTarget

    target = await SshTarget.connect(openssh_server.url(tmp_path), **openssh_server.options())
    try:
        s = await long_session(tmp_path, target=target)
        await collect_all(s.lease, pack_batch=None)
        before = await states_and_bytes(target, s.session_id)
        reports = await collect_all(s.lease, pack_batch=BATCH)
        assert sum(len(r.packed) for r in reports) == TURNS - KEEP
        assert len(volumes(tmp_path, s.session_id)) == 1
        assert await states_and_bytes(target, s.session_id) == before
        third = next(st for st in (await redo_states(target, s.session_id)).states if st.turn_count == 3)
        impact = await prepare_redo(target, s.session_id, third.publication_id)
        s.adopt((await commit_redo(s.publisher, impact.token)).conversation)
        assert snapshot_files(tmp_path, ["a.txt"]) == {"a.txt": b"a3\n"}
    finally:
        await target.close()
