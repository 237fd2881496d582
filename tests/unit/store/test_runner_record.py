"""The runner record of ``mevedel prompt`` (which process runs a session's
turns): the process that wrote it clears it in one guarded program that
proves its own bytes are still there, and never clears another runner's."""

from __future__ import annotations

from counted_programs import CountedPrograms as Counting
from mevedel_server.store import (
    ClientIdentity,
    RunnerRecord,
    clear_runner,
    read_runner,
    record_runner,
    runner_clear_ops,
)
from mevedel_server.store.service import SessionService
from mevedel_server.targets import (
    LocalTarget,
)

ME = ClientIdentity("runner-client", "desk")


async def _held(tmp_path):
    target = Counting(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "hello")
    await service.turns.settle(sid)
    return target, service, sid, service.session(sid).lease


async def _record(lease, pid: int):
    """This client's runner record as process ``pid``; what was written."""
    return await record_runner(lease, RunnerRecord(client_id=ME.client_id, host="desk", pid=pid, boot="b"))


async def test_the_writer_clears_its_record_in_one_program(tmp_path):
    target, service, sid, lease = await _held(tmp_path)
    written = await _record(lease, 4242)
    assert (await read_runner(lease.target, lease.paths)).pid == 4242
    before = target.programs
    await clear_runner(lease, 4242, written=written)
    assert target.programs - before == 1
    assert await read_runner(lease.target, lease.paths) is None
    await service.sessions.close(sid)


async def test_another_runners_record_is_left_alone(tmp_path):
    target, service, sid, lease = await _held(tmp_path)
    mine = await _record(lease, 4242)
    await _record(lease, 5151)
    await clear_runner(lease, 4242, written=mine)
    assert (await read_runner(lease.target, lease.paths)).pid == 5151
    await clear_runner(lease, 4242)  # read first: not 4242's either
    assert (await read_runner(lease.target, lease.paths)).pid == 5151
    await service.sessions.close(sid)


async def test_a_settlement_carries_the_records_removal_in_its_own_program(tmp_path):
    target, service, sid, lease = await _held(tmp_path)
    await service.turns.begin_turn(sid, "plain")
    before = target.programs
    await service.turns.settle(sid)
    plain = target.programs - before

    written = await _record(lease, 4242)
    await service.turns.begin_turn(sid, "the last one")
    lease.ride(runner_clear_ops(lease.paths, written))
    before = target.programs
    await service.turns.settle(sid)
    assert target.programs - before == plain
    assert await read_runner(lease.target, lease.paths) is None
    await service.sessions.close(sid)


async def test_a_settlement_leaves_another_runners_record(tmp_path):
    target, service, sid, lease = await _held(tmp_path)
    mine = await _record(lease, 4242)
    await _record(lease, 5151)
    await service.turns.begin_turn(sid, "again")
    lease.ride(runner_clear_ops(lease.paths, mine))
    await service.turns.settle(sid)
    assert (await read_runner(lease.target, lease.paths)).pid == 5151
    await service.sessions.close(sid)
