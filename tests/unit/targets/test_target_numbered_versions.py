"""A numbered family of version files, each published as one new file: the
stamped create written in place under its number (``StampedCreateInPlace``),
the proof of which member is newest (``NewestIs``) and the read of only the
head of the newest (``ReadNewest(max_bytes=...)``), on LocalTarget and on
SshTarget over a real OpenSSH server (the same directory seen both ways),
inline, and through the fault-injecting target."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys

import pytest

from mevedel_server.targets import (
    Barrier,
    ClockStamp,
    ControlProgram,
    FaultInjectingTarget,
    LocalTarget,
    NewestIs,
    Read,
    ReadNewest,
    Replace,
    SimulatedCrash,
    StampedCreate,
    StampedCreateInPlace,
    Status,
)
from mevedel_server.targets.executor import Executor, pin_root
from mevedel_server.targets.inotify import IN_CREATE, IN_MOVED_TO, events, libc

FAMILY = ("", 10, ".version")
HEADER = [b'{"version":1,"at":', ClockStamp(), b',"until":', ClockStamp(30), b"}\n"]


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "versions").mkdir(parents=True)
    return r


def _fs_seconds(path) -> int:
    path.write_bytes(b"")
    return os.stat(path).st_mtime_ns // 1_000_000_000


class _Created:
    """Every name created in a directory while it is watched (inotify: a
    name made and removed in between is seen too)."""

    def __init__(self, directory) -> None:
        found = libc()
        if found is None:
            pytest.skip("no inotify here")
        self.fd = found.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert found.inotify_add_watch(self.fd, os.fsencode(directory), IN_CREATE | IN_MOVED_TO) >= 0

    def names(self) -> list[str]:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        finally:
            os.close(self.fd)
        return [name for _wd, _mask, name in events(data)]


# -- StampedCreateInPlace --------------------------------------------------------


async def test_a_stamped_in_place_create_writes_its_own_time_under_its_name_and_nothing_beside(root, tmp_path, open_target):
    t = await open_target(root)
    payload = b"x" * 100_000
    op = StampedCreateInPlace("versions/0000000001.version", [*HEADER, payload])
    before = _fs_seconds(tmp_path / "before")
    watch = _Created(root / "versions")
    result = await t.run(ControlProgram([op, Read("versions/0000000001.version")]))
    created = watch.names()
    after = _fs_seconds(tmp_path / "after")
    assert result.completed
    reading = result[0].value
    written = root / "versions" / "0000000001.version"
    # The reading is the new file's own time, and the file keeps it.
    assert before <= reading <= after
    assert os.stat(written).st_mtime_ns // 1_000_000_000 == reading
    assert written.read_bytes() == result[1].value == op.content(reading)
    assert op.content(reading) == b'{"version":1,"at":%d,"until":%d}\n' % (reading, reading + 30) + payload
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    # No temporary file and no clock probe was ever made beside it.
    assert created == ["0000000001.version"]
    assert os.listdir(root / "versions") == ["0000000001.version"]


async def test_a_stamped_create_makes_names_beside_its_own_where_the_in_place_one_makes_none(root, open_target):
    """What the in-place create spares: the exclusive stamped create probes
    the clock with a file of its own and writes a temporary file it links."""
    t = await open_target(root)
    watch = _Created(root / "versions")
    result = await t.run(ControlProgram([StampedCreate("versions/0000000001.version", HEADER)]))
    probe, temporary, name = watch.names()
    assert result.completed and name == "0000000001.version"
    assert probe.startswith(".clock-probe-") and temporary.startswith(".0000000001.version.") and temporary.endswith(".tmp")


async def test_a_deferred_stamped_in_place_create_is_flushed_by_the_programs_barrier(root, open_target):
    t = await open_target(root)
    ops = [
        StampedCreateInPlace("versions/0000000001.version", HEADER, deferred=True),
        StampedCreateInPlace("versions/0000000002.version", [*HEADER, b"second"], deferred=True),
        Barrier(),
        ReadNewest("versions", *FAMILY),
    ]
    result = await t.run(ControlProgram(ops))
    assert result.completed
    assert result[2].value == 2  # the barrier covered both files
    first, second = result[0].value, result[1].value
    assert (root / "versions" / "0000000001.version").read_bytes() == ops[0].content(first)
    assert result[3].value == ("0000000002.version", ops[1].content(second))
    assert sorted(os.listdir(root / "versions")) == ["0000000001.version", "0000000002.version"]


async def test_a_stamped_in_place_create_refuses_any_name_already_there_and_stops_the_program(root, tmp_path, open_target):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"outside bytes")
    versions = root / "versions"
    (versions / "0000000001.version").write_bytes(b"kept")
    (versions / "0000000002.version").symlink_to(outside / "secret")
    (versions / "0000000003.version").symlink_to(outside / "nothing-here")
    t = await open_target(root)
    for name in ("0000000001.version", "0000000002.version", "0000000003.version"):
        op = StampedCreateInPlace(f"versions/{name}", [*HEADER, b"evil"], deferred=True)
        result = await t.run(ControlProgram([op, Barrier(), Replace("head", b"names it")]))
        assert [r.status for r in result] == [Status.CONFLICT, Status.SKIPPED, Status.SKIPPED], name
        assert result[0].reason == f"'versions/{name}' already exists" and result[0].value is None
    assert (versions / "0000000001.version").read_bytes() == b"kept"
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_bytes() == b"outside bytes"
    assert not (root / "head").exists()


def test_a_failed_in_place_write_leaves_no_file(root):
    """A write the filesystem refuses part-way (here: past the process's
    file size limit) removes the file it had begun, as CreateInPlace does."""
    script = """
import asyncio, resource, signal, sys
from mevedel_server.targets import ClockStamp, ControlProgram, ListDir, LocalTarget, StampedCreateInPlace
target = LocalTarget(sys.argv[1], inline=True)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
op = StampedCreateInPlace("versions/0000000001.version", [b"at ", ClockStamp(), b" ", b"x" * 100000], optional=True)
result = asyncio.run(target.run(ControlProgram([op, ListDir("versions")])))
print(result[0].status.value, result[0].reason, list(result[1].value), sep="|")
"""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, env=env, check=True)
    status, reason, listing = out.stdout.strip().split("|")
    assert (status, reason) == ("failed", os.strerror(errno.EFBIG))
    assert listing == "[]" and os.listdir(root / "versions") == []


def test_stamped_parts_are_refused_before_a_file_is_made(root):
    """The executor checks what the wire brings (a program built here is
    checked at construction already)."""
    executor = Executor(str(root), pin_root(str(root)))
    results, stopped_at = executor.run([("StampedCreateInPlace", "versions/0000000001.version", False, [b"a", "text"])])
    assert results[0][0] == "failed" and stopped_at == 0
    assert os.listdir(root / "versions") == []
    with pytest.raises(TypeError):
        StampedCreateInPlace("versions/0000000001.version", [b"a", "text"])


# -- NewestIs ------------------------------------------------------------------


async def test_newest_is_proves_the_member_with_the_greatest_number(root, open_target):
    versions = root / "versions"
    for name in ("0000000002.version", "0000000010.version", "0000000009.version"):
        (versions / name).write_bytes(b"")
    # Not members: no suffix, other width, not digits, a temporary file.
    for name in ("0000000011", "00000000012.version", "00000000x3.version", ".0000000014.version.1a2b.tmp"):
        (versions / name).write_bytes(b"")
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                NewestIs("versions", *FAMILY, "0000000010.version"),
                NewestIs("versions", *FAMILY, "0000000009.version", optional=True),
                NewestIs("versions", *FAMILY, None, optional=True),
                NewestIs("versions", "", 10, "", "0000000011", optional=True),
            ]
        )
    )
    assert [r.status for r in result] == [Status.OK, Status.MISMATCH, Status.MISMATCH, Status.OK]
    assert result[0].value == "0000000010.version"
    assert result[1].value == result[2].value == "0000000010.version"
    assert "'versions'" in result[1].reason and "0000000010.version" in result[1].reason
    assert "'versions'" in result[2].reason
    assert result[3].value == "0000000011"


async def test_newest_is_only_lists_the_directory(root, open_target):
    """A newest member that no read could take (a FIFO) is still proved
    newest: nothing is opened but the directory."""
    os.mkfifo(root / "versions" / "0000000004.version")
    t = await open_target(root)
    result = await t.run(
        ControlProgram([NewestIs("versions", *FAMILY, "0000000004.version"), ReadNewest("versions", *FAMILY, optional=True)])
    )
    assert result[0].status is Status.OK
    assert result[1].status is Status.FAILED and "not a regular file" in result[1].reason


async def test_no_member_is_an_empty_or_missing_directory(root, open_target):
    (root / "empty").mkdir()
    (root / "empty" / "unrelated").write_bytes(b"")
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                NewestIs("empty", *FAMILY, None),
                NewestIs("missing", *FAMILY, None),
                NewestIs("missing/below", *FAMILY, None),
                NewestIs("missing", *FAMILY, "0000000001.version", optional=True),
            ]
        )
    )
    assert [r.status for r in result] == [Status.OK, Status.OK, Status.OK, Status.MISMATCH]
    assert [r.value for r in result] == [None, None, None, None]
    assert "'missing'" in result[3].reason


async def test_a_newest_mismatch_stops_the_program_before_its_write(root, open_target):
    (root / "versions" / "0000000001.version").write_bytes(b"one")
    t = await open_target(root)
    seen = "0000000001.version"
    stale = await t.run(
        ControlProgram(
            [
                NewestIs("versions", *FAMILY, None),
                StampedCreateInPlace("versions/0000000001.version", HEADER, deferred=True),
                Barrier(),
            ]
        )
    )
    assert [r.status for r in stale] == [Status.MISMATCH, Status.SKIPPED, Status.SKIPPED]
    assert stale.stopped_at == 0 and stale[0].value == seen
    (root / "versions" / "0000000002.version").write_bytes(b"another writer's")
    raced = await t.run(ControlProgram([NewestIs("versions", *FAMILY, seen), Replace("head", b"3")]))
    assert [r.status for r in raced] == [Status.MISMATCH, Status.SKIPPED] and raced[0].value == "0000000002.version"
    assert not (root / "head").exists()
    assert sorted(os.listdir(root / "versions")) == ["0000000001.version", "0000000002.version"]
    fresh = await t.run(
        ControlProgram(
            [
                NewestIs("versions", *FAMILY, "0000000002.version"),
                StampedCreateInPlace("versions/0000000003.version", HEADER, deferred=True),
                Barrier(),
                NewestIs("versions", *FAMILY, "0000000003.version"),
            ]
        )
    )
    assert fresh.completed


async def test_newest_is_fails_closed_on_a_symlinked_directory(root, tmp_path, open_target):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0000000001.version").write_bytes(b"")
    (root / "linked").symlink_to(elsewhere)
    t = await open_target(root)
    result = await t.run(ControlProgram([NewestIs("linked", *FAMILY, None)]))
    assert result[0].status is Status.FAILED and result[0].unsafe


def test_newest_is_checks_its_family_and_name_when_built():
    for bad in (dict(digits=0), dict(prefix="a/b"), dict(name="0000000001"), dict(name="000000001.version")):
        with pytest.raises(ValueError):
            NewestIs("versions", **{"prefix": "", "digits": 10, "suffix": ".version", "name": None, **bad})
    with pytest.raises(ValueError, match="cannot be deferred"):
        NewestIs("versions", *FAMILY, None, deferred=True)
    assert NewestIs(".", *FAMILY, None).path == "."


# -- ReadNewest(max_bytes) -----------------------------------------------------


async def test_read_newest_reads_at_most_max_bytes_of_the_newest(root, open_target):
    versions = root / "versions"
    (versions / "0000000001.version").write_bytes(b"old")
    with open(versions / "0000000002.version", "wb") as big:
        big.write(b"HEAD")
        # 64 GiB, sparse: a read of it whole could not be answered.
        big.truncate(64 * 1024**3)
    (root / "short").mkdir()
    (root / "short" / "0000000001.version").write_bytes(b"tiny")
    t = await open_target(root)
    result = await t.run(
        ControlProgram(
            [
                ReadNewest("versions", *FAMILY, max_bytes=16),
                ReadNewest("short", *FAMILY, max_bytes=16),
                ReadNewest("short", *FAMILY, max_bytes=0),
                ReadNewest("short", *FAMILY),
                ReadNewest("missing", *FAMILY, max_bytes=16, optional=True),
            ]
        )
    )
    assert [r.status for r in result] == [Status.OK] * 4 + [Status.ABSENT]
    assert result[0].value == ("0000000002.version", b"HEAD" + bytes(12))
    assert result[1].value == ("0000000001.version", b"tiny")
    assert result[2].value == ("0000000001.version", b"")
    assert result[3].value == ("0000000001.version", b"tiny")


def test_read_newest_refuses_a_limit_that_is_no_whole_number():
    for bad in (-1, True, 1.5, "16"):
        with pytest.raises(ValueError, match="size limit"):
            ReadNewest("versions", *FAMILY, max_bytes=bad)
    assert ReadNewest("versions", *FAMILY).max_bytes is None


def test_read_newest_travels_as_before_without_a_limit():
    from mevedel_server.targets.plain_form import plain_operation

    assert plain_operation(ReadNewest("v", *FAMILY))[3] == ["", 10, ".version"]
    assert plain_operation(ReadNewest("v", *FAMILY, max_bytes=7))[3] == ["", 10, ".version", 7]


# -- inline, and through fault injection --------------------------------------


async def test_an_inline_target_answers_as_a_threaded_one(root, tmp_path):
    other = tmp_path / "other"
    (other / "versions").mkdir(parents=True)
    answers = []
    for where, target in ((root, LocalTarget(root)), (other, LocalTarget(other, inline=True))):
        ops = [
            NewestIs("versions", *FAMILY, None),
            StampedCreateInPlace("versions/0000000001.version", [b"v1 ", ClockStamp()], deferred=True),
            Barrier(),
            NewestIs("versions", *FAMILY, "0000000001.version"),
            ReadNewest("versions", *FAMILY, max_bytes=3),
            NewestIs("versions", *FAMILY, None),
        ]
        result = await target.run(ControlProgram(ops))
        assert (where / "versions" / "0000000001.version").read_bytes() == ops[1].content(result[1].value)
        answers.append([(r.status, r.value if i != 1 else None) for i, r in enumerate(result)])
    assert answers[0] == answers[1]
    assert [status for status, _value in answers[0]] == [Status.OK] * 5 + [Status.MISMATCH]
    assert answers[0][4][1] == ("0000000001.version", b"v1 ")


async def test_a_crash_at_a_stamped_in_place_create_leaves_what_an_in_place_one_does(root, open_target):
    inner = await open_target(root)
    target = FaultInjectingTarget(inner, fail_at=1, mode="crash")
    op = StampedCreateInPlace("versions/0000000001.version", [b"at ", ClockStamp(), b";", b"y" * 40], deferred=True)
    with pytest.raises(SimulatedCrash) as crash:
        await target.run(ControlProgram([NewestIs("versions", *FAMILY, None), op, Barrier()]))
    assert crash.value.operation is op and target.writes == 1
    # Under its own name, as a process dying mid-write leaves an in-place
    # create: the half it wrote (the failed write's removal never ran).
    assert os.listdir(root / "versions") == ["0000000001.version"]
    debris = (root / "versions" / "0000000001.version").read_bytes()
    reading = int(debris[3 : debris.index(b";")])
    assert debris == op.content(reading)[: len(op.content(reading)) // 2]


async def test_a_power_loss_before_the_barrier_tears_a_stamped_in_place_create_under_its_name(root, open_target):
    inner = await open_target(root)
    target = FaultInjectingTarget(inner, fail_at=2, mode="crash", debris=False, power_loss=True)
    op = StampedCreateInPlace("versions/0000000001.version", [b"at ", ClockStamp(), b";", b"z" * 40], deferred=True)
    with pytest.raises(SimulatedCrash) as crash:
        await target.run(ControlProgram([op, Barrier(), Replace("head", b"names it")]))
    assert isinstance(crash.value.operation, Barrier)
    torn = (root / "versions" / "0000000001.version").read_bytes()
    reading = int(torn[3 : torn.index(b";")])
    assert torn == op.content(reading)[: len(op.content(reading)) // 2]
    assert not (root / "head").exists()


async def test_a_newest_mismatch_stops_a_program_before_its_fault_point(root, open_target):
    (root / "versions" / "0000000001.version").write_bytes(b"")
    target = FaultInjectingTarget(await open_target(root), fail_at=1, mode="crash")
    op = StampedCreateInPlace("versions/0000000001.version", HEADER, deferred=True)
    result = await target.run(ControlProgram([NewestIs("versions", *FAMILY, None), op, Barrier()]))
    assert [r.status for r in result] == [Status.MISMATCH, Status.SKIPPED, Status.SKIPPED]
    assert not target.fired and target.writes == 0
