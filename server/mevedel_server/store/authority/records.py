"""The durable records of the session store and their one decoder.

Every record is a msgspec Struct encoded as JSON, with
``forbid_unknown_fields``, an explicit ``format_version`` and whole target
seconds as integers (floats, and so NaN or Infinity, have no place in them).
:func:`decode_record` accepts exactly the current version and the complete
current shape -- but for a field added to a version after records of it were
written (:data:`ADDED_FIELDS`, the only fields with a default: absent means
unknown); every other byte string becomes a :class:`RecordError` naming
the file (by its session- or workspace-relative label) and the reason. A
decoder never guesses a value and never deletes anything.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, TypeVar

import msgspec

from ...targets import InvalidTargetPath, ProcessIdentity, split_target_path
from ..content.pattern_check import pattern_check
from ..content.remembered import Remembered
from ..errors import StoreError

LEASE_FORMAT_VERSION = 1
MANIFEST_FORMAT_VERSION = 1
WORKSPACE_FORMAT_VERSION = 1
TRANSFER_FORMAT_VERSION = 1
TURN_STATES_FORMAT_VERSION = 1

#: Upper bound for seconds, generations and sizes: far beyond any real value,
#: and exactly representable wherever these records are read.
MAX_INTEGER = 2**53

PUBLICATION_ID_PATTERN = r"[0-9a-f]{32}"
#: ``publication_head``: the session-relative path of a manifest.
HEAD_PATTERN = rf"^\.publications/{PUBLICATION_ID_PATTERN}/manifest\.json\Z"
#: Where a manifest entry's immutable bytes live (this or an earlier publication).
PUBLISHED_PATTERN = rf"^\.publications/{PUBLICATION_ID_PATTERN}/[0-9]{{6,}}\.data\Z"
SHA256_PATTERN = r"^[0-9a-f]{64}\Z"
CLIENT_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}\Z"

Seconds = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]


#: Client IDs repeat across records (a few clients write them all).
_client_id = pattern_check(CLIENT_ID_PATTERN, remember=True)
_head = pattern_check(HEAD_PATTERN)
_published = pattern_check(PUBLISHED_PATTERN)
_sha256 = pattern_check(SHA256_PATTERN)
_publication_id = pattern_check(rf"^{PUBLICATION_ID_PATTERN}\Z")


class RecordErrorKind(enum.Enum):
    TRUNCATED = "truncated"
    MALFORMED = "malformed"
    NON_FINITE = "non-finite"
    WRONG_VERSION = "wrong-version"
    UNKNOWN_FIELD = "unknown-field"
    MISSING_FIELD = "missing-field"
    WRONG_TYPE = "wrong-type"
    INVALID_VALUE = "invalid-value"
    #: Bytes a valid manifest names do not have the recorded digest or size.
    DIGEST_MISMATCH = "digest-mismatch"
    #: A file a valid reference names is absent or unreadable.
    MISSING = "missing"


class RecordError(StoreError):
    """A durable record (or bytes a record names) cannot be trusted."""

    def __init__(self, kind: RecordErrorKind, path_label: str, reason: str) -> None:
        super().__init__(f"{path_label}: {reason}")
        self.kind = kind
        self.path_label = path_label
        self.reason = reason


class LeaseState(enum.Enum):
    CLAIMING = "claiming"
    ACTIVE = "active"
    PUBLISHING = "publishing"
    RELEASED = "released"
    ABORTED = "aborted"


# Untracked by the garbage collector (gc=False): a record holds scalars and
# dicts of records, never a cycle (a listing decodes three per session).
class _Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, gc=False):
    pass


class LeaseRecord(_Record, kw_only=True):
    """One immutable lease generation (see :mod:`.lease`)."""

    format_version: int = LEASE_FORMAT_VERSION
    generation: Annotated[int, msgspec.Meta(ge=1, le=MAX_INTEGER)]
    state: LeaseState
    #: Matches CLIENT_ID_PATTERN (checked after decoding: see ..content.pattern_check).
    client_id: str
    #: For display only ("held by HOST"); never an authority input.
    host: Annotated[str, msgspec.Meta(max_length=255)]
    renewed_at: Seconds
    expires_at: Seconds
    #: Matches HEAD_PATTERN.
    publication_head: str | None
    unsettled_mutation: bool
    transfer_generation: Count
    #: The process that wrote this generation (and renews it), so that a
    #: client on its machine can prove it ended (see :mod:`.lease`). Added
    #: to version 1 (:data:`ADDED_FIELDS`): a generation written before it
    #: has none, and is judged by its expiry alone.
    holder: ProcessIdentity | None = None

    def __post_init__(self) -> None:
        _client_id("client_id", self.client_id)
        if self.publication_head is not None:
            _head("publication_head", self.publication_head)
        if self.expires_at < self.renewed_at:
            raise ValueError("expires_at is earlier than renewed_at")


class ManifestEntry(_Record, kw_only=True):
    #: Matches PUBLISHED_PATTERN (checked after decoding: see ..content.pattern_check).
    published: str
    #: Matches SHA256_PATTERN.
    sha256: str
    size: Count

    def __post_init__(self) -> None:
        _published("published", self.published)
        _sha256("sha256", self.sha256)


class PublicationManifest(_Record, kw_only=True):
    """Logical session path -> immutable published bytes. Written last in
    its publication directory."""

    format_version: int = MANIFEST_FORMAT_VERSION
    #: Matches PUBLICATION_ID_PATTERN, whole (checked after decoding: see ..content.pattern_check).
    publication_id: str
    entries: dict[str, ManifestEntry]

    def __post_init__(self) -> None:
        _publication_id("publication_id", self.publication_id)
        # Every session's manifest names the same few logical paths.
        known = _logical_paths.values
        for logical in self.entries:
            if logical not in known:
                check_logical_path(logical)
                _logical_paths.keep(logical, True)


class TransferVerdict(enum.Enum):
    GRANT = "grant"
    KEEP = "keep"


class TransferRequest(_Record, kw_only=True):
    """A request for control, one per transfer generation (see :mod:`.transfer`)."""

    format_version: int = TRANSFER_FORMAT_VERSION
    transfer_generation: Count
    requester_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    requester_host: Annotated[str, msgspec.Meta(max_length=255)]
    #: The lease holder the request is addressed to; no other owner answers it.
    owner_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    requested_at: Seconds


class TransferDecision(_Record, kw_only=True):
    """The owner's answer to the request of the same transfer generation."""

    format_version: int = TRANSFER_FORMAT_VERSION
    transfer_generation: Count
    requester_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    owner_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    verdict: TransferVerdict
    #: ``answered`` (the owner's user chose) or ``timeout`` (nobody answered).
    reason: Annotated[str, msgspec.Meta(pattern=r"^(answered|timeout)\Z")]
    decided_at: Seconds


class TransferFence(_Record, kw_only=True):
    """Written with a granted release: until ``expires_at`` only the
    requester may claim the released lease."""

    format_version: int = TRANSFER_FORMAT_VERSION
    transfer_generation: Count
    requester_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    requester_host: Annotated[str, msgspec.Meta(max_length=255)]
    owner_client: Annotated[str, msgspec.Meta(pattern=CLIENT_ID_PATTERN)]
    #: The lease generation the grant released.
    released_generation: Annotated[int, msgspec.Meta(ge=1, le=MAX_INTEGER)]
    fenced_at: Seconds
    expires_at: Seconds

    def __post_init__(self) -> None:
        if self.expires_at < self.fenced_at:
            raise ValueError("expires_at is earlier than fenced_at")


class WorkspaceIdentity(_Record, kw_only=True):
    format_version: int = WORKSPACE_FORMAT_VERSION
    workspace_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class KeptTurnState(_Record, kw_only=True):
    """What one generation's immutable sidecar and prompt index say about
    its turn state (Redo's grouping), as the holder that judged them
    recorded it; it applies only to a manifest whose sidecar has this
    digest."""

    sidecar_sha256: Annotated[str, msgspec.Meta(pattern=SHA256_PATTERN)]
    turn_count: Count
    #: The last settled turn's identity (None: no turn).
    last_turn: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None
    in_flight: bool
    updated_at: Seconds


class KeptTurnStates(_Record, kw_only=True):
    """``.publications/.turn-states.json``: the turn states a session's
    holders judged, by publication ID, so that a later process's collection
    need not read them again. A cache of immutable facts: written only
    behind the lease proof, ignored when it does not decode."""

    format_version: int = TURN_STATES_FORMAT_VERSION
    session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    states: dict[Annotated[str, msgspec.Meta(pattern=rf"^{PUBLICATION_ID_PATTERN}\Z")], KeptTurnState]


#: Logical paths a manifest named that :func:`check_logical_path` accepted.
_logical_paths = Remembered(8192)


def check_logical_path(logical: str) -> None:
    """A logical artifact path is a plain session-relative path outside the
    dot-named control directories."""
    try:
        parts = split_target_path(logical)
    except InvalidTargetPath as exc:
        raise ValueError(f"logical path {logical!r} {exc.reason}") from None
    if not parts:
        raise ValueError("a logical path may not be empty")
    if parts[0].startswith("."):
        raise ValueError(f"logical path {logical!r} names a control directory")


#: Fields added to a record's current version after records of that version
#: were written: the only fields besides ``format_version`` with a default
#: (None: unknown, which each reader judges as the field's comment says). A
#: missing field of any other name is refused.
ADDED_FIELDS: dict[type, frozenset[str]] = {LeaseRecord: frozenset({"holder"})}

_VERSIONS: dict[type, int] = {
    LeaseRecord: LEASE_FORMAT_VERSION,
    PublicationManifest: MANIFEST_FORMAT_VERSION,
    WorkspaceIdentity: WORKSPACE_FORMAT_VERSION,
    TransferRequest: TRANSFER_FORMAT_VERSION,
    TransferDecision: TRANSFER_FORMAT_VERSION,
    TransferFence: TRANSFER_FORMAT_VERSION,
    KeptTurnStates: TURN_STATES_FORMAT_VERSION,
}

R = TypeVar("R", LeaseRecord, PublicationManifest, WorkspaceIdentity, TransferRequest, TransferDecision, TransferFence, KeptTurnStates)

_NON_FINITE_TOKEN = re.compile(rb"(?<![A-Za-z\"])(?:-?Infinity|NaN)(?![A-Za-z\"])")


def encode_record(record: _Record) -> bytes:
    """Deterministic bytes: fields in declaration order, dict keys sorted."""
    return msgspec.json.encode(record, order="deterministic") + b"\n"


def _classify(message: str) -> RecordErrorKind:
    if "unknown field" in message:
        return RecordErrorKind.UNKNOWN_FIELD
    if "missing required field" in message:
        return RecordErrorKind.MISSING_FIELD
    if message.startswith("Expected `") and "`, got `" in message:
        return RecordErrorKind.WRONG_TYPE
    return RecordErrorKind.INVALID_VALUE


#: How :func:`encode_record` starts every record.
_VERSION_FIRST = b'{"format_version":'
_typed: dict[type, msgspec.json.Decoder] = {}


def decode_record(record_type: type[R], data: bytes, path_label: str) -> R:
    """Decode ``data`` as exactly the current version of ``record_type``."""
    version = _VERSIONS[record_type]
    if data[: len(_VERSION_FIRST)] == _VERSION_FIRST:
        # Bytes that start as a written record does (its version present:
        # the only field with a default but ADDED_FIELDS, which the checks
        # below default alike) decode straight into the record,
        # which accepts exactly what the checks below accept; whatever it
        # refuses goes through them, which say what is wrong.
        decoder = _typed.get(record_type)
        if decoder is None:
            decoder = _typed[record_type] = msgspec.json.Decoder(record_type)
        try:
            record = decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            if record.format_version == version:
                return record
    try:
        raw = msgspec.json.decode(data)
    except msgspec.ValidationError as exc:
        # The untyped decoder only rejects numbers it cannot represent.
        raise RecordError(RecordErrorKind.NON_FINITE, path_label, f"contains a number out of range ({exc})") from None
    except msgspec.DecodeError as exc:
        message = str(exc)
        if "truncated" in message:
            raise RecordError(RecordErrorKind.TRUNCATED, path_label, "the record is truncated") from None
        if _NON_FINITE_TOKEN.search(data):
            raise RecordError(RecordErrorKind.NON_FINITE, path_label, "contains a non-finite number (NaN or Infinity)") from None
        raise RecordError(RecordErrorKind.MALFORMED, path_label, f"the record is not valid JSON ({message})") from None
    if not isinstance(raw, dict):
        raise RecordError(RecordErrorKind.WRONG_TYPE, path_label, "the record is not a JSON object")
    if "format_version" not in raw:
        raise RecordError(RecordErrorKind.MISSING_FIELD, path_label, "the record has no format_version")
    found = raw["format_version"]
    if type(found) is not int or found != version:
        raise RecordError(
            RecordErrorKind.WRONG_VERSION,
            path_label,
            f"format_version {found!r} is not the supported version {version}",
        )
    try:
        return msgspec.convert(raw, record_type, strict=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        raise RecordError(_classify(message), path_label, message) from None
