"""The durable-session store over SshTarget on a real OpenSSH server, with
LocalTarget reading the same directory: leases and publications work
unchanged, and a client whose wall clock is hours off cannot move any lease
time."""

from __future__ import annotations

import math
import os
import time

import pytest

from mevedel_server.store import (
    ClientIdentity,
    LeaseHeld,
    Publisher,
    acquire_lease,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.store.content.sidecar import (
    Layout,
    NamingState,
    Sidecar,
    encode_sidecar,
)
from mevedel_server.store.workspace_wide.listing import list_sessions
from mevedel_server.targets import LocalTarget
from mevedel_server.targets.ssh import SshTarget

SID = "2026-07-19T09-47-bf87b5dd793a"
REMOTE = ClientIdentity("remote-client", "laptop")
LOCAL = ClientIdentity("local-client", "workstation")


@pytest.fixture
async def ssh_target(openssh_server, tmp_path):
    target = await SshTarget.connect(openssh_server.url(tmp_path), **openssh_server.options())
    yield target
    await target.close()


def _fs_seconds(path) -> int:
    path.write_bytes(b"")
    return os.stat(path).st_mtime_ns // 1_000_000_000


async def test_publications_over_ssh_are_read_locally_and_the_lease_fences_local_writers(ssh_target, tmp_path):
    await materialize_session(ssh_target, SID)
    lease = await acquire_lease(ssh_target, SID, REMOTE)
    publisher = Publisher(lease)
    first = await publisher.publish({"session.meta.json": b"{}", "segment-0001.chat.jsonl": b"one\n"})
    second = await publisher.publish({"segment-0001.chat.jsonl": b"one\ntwo\n"})
    assert first.committed and second.committed and second.written == ("segment-0001.chat.jsonl",)
    committed = await read_committed(LocalTarget(tmp_path), SID)
    assert committed.head == second.head
    assert await committed.read_all() == {"session.meta.json": b"{}", "segment-0001.chat.jsonl": b"one\ntwo\n"}
    with pytest.raises(LeaseHeld):
        await acquire_lease(LocalTarget(tmp_path), SID, LOCAL)
    await lease.release()
    local_lease = await acquire_lease(LocalTarget(tmp_path), SID, LOCAL)
    assert local_lease.publication_head == second.head


async def test_a_skewed_client_clock_does_not_change_lease_times(ssh_target, tmp_path, monkeypatch):
    await materialize_session(ssh_target, SID)
    before = _fs_seconds(tmp_path / "before")
    # This client believes it is five hours later than the target.
    skew = 5 * 3600
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + skew * 10**9)
    lease = await acquire_lease(ssh_target, SID, REMOTE, duration_seconds=30)
    await lease.renew()
    observed = await observe_lease(ssh_target, SID)
    monkeypatch.undo()
    after = _fs_seconds(tmp_path / "after")
    record = observed.record
    assert before <= record.renewed_at <= after
    assert record.expires_at == record.renewed_at + 30
    assert before <= observed.now <= after
    # What a local observer without any skew judges: the lease is live.
    local = await observe_lease(LocalTarget(tmp_path), SID)
    assert local.record.expires_at == record.expires_at and local.now < record.expires_at


async def test_lease_renewal_and_publication_cost_few_round_trips(ssh_target, tmp_path):
    await materialize_session(ssh_target, SID)
    lease = await acquire_lease(ssh_target, SID, REMOTE)
    publisher = Publisher(lease)
    await publisher.publish({"meta": b"v1"})
    start = ssh_target.round_trips
    # The publication's files, its barrier and the head commit: one program.
    await publisher.publish({"meta": b"v2", "segment": b"x"})
    assert ssh_target.round_trips - start == 1
    start = ssh_target.round_trips
    await lease.renew()
    # The stamped create reads the target clock in the program that writes.
    assert ssh_target.round_trips - start == 1


async def _published_locally(root, session_id: str, turns: int) -> None:
    local = LocalTarget(root)
    await materialize_session(local, session_id)
    lease = await acquire_lease(local, session_id, LOCAL)
    sidecar = Sidecar(
        session_id=session_id,
        workspace_id="b" * 64,
        display_name=f"session {turns}",
        naming_state=NamingState.EXPLICIT,
        created_at=0,
        updated_at=1_000 + turns,
        total_turn_count=turns,
        in_flight_turn=None,
        layout=Layout(segment_parts=[1], prompt_pages=1, file_pages=0),
        first_user_message="prompt 1",
        latest_user_message=f"prompt {turns}",
    )
    await Publisher(lease).publish({"session.json": encode_sidecar(sidecar), "segment-0001.chat.jsonl": b"{}\n"})
    await lease.release()


@pytest.mark.parametrize(("count", "batch"), [(1, None), (33, None), (33, 32)])
async def test_a_listing_over_ssh_costs_one_program_per_batch(ssh_target, tmp_path, count, batch):
    for n in range(count):
        await _published_locally(tmp_path, f"2026-07-19T09-47-{n + 1:012x}", n + 1)
    start = ssh_target.round_trips
    listing = await (list_sessions(ssh_target, REMOTE) if batch is None else list_sessions(ssh_target, REMOTE, batch=batch))
    # One program per batch (by default every session): each session's
    # directory, lease head, manifest and sidecar travel in one survey.
    assert ssh_target.round_trips - start == (1 if batch is None else math.ceil(count / batch))
    assert [(row.display_name, row.turn_count, row.published) for row in listing.rows] == [
        (f"session {n}", n, True) for n in range(count, 0, -1)
    ]
    assert listing.inspect_rows == ()
    assert listing.rows == (await list_sessions(LocalTarget(tmp_path), REMOTE)).rows
