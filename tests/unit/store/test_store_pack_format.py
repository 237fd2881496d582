"""The pack volume format: blobs as deltas of their base, a volume refused
whole when torn, altered or of another session, and a blob whose chain is
broken read as absent, never as wrong bytes."""

from __future__ import annotations

import hashlib

import pytest

from mevedel_server.store.authority.packed import (
    MAX_CHAIN,
    Pack,
    PackedBlob,
    PackedGeneration,
    PackVolume,
    decode_volume,
    encode_volume,
    make_blob,
    volume_name,
)
from mevedel_server.store.authority.records import RecordError

SID = "2026-07-19T09-47-bf87b5dd793a"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def growing(n: int) -> list[bytes]:
    """Versions of an append-only transcript part."""
    lines = [b'{"kind":"response","text":"answer %d: %s"}\n' % (i, b"x" * (i % 50)) for i in range(n)]
    return [b"".join(lines[: i + 1]) for i in range(n)]


def test_each_version_of_a_growing_part_costs_about_its_new_lines():
    versions = growing(40)
    pack = Pack(SID)
    blobs = []
    for i, data in enumerate(versions):
        base = (sha(versions[i - 1]), versions[i - 1]) if i else None
        blob = make_blob(data, base)
        blobs.append(blob)
        pack.blobs[blob.sha256] = blob
    assert all(b.base is not None for b in blobs[1:])
    stored = sum(len(b.data) for b in blobs)
    assert stored < len(versions[-1])  # all 40 versions in less than the last one alone
    for data in reversed(versions):
        assert pack.get(sha(data), len(data)) == data
    assert pack.depth(sha(versions[-1])) == 39


def test_a_changed_record_is_a_delta_of_the_previous_one():
    old = b'{"entries":{' + b",".join(b'"segment-0001/part-%06d":"%s"' % (i, sha(b"%d" % i).encode()) for i in range(30)) + b"}}"
    new = old.replace(sha(b"29").encode(), sha(b"thirty").encode())
    blob = make_blob(new, (sha(old), old))
    assert blob.base == sha(old) and len(blob.data) < 200
    pack = Pack(SID)
    pack.blobs[sha(old)] = make_blob(old)
    pack.blobs[blob.sha256] = blob
    assert pack.get(sha(new), len(new)) == new


def test_a_volume_round_trips_and_is_refused_whole_when_torn_altered_or_foreign():
    data = b"hello\n" * 100
    volume = PackVolume(
        format=1, session_id=SID, generations=[PackedGeneration("a" * 32, sha(data), len(data), 5)], blobs=[make_blob(data)]
    )
    raw = encode_volume(volume)
    assert decode_volume("v", raw, SID) == volume
    with pytest.raises(RecordError, match="torn or altered"):
        decode_volume("v", raw[: len(raw) // 2], SID)
    altered = bytearray(raw)
    altered[40] ^= 1
    with pytest.raises(RecordError, match="torn or altered"):
        decode_volume("v", bytes(altered), SID)
    with pytest.raises(RecordError, match="belongs to session"):
        decode_volume("v", raw, "2026-07-19T09-47-000000000000")
    with pytest.raises(RecordError, match="not a pack volume"):
        decode_volume("v", b"{}", SID)
    with pytest.raises(ValueError):
        volume_name("../x")


def test_a_broken_chain_reads_as_absent_never_as_wrong_bytes():
    a, b = b"first\n", b"first\nsecond\n"
    pack = Pack(SID)
    delta = make_blob(b, (sha(a), a))
    pack.blobs[delta.sha256] = delta
    assert pack.get(sha(b), len(b)) is None  # its base is missing
    pack.blobs[sha(a)] = PackedBlob(sha(a), len(a), None, 0, make_blob(b"other\n").data)
    assert pack.get(sha(a), len(a)) is None  # bytes that do not match their digest
    assert pack.get(sha(b), len(b)) is None
    # A cycle is cut, not followed forever.
    pack = Pack(SID)
    pack.blobs["1" * 64] = PackedBlob("1" * 64, 3, "2" * 64, 0, b"")
    pack.blobs["2" * 64] = PackedBlob("2" * 64, 3, "1" * 64, 0, b"")
    assert pack.get("1" * 64, 3) is None
    assert pack.depth("1" * 64) > MAX_CHAIN
