"""How the unsettled-mutation latch clears once a command ended: the owner
killed at any write of the settlement (or of a new owner's check that
proves the command gone) leaves the next owner either the latch with the
command's record, which it proves gone by itself, or no latch -- never a
latch without a record, which it cannot tell from an owner killed before
it recorded its command's group and so would ask the person about. With
several commands at once the latch stays until the last has ended, a
command armed and not yet launched included. And what a command costs in
control programs (one program is one round trip over SSH)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from counted_programs import CountedPrograms as Counting
from mevedel_server.store import (
    ClientIdentity,
    acquire_lease,
    materialize_session,
    observe_lease,
)
from mevedel_server.store.service.mutation_latch import MutationLatch
from mevedel_server.targets import (
    FaultInjectingTarget,
    LocalTarget,
    SimulatedCrash,
)

SID = "2026-12-06T19-47-5e771ed1a7c4"
ME = ClientIdentity("client-me", "workstation")


def ended_group() -> int:
    """The process group of a command that ran and ended (nothing is left of it)."""
    process = subprocess.Popen(["true"], start_new_session=True)
    process.wait()
    return process.pid


def records(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".mevedel" / "sessions" / SID / ".mutations").glob("armed-*"))


async def owner(target, root: Path):
    """This client's process holding the session (a restart adopts its lease)."""
    return await acquire_lease(target, SID, ME, duration_seconds=600), MutationLatch(ME)


async def next_owner_finds_nothing_to_ask(root: Path, killed: str) -> None:
    lease, latch = await owner(LocalTarget(root), root)
    state = await latch.check(lease)
    assert not state.set, f"{killed}: the next owner asks: {state.message()}"
    assert not (await observe_lease(LocalTarget(root), SID)).record.unsettled_mutation, killed
    # What a kill left of an ended command's record goes with its next
    # command's settlement, in the same program.
    armed = await latch.arm(lease)
    await latch.launched(lease, ended_group(), "true", 2, 0, armed_id=armed)
    await latch.settled(lease, armed)
    assert records(root) == [], killed
    assert not (await observe_lease(LocalTarget(root), SID)).record.unsettled_mutation, killed


async def walk(tmp_path: Path, prepare, act, judged=None) -> int:
    """``act`` killed at its first write, its second, ... until it runs
    whole; after each, the next owner must have nothing to ask (``judged``:
    or what it is asked)."""
    point = 0
    while True:
        point += 1
        root = tmp_path / f"killed-{point}"
        root.mkdir()
        await materialize_session(LocalTarget(root), SID)
        faulty = FaultInjectingTarget(LocalTarget(root))
        context = await prepare(faulty, root)
        faulty.arm(point, "crash")
        try:
            await act(*context)
        except SimulatedCrash:
            if judged is not None and await judged(root, point):
                continue
        else:
            assert not faulty.fired
            await next_owner_finds_nothing_to_ask(root, "run whole")
            return point - 1
        await next_owner_finds_nothing_to_ask(root, f"killed at write {point}")


async def test_the_owner_killed_anywhere_in_the_settlement_of_an_ended_command_leaves_nothing_to_ask(tmp_path):
    async def prepare(target, root):
        lease, latch = await owner(target, root)
        armed = await latch.arm(lease)
        await latch.launched(lease, ended_group(), "make", 1, 0, armed_id=armed)
        assert records(root) == [f"armed-{armed}.json"]
        return latch, lease, armed

    async def settle(latch, lease, armed):
        await latch.settled(lease, armed)

    points = await walk(tmp_path, prepare, settle)
    # The latch's clearing (the rotation's writes) and the record's removal.
    assert points >= 2


async def test_a_new_owner_killed_anywhere_while_it_clears_a_proven_latch_leaves_nothing_to_ask(tmp_path):
    async def prepare(target, root):
        crashed, latch = await owner(LocalTarget(root), root)
        armed = await latch.arm(crashed)
        await latch.launched(crashed, ended_group(), "make", 1, 0, armed_id=armed)
        # The owner is gone with its command; the next one, checking
        # before a Rewind, proves the group gone.
        return await owner(target, root)

    async def check(lease, latch):
        assert not (await latch.check(lease)).set

    assert await walk(tmp_path, prepare, check) >= 2


async def test_an_acknowledgement_killed_anywhere_leaves_the_question_it_answered_or_nothing(tmp_path):
    """A kill before the acknowledgement's commit asks again what was asked
    (it was not recorded), never about a record it had removed."""

    async def prepare(target, root):
        crashed, latch = await owner(LocalTarget(root), root)
        armed = await latch.arm(crashed)
        # Recorded as run on a machine this one is not: unprovable here.
        await latch.launched(crashed, ended_group(), "make", 1, 0, machine=("0" * 32, "boot"), runs_on="elsewhere", armed_id=armed)
        lease, latch = await owner(target, root)
        assert "it ran on elsewhere" in (await latch.check(lease)).message()
        return lease, latch

    async def acknowledge(lease, latch):
        await latch.acknowledge(lease)

    async def asked_again(root, point):
        lease, latch = await owner(LocalTarget(root), root)
        state = await latch.check(lease)
        if not state.set:
            return False  # the clearing committed: nothing is asked
        assert state.unprovable == "it ran on elsewhere, whose processes the workspace's machine cannot check", (point, state.message())
        return True

    assert await walk(tmp_path, prepare, acknowledge, asked_again) >= 2


async def test_the_latch_stays_until_the_last_of_several_commands_has_ended(tmp_path):
    await materialize_session(LocalTarget(tmp_path), SID)
    lease, latch = await owner(LocalTarget(tmp_path), tmp_path)

    async def latched() -> bool:
        return (await observe_lease(LocalTarget(tmp_path), SID)).record.unsettled_mutation

    first = await latch.arm(lease)
    await latch.launched(lease, ended_group(), "make", 1, 0, armed_id=first)
    second = await latch.arm(lease)  # armed: about to be launched
    await latch.settled(lease, first)
    assert await latched(), "the latch was cleared under a command being launched"
    await latch.launched(lease, ended_group(), "make test", 1, 0, armed_id=second)
    third = await latch.arm(lease)
    await latch.launched(lease, ended_group(), "make lint", 1, 0, armed_id=third)
    await latch.settled(lease, third)
    assert await latched() and records(tmp_path) == [f"armed-{second}.json"]
    await latch.settled(lease, second)
    assert not await latched() and records(tmp_path) == []
    # A command that never started (its spawn failed) settles as well.
    never = await latch.arm(lease)
    assert await latched()
    await latch.settled(lease, never)
    assert not await latched()


async def test_a_command_costs_three_programs_around_it(tmp_path):
    """Set the latch, record the group, and settle: the settlement clears
    the latch and removes the record in one program."""
    await materialize_session(LocalTarget(tmp_path), SID)
    counted = Counting(LocalTarget(tmp_path))
    lease, latch = await owner(counted, tmp_path)
    before = counted.programs
    armed = await latch.arm(lease)
    await latch.launched(lease, ended_group(), "make", 1, 0, armed_id=armed)
    await latch.settled(lease, armed)
    assert counted.programs - before == 3
    assert not (await observe_lease(LocalTarget(tmp_path), SID)).record.unsettled_mutation and records(tmp_path) == []
