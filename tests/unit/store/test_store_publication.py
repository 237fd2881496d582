"""Immutable publications: manifest last, one commit point, identical saves
do nothing, unchanged bytes reused, replace snapshots, pending on failure,
readers verify what they consume."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import mevedel_server.store.authority.publication as publication_module
from mevedel_server.store import (
    ClientIdentity,
    PublicationFailed,
    PublicationPending,
    Publisher,
    RecordError,
    RecordErrorKind,
    acquire_lease,
    materialize_session,
    observe_lease,
    read_committed,
)
from mevedel_server.store.layout import publication_id_of
from mevedel_server.targets import FaultInjectingTarget, LocalTarget

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("writer", "workstation")


@pytest.fixture
async def target(tmp_path):
    t = FaultInjectingTarget(LocalTarget(tmp_path))
    await materialize_session(t, SID)
    return t


def session_dir(tmp_path) -> Path:
    return tmp_path / ".mevedel" / "sessions" / SID


def publication_dirs(tmp_path) -> list[str]:
    return sorted(os.listdir(session_dir(tmp_path) / ".publications"))


async def snapshot(tmp_path) -> dict[str, bytes]:
    return await (await read_committed(LocalTarget(tmp_path), SID)).read_all()


async def test_publication_writes_artifacts_then_manifest_and_commits_the_head(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    outcome = await Publisher(lease).publish({"session.meta.json": b"{}", "segment-0001.chat.jsonl": b"line\n"})
    assert outcome.committed and set(outcome.written) == {"session.meta.json", "segment-0001.chat.jsonl"}
    [pub] = publication_dirs(tmp_path)
    assert sorted(os.listdir(session_dir(tmp_path) / ".publications" / pub)) == ["000001.data", "000002.data", "manifest.json"]
    assert outcome.head == f".publications/{pub}/manifest.json"
    assert (await observe_lease(LocalTarget(tmp_path), SID)).record.publication_head == outcome.head
    committed = await read_committed(LocalTarget(tmp_path), SID)
    entry = committed.manifest.entries["segment-0001.chat.jsonl"]
    assert entry.sha256 == hashlib.sha256(b"line\n").hexdigest() and entry.size == 5
    assert await committed.read_all() == {"session.meta.json": b"{}", "segment-0001.chat.jsonl": b"line\n"}


async def test_unpublished_session_reads_as_empty(tmp_path, target):
    await acquire_lease(target, SID, ME)
    committed = await read_committed(LocalTarget(tmp_path), SID)
    assert committed.head is None and not committed.published and await committed.read_all() == {}


async def test_identical_save_performs_no_transaction(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    await publisher.publish({"a": b"1", "b": b"2"})
    generation, dirs, writes = lease.generation, publication_dirs(tmp_path), target.writes
    outcome = await publisher.publish({"a": b"1", "b": b"2"})
    assert not outcome.committed
    assert (lease.generation, publication_dirs(tmp_path), target.writes) == (generation, dirs, writes)
    # A subset is identical too: omitted artifacts keep their entries.
    assert not (await publisher.publish({"b": b"2"})).committed
    forced = await publisher.publish({"a": b"1"}, force=True)
    assert forced.committed and lease.generation == generation + 1


async def test_unchanged_payloads_reuse_earlier_immutable_bytes(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    first = await publisher.publish({"meta": b"m1", "segment": b"s" * 1000, "history/x": b"pre-image"})
    second = await publisher.publish({"meta": b"m2", "history/y": b"pre-image"})
    assert second.written == ("meta",) and second.reused == ("history/y",)
    new_dir = publication_id_of(second.head)
    assert sorted(os.listdir(session_dir(tmp_path) / ".publications" / new_dir)) == ["000001.data", "manifest.json"]
    assert second.manifest.entries["segment"].published == first.manifest.entries["segment"].published
    assert second.manifest.entries["history/y"].published == first.manifest.entries["history/x"].published
    assert await snapshot(tmp_path) == {"meta": b"m2", "segment": b"s" * 1000, "history/x": b"pre-image", "history/y": b"pre-image"}


async def test_replace_starts_from_an_empty_manifest(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    await publisher.publish({"meta": b"m1", "segment-0001": b"old turn", "segment-0002": b"newer turn"})
    outcome = await publisher.publish({"meta": b"m1", "segment-0001": b"old turn"}, replace=True)
    assert outcome.committed and outcome.written == ()
    assert await snapshot(tmp_path) == {"meta": b"m1", "segment-0001": b"old turn"}


async def test_failure_before_the_commit_leaves_the_prior_head_and_a_pending_publication(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    await publisher.publish({"meta": b"v1"})
    target.arm(2, "error")  # the publication directory
    with pytest.raises(PublicationFailed, match="publication pending"):
        await publisher.publish({"meta": b"v2"})
    assert await snapshot(tmp_path) == {"meta": b"v1"}
    assert publisher.pending is not None and publisher.pending.artifacts == {"meta": b"v2"}
    with pytest.raises(PublicationPending):
        await publisher.publish({"meta": b"v3"})
    outcome = await publisher.retry()
    assert outcome.committed and publisher.pending is None
    assert await snapshot(tmp_path) == {"meta": b"v2"}


async def test_abandon_keeps_the_committed_state(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    await publisher.publish({"meta": b"v1"})
    target.arm(4, "error")  # the lease generation that would commit
    with pytest.raises(PublicationFailed):
        await publisher.publish({"meta": b"v2"})
    abandoned = publisher.abandon()
    assert abandoned.artifacts == {"meta": b"v2"} and publisher.pending is None
    assert await snapshot(tmp_path) == {"meta": b"v1"}
    # The uncommitted directory is inert: readers never see it.
    assert len(publication_dirs(tmp_path)) == 2
    await publisher.publish({"meta": b"v3"})
    assert await snapshot(tmp_path) == {"meta": b"v3"}


async def test_error_at_every_write_either_keeps_the_old_state_or_commits(tmp_path):
    points = 0
    seen = set()
    while True:
        points += 1
        root = tmp_path / f"run-{points}"
        root.mkdir()
        target = FaultInjectingTarget(LocalTarget(root))
        await materialize_session(target, SID)
        lease = await acquire_lease(target, SID, ME)
        for _ in range(3):
            await lease.renew()  # older generations for the commit to prune
        publisher = Publisher(lease)
        await publisher.publish({"meta": b"v1", "turn": b"t1"})
        target.arm(points, "error")
        try:
            outcome = await publisher.publish({"meta": b"v2", "turn": b"t1", "extra": b"e"})
        except PublicationFailed:
            assert await snapshot(root) == {"meta": b"v1", "turn": b"t1"}
            seen.add("old")
            await publisher.retry()
        else:
            assert outcome.committed
            seen.add("new")
            if not target.fired:
                break
        assert await snapshot(root) == {"meta": b"v2", "turn": b"t1", "extra": b"e"}
    print(f"error points walked: {points - 1}")
    assert points - 1 >= 6 and seen == {"old", "new"}


async def test_publication_name_collision_draws_another(tmp_path, target, monkeypatch):
    lease = await acquire_lease(target, SID, ME)
    taken = "f" * 32
    (session_dir(tmp_path) / ".publications" / taken).mkdir()
    drawn = iter([taken, "1" * 32])
    monkeypatch.setattr(publication_module, "new_publication_id", lambda: next(drawn))
    outcome = await Publisher(lease).publish({"meta": b"v1"})
    assert outcome.head == f".publications/{'1' * 32}/manifest.json"
    assert os.listdir(session_dir(tmp_path) / ".publications" / taken) == []


async def test_bad_logical_paths_are_refused_before_any_write(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    writes = target.writes
    for bad in ("../escape", ".lease/generation-1.json", "a//b", ""):
        with pytest.raises(ValueError):
            await Publisher(lease).publish({bad: b"x"})
    assert target.writes == writes


async def _published(tmp_path, target, artifacts):
    lease = await acquire_lease(target, SID, ME)
    outcome = await Publisher(lease).publish(artifacts)
    return session_dir(tmp_path) / outcome.head, outcome


async def test_tampered_bytes_are_refused_and_kept(tmp_path, target):
    manifest_path, outcome = await _published(tmp_path, target, {"meta": b"good bytes", "turn": b"t"})
    data_path = session_dir(tmp_path) / outcome.manifest.entries["meta"].published
    data_path.write_bytes(b"evil bytes")
    committed = await read_committed(LocalTarget(tmp_path), SID)
    assert await committed.read("turn") == b"t"
    with pytest.raises(RecordError) as info:
        await committed.read_all()
    assert info.value.kind is RecordErrorKind.DIGEST_MISMATCH and "meta" in str(info.value)
    assert data_path.read_bytes() == b"evil bytes"
    data_path.unlink()
    with pytest.raises(RecordError) as info:
        await committed.read("meta")
    assert info.value.kind is RecordErrorKind.MISSING


@pytest.mark.parametrize(
    "corrupt,kind",
    [
        (lambda b: b[: len(b) // 2], RecordErrorKind.TRUNCATED),
        (lambda b: b.replace(b'"size":', b'"size":-', 1), RecordErrorKind.INVALID_VALUE),
        (lambda b: b.replace(b'"entries"', b'"extra":1,"entries"', 1), RecordErrorKind.UNKNOWN_FIELD),
        (lambda b: b.replace(b'"format_version":1', b'"format_version":7', 1), RecordErrorKind.WRONG_VERSION),
        (lambda b: b.replace(b'"size":', b'"size":NaN,"x":', 1), RecordErrorKind.NON_FINITE),
    ],
)
async def test_corrupt_manifests_are_refused_and_kept(tmp_path, target, corrupt, kind):
    manifest_path, _ = await _published(tmp_path, target, {"meta": b"m"})
    bad = corrupt(manifest_path.read_bytes())
    manifest_path.write_bytes(bad)
    with pytest.raises(RecordError) as info:
        await read_committed(LocalTarget(tmp_path), SID)
    assert info.value.kind is kind and "manifest.json" in str(info.value)
    assert str(tmp_path) not in str(info.value)
    assert manifest_path.read_bytes() == bad


async def test_manifest_copied_from_another_publication_is_refused(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    first = await publisher.publish({"meta": b"1"})
    second = await publisher.publish({"meta": b"2"})
    (session_dir(tmp_path) / second.head).write_bytes((session_dir(tmp_path) / first.head).read_bytes())
    with pytest.raises(RecordError, match="not its own directory"):
        await read_committed(LocalTarget(tmp_path), SID)


async def test_debris_is_ignored_by_readers(tmp_path, target):
    lease = await acquire_lease(target, SID, ME)
    await Publisher(lease).publish({"meta": b"m"})
    sd = session_dir(tmp_path)
    (sd / ".lease" / ".generation-00000000000000000009.json.abc.tmp").write_bytes(b"{")
    (sd / ".lease" / ".clock-probe-0011").write_bytes(b"")
    (sd / ".publications" / ("9" * 32)).mkdir()
    (sd / ".publications" / ("9" * 32) / "000001.data").write_bytes(b"half")
    assert await snapshot(tmp_path) == {"meta": b"m"}
    assert (await observe_lease(LocalTarget(tmp_path), SID)).generation == lease.generation


async def test_concurrent_publishes_on_one_writer_lose_nothing(tmp_path, target):
    import asyncio

    lease = await acquire_lease(target, SID, ME)
    publisher = Publisher(lease)
    await asyncio.gather(*(publisher.publish({f"agents/{i}.jsonl": str(i).encode()}) for i in range(5)))
    assert await snapshot(tmp_path) == {f"agents/{i}.jsonl": str(i).encode() for i in range(5)}
