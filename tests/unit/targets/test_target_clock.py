"""The target clock comes from the target filesystem, never the client's
wall clock."""

from __future__ import annotations

import os
import time

from mevedel_server.targets import (
    Clock,
    ControlProgram,
    LocalTarget,
    Read,
    Status,
    read_target_clock,
)


def _fs_seconds(path) -> int:
    path.write_bytes(b"")
    return os.stat(path).st_mtime_ns // 1_000_000_000


async def test_reading_lies_between_filesystem_stamps_taken_around_it(tmp_path):
    target = LocalTarget(tmp_path)
    (tmp_path / "d").mkdir()
    before = _fs_seconds(tmp_path / "before")
    reading = await read_target_clock(target, "d")
    after = _fs_seconds(tmp_path / "after")
    assert before <= reading <= after
    assert os.listdir(tmp_path / "d") == []  # the probe is gone


async def test_client_wall_clock_does_not_enter_the_reading(tmp_path, monkeypatch):
    target = LocalTarget(tmp_path)
    before = _fs_seconds(tmp_path / "before")
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)
    monkeypatch.setattr(time, "time_ns", lambda: 4_000_000_000 * 10**9)
    reading = await read_target_clock(target)
    monkeypatch.undo()
    after = _fs_seconds(tmp_path / "after")
    assert before <= reading <= after < 4_000_000_000


async def test_clock_is_read_in_the_same_program_as_records(tmp_path):
    (tmp_path / "record").write_bytes(b"r")
    result = await LocalTarget(tmp_path).run(ControlProgram([Read("record"), Clock(".")]))
    assert result.completed
    assert result[0].value == b"r" and isinstance(result[1].value, int)


async def test_clock_in_absent_or_symlinked_directory_fails(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = await LocalTarget(tmp_path).run(
        ControlProgram([Clock("missing", optional=True), Clock("link", optional=True)])
    )
    assert result[0].status is Status.ABSENT
    assert result[1].status is Status.FAILED and result[1].unsafe
    assert os.listdir(tmp_path / "real") == []
