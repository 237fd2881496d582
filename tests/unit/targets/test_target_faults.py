"""FaultInjectingTarget counts writes, including those inside programs, and
fails or crashes at the Nth."""

from __future__ import annotations

import pytest

from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    FaultInjectingTarget,
    InjectedFault,
    LocalTarget,
    MakeDirs,
    Read,
    Replace,
    SimulatedCrash,
    Status,
    Verify,
)


def _ops():
    return [
        MakeDirs("d", optional=True),
        Read("d/missing", optional=True),
        CreateExclusive("d/a", b"aaaa"),
        Verify("d/a", b"aaaa"),
        Replace("d/b", b"bbbb"),
    ]


async def test_error_at_nth_write_inside_a_program(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path), fail_at=3, mode="error")
    with pytest.raises(InjectedFault) as info:
        await target.run(ControlProgram(_ops()))
    assert info.value.index == 3 and isinstance(info.value.operation, Replace)
    assert (tmp_path / "d" / "a").read_bytes() == b"aaaa"
    assert not (tmp_path / "d" / "b").exists()
    # An injected error is transient: the same target works again.
    await target.replace_atomic("d/b", b"bbbb")
    assert (tmp_path / "d" / "b").read_bytes() == b"bbbb"


async def test_single_operation_methods_are_counted(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path), fail_at=2, mode="error")
    await target.create_exclusive("one", b"1")
    assert await target.read("one") == b"1"  # reads do not count
    with pytest.raises(InjectedFault):
        await target.create_exclusive("two", b"2")
    assert not (tmp_path / "two").exists()


async def test_crash_is_process_death(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path), fail_at=2, mode="crash")
    assert not issubclass(SimulatedCrash, Exception)
    with pytest.raises(SimulatedCrash):
        try:
            await target.run(ControlProgram(_ops()))
        except Exception:  # pragma: no cover - the point is that this never catches it
            pytest.fail("a simulated crash was caught as an ordinary exception")
    assert not (tmp_path / "d" / "a").exists()
    # The half-written temporary a real crash could leave, never the real name.
    assert [p.name for p in (tmp_path / "d").iterdir()] == [".a.crash.tmp"]
    assert (tmp_path / "d" / ".a.crash.tmp").read_bytes() == b"aa"
    with pytest.raises(SimulatedCrash):
        await target.read("d/a")


async def test_a_program_that_stops_before_the_fault_does_not_fire_it(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path), fail_at=2, mode="crash")
    result = await target.run(ControlProgram([MakeDirs("d"), Read("nope"), CreateExclusive("d/x", b"")]))
    assert [r.status for r in result] == [Status.OK, Status.ABSENT, Status.SKIPPED]
    assert not target.fired and target.writes == 1


async def test_fault_beyond_the_last_write_never_fires(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path), fail_at=99, mode="crash")
    result = await target.run(ControlProgram(_ops()))
    assert result.completed and not target.fired
    assert target.writes == 3


async def test_arm_restarts_the_count(tmp_path):
    target = FaultInjectingTarget(LocalTarget(tmp_path))
    await target.make_dirs("d")
    target.arm(1, "error")
    with pytest.raises(InjectedFault):
        await target.create_exclusive("d/x", b"")
    with pytest.raises(ValueError):
        target.arm(0)
