"""Record decoding: the current version and shape only; every bad byte is a
RecordError with a kind and a reason, never a guessed value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mevedel_server.store import (
    LeaseRecord,
    LeaseState,
    ManifestEntry,
    PublicationManifest,
    RecordError,
    RecordErrorKind,
    WorkspaceIdentity,
    decode_record,
    encode_record,
)

LABEL = "session S: .lease/generation-00000000000000000001.json"
HEAD = ".publications/" + "a" * 32 + "/manifest.json"


def _lease(**changes) -> LeaseRecord:
    fields = dict(
        generation=1,
        state=LeaseState.ACTIVE,
        client_id="client-1",
        host="laptop",
        renewed_at=100,
        expires_at=160,
        publication_head=HEAD,
        unsettled_mutation=False,
        transfer_generation=0,
    )
    fields.update(changes)
    return LeaseRecord(**fields)


GOOD = encode_record(_lease())


def test_round_trip_of_every_record_type():
    lease = _lease(unsettled_mutation=True, transfer_generation=3)
    assert decode_record(LeaseRecord, encode_record(lease), LABEL) == lease
    manifest = PublicationManifest(
        publication_id="b" * 32,
        entries={"session.meta.json": ManifestEntry(published=".publications/" + "b" * 32 + "/000001.data", sha256="c" * 64, size=3)},
    )
    assert decode_record(PublicationManifest, encode_record(manifest), "m") == manifest
    ident = WorkspaceIdentity(workspace_id="d" * 64)
    assert decode_record(WorkspaceIdentity, encode_record(ident), "w") == ident


def test_a_lease_written_before_its_holder_field_reads_as_holder_unknown():
    older = GOOD.replace(b',"holder":null', b"")
    assert b'"holder"' in GOOD and b'"holder"' not in older
    for data in (GOOD, older):
        assert decode_record(LeaseRecord, data, LABEL).holder is None
    assert decode_record(LeaseRecord, older, LABEL) == _lease()
    with pytest.raises(RecordError) as info:
        decode_record(LeaseRecord, GOOD.replace(b'"holder":null', b'"holder":{"pid":1}'), LABEL)
    assert info.value.kind is RecordErrorKind.MISSING_FIELD


def test_encoding_is_deterministic():
    assert encode_record(_lease()) == encode_record(_lease())
    assert GOOD.startswith(b'{"format_version":1,')


BAD_LEASES = [
    ("empty", b"", RecordErrorKind.TRUNCATED),
    ("truncated", GOOD[: len(GOOD) // 2], RecordErrorKind.TRUNCATED),
    ("corrupted", GOOD.replace(b'"state"', b'"sta\x00e"', 1).replace(b"{", b"x", 1), RecordErrorKind.MALFORMED),
    ("nan", GOOD.replace(b'"renewed_at":100', b'"renewed_at":NaN'), RecordErrorKind.NON_FINITE),
    ("infinity", GOOD.replace(b'"expires_at":160', b'"expires_at":Infinity'), RecordErrorKind.NON_FINITE),
    ("-infinity", GOOD.replace(b'"renewed_at":100', b'"renewed_at":-Infinity'), RecordErrorKind.NON_FINITE),
    ("overflow", GOOD.replace(b'"expires_at":160', b'"expires_at":1e999'), RecordErrorKind.NON_FINITE),
    ("negative", GOOD.replace(b'"renewed_at":100', b'"renewed_at":-5'), RecordErrorKind.INVALID_VALUE),
    ("huge", GOOD.replace(b'"expires_at":160', b'"expires_at":' + str(2**64).encode()), RecordErrorKind.INVALID_VALUE),
    ("float time", GOOD.replace(b'"renewed_at":100', b'"renewed_at":100.5'), RecordErrorKind.WRONG_TYPE),
    ("bool int", GOOD.replace(b'"transfer_generation":0', b'"transfer_generation":false'), RecordErrorKind.WRONG_TYPE),
    ("string gen", GOOD.replace(b'"generation":1', b'"generation":"1"'), RecordErrorKind.WRONG_TYPE),
    ("unknown field", GOOD.replace(b'"host":"laptop"', b'"host":"laptop","pid":42'), RecordErrorKind.UNKNOWN_FIELD),
    ("missing field", GOOD.replace(b',"unsettled_mutation":false', b""), RecordErrorKind.MISSING_FIELD),
    ("no version", GOOD.replace(b'"format_version":1,', b""), RecordErrorKind.MISSING_FIELD),
    ("wrong version", GOOD.replace(b'"format_version":1', b'"format_version":2'), RecordErrorKind.WRONG_VERSION),
    ("float version", GOOD.replace(b'"format_version":1', b'"format_version":1.0'), RecordErrorKind.WRONG_VERSION),
    ("bad state", GOOD.replace(b'"active"', b'"owned"'), RecordErrorKind.INVALID_VALUE),
    ("expiry before renewal", GOOD.replace(b'"expires_at":160', b'"expires_at":99'), RecordErrorKind.INVALID_VALUE),
    ("head escapes", GOOD.replace(HEAD.encode(), b"../../other/manifest.json"), RecordErrorKind.INVALID_VALUE),
    ("bad client id", GOOD.replace(b'"client-1"', b'"a b/c"'), RecordErrorKind.INVALID_VALUE),
    # A regex's ``$`` also matches before a final newline.
    ("client id and a newline", GOOD.replace(b'"client-1"', b'"client-1\\n"'), RecordErrorKind.INVALID_VALUE),
    ("head and a newline", GOOD.replace(HEAD.encode(), HEAD.encode() + b"\\n"), RecordErrorKind.INVALID_VALUE),
    ("not an object", b"[1, 2, 3]", RecordErrorKind.WRONG_TYPE),
]


@pytest.mark.parametrize("name,data,kind", BAD_LEASES, ids=[b[0] for b in BAD_LEASES])
def test_bad_lease_bytes_are_refused_with_a_reason(name, data, kind):
    with pytest.raises(RecordError) as info:
        decode_record(LeaseRecord, data, LABEL)
    assert info.value.kind is kind
    assert info.value.path_label == LABEL
    assert str(info.value).startswith(LABEL + ": ")
    assert info.value.reason



def test_a_refused_field_is_refused_every_time_beside_accepted_ones():
    """Pattern checks remember what they accepted (a listing decodes the
    same records each time): never what they refused."""
    bad = GOOD.replace(b'"client-1"', b'"a b/c"')
    for _ in range(3):
        assert decode_record(LeaseRecord, GOOD, LABEL).client_id == "client-1"
        with pytest.raises(RecordError) as info:
            decode_record(LeaseRecord, bad, LABEL)
        assert info.value.kind is RecordErrorKind.INVALID_VALUE and "client_id" in info.value.reason


def _manifest_bytes(logical: str, published: str, sha: str = "c" * 64) -> bytes:
    return (
        b'{"format_version":1,"publication_id":"' + b"b" * 32 + b'","entries":{"'
        + logical.encode() + b'":{"published":"' + published.encode() + b'","sha256":"' + sha.encode() + b'","size":1}}}'
    )


PUBLISHED = ".publications/" + "b" * 32 + "/000001.data"


@pytest.mark.parametrize(
    "logical,published,sha",
    [
        ("../escape", PUBLISHED, "c" * 64),
        (".lease/generation-1.json", PUBLISHED, "c" * 64),
        ("a//b", PUBLISHED, "c" * 64),
        ("ok.json", "../../etc/passwd", "c" * 64),
        ("ok.json", ".lease/generation-00000000000000000001.json", "c" * 64),
        ("ok.json", PUBLISHED, "C" * 64),
        ("ok.json", PUBLISHED, "c" * 63),
    ],
)
def test_manifest_paths_and_digests_are_validated(logical, published, sha):
    decode_record(PublicationManifest, _manifest_bytes("ok.json", PUBLISHED), "m")  # the control case
    with pytest.raises(RecordError) as info:
        decode_record(PublicationManifest, _manifest_bytes(logical, published, sha), "m")
    assert info.value.kind is RecordErrorKind.INVALID_VALUE


@pytest.mark.parametrize("value", ["D" * 64, "d" * 63, "g" * 64, ""])
def test_workspace_identity_must_be_64_lowercase_hex(value):
    data = b'{"format_version":1,"workspace_id":"' + value.encode() + b'"}'
    with pytest.raises(RecordError):
        decode_record(WorkspaceIdentity, data, "w")


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_another_exception(data):
    for record_type in (LeaseRecord, PublicationManifest, WorkspaceIdentity):
        try:
            decode_record(record_type, data, "x")
        except RecordError:
            pass


@st.composite
def lease_records(draw) -> LeaseRecord:
    renewed = draw(st.integers(0, 2**40))
    return _lease(
        generation=draw(st.integers(1, 2**53)),
        state=draw(st.sampled_from(LeaseState)),
        renewed_at=renewed,
        expires_at=renewed + draw(st.integers(0, 10**6)),
        unsettled_mutation=draw(st.booleans()),
        transfer_generation=draw(st.integers(0, 2**53)),
        host=draw(st.text(max_size=40)),
        publication_head=draw(st.sampled_from([None, HEAD])),
    )


@given(lease_records())
def test_lease_records_round_trip(record):
    assert decode_record(LeaseRecord, encode_record(record), "x") == record


@given(st.sampled_from([GOOD]), st.integers(0, len(GOOD) - 1), st.integers(0, 255))
def test_single_byte_corruption_is_refused_or_still_a_valid_record(good, index, byte):
    corrupted = good[:index] + bytes([byte]) + good[index + 1 :]
    try:
        record = decode_record(LeaseRecord, corrupted, "x")
    except RecordError:
        return
    assert isinstance(record, LeaseRecord)  # e.g. a digit changed inside a number


def test_a_name_with_a_trailing_newline_is_not_a_generation():
    # `$` would also match before a final newline; such a file is not the
    # generation its digits name (reading that name finds nothing).
    from mevedel_server.store.layout import generation_name, generation_numbers

    real = generation_name(7)
    assert generation_numbers([real, generation_name(9) + "\n", "generation-1.json"]) == [7]


def test_no_record_field_but_its_version_and_the_fields_added_later_has_a_default():
    """Bytes that start with the version decode straight into the record,
    which fills a missing field with its default; only the version and the
    fields declared added to a version (absent: unknown) may have one, or
    such bytes would pass where the checks refuse a missing field."""
    import msgspec.inspect

    from mevedel_server.store.authority.records import _VERSIONS, ADDED_FIELDS

    def defaulted(info, top):
        if isinstance(info, msgspec.inspect.StructType):
            return [f.name for f in info.fields if not f.required and not (top and f.name == "format_version")] + [
                name for f in info.fields for name in defaulted(f.type, False)
            ]
        inner = [getattr(info, attr) for attr in ("key_type", "value_type", "item_type") if hasattr(info, attr)]
        inner += list(getattr(info, "types", ()))
        return [name for sub in inner for name in defaulted(sub, False)]

    for record_type in _VERSIONS:
        added = sorted(ADDED_FIELDS.get(record_type, ()))
        assert sorted(defaulted(msgspec.inspect.type_info(record_type), True)) == added, record_type.__name__
    # A record without its version, though the record's default fills it, is refused.
    with pytest.raises(RecordError) as info:
        decode_record(LeaseRecord, GOOD.replace(b'"format_version":1,', b""), LABEL)
    assert info.value.kind is RecordErrorKind.MISSING_FIELD
