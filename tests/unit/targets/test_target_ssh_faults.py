"""SshTarget against an in-process asyncssh server that runs the same remote
program and misbehaves on demand: a program whose connection drops, whose
answer is cut short, stale or followed by a kill, or that is refused, is
never reported as success; a slow target is waited for or timed out; a
dropped connection is re-established with backoff, within bounds; and
committed store state is never lost or corrupted."""

from __future__ import annotations

import asyncio
import os

import pytest

from mevedel_server.store import (
    ClientIdentity,
    PublicationFailed,
    Publisher,
    acquire_lease,
    materialize_session,
    read_committed,
)
from mevedel_server.targets import (
    ControlProgram,
    CreateExclusive,
    ListDir,
    LocalTarget,
    MakeDirs,
    Read,
    Status,
)
from mevedel_server.targets.remote_errors import TargetUnavailable
from mevedel_server.targets.ssh import SshTarget

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("ssh-writer", "laptop")


async def connect(server, root, **options) -> SshTarget:
    return await SshTarget.connect(server.url(root), **server.options(), **options)


@pytest.fixture
async def target(fault_server, tmp_path):
    t = await connect(fault_server, tmp_path, reconnect_delay=0.01)
    yield t
    await t.close()


def _create(name: str, data: bytes = b"x") -> ControlProgram:
    return ControlProgram([CreateExclusive(name, data), ListDir(".")])


@pytest.mark.parametrize("fault", ["drop-after-run", "drop-mid-answer", "kill-after-answer", "stale-answer"])
async def test_a_program_that_ran_but_did_not_report_is_never_success(fault_server, target, tmp_path, fault):
    fault_server.plan = [fault]
    ran_before = fault_server.ran
    with pytest.raises(TargetUnavailable) as info:
        await target.run(_create("made"))
    assert info.value.outcome_unknown
    # It did run: the caller learns only that the outcome is unknown.
    assert fault_server.ran == ran_before + 1 and (tmp_path / "made").read_bytes() == b"x"
    assert str(tmp_path) not in str(info.value)
    # Re-observing works (reconnecting when the connection was dropped).
    result = await target.run(ControlProgram([Read("made")]))
    assert result[0].value == b"x"


async def test_a_request_dropped_before_it_ran_changes_nothing(fault_server, target, tmp_path):
    fault_server.plan = ["drop-before-run"]
    with pytest.raises(TargetUnavailable):
        await target.run(_create("never"))
    assert not (tmp_path / "never").exists()
    assert (await target.run(_create("later"))).completed
    assert target.connections == 2


async def test_login_noise_before_the_answer_is_skipped(fault_server, target, tmp_path):
    fault_server.plan = ["login-noise"]
    result = await target.run(_create("f"))
    assert result.completed and result[1].value == ("f",)


async def test_a_refused_channel_is_reported_and_nothing_runs(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spares=0)  # the program's own channel is refused
    fault_server.plan = ["refuse-channel"]
    ran = fault_server.ran
    with pytest.raises(TargetUnavailable) as info:
        await target.run(_create("f"))
    assert not info.value.outcome_unknown
    assert fault_server.ran == ran and not (tmp_path / "f").exists()
    assert (await target.run(_create("f"))).completed
    await target.close()


async def test_a_host_without_python_is_refused_clearly(fault_server, tmp_path):
    fault_server.plan = ["command-not-found"]
    with pytest.raises(TargetUnavailable, match=r"no 'python3' command \(exit status 127\)"):
        await connect(fault_server, tmp_path)


async def test_the_interpreter_path_found_at_connection_is_reused_and_dropped_when_gone(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spares=0)  # every program starts its own process
    # The remote side reported its real interpreter path when the root was pinned.
    assert fault_server.commands[-1].startswith("python3 ")
    assert (await target.run(_create("a"))).completed
    assert fault_server.commands[-1].startswith("/")
    fault_server.plan = ["command-not-found"]  # that path went away
    trips = target.round_trips
    assert (await target.run(_create("b"))).completed
    assert target.round_trips == trips + 2 and fault_server.commands[-1].startswith("python3 ")
    await target.close()


async def test_the_pinned_interpreter_gets_compiled_code_and_a_fallback_the_source(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spares=0)
    # The pin itself travels as source: nothing is known of the interpreter yet.
    assert fault_server.scripts == ["source"]
    assert (await target.run(_create("a"))).completed
    assert fault_server.scripts[-1] == "compiled" and (tmp_path / "a").exists()
    fault_server.plan = ["command-not-found"]  # the cached interpreter went away
    assert (await target.run(_create("b"))).completed
    # Whatever "python3" now is, it may be another version: source again.
    assert fault_server.scripts[-1] == "source" and (tmp_path / "b").exists()
    await target.close()


async def test_a_slow_target_is_waited_for(fault_server, target, tmp_path):
    fault_server.slow_seconds = 1.0
    fault_server.plan = ["slow"]
    result = await target.run(_create("slow"))
    assert result.completed and (tmp_path / "slow").exists()


async def test_a_target_slower_than_the_program_timeout_is_unavailable(fault_server, tmp_path):
    t = await connect(fault_server, tmp_path, program_timeout=0.5)
    fault_server.slow_seconds = 3.0
    fault_server.plan = ["slow"]
    try:
        with pytest.raises(TargetUnavailable, match="no answer within") as info:
            await t.run(_create("late"))
        assert info.value.outcome_unknown
        # The connection itself is fine: the next program runs on it.
        assert (await t.run(ControlProgram([MakeDirs("d")]))).completed
        assert t.connections == 1
    finally:
        await t.close()


async def test_reconnects_with_bounded_backoff_and_then_recovers(fault_server, tmp_path):
    t = await connect(fault_server, tmp_path, reconnect_attempts=3, reconnect_delay=0.01)
    try:
        await fault_server.stop()
        with pytest.raises(TargetUnavailable, match="cannot connect after 3 attempts") as info:
            await t.run(_create("f"))
        assert not info.value.outcome_unknown and not (tmp_path / "f").exists()
        await fault_server.start()  # the same host comes back on the same port
        assert (await t.run(_create("f"))).completed
        assert t.connections == 2
    finally:
        await t.close()


async def test_a_connection_found_dropped_before_sending_is_retried_transparently(fault_server, target, tmp_path):
    fault_server.drop_connections()
    await asyncio.sleep(0.1)  # let the client notice
    result = await target.run(_create("f"))
    assert result.completed and target.connections == 2


async def test_concurrent_programs_share_one_connection(fault_server, target, tmp_path):
    results = await asyncio.gather(*(target.run(ControlProgram([CreateExclusive(f"f{i}", b"%d" % i)])) for i in range(24)))
    assert all(r.completed for r in results)
    assert target.connections == 1
    assert sorted(os.listdir(tmp_path)) == sorted(f"f{i}" for i in range(24))


# -- committed state survives every fault ----------------------------------------


_PUBLICATION_FAULTS = [
    # The commit program never ran: the publication is pending.
    ("drop-before-run", "failed"),
    # It ran but did not report: the publisher re-observes and finds it.
    ("drop-after-run", "committed"),
    ("drop-mid-answer", "committed"),
    ("kill-after-answer", "committed"),
    ("stale-answer", "committed"),
]


# With warm processes the commit program runs in one started before it; only
# without them is a refused channel the commit program's own.
@pytest.mark.parametrize(
    ("fault", "expected", "spares"),
    [(*case, spares) for case in _PUBLICATION_FAULTS for spares in (0, 2)] + [("refuse-channel", "failed", 0)],
)
async def test_publication_through_a_failing_target_keeps_old_or_new(fault_server, tmp_path, fault, expected, spares):
    t = await connect(fault_server, tmp_path, reconnect_delay=0.01, spares=spares)
    try:
        await materialize_session(t, SID)
        lease = await acquire_lease(t, SID, ME)
        publisher = Publisher(lease)
        assert (await publisher.publish({"meta": b"v1", "segment": b"turn one\n"})).committed
        new = {"meta": b"v2", "segment": b"turn one\nturn two\n"}
        fault_server.plan = [fault]  # the publication's commit program
        try:
            outcome = await publisher.publish(new)
            reported = "committed" if outcome.committed else "unchanged"
        except PublicationFailed:
            reported = "failed"
        seen = await (await read_committed(LocalTarget(tmp_path), SID)).read_all()
        assert seen in ({"meta": b"v1", "segment": b"turn one\n"}, new)
        assert reported == expected
        assert seen == (new if reported == "committed" else {"meta": b"v1", "segment": b"turn one\n"})
        # Whatever happened, the writer can finish the job.
        if publisher.pending is not None:
            await publisher.retry()
        elif reported != "committed":
            await publisher.publish(new)
        assert await (await read_committed(LocalTarget(tmp_path), SID)).read_all() == new
    finally:
        await t.close()


async def test_a_program_killed_after_its_answer_is_not_success_even_when_complete(fault_server, target, tmp_path):
    fault_server.plan = ["kill-after-answer"]
    with pytest.raises(TargetUnavailable, match="SIGKILL"):
        await target.run(ControlProgram([MakeDirs("d")]))
    listing = await target.run(ControlProgram([ListDir(".")]))
    assert listing[0].status is Status.OK and listing[0].value == ("d",)


# -- warm processes ----------------------------------------------------------------


async def until(condition, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_programs_go_to_processes_started_before_they_were_needed(fault_server, target, tmp_path):
    await until(lambda: len(fault_server.waiting) == 2)
    started, ran = len(fault_server.commands), fault_server.ran
    assert (await target.run(_create("a"))).completed
    assert (await target.run(_create("b"))).completed
    # Both ran in processes that were already waiting; the two started
    # meanwhile are the replacements, waiting in turn.
    await until(lambda: len(fault_server.waiting) == 2)
    assert len(fault_server.commands) == started + 2 and fault_server.ran == ran + 2
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


async def test_a_warm_process_killed_while_waiting_is_never_sent_the_program(fault_server, target, tmp_path):
    await until(lambda: len(fault_server.waiting) == 2)
    fault_server.kill_waiting()
    await until(lambda: not fault_server.waiting)
    ran = fault_server.ran
    result = await target.run(_create("f"))
    assert result.completed and fault_server.ran == ran + 1 and (tmp_path / "f").read_bytes() == b"x"
    assert target.connections == 1


async def test_a_warm_process_whose_interpreter_went_away_falls_back_to_the_command_name(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spares=1)
    try:
        await until(lambda: len(fault_server.waiting) == 1)
        fault_server.plan = ["command-not-found"]  # the replacement finds no interpreter
        assert (await target.run(_create("a"))).completed
        await until(lambda: "command-not-found" in fault_server.seen and len(fault_server.commands) == 3)
        await asyncio.sleep(0.1)  # its exit status arrives
        assert fault_server.commands[2].startswith("/")  # the replacement tried the cached path
        assert (await target.run(_create("b"))).completed and (tmp_path / "b").exists()
        # b, and the process warmed after it, start by the command name.
        assert len(fault_server.commands) > 3
        assert all(command.startswith("python3 ") for command in fault_server.commands[3:])
    finally:
        await target.close()


async def test_warm_processes_are_closed_when_idle_and_with_the_target(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spare_idle_seconds=0.3)
    await until(lambda: len(fault_server.waiting) == 2)
    await until(lambda: not fault_server.waiting, seconds=3)
    assert (await target.run(_create("f"))).completed  # a fresh start, then warm ones again
    await until(lambda: len(fault_server.waiting) == 2)
    await target.close()
    await until(lambda: not fault_server.waiting)


async def test_a_refused_warm_process_leaves_the_program_to_a_fresh_one(fault_server, tmp_path):
    target = await connect(fault_server, tmp_path, spares=1)
    try:
        await until(lambda: len(fault_server.waiting) == 1)
        fault_server.plan = ["refuse-channel"]  # the replacement's channel
        assert (await target.run(_create("a"))).completed
        await until(lambda: "refuse-channel" in fault_server.seen)
        assert (await target.run(_create("b"))).completed
        assert sorted(os.listdir(tmp_path)) == ["a", "b"]
    finally:
        await target.close()
