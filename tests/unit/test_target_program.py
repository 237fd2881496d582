"""Control programs: stop at the first failure, per-operation statuses,
optional operations, verify preconditions, one thread hop per program."""

from __future__ import annotations

import asyncio

import pytest

import mevedel_server.targets.local as local_module
from mevedel_server.targets import (
    Clock,
    ControlProgram,
    CreateExclusive,
    ListDir,
    LocalTarget,
    MakeDirs,
    Read,
    Remove,
    Replace,
    Stat,
    Status,
    Verify,
)


@pytest.fixture
def target(tmp_path):
    return LocalTarget(tmp_path)


async def test_program_stops_at_the_first_failure_and_skips_the_rest(tmp_path, target):
    result = await target.run(
        ControlProgram([Read("missing"), CreateExclusive("guarded", b"x"), Replace("other", b"y")])
    )
    assert [r.status for r in result] == [Status.ABSENT, Status.SKIPPED, Status.SKIPPED]
    assert result.stopped_at == 0 and not result.completed
    assert not (tmp_path / "guarded").exists() and not (tmp_path / "other").exists()


async def test_every_status_is_reported(tmp_path, target):
    (tmp_path / "present").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "present")
    result = await target.run(
        ControlProgram(
            [
                Read("present"),
                CreateExclusive("present", b"", optional=True),
                Read("absent", optional=True),
                Verify("present", b"xyz", optional=True),
                Read("link", optional=True),
                Verify("present", None),
                Read("present"),
            ]
        )
    )
    assert [r.status for r in result] == [
        Status.OK,
        Status.CONFLICT,
        Status.ABSENT,
        Status.MISMATCH,
        Status.FAILED,
        Status.MISMATCH,
        Status.SKIPPED,
    ]
    assert result[0].value == b"abc"
    assert result[3].value == b"abc"  # a mismatch carries what was actually there
    assert result[4].unsafe
    assert result.stopped_at == 5


async def test_verify_guards_the_write_that_follows_it(tmp_path, target):
    (tmp_path / "head").write_bytes(b"v1")
    stale = await target.run(ControlProgram([Verify("head", b"v0"), Replace("head", b"v2")]))
    assert [r.status for r in stale] == [Status.MISMATCH, Status.SKIPPED]
    assert (tmp_path / "head").read_bytes() == b"v1"
    fresh = await target.run(ControlProgram([Verify("head", b"v1"), Replace("head", b"v2")]))
    assert fresh.completed
    assert (tmp_path / "head").read_bytes() == b"v2"


async def test_verify_absent(tmp_path, target):
    result = await target.run(
        ControlProgram([Verify("nope", None), Verify("no/such/dir/file", None), Verify("nope", b"x", optional=True)])
    )
    assert [r.status for r in result] == [Status.OK, Status.OK, Status.MISMATCH]
    assert result[2].value is None


async def test_optional_operations_do_not_stop_the_program(tmp_path, target):
    (tmp_path / "d").mkdir()
    result = await target.run(
        ControlProgram([MakeDirs("d", optional=True), CreateExclusive("d/f", b"x"), Remove("gone", optional=True), ListDir("d")])
    )
    assert [r.status for r in result] == [Status.CONFLICT, Status.OK, Status.ABSENT, Status.OK]
    assert result[3].value == ("f",)
    assert result.completed


async def test_stat_list_and_clock_accept_the_root(tmp_path, target):
    (tmp_path / "a").write_bytes(b"")
    result = await target.run(ControlProgram([Stat("."), ListDir(""), Clock(".")]))
    assert result.completed
    assert result[0].value.kind == "directory"
    assert result[1].value == ("a",)
    assert isinstance(result[2].value, int)


async def test_one_thread_hop_per_program(tmp_path, target, monkeypatch):
    hops = []
    real = asyncio.to_thread

    async def counting(func, *args, **kwargs):
        hops.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(local_module.asyncio, "to_thread", counting)
    ops = [MakeDirs("x", optional=True)] + [CreateExclusive(f"x/{i}", b"d") for i in range(20)] + [ListDir("x")]
    result = await target.run(ControlProgram(ops))
    assert result.completed and len(result[-1].value) == 20
    assert len(hops) == 1
