"""What lease transactions cost in round trips (one control program is one
round trip, whatever the target), and the two operations behind those
counts, on LocalTarget and on SshTarget over a real OpenSSH server: the
stamped write that makes a renewal one program (its times are the target
clock the write itself reads) and the newest-of-a-family read that makes an
observation one program."""

from __future__ import annotations

import os
import time

import pytest

from mevedel_server.store import (
    ClientIdentity,
    LeaseRecord,
    Publisher,
    acquire_lease,
    decode_record,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.targets import (
    ControlProgram,
    ListDir,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
    Read,
    Status,
    Verify,
)
from mevedel_server.targets.program import ClockStamp, ReadNewest, StampedCreate

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("counted-client", "desk")
OTHER = ClientIdentity("other-client", "laptop")


class CountingTarget(ProgramTarget):
    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs: list[ControlProgram] = []

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs.append(program)
        return await self.inner.run(program)

    def since(self, mark: int) -> int:
        return len(self.programs) - mark


def _fs_seconds(path) -> int:
    path.write_bytes(b"")
    return os.stat(path).st_mtime_ns // 1_000_000_000


def _generation_bytes(root, generation: int) -> bytes:
    path = os.path.join(root, ".mevedel", "sessions", SID, ".lease", f"generation-{generation:020d}.json")
    with open(path, "rb") as handle:
        return handle.read()


@pytest.fixture
async def counted(root):
    inner = LocalTarget(root)
    await materialize_session(inner, SID)
    return CountingTarget(inner)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    return r


async def test_a_renewal_is_one_program_and_takes_its_times_from_that_program(counted, tmp_path):
    lease = await acquire_lease(counted, SID, ME, duration_seconds=45)
    mark = len(counted.programs)
    before = _fs_seconds(tmp_path / "before")
    await lease.renew()
    after = _fs_seconds(tmp_path / "after")
    assert counted.since(mark) == 1
    record = lease.record
    assert before <= record.renewed_at <= after and record.expires_at == record.renewed_at + 45
    assert lease.now == record.renewed_at
    on_disk = _generation_bytes(tmp_path / "root", lease.generation)
    assert on_disk == lease.raw and decode_record(LeaseRecord, on_disk, "test") == record
    # The handle's bytes are exactly what a later proof must match.
    await lease.renew()
    assert counted.since(mark) == 2 and lease.record.client_id == ME.client_id


async def test_claim_adoption_release_and_publication_round_trips(counted, tmp_path):
    mark = len(counted.programs)
    await acquire_lease(counted, SID, ME, duration_seconds=45)
    # One observation (listing, newest generation and clock together), then the claim.
    assert counted.since(mark) == 2

    mark = len(counted.programs)
    before = _fs_seconds(tmp_path / "before")
    adopted = await acquire_lease(counted, SID, ME, duration_seconds=45)  # a restart with the same client id
    after = _fs_seconds(tmp_path / "after")
    assert counted.since(mark) == 2
    assert before <= adopted.record.renewed_at <= after and adopted.record.expires_at == adopted.record.renewed_at + 45

    publisher = Publisher(adopted)
    await publisher.publish({"turn": b"one"})
    mark = len(counted.programs)
    await publisher.publish({"turn": b"two", "meta": b"{}"})
    assert counted.since(mark) == 1  # artifacts, manifest and the head commit

    mark = len(counted.programs)
    await adopted.release()
    assert counted.since(mark) == 1

    mark = len(counted.programs)
    await acquire_lease(counted, SID, OTHER)
    assert counted.since(mark) == 2

    mark = len(counted.programs)
    committed = await read_committed(counted, SID)
    assert await committed.read_all() == {"turn": b"two", "meta": b"{}"}
    assert counted.since(mark) == 2  # the lease head with the manifest it names, then the bytes


async def test_a_claim_stamps_its_active_generation_from_the_claiming_program(counted, tmp_path):
    before = _fs_seconds(tmp_path / "before")
    lease = await acquire_lease(counted, SID, OTHER, duration_seconds=30)
    after = _fs_seconds(tmp_path / "after")
    claim = counted.programs[-1]
    assert any(isinstance(op, StampedCreate) for op in claim.operations)
    record = lease.record
    assert before <= record.renewed_at <= after and record.expires_at == record.renewed_at + 30
    assert _generation_bytes(tmp_path / "root", lease.generation) == lease.raw
    observed = await observe_lease(counted.inner, SID)
    assert observed.record == record


# -- the two target operations behind these counts, on both targets -------------



async def test_a_stamped_create_writes_the_clock_it_reads(root, tmp_path, open_target, monkeypatch):
    target = await open_target(root)
    (root / "records").mkdir()
    op = StampedCreate("records/r.json", [b'{"at":', ClockStamp(), b',"until":', ClockStamp(90), b',"before":', ClockStamp(-5), b"}"])
    before = _fs_seconds(tmp_path / "before")
    # A client clock far in the future never reaches the stamp.
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + 7200)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + 7200 * 10**9)
    result = await target.run(ControlProgram([op, Read("records/r.json"), ListDir("records")]))
    monkeypatch.undo()
    after = _fs_seconds(tmp_path / "after")
    assert result.completed
    reading = result[0].value
    assert before <= reading <= after
    assert result[1].value == b'{"at":%d,"until":%d,"before":%d}' % (reading, reading + 90, reading - 5)
    assert op.content(reading) == result[1].value
    assert result[2].value == ("r.json",)  # no clock probe or temporary file left behind


async def test_a_stamped_create_refuses_an_existing_file_and_unsafe_parents(root, tmp_path, open_target):
    target = await open_target(root)
    (root / "present").write_bytes(b"keep me")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside)
    stamp = [b"t=", ClockStamp()]
    result = await target.run(
        ControlProgram(
            [
                StampedCreate("present", stamp, optional=True),
                StampedCreate("missing/x", stamp, optional=True),
                StampedCreate("linked/x", stamp, optional=True),
                Verify("present", b"other bytes"),
                StampedCreate("guarded", stamp),
            ]
        )
    )
    statuses = [r.status for r in result]
    assert statuses == [Status.CONFLICT, Status.ABSENT, Status.FAILED, Status.MISMATCH, Status.SKIPPED]
    assert result[0].value is None and result[2].unsafe
    assert (root / "present").read_bytes() == b"keep me"
    assert sorted(os.listdir(root)) == ["linked", "present"] and os.listdir(outside) == []


def test_stamped_content_is_bytes_and_whole_second_stamps():
    with pytest.raises(TypeError):
        StampedCreate("r", [b"x", "text"])
    with pytest.raises(TypeError):
        ClockStamp(1.5)
    with pytest.raises(TypeError):
        ClockStamp(True)
    assert StampedCreate("r", [ClockStamp(2), b"|"]).content(40) == b"42|"


async def test_read_newest_reads_the_greatest_number_of_the_family(root, tmp_path, open_target):
    target = await open_target(root)
    family = root / "family"
    family.mkdir()
    for name, data in [
        ("gen-0002.rec", b"two"),
        ("gen-0010.rec", b"ten"),
        ("gen-0009.rec", b"nine"),
        ("gen-99999.rec", b"five digits: not a member"),
        ("gen-00x1.rec", b"not digits"),
        ("gen-0011.bak", b"other suffix"),
        ("old-0012.rec", b"other prefix"),
        (".gen-0013.rec.1a2b.tmp", b"a temporary file"),
    ]:
        (family / name).write_bytes(data)
    (root / "empty").mkdir()
    (root / "empty" / "unrelated").write_bytes(b"")
    result = await target.run(
        ControlProgram(
            [
                ReadNewest("family", "gen-", 4, ".rec"),
                ReadNewest("empty", "gen-", 4, ".rec", optional=True),
                ReadNewest("missing", "gen-", 4, ".rec", optional=True),
            ]
        )
    )
    assert result[0].status is Status.OK and result[0].value == ("gen-0010.rec", b"ten")
    assert result[1].status is Status.ABSENT and result[2].status is Status.ABSENT


async def test_read_newest_fails_closed_on_a_symlinked_or_odd_newest_member(root, tmp_path, open_target):
    target = await open_target(root)
    (tmp_path / "outside").write_bytes(b"outside bytes")
    (root / "linked").mkdir()
    (root / "linked" / "gen-0001.rec").write_bytes(b"one")
    (root / "linked" / "gen-0002.rec").symlink_to(tmp_path / "outside")
    (root / "odd").mkdir()
    (root / "odd" / "gen-0003.rec").mkdir()
    (root / "via").symlink_to(root / "linked")
    result = await target.run(
        ControlProgram(
            [
                ReadNewest("linked", "gen-", 4, ".rec", optional=True),
                ReadNewest("odd", "gen-", 4, ".rec", optional=True),
                ReadNewest("via", "gen-", 4, ".rec", optional=True),
            ]
        )
    )
    assert result[0].status is Status.FAILED and result[0].unsafe and result[0].value is None
    assert result[1].status is Status.FAILED and not result[1].unsafe
    assert result[2].status is Status.FAILED and result[2].unsafe
    assert "outside" not in (result[0].reason or "") + (result[2].reason or "")


def test_a_numbered_family_is_a_prefix_digits_and_a_suffix():
    for bad in (dict(digits=0), dict(digits=True), dict(prefix="a/b")):
        with pytest.raises(ValueError):
            ReadNewest("d", **{"prefix": "p", "digits": 3, "suffix": ".s", **bad})


async def test_a_claim_from_the_callers_observation_is_one_program_and_a_stale_one_is_observed_again(counted, tmp_path):
    seen = await observe_lease(counted, SID)
    mark = len(counted.programs)
    lease = await acquire_lease(counted, SID, ME, duration_seconds=45, observation=seen)
    assert counted.since(mark) == 1  # the claim alone
    await lease.release()
    stale = await observe_lease(counted, SID)
    # Another client claims and releases in between: the observation is stale.
    other = await acquire_lease(counted.inner, SID, OTHER, duration_seconds=45)
    await other.release()
    mark = len(counted.programs)
    lease = await acquire_lease(counted, SID, ME, duration_seconds=45, observation=stale)
    # The claim from it wrote nothing and failed; a fresh observation and claim followed.
    assert counted.since(mark) == 3
    assert lease.record.client_id == ME.client_id and (await observe_lease(counted, SID)).record.client_id == ME.client_id
    assert lease.generation == (await observe_lease(counted, SID)).generation
