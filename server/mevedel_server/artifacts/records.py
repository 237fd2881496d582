"""The store's closed records (msgspec): an unknown field, a missing one or
a value out of range refuses the record rather than guessing."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

import msgspec

from ..store import encode_record
from ..targets import ProcessIdentity
from .errors import ArtifactError
from .layout import MAX_TITLE

Seconds = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
ItemIdText = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}\Z")]
SessionIdText = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")]
Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]

FORMAT_VERSION = 1


class _Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class ItemMeta(_Record, kw_only=True):
    format_version: Literal[1] = FORMAT_VERSION
    id: ItemIdText
    kind: Literal["document", "whiteboard", "artifact"]
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TITLE)]
    primary: Annotated[str, msgspec.Meta(min_length=1, max_length=120)]
    created_at: Seconds
    updated_at: Seconds
    #: The item's own conversation (counts only while that session names
    #: this item back).
    dedicated_session: SessionIdText | None = None


class VersionReason(enum.Enum):
    TURN = "turn"
    SAVED = "saved"
    CREATED = "created"
    RESTORED = "restored"
    #: What a restore wrote over (recorded before it, so it can be undone).
    REPLACED = "replaced"


class VersionEntry(_Record, kw_only=True):
    number: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    at: Seconds
    reason: VersionReason
    size: Count
    sha256: Sha256
    session_id: SessionIdText | None = None
    turn: Count | None = None


class VersionIndex(_Record, kw_only=True):
    format_version: Literal[1] = FORMAT_VERSION
    #: Numbers are never reused, even after the oldest are dropped.
    next_number: Annotated[int, msgspec.Meta(ge=1, le=2**53)] = 1
    #: Oldest first.
    versions: list[VersionEntry] = []


class Comment(_Record, kw_only=True):
    number: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    at: Seconds
    author: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    text: str
    #: The session the comment was routed to (see ``SessionArtifacts.comment``).
    session_id: SessionIdText | None = None
    #: The turn of that session whose prompt carried it to the agent, once
    #: the agent answered (see ``artifacts.mail``).
    delivered_in: Count | None = None


class Discussion(_Record, kw_only=True):
    format_version: Literal[1] = FORMAT_VERSION
    comments: list[Comment] = []


class ItemLeaseState(enum.Enum):
    ACTIVE = "active"
    RELEASED = "released"


class ItemLeaseRecord(_Record, kw_only=True):
    """One immutable generation of an item lease."""

    format_version: Literal[1] = FORMAT_VERSION
    generation: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    state: ItemLeaseState
    client_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._-]{1,128}\Z")]
    host: Annotated[str, msgspec.Meta(max_length=255)]
    renewed_at: Seconds
    expires_at: Seconds
    #: The editor or process holding it (shown to people with the host, so
    #: two editors on one machine are told apart); None from older writers.
    holder: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    #: The process that wrote this generation (and renews it), so that
    #: another process on its machine can prove it ended and take the item
    #: before the expiry (see :mod:`.item_lease`); None from older writers,
    #: and from a process ``/proc`` could not name: judged by the expiry.
    process: ProcessIdentity | None = None


class HandoverRequest(_Record, kw_only=True):
    client_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._-]{1,128}\Z")]
    host: Annotated[str, msgspec.Meta(max_length=255)]


def encode(record: _Record) -> bytes:
    """The session store's codec: deterministic bytes, one line."""
    return encode_record(record)


class RecordRefused(Exception):
    def __init__(self, label: str, reason: str) -> None:
        super().__init__(f"{label}: {reason}")
        self.label = label
        self.reason = reason


def decode_record(record_type: type, data: bytes, label: str):
    try:
        return msgspec.json.decode(data, type=record_type)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RecordRefused(label, f"is not a valid record ({exc})") from None


def load(record_type: type, raw: bytes | None, item_id: str, what: str):
    """An item's bookkeeping record (``record_type()`` when absent), or an
    ``unreadable`` refusal naming the item: bytes that do not decode are
    never guessed at."""
    if raw is None:
        return record_type()
    try:
        return decode_record(record_type, raw, f"{what} of {item_id}")
    except RecordRefused as exc:
        raise ArtifactError("unreadable", item_id, f"its {what} cannot be trusted ({exc.reason})") from None
