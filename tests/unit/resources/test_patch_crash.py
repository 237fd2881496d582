"""Crash at every fault point of an ApplyPatch, on a local and an SSH
target, as a process death and as a power loss: after the restart, the
next patch on the target (or ``recover``) leaves every file wholly old --
the crash came before the commit point, the marker's removal -- or wholly
new, and no journal behind; then the patch applies on the recovered tree."""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

import pytest

from mevedel_server.resources.patch import (
    ResolvedOperation,
    apply_patch,
    parse_patch,
    recover,
)
from mevedel_server.targets import FaultInjectingTarget, SimulatedCrash

JOURNAL = ".mevedel/patches"
PATCH = (
    "*** Begin Patch\n"
    "*** Update File: work://shared/a.md\n@@\n one\n-two\n+TWO\n"
    "*** Add File: work://shared/new/dir/b.md\n+b\n"
    "*** Delete File: work://shared/c.md\n"
    "*** Update File: work://shared/run.sh\n@@\n-echo old\n+echo new\n"
    "*** Update File: work://shared/d.md\n*** Move to: work://shared/moved/d.md\n@@\n-d\n+D\n"
    "*** End Patch\n"
)
OLD = {
    "a.md": (b"one\ntwo\n", 0o644),
    "c.md": (b"c\n", 0o600),
    "run.sh": (b"#!/bin/sh\necho old\n", 0o755),
    "d.md": (b"d\n", 0o644),
}
NEW = {
    "a.md": (b"one\nTWO\n", 0o644),
    "new/dir/b.md": (b"b\n", 0o644),
    "run.sh": (b"#!/bin/sh\necho new\n", 0o755),
    "moved/d.md": (b"D\n", 0o644),
}
WALKED: Counter[str] = Counter()


def build(root: Path) -> None:
    shared = root / ".mevedel" / "shared"
    shared.mkdir(parents=True)
    for name, (data, mode) in OLD.items():
        (shared / name).write_bytes(data)
        (shared / name).chmod(mode)


def files(root: Path) -> dict[str, tuple[bytes, int]]:
    """The shared files (modes included); the directories a patch creates
    are there exactly when one of its files is. A simulated crash's own
    half-written temporary file (``*.crash.tmp``) is left out: the target's
    real ones are recovery's to remove."""
    shared = root / ".mevedel" / "shared"
    out = {}
    for path in sorted(shared.rglob("*")):
        if path.name.endswith(".crash.tmp"):
            continue
        if path.is_file():
            out[str(path.relative_to(shared))] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
        elif not any(path.iterdir()):
            out[str(path.relative_to(shared))] = (b"<empty directory>", 0)
    return out


def leftovers(root: Path) -> list[str]:
    """Temporary files and journals that should not outlive a recovery."""
    found = []
    for path in (root / ".mevedel").rglob("*"):
        name = path.name
        if name.endswith(".tmp") and not name.endswith(".crash.tmp"):
            found.append(str(path.relative_to(root)))
    if (root / JOURNAL).exists():
        found.append(JOURNAL)
    return found


def operations() -> list[ResolvedOperation]:
    def path(address: str) -> str:
        return ".mevedel/shared/" + address.removeprefix("work://shared/")

    return [
        ResolvedOperation(op, path(op.target), path(op.move_to) if op.move_to else None, op.target, op.move_to)
        for op in parse_patch(PATCH).operations
    ]


@pytest.mark.parametrize("power_loss", [False, True], ids=["process-death", "power-loss"])
async def test_a_crash_at_every_point_leaves_the_files_old_or_new(open_target, tmp_path, power_loss):
    baseline_root = tmp_path / "baseline"
    build(baseline_root)
    baseline = FaultInjectingTarget(await open_target(baseline_root))
    await apply_patch(baseline, JOURNAL, operations())
    assert files(baseline_root) == NEW and leftovers(baseline_root) == []
    total = baseline.writes

    walked = 0
    seen: Counter[str] = Counter()
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        build(root)
        target = FaultInjectingTarget(await open_target(root), power_loss=power_loss)
        target.arm(point, "crash")
        try:
            await apply_patch(target, JOURNAL, operations())
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1 and not target.fired
            assert files(root) == NEW
            break
        walked += 1
        del target  # the process is dead: nothing of it runs again
        restarted = await open_target(root)
        await recover(restarted, JOURNAL)
        state = files(root)
        assert state in (OLD, NEW), f"crash point {point}: {state}"
        assert leftovers(root) == [], f"crash point {point}"
        seen["old" if state == OLD else "new"] += 1
        # The patch applies on the recovered tree (or finds it applied).
        if state == OLD:
            await apply_patch(restarted, JOURNAL, operations())
            assert files(root) == NEW and leftovers(root) == []
    kind = "power loss" if power_loss else "process death"
    WALKED[kind] += walked
    print(f"\nApplyPatch ({kind}): {walked} crash points walked, outcomes {dict(seen)}")
    assert walked == total >= 12
    # Before the marker's removal the patch never happened; after it (the
    # keep names, the data and the journal directory go), it did.
    assert seen["new"] == 4 and seen["old"] == total - 4


async def crashed_after_the_first_file(open_target, root: Path) -> None:
    """A patch killed after it rewrote a.md, before anything else."""
    build(root)
    # (No simulated debris: the target's own temporary files are recovery's.)
    target = FaultInjectingTarget(await open_target(root), debris=False)
    # Fault points: journal directory, data, the keep names of c.md and
    # d.md, marker, barrier, three new directories, a.md, then the second
    # file: the crash catches a.md rewritten and the rest untouched.
    target.arm(11, "crash")
    with pytest.raises(SimulatedCrash):
        await apply_patch(target, JOURNAL, operations())
    assert (root / ".mevedel" / "shared" / "a.md").read_bytes() == b"one\nTWO\n"
    assert (root / JOURNAL).is_dir()


async def test_a_crash_before_recovery_is_recovered_by_the_next_patch(open_target, tmp_path):
    root = tmp_path / "w"
    await crashed_after_the_first_file(open_target, root)
    other = (
        "*** Begin Patch\n*** Update File: work://shared/c.md\n@@\n-c\n+see\n*** End Patch\n"
    )
    (op,) = parse_patch(other).operations
    result = await apply_patch(await open_target(root), JOURNAL, [ResolvedOperation(op, ".mevedel/shared/c.md", None, op.target)])
    assert result.summary() == "M work://shared/c.md"
    expected = dict(OLD, **{"c.md": (b"see\n", 0o600)})
    assert files(root) == expected and leftovers(root) == []
    assert not os.path.exists(root / ".mevedel" / "shared" / "new")


async def test_recovery_removes_the_targets_own_temporary_files_beside_the_patched_ones(open_target, tmp_path):
    root = tmp_path / "w"
    await crashed_after_the_first_file(open_target, root)
    shared = root / ".mevedel" / "shared"
    # What a process killed inside a replace leaves (the target's own
    # temporary name), beside a person's file that merely looks alike.
    (shared / ".a.md.0123456789ab.tmp").write_bytes(b"one\nT")
    (shared / ".a.md.backup.tmp").write_bytes(b"mine")
    await recover(await open_target(root), JOURNAL)
    assert files(root) == dict(OLD, **{".a.md.backup.tmp": (b"mine", 0o644)})
    assert leftovers(root) == [str((shared / ".a.md.backup.tmp").relative_to(root))]
