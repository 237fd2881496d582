"""Crash at every write of each lifecycle transaction (Rewind, Redo, Fork,
Save As): a fresh reader sees the old or the new committed state, the
project files are wholly old or wholly new -- or a ``.recovery/`` marker
exists, and ``retry_recovery`` by the restarted client brings them to the
committed side -- and the session takes the next transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from txn_sessions import (
    DELETE,
    ME,
    committed_view,
    open_session,
    read_committed_head,
    reopen,
    snapshot_files,
    write,
)

from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.transactions.fork import commit_fork, prepare_fork
from mevedel_server.store.transactions.recovery import find_recovery, retry_recovery
from mevedel_server.store.transactions.redo import (
    commit_redo,
    prepare_redo,
    redo_states,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.save_as import commit_save_as, prepare_save_as
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

FILES = ("a.txt", "b.txt", "src/c.txt")
OLD_FILES = {"a.txt": b"a2\n", "b.txt": None, "src/c.txt": b"c3\n"}
THREE = (3, ["one", "two", "three"])
WALKED: Counter[str] = Counter()


async def three_turns(root: Path, target):
    write(root, "a.txt", b"a0\n")
    s = await open_session(root, target=target)
    await s.turn("one", {"a.txt": b"a1\n"})
    await s.turn("two", {"a.txt": b"a2\n", "b.txt": b"b2\n"})
    await s.turn("three", {"b.txt": DELETE, "src/c.txt": b"c3\n"})
    local = root / ".mevedel" / "sessions" / s.session_id / "local"
    local.mkdir(parents=True)
    (local / "notes.md").write_text("kept")
    return s


@dataclass
class Scenario:
    #: Builds the state and prepares; returns (session, token).
    prepare: Callable[[Path, FaultInjectingTarget], Awaitable[tuple]]
    act: Callable[[object, object], Awaitable[object]]
    #: The committed view and files of the source before and after.
    old: tuple
    new: tuple
    old_files: dict
    new_files: dict
    #: Creates a child session (Fork, Save As) instead of replacing in place.
    child: tuple | None = None
    extra: dict = field(default_factory=dict)


async def _rewind_prepare(root, target):
    s = await three_turns(root, target)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(2))
    return s, impact.token


async def _rewind_act(s, token):
    return await commit_rewind(s.publisher, token)


async def _redo_prepare(root, target):
    s = await three_turns(root, target)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.after(1))
    s.adopt((await commit_rewind(s.publisher, impact.token)).conversation)
    three = next(st for st in (await redo_states(s.target, s.session_id)).states if st.turn_count == 3)
    return s, (await prepare_redo(s.target, s.session_id, three.publication_id)).token


async def _redo_act(s, token):
    return await commit_redo(s.publisher, token)


async def _fork_prepare(root, target):
    s = await three_turns(root, target)
    return s, (await prepare_fork(s.target, s.session_id, 2)).token


async def _fork_act(s, token):
    return await commit_fork(s.target, token, ME)


async def _save_as_prepare(root, target):
    s = await three_turns(root, target)
    return s, (await prepare_save_as(s.target, s.session_id, "The copy")).token


async def _save_as_act(s, token):
    return await commit_save_as(s.target, token, ME)


SCENARIOS = {
    "rewind": Scenario(
        _rewind_prepare, _rewind_act, THREE, (1, ["one"]), OLD_FILES, {"a.txt": b"a1\n", "b.txt": None, "src/c.txt": None}
    ),
    "redo": Scenario(
        _redo_prepare, _redo_act, (1, ["one"]), THREE, {"a.txt": b"a1\n", "b.txt": None, "src/c.txt": None}, OLD_FILES
    ),
    "fork": Scenario(_fork_prepare, _fork_act, THREE, THREE, OLD_FILES, OLD_FILES, child=(2, ["one", "two"])),
    "save-as": Scenario(_save_as_prepare, _save_as_act, THREE, THREE, OLD_FILES, OLD_FILES, child=THREE),
}


async def _committed_children(root: Path, source: str) -> list[tuple]:
    views = []
    for directory in sorted((root / ".mevedel" / "sessions").iterdir()):
        if directory.name != source:
            view = await committed_view(root, directory.name)
            if view is not None:
                views.append(view)
    return views


async def _check(name: str, scenario: Scenario, root: Path, s, point: int) -> str:
    """What a fresh reader sees after the crash, then the restarted
    client's recovery. Returns ``old`` or ``new``."""
    view = await committed_view(root, s.session_id)
    files = snapshot_files(root, FILES)
    assert view in (scenario.old, scenario.new), f"{name} #{point}: a reader saw {view}"
    if scenario.child is not None:
        children = await _committed_children(root, s.session_id)
        assert children in ([], [scenario.child]), f"{name} #{point}: children {children}"
        side = "new" if children else "old"
        assert files == scenario.old_files, f"{name} #{point}: a fork touched project files"
        # Run it again from the restarted client: one more child commits.
        restarted = await reopen(s, LocalTarget(root))
        await scenario.act(restarted, (await _again(name, restarted)))
        assert len(await _committed_children(root, s.session_id)) == len(children) + 1
        return side
    side = "new" if view == scenario.new else "old"
    expected = scenario.new_files if side == "new" else scenario.old_files
    state = await find_recovery(LocalTarget(root), s.session_id)
    if state.pending:
        restarted = await reopen(s, LocalTarget(root))
        outcome = await retry_recovery(restarted.lease)
        assert outcome.resolution == ("completed" if side == "new" else "rolled-back"), f"{name} #{point}"
        side += "+recovered"
    else:
        restarted = await reopen(s, LocalTarget(root))
        assert files == expected, f"{name} #{point}: files {files} with the {side} state and no recovery marker"
    assert snapshot_files(root, FILES) == expected, f"{name} #{point}"
    assert not (await find_recovery(LocalTarget(root), s.session_id)).pending
    # Nothing blocks the next transaction.
    impact = await prepare_rewind(restarted.target, s.session_id, Boundary.before(1))
    await commit_rewind(restarted.publisher, impact.token)
    assert await committed_view(root, s.session_id) == (0, [])
    return side


async def _again(name: str, s):
    if name == "fork":
        return (await prepare_fork(s.target, s.session_id, 2)).token
    return (await prepare_save_as(s.target, s.session_id, "The copy")).token


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_crash_at_every_write(tmp_path, name):
    scenario = SCENARIOS[name]
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    target = FaultInjectingTarget(LocalTarget(baseline))
    s, token = await scenario.prepare(baseline, target)
    target.arm(None)
    await scenario.act(s, token)
    total = target.writes
    assert await committed_view(baseline, s.session_id) == scenario.new
    outcomes: Counter[str] = Counter()
    for point in range(1, total + 1):
        root = tmp_path / f"crash-{point}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root))
        s, token = await scenario.prepare(root, target)
        head = await read_committed_head(root, s.session_id)
        target.arm(point, "crash")
        with pytest.raises(SimulatedCrash):
            await scenario.act(s, token)
        if scenario.child is not None:
            assert await read_committed_head(root, s.session_id) == head, f"{name} #{point}: the source moved"
        outcomes[await _check(name, scenario, root, s, point)] += 1
    WALKED[name] = total
    print(f"\n{name}: {total} crash points walked, outcomes {dict(outcomes)}")
    assert total >= 5 and outcomes["old"] >= 2
    if scenario.child is None:
        # The journal is written before any file: crashes between it and the
        # commit point are resolved by retrying the recovery.
        assert outcomes["old+recovered"] >= 1 and outcomes["new"] + outcomes["new+recovered"] >= 1


# The whole state: modes, links, directories ----------------------------------------

TREE = ("run.sh", "d", "d/f.txt", "link", "newdir", "newdir/n.txt", "swap")


def _entry(root: Path, path: str):
    """A path's whole state, as the turn's writers record it."""
    import os
    import stat

    from mevedel_server.targets import Entry

    full = root / path
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Entry.symlink(os.fsencode(os.readlink(full)))
    if stat.S_ISDIR(st.st_mode):
        return Entry.directory(stat.S_IMODE(st.st_mode))
    return Entry.file(full.read_bytes(), stat.S_IMODE(st.st_mode))


def _tree(root: Path) -> dict:
    return {path: _entry(root, path) for path in TREE}


async def _exact_turns(root: Path, target):
    """Before: run.sh executable, d/ (0750) holding f.txt, link -> run.sh,
    swap a directory. One turn: chmod 644 run.sh, rm -r d, relink link,
    mkdir newdir (0700) with a file, swap replaced by a file."""
    import os

    root.mkdir(exist_ok=True)
    write(root, "run.sh", b"#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    write(root, "d/f.txt", b"f\n")
    os.chmod(root / "d", 0o750)
    os.symlink("run.sh", root / "link")
    (root / "swap").mkdir()
    s = await open_session(root, target=target)
    c = s.conversation
    s.at += 1
    turn_id = c.begin_turn("exact", at=s.at)
    for path in TREE:
        c.capture_file(path, _entry(root, path))
    os.chmod(root / "run.sh", 0o644)
    (root / "d" / "f.txt").unlink()
    (root / "d").rmdir()
    (root / "link").unlink()
    os.symlink("elsewhere", root / "link")
    (root / "newdir").mkdir(mode=0o700)
    write(root, "newdir/n.txt", b"n\n")
    (root / "swap").rmdir()
    write(root, "swap", b"now a file\n")
    c.append(Response(turn_id=turn_id, text="done"))
    c.settle(Outcome.COMPLETED, at=s.at, current={p: _entry(root, p) for p in TREE})
    await s.save()
    return s


async def test_crash_at_every_write_of_an_exact_rewind(tmp_path):
    """Every crash point of a Rewind that restores modes, removes and makes
    directories, relinks a link and turns a file back into a directory:
    each path is wholly old or wholly new (or the recovery brings it to the
    committed side)."""
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    target = FaultInjectingTarget(LocalTarget(baseline))
    s = await _exact_turns(baseline, target)
    new_tree = _tree(baseline)
    impact = await prepare_rewind(s.target, s.session_id, Boundary.before(1))
    target.arm(None)
    await commit_rewind(s.publisher, impact.token)
    old_tree = _tree(baseline)
    assert old_tree != new_tree and old_tree["run.sh"].mode == 0o755 and old_tree["d"].mode == 0o750
    assert old_tree["newdir"] is None and old_tree["link"].data == b"run.sh" and old_tree["swap"].kind == "directory"
    total = target.writes
    outcomes: Counter[str] = Counter()
    for point in range(1, total + 1):
        root = tmp_path / f"crash-{point}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root))
        s = await _exact_turns(root, target)
        impact = await prepare_rewind(s.target, s.session_id, Boundary.before(1))
        target.arm(point, "crash")
        with pytest.raises(SimulatedCrash):
            await commit_rewind(s.publisher, impact.token)
        view = await committed_view(root, s.session_id)
        assert view in ((1, ["exact"]), (0, [])), f"#{point}: a reader saw {view}"
        side = "new" if view == (0, []) else "old"
        expected = old_tree if side == "new" else new_tree
        if (await find_recovery(LocalTarget(root), s.session_id)).pending:
            restarted = await reopen(s, LocalTarget(root))
            await retry_recovery(restarted.lease)
            side += "+recovered"
        assert _tree(root) == expected, f"#{point} ({side})"
        outcomes[side] += 1
    print(f"\nexact rewind: {total} crash points walked, outcomes {dict(outcomes)}")
    assert outcomes["old+recovered"] >= 1 and outcomes["new"] + outcomes["new+recovered"] >= 1
