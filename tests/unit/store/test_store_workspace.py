"""Workspace identity, session IDs and session materialization."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime

import pytest

from mevedel_server.store import (
    InvalidSessionId,
    RecordError,
    RecordErrorKind,
    SessionOccupied,
    allocate_session_id,
    check_session_id,
    ensure_workspace_id,
    materialize_session,
    new_session_id,
    read_workspace_id,
    saved_session_ids,
)
from mevedel_server.targets import LocalTarget, UnsafePathError


async def test_workspace_identity_is_created_once_and_then_read(tmp_path):
    target = LocalTarget(tmp_path)
    assert await read_workspace_id(target) is None
    first = await ensure_workspace_id(target)
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert await ensure_workspace_id(target) == first
    assert await read_workspace_id(target) == first
    on_disk = json.loads((tmp_path / ".mevedel" / "workspace-id").read_bytes())
    assert on_disk == {"format_version": 1, "workspace_id": first}


async def test_concurrent_creators_agree_on_one_identity(tmp_path):
    target = LocalTarget(tmp_path)
    ids = await asyncio.gather(*(ensure_workspace_id(target) for _ in range(8)))
    assert len(set(ids)) == 1


@pytest.mark.parametrize(
    "content,kind",
    [
        (b'{"format_version":1,"workspace_id":"abc"}', RecordErrorKind.INVALID_VALUE),
        (b'{"format_version":1,"workspace_id":"', RecordErrorKind.TRUNCATED),
        (b"f" * 64, RecordErrorKind.MALFORMED),
    ],
)
async def test_malformed_identity_is_an_error_and_is_never_overwritten(tmp_path, content, kind):
    (tmp_path / ".mevedel").mkdir()
    (tmp_path / ".mevedel" / "workspace-id").write_bytes(content)
    target = LocalTarget(tmp_path)
    for call in (ensure_workspace_id, read_workspace_id):
        with pytest.raises(RecordError) as info:
            await call(target)
        assert info.value.kind is kind
        assert "workspace-id" in str(info.value)
    with pytest.raises(RecordError):
        await materialize_session(target, "2026-07-19T09-47-bf87b5dd793a")
    assert (tmp_path / ".mevedel" / "workspace-id").read_bytes() == content
    assert not (tmp_path / ".mevedel" / "sessions").exists()


async def test_symlinked_state_directory_fails_closed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".mevedel").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError):
        await ensure_workspace_id(LocalTarget(tmp_path / "."))
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_session_id_format():
    sid = new_session_id(datetime(2026, 7, 19, 9, 47))
    assert re.fullmatch(r"2026-07-19T09-47-[0-9a-f]{12}", sid)
    assert check_session_id("2026-07-19T09-47-bf87b5dd793a") == "2026-07-19T09-47-bf87b5dd793a"


@pytest.mark.parametrize(
    "bad",
    [
        "2026-07-19T09-47-BF87B5DD793A",
        "2026-07-19T09-47-bf87b5dd793",
        "2026-13-19T09-47-bf87b5dd793a",
        "2026-02-30T09-47-bf87b5dd793a",
        "2026-07-19T25-47-bf87b5dd793a",
        "../2026-07-19T09-47-bf87b5dd793a",
        "",
    ],
)
def test_malformed_session_ids_are_refused(bad):
    with pytest.raises(InvalidSessionId):
        check_session_id(bad)


async def test_allocation_avoids_saved_and_live_identities(tmp_path):
    target = LocalTarget(tmp_path)
    now = datetime(2026, 7, 19, 9, 47)
    await materialize_session(target, "2026-07-19T09-47-000000000001")
    suffixes = iter(["000000000001", "000000000002", "000000000003"])
    sid = await allocate_session_id(target, live_ids={"2026-07-19T09-47-000000000002"}, now=now, suffix=lambda: next(suffixes))
    assert sid == "2026-07-19T09-47-000000000003"


async def test_materialization_refuses_an_occupied_directory(tmp_path):
    target = LocalTarget(tmp_path)
    sid = "2026-07-19T09-47-bf87b5dd793a"
    paths = await materialize_session(target, sid)
    root = tmp_path / ".mevedel" / "sessions" / sid
    assert sorted(p.name for p in root.iterdir()) == [".lease", ".publications"]
    assert paths.root == f".mevedel/sessions/{sid}"
    (root / "keep").write_bytes(b"x")
    with pytest.raises(SessionOccupied, match=sid):
        await materialize_session(target, sid)
    assert (root / "keep").read_bytes() == b"x"
    assert await saved_session_ids(target) == [sid]
