"""Sessions nobody used for ``sessionMaxAgeDays`` are removed when the server
starts (in the background, after ``initialized``), except the
``sessionKeepRecent`` most recent; ``mevedel/session/list`` then shows only
those."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import msgspec

from deadlines import ticks
from mevedel_protocol import methods
from mevedel_server.store import (
    ClientIdentity,
    LeaseRecord,
    Publisher,
    acquire_lease,
    decode_record,
    encode_record,
    materialize_session,
)
from mevedel_server.store.content.sidecar import Layout, Sidecar, encode_sidecar
from mevedel_server.targets import LocalTarget

from .conftest import SERVER, initialize_params, request

OLD = ClientIdentity("an-old-client", "old-host")
DAY = 86_400


def _sid(n: int) -> str:
    return f"2026-01-01T00-00-{n:012x}"


async def _aged(root: Path, session_id: str, days: int) -> None:
    """A session published and released ``days`` ago."""
    target = LocalTarget(root)
    stamp = int(time.time()) - days * DAY
    await materialize_session(target, session_id)
    lease = await acquire_lease(target, session_id, OLD)
    sidecar = Sidecar(
        session_id=session_id, workspace_id="d" * 64, created_at=stamp, updated_at=stamp, total_turn_count=1,
        layout=Layout(segment_parts=[1], prompt_pages=1, file_pages=0), first_user_message="hi", latest_user_message="hi",
    )
    await Publisher(lease).publish({"session.json": encode_sidecar(sidecar), "segment-0001.chat.jsonl": b"{}\n"})
    await lease.release()
    directory = root / ".mevedel" / "sessions" / session_id
    lease_dir = directory / ".lease"
    head = lease_dir / max(n for n in os.listdir(lease_dir) if n.startswith("generation-"))
    record = decode_record(LeaseRecord, head.read_bytes(), "test")
    head.write_bytes(encode_record(msgspec.structs.replace(record, renewed_at=stamp, expires_at=stamp + 60)))
    os.utime(directory, (stamp, stamp))


async def test_sessions_older_than_the_limit_are_removed_when_the_server_starts(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for n in range(1, 7):
        await _aged(project, _sid(n), 40 + n)
    sessions = project / ".mevedel" / "sessions"
    client = await SERVER.start()
    try:
        await client.initialize_session(initialize_params(project, sessionKeepRecent=2))
        for _ in ticks():
            if set(os.listdir(sessions)) == {_sid(1), _sid(2)}:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"expired sessions were not removed: {sorted(os.listdir(sessions))}")
        listed = await request(client, methods.SESSION_LIST, {})
        assert {row["sessionId"] for row in listed["sessions"]} == {_sid(1), _sid(2)}
    finally:
        await client.shutdown_session()


async def test_a_zero_max_age_keeps_every_session(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for n in range(1, 5):
        await _aged(project, _sid(n), 400)
    client = await SERVER.start()
    try:
        await client.initialize_session(initialize_params(project, sessionMaxAgeDays=0, sessionKeepRecent=0))
        listed = await request(client, methods.SESSION_LIST, {})
        assert len(listed["sessions"]) == 4
        assert len(os.listdir(project / ".mevedel" / "sessions")) == 4
    finally:
        await client.shutdown_session()
