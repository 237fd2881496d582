"""Refusals of the session service, and the one table that gives every store
refusal its stable kind (the ``data.kind`` of an LSP error and the ``kind``
of ``mevedel --json``).

Messages name sessions, turns, hosts and session-relative files; never a
backing filesystem path.
"""

from __future__ import annotations

import json

from ...targets import TargetError, UnsafePathError
from ..authority.records import RecordError
from ..authority.transfer import NotRequestable, TransferBusy
from ..content.inspect import InspectRow
from ..content.sidecar import SidecarError
from ..content.transcript import SegmentError
from ..errors import (
    ClaimRaced,
    ContentError,
    ConversationError,
    IdentityNeedsConfirmation,
    InvalidSessionId,
    KindedRefusal,
    LeaseHeld,
    LeaseLost,
    LeaseObservationError,
    OutcomeUnknown,
    PublicationFailed,
    PublicationPending,
    SessionMissing,
    SessionOccupied,
    SessionRefusal,
    StoreError,
    TakeoverNeedsConfirmation,
)
from ..transactions.lifecycle_token import LifecycleError
from .held_beside import BesideHeld


class SessionNotOpen(SessionRefusal):
    """The request names a session this client has not opened."""

    def __init__(self, session_id: str, action: str) -> None:
        super().__init__(session_id, f"is not open; open it before you {action}", continues=True)


class NoSessionOpen(StoreError):
    """The request names no session, and it has none to fall back on: a
    refusal about no session, so it names none."""

    def __init__(self, action: str) -> None:
        super().__init__(f"no session is open; open one before you {action}")


class SessionReadOnly(SessionRefusal):
    """The session is open read-only (joined, or its lease was lost)."""

    def __init__(self, session_id: str, why: str) -> None:
        super().__init__(session_id, f"is open read-only: {why}", continues=True)
        self.why = why


class SessionIncompatible(SessionRefusal):
    """The committed sidecar is not the current format: inspect only."""

    def __init__(self, session_id: str, row: InspectRow) -> None:
        super().__init__(session_id, f"cannot be opened: {row.reason}", continues=True)
        self.row = row


class InvalidSessionInput(StoreError, ValueError):
    """A request argument (name, prompt, record field, path) is unusable.
    ``what`` names the authored input (``name "  "``), so a client's error
    points at what the user typed, not at the request."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.authored = what
        self.reason = reason


class TurnStateConflict(ConversationError, SessionRefusal):
    """The request does not fit the session's turn state (no turn in flight,
    or one still in flight)."""

    def __init__(self, session_id: str, reason: str) -> None:
        SessionRefusal.__init__(self, session_id, reason, continues=True)


class SessionConflict(ConversationError, SessionRefusal):
    """The turn in flight refused a record or capture (a repeated tool call,
    a result for a call it never made...)."""

    def __init__(self, session_id: str, reason: str) -> None:
        SessionRefusal.__init__(self, session_id, reason)


def quoted(text: object, limit: int = 60) -> str:
    """Authored text as it appears in an error: double-quoted with JSON
    escapes (so blanks and control characters stay visible), cut at
    ``limit`` characters."""
    if not isinstance(text, str):
        return repr(text)
    shown = text if len(text) <= limit else text[:limit] + "…"
    return json.dumps(shown, ensure_ascii=False)


class NoPendingPublication(SessionRefusal):
    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, "has no pending publication to retry", continues=True)


class TransferDraining(SessionRefusal):
    """A granted control transfer is draining the session: new mutations
    are refused until the hand-over completes."""

    def __init__(self, session_id: str, requester: str) -> None:
        super().__init__(
            session_id, f"is being handed to {requester}: new work is refused until the hand-over completes", continues=True
        )


class UnsettledMutation(SessionRefusal):
    """A shell command a previous owner of the session started may still be
    running (the lease's unsettled-mutation latch): what would change the
    workspace under it is refused, and the person told what to check."""

    def __init__(self, session_id: str, action: str, message: str) -> None:
        super().__init__(session_id, f"cannot {action} yet: {message}")


class NoSuchTurn(SessionRefusal):
    def __init__(self, session_id: str, turn: int, count: int) -> None:
        known = f"turns are numbered 1-{count}" if count else "it has no turns yet"
        super().__init__(session_id, f"has no turn {turn} ({known})", continues=True)
        self.turn = turn


#: Stable kinds, most specific class first.
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (InvalidSessionId, "invalid-params"),
    (InvalidSessionInput, "invalid-params"),
    (SessionNotOpen, "owner-missing"),
    (NoSessionOpen, "owner-missing"),
    (SessionMissing, "missing-target"),
    (NoSuchTurn, "missing-target"),
    (TakeoverNeedsConfirmation, "takeover-needs-confirmation"),
    (IdentityNeedsConfirmation, "identity-needs-confirmation"),
    (BesideHeld, "beside-held-needs-confirmation"),
    (TransferDraining, "transfer-draining"),
    (UnsettledMutation, "unsettled-mutation"),
    (TransferBusy, "conflict"),
    (NotRequestable, "conflict"),
    (ClaimRaced, "lease-held"),
    (LeaseHeld, "lease-held"),
    (LeaseLost, "lease-lost"),
    (SessionReadOnly, "read-only"),
    (PublicationPending, "publication-pending"),
    (PublicationFailed, "publication-pending"),
    (SessionIncompatible, "incompatible"),
    (SidecarError, "incompatible"),
    (SessionOccupied, "conflict"),
    (NoPendingPublication, "conflict"),
    (TurnStateConflict, "conflict"),
    (ConversationError, "conflict"),
    (RecordError, "unreadable"),
    (ContentError, "unreadable"),
    (SegmentError, "unreadable"),
    (LeaseObservationError, "unavailable"),
    (OutcomeUnknown, "unavailable"),
    (UnsafePathError, "unreadable"),
    (TargetError, "unavailable"),
)

#: Every kind :func:`error_kind` can return.
KINDS = frozenset(kind for _cls, kind in _KINDS) | {"internal", "stale-head", "recovery-pending"}


def error_kind(error: BaseException) -> str:
    """The stable kind of a store or target refusal; ``internal`` for
    anything else (a bug). A lifecycle transaction's refusal carries its own."""
    if isinstance(error, LifecycleError) or isinstance(error, KindedRefusal):
        return error.kind
    for cls, kind in _KINDS:
        if isinstance(error, cls):
            return kind
    return "internal"


def is_refusal(error: BaseException) -> bool:
    """True for the errors a user is shown as they are (not a bug)."""
    return isinstance(error, (StoreError, TargetError))
