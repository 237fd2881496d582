"""Expired-session cleanup: ages judged by the target clock, the most recent
sessions always kept, live leases and recovery states never removed, bad
sidecars no protection, a competing claim keeps the session."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from counted_programs import CountedPrograms as CountingPrograms
from mevedel_server.store import (
    ClientIdentity,
    LeaseRecord,
    LeaseState,
    Publisher,
    acquire_lease,
    decode_record,
    encode_record,
    materialize_session,
    read_committed,
)
from mevedel_server.store.content.sidecar import Layout, Sidecar, encode_sidecar
from mevedel_server.store.workspace_wide.cleanup import remove_expired_sessions
from mevedel_server.store.workspace_wide.listing import list_sessions
from mevedel_server.targets import ControlProgram, LocalTarget, ProgramTarget, Remove

ME = ClientIdentity("sweeper", "this-host")
OTHER = ClientIdentity("other-client", "their-host")
DAY = 86_400


def sid(n: int) -> str:
    return f"2026-07-19T09-47-{n:012x}"


def session_dir(root: Path, session_id: str) -> Path:
    return root / ".mevedel" / "sessions" / session_id


def sidecar(session_id: str, updated: int) -> bytes:
    return encode_sidecar(
        Sidecar(
            session_id=session_id,
            workspace_id="c" * 64,
            created_at=0,
            updated_at=updated,
            total_turn_count=1,
            layout=Layout(segment_parts=[1], prompt_pages=1, file_pages=0),
            first_user_message="hello",
            latest_user_message="hello",
        )
    )


def head_path(root: Path, session_id: str) -> Path:
    lease = session_dir(root, session_id) / ".lease"
    return lease / max(n for n in os.listdir(lease) if n.startswith("generation-"))


def head_record(root: Path, session_id: str) -> LeaseRecord:
    return decode_record(LeaseRecord, head_path(root, session_id).read_bytes(), "test")


def write_head(root: Path, session_id: str, **changes) -> None:
    """Add a generation above the head, copying it with ``changes``."""
    import msgspec

    record = head_record(root, session_id)
    new = msgspec.structs.replace(record, generation=record.generation + 1, **changes)
    (session_dir(root, session_id) / ".lease" / f"generation-{new.generation:020d}.json").write_bytes(encode_record(new))


async def aged_session(target, root: Path, session_id: str, age_days: float, *, now: int) -> None:
    """A published, released session last used ``age_days`` ago."""
    stamp = now - int(age_days * DAY)
    await materialize_session(target, session_id)
    lease = await acquire_lease(target, session_id, ME)
    await Publisher(lease).publish({"session.json": sidecar(session_id, stamp), "segment-0001.chat.jsonl": b"{}\n"})
    await lease.release()
    # Its lease records were written then, not now.
    path = head_path(root, session_id)
    record = head_record(root, session_id)
    import msgspec

    path.write_bytes(encode_record(msgspec.structs.replace(record, renewed_at=stamp, expires_at=stamp + 60)))
    os.utime(session_dir(root, session_id), (stamp, stamp))


@pytest.fixture
def target(tmp_path):
    return LocalTarget(tmp_path)


def remaining(root: Path) -> set[str]:
    return set(os.listdir(root / ".mevedel" / "sessions"))


async def test_old_sessions_go_and_recent_ones_stay(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 45, now=now)
    await aged_session(target, tmp_path, sid(2), 31, now=now)
    await aged_session(target, tmp_path, sid(3), 29, now=now)
    await aged_session(target, tmp_path, sid(4), 1, now=now)
    report = await remove_expired_sessions(target, ME, keep_recent=0)
    assert {r.session_id for r in report.removed} == {sid(1), sid(2)}
    assert remaining(tmp_path) == {sid(3), sid(4)}
    kept = {k.name: k.reason for k in report.kept}
    assert "updated 29 days ago" in kept[sid(3)] and "limit 30 days" in kept[sid(3)]
    assert "not updated for 45 days" in next(r.reason for r in report.removed if r.session_id == sid(1))
    # The survivors are untouched and still read.
    assert len((await list_sessions(target, ME)).rows) == 2
    await (await read_committed(target, sid(3))).read_all()


async def test_the_most_recent_sessions_are_kept_whatever_their_age(tmp_path, target):
    now = int(time.time())
    for n in range(12):
        await aged_session(target, tmp_path, sid(n + 1), 100 + n, now=now)
    report = await remove_expired_sessions(target, ME)  # the spec's defaults: 30 days, keep 3
    assert {r.session_id for r in report.removed} == {sid(n) for n in range(4, 13)}  # all but the 3 newest
    assert remaining(tmp_path) == {sid(1), sid(2), sid(3)}
    assert all("3 most recently updated" in k.reason for k in report.kept)


async def test_configured_age_and_disabled_cleanup(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 8, now=now)
    assert (await remove_expired_sessions(target, ME, keep_recent=0)).removed == ()
    disabled = await remove_expired_sessions(target, ME, keep_recent=0, max_age_days=None)
    assert disabled.removed == () and disabled.kept[0].reason == "cleanup is disabled"
    report = await remove_expired_sessions(target, ME, keep_recent=0, max_age_days=7)
    assert [r.session_id for r in report.removed] == [sid(1)]
    with pytest.raises(ValueError):
        await remove_expired_sessions(target, ME, max_age_days=0)


async def test_leases_and_recovery_states_protect_old_sessions(tmp_path, target):
    now = int(time.time())
    old = now - 90 * DAY
    for n in range(1, 7):
        await aged_session(target, tmp_path, sid(n), 90, now=now)
    # Held by a live client (renewed long ago, but its lease runs for years).
    write_head(tmp_path, sid(1), state=LeaseState.ACTIVE, client_id=OTHER.client_id, host=OTHER.host,
               renewed_at=old, expires_at=now + 400 * DAY)
    # Expired inside a publishing window.
    write_head(tmp_path, sid(2), state=LeaseState.PUBLISHING, client_id=OTHER.client_id, renewed_at=old, expires_at=old + 60)
    # Expired, with an unsettled mutation recorded.
    write_head(tmp_path, sid(3), state=LeaseState.ACTIVE, client_id=OTHER.client_id, renewed_at=old, expires_at=old + 60,
               unsettled_mutation=True)
    # Another client's ordinary expired lease: fenced and removed without asking.
    write_head(tmp_path, sid(4), state=LeaseState.ACTIVE, client_id=OTHER.client_id, renewed_at=old, expires_at=old + 60)
    # sid(5): released long ago, removable; sid(6) is open in this client.
    report = await remove_expired_sessions(target, ME, keep_recent=0, open_sessions={sid(6)})
    assert {r.session_id for r in report.removed} == {sid(4), sid(5)}
    kept = {k.name: k.reason for k in report.kept}
    assert "held by their-host" in kept[sid(1)]
    assert "publishing" in kept[sid(2)]
    assert "unsettled mutation" in kept[sid(3)]
    assert kept[sid(6)] == "open in this client"
    assert remaining(tmp_path) == {sid(1), sid(2), sid(3), sid(6)}


async def test_bad_sidecars_do_not_protect_but_bad_leases_do(tmp_path, target):
    now = int(time.time())
    for n in (1, 2):
        await aged_session(target, tmp_path, sid(n), 60, now=now)
    import json

    pubs = session_dir(tmp_path, sid(1)) / ".publications"
    [pub] = os.listdir(pubs)
    manifest = json.loads((pubs / pub / "manifest.json").read_bytes())
    sidecar_file = session_dir(tmp_path, sid(1)) / manifest["entries"]["session.json"]["published"]
    sidecar_file.write_bytes(b'{"format_version": 0}')
    head = head_path(tmp_path, sid(2))
    head.write_bytes(head.read_bytes()[:30])
    (tmp_path / ".mevedel" / "sessions" / "stray-directory").mkdir()
    report = await remove_expired_sessions(target, ME, keep_recent=0)
    assert [r.session_id for r in report.removed] == [sid(1)]
    assert "unreadable" in report.removed[0].reason
    kept = {k.name: k.reason for k in report.kept}
    assert "lease cannot be judged" in kept[sid(2)] and "truncated" in kept[sid(2)]
    assert "not a session ID" in kept["stray-directory"]
    assert remaining(tmp_path) == {sid(2), "stray-directory"}
    assert head.read_bytes()  # the unreadable record is kept as it was


class ClaimBeforeDelete(ProgramTarget):
    """Another client's generation appears just before the first removal
    program runs: cleanup's proof must refuse to delete."""

    def __init__(self, inner, root: Path, session_id: str) -> None:
        self.inner, self.root, self.session_id = inner, root, session_id
        self.fired = False

    async def run(self, program: ControlProgram):
        if not self.fired and any(isinstance(op, Remove) and op.path.endswith(self.session_id) for op in program.operations):
            self.fired = True
            write_head(self.root, self.session_id, state=LeaseState.ACTIVE, client_id=OTHER.client_id,
                       host=OTHER.host, renewed_at=int(time.time()), expires_at=int(time.time()) + 600)
        return await self.inner.run(program)


async def test_a_competing_claim_keeps_the_session(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 60, now=now)
    racing = ClaimBeforeDelete(target, tmp_path, sid(1))
    report = await remove_expired_sessions(racing, ME, keep_recent=0)
    assert racing.fired and report.removed == ()
    assert "claimed it while cleanup ran" in report.kept[0].reason
    assert remaining(tmp_path) == {sid(1)}
    await (await read_committed(target, sid(1))).read_all()
    assert head_record(tmp_path, sid(1)).client_id == OTHER.client_id


async def test_a_session_holding_a_symlink_is_not_removed(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 60, now=now)
    outside = tmp_path / "precious"
    outside.write_bytes(b"not part of any session")
    (session_dir(tmp_path, sid(1)) / "local").symlink_to(outside)
    old = now - 60 * DAY
    os.utime(session_dir(tmp_path, sid(1)), (old, old))
    report = await remove_expired_sessions(target, ME, keep_recent=0)
    assert report.removed == () and "symbolic link" in report.kept[0].reason
    assert outside.read_bytes() == b"not part of any session"
    assert remaining(tmp_path) == {sid(1)}
    # The claim cleanup took was released again: anyone may resume it.
    assert head_record(tmp_path, sid(1)).state is LeaseState.RELEASED


class UseBeforeClaim(ProgramTarget):
    """The session is opened and closed again by its owner after cleanup
    judged it and before cleanup's claim observes the lease."""

    def __init__(self, inner, root: Path, session_id: str) -> None:
        self.inner, self.root, self.session_id = inner, root, session_id
        self.fired = False

    async def run(self, program: ControlProgram):
        from mevedel_server.targets import Clock

        if not self.fired and any(isinstance(op, Clock) and op.path.endswith(self.session_id) for op in program.operations):
            self.fired = True
            write_head(self.root, self.session_id, state=LeaseState.RELEASED, renewed_at=int(time.time()), expires_at=int(time.time()) + 60)
        return await self.inner.run(program)


async def test_a_session_used_after_it_was_judged_is_kept(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 60, now=now)
    racing = UseBeforeClaim(target, tmp_path, sid(1))
    report = await remove_expired_sessions(racing, ME, keep_recent=0)
    assert racing.fired and report.removed == ()
    assert report.kept[0].reason == "it was used while cleanup ran"
    await (await read_committed(target, sid(1))).read_all()
    # Cleanup's own claim (active) was released again.
    assert head_record(tmp_path, sid(1)).state is LeaseState.RELEASED


def write_marker(root: Path, session_id: str, data: bytes = b"{}") -> None:
    recovery = session_dir(root, session_id) / ".recovery"
    recovery.mkdir(exist_ok=True)
    (recovery / f"recovery-{'ab' * 16}.json").write_bytes(data)


async def test_a_pending_recovery_keeps_an_old_session(tmp_path, target):
    """An interrupted Rewind's marker (readable or not) outlives any age."""
    now = int(time.time())
    for n in (1, 2, 3):
        await aged_session(target, tmp_path, sid(n), 90, now=now)
    write_marker(tmp_path, sid(1))
    write_marker(tmp_path, sid(2), b"torn")
    # sid(3): only a data directory whose marker is gone: nothing pending.
    (session_dir(tmp_path, sid(3)) / ".recovery" / ("cd" * 16)).mkdir(parents=True)
    report = await remove_expired_sessions(target, ME, keep_recent=0)
    assert [r.session_id for r in report.removed] == [sid(3)]
    kept = {k.name: k.reason for k in report.kept}
    assert kept[sid(1)] == kept[sid(2)] == f"recovery {'ab' * 16} is pending (left for recovery)"
    assert remaining(tmp_path) == {sid(1), sid(2)}
    # Judged without a claim: their lease heads are the released ones they had.
    assert head_record(tmp_path, sid(1)).client_id == ME.client_id


class MarkerAfterJudging(ProgramTarget):
    """A marker shows up after the sweep judged the session and before its
    claim (the recheck behind the claim must see it)."""

    def __init__(self, inner, root: Path, session_id: str) -> None:
        self.inner, self.root, self.session_id = inner, root, session_id
        self.fired = False

    async def run(self, program: ControlProgram):
        from mevedel_server.targets import Clock

        if not self.fired and any(isinstance(op, Clock) and op.path.endswith(self.session_id) for op in program.operations):
            self.fired = True
            write_marker(self.root, self.session_id)
        return await self.inner.run(program)


async def test_the_recovery_marker_is_rechecked_behind_the_claim(tmp_path, target):
    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 60, now=now)
    racing = MarkerAfterJudging(target, tmp_path, sid(1))
    report = await remove_expired_sessions(racing, ME, keep_recent=0)
    assert racing.fired and report.removed == ()
    assert "pending (left for recovery)" in report.kept[0].reason
    assert remaining(tmp_path) == {sid(1)}
    assert head_record(tmp_path, sid(1)).state is LeaseState.RELEASED


async def test_an_existing_artifacts_own_conversation_is_kept_however_old(tmp_path, target):
    """The service sweeps with the artifact store's exemptions installed (as
    the LSP server and the CLI install them): an item's conversation stays
    while the item exists, and goes like any other session once it is gone."""
    from mevedel_server.artifacts import ArtifactStore
    from mevedel_server.artifacts.attachments import SessionArtifacts
    from mevedel_server.store.service import SessionService

    now = int(time.time())
    await aged_session(target, tmp_path, sid(1), 45, now=now)
    await aged_session(target, tmp_path, sid(2), 45, now=now)
    service = SessionService(target, ME, session_max_age_days=30, session_keep_recent=0)
    work = SessionArtifacts(ArtifactStore(target, ME), service)
    item = await work.store.create("whiteboard", "Board", None)
    assert await work.store.set_dedicated_session(item.item_id, sid(1), expected=None)
    report = await service.sessions.sweep_expired(force=True)
    assert remaining(tmp_path) == {sid(1)}
    assert "Board" in {k.name: k.reason for k in report.kept}[sid(1)]
    await work.store.delete(item.item_id)
    await service.sessions.sweep_expired(force=True)
    assert remaining(tmp_path) == set()


async def test_a_listing_sweeps_from_its_own_survey_and_asks_the_artifact_store_only_for_old_sessions(tmp_path, target):
    """A listing's sweep judges the observations the listing made: a
    workspace with nothing old costs the listing's one program and no
    more (over SSH each program is a round trip), and one with an old
    session removes it and does not list it."""
    from mevedel_server.artifacts import ArtifactStore
    from mevedel_server.artifacts.attachments import SessionArtifacts
    from mevedel_server.store.service import SessionService

    now = int(time.time())
    for n in (1, 2, 3):
        await aged_session(target, tmp_path, sid(n), 1, now=now)
    counted = CountingPrograms(target)
    service = SessionService(counted, ME, session_max_age_days=30, session_keep_recent=0)
    SessionArtifacts(ArtifactStore(counted, ME), service)  # installs the expiry exemptions, as the front ends do
    listing = await service.sessions.list()
    assert {r.session_id for r in listing.rows} == {sid(1), sid(2), sid(3)}
    assert counted.programs == 1  # one survey of all three
    await aged_session(target, tmp_path, sid(4), 45, now=now)
    again = SessionService(counted, ME, session_max_age_days=30, session_keep_recent=0)
    SessionArtifacts(ArtifactStore(counted, ME), again)
    listing = await again.sessions.list()
    assert {r.session_id for r in listing.rows} == {sid(1), sid(2), sid(3)}
    assert remaining(tmp_path) == {sid(1), sid(2), sid(3)}
