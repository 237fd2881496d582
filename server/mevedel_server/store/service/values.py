"""The session service's value types and defaults: what its capabilities
return (:class:`SessionInfo`, :class:`OpenResult`, :class:`TurnStarted`,
:class:`CaptureResult`, :class:`SegmentRotation`, :class:`SessionListing`),
what it reports (:class:`SessionChange`), and the storage defaults the
LSP server and the CLI run with (:data:`PRODUCT_STORAGE`)."""

from __future__ import annotations

import enum

import msgspec

from ..workspace_wide.cleanup import DEFAULT_MAX_AGE_DAYS
from ..workspace_wide.collection import (
    DEFAULT_KEEP_RECENT as DEFAULT_PUBLICATION_KEEP_RECENT,
)
from ..workspace_wide.listing import InspectSessionRow, SessionRow

#: Spec default: a turn in flight is checkpointed this often.
DEFAULT_CHECKPOINT_SECONDS = 30
#: Files larger than this are recorded as capture gaps, not snapshots.
DEFAULT_MAX_SNAPSHOT_BYTES = 1024 * 1024
#: Spec default: the most recently updated sessions cleanup always keeps.
DEFAULT_SESSION_KEEP_RECENT = 3
#: The background storage work the LSP server and the CLI run, with the
#: spec's defaults: publication collection (newest 3 generations kept beyond
#: the head and the settled-turn states), a mid-turn checkpoint every 30 s,
#: expired-session cleanup (30 days, the 3 most recent kept), and the
#: generated-state entries of ``.git/info/exclude``. A bare
#: ``SessionService`` (tests, tools) runs none of it unless asked.
PRODUCT_STORAGE = {
    "git_excludes": True,
    "publication_keep_recent": DEFAULT_PUBLICATION_KEEP_RECENT,
    "checkpoint_seconds": DEFAULT_CHECKPOINT_SECONDS,
    "session_max_age_days": DEFAULT_MAX_AGE_DAYS,
    "session_keep_recent": DEFAULT_SESSION_KEEP_RECENT,
}
ABORT_REASON = "aborted"
#: What an interrupted turn's reason says when the files its stopped
#: process changed since its last checkpoint could not be recovered.
CHANGES_UNKNOWN = "what it changed in the files since its last checkpoint is not known"


class StoppedTurnChanges:
    """What a turn a stopped process left in flight changed in the tree,
    as the front end's file-state record found it
    (``SessionService(stopped_turn_changes=...)``): each path's state
    before the turn -- ``(path, Entry or None, gap or None)`` --, or why
    it cannot be known (``lost``); ``finish`` is awaited once the turn's
    settlement committed (the record lets its baseline go)."""

    __slots__ = ("changes", "finish", "lost")

    def __init__(self, changes: tuple = (), *, lost: str | None = None, finish=None) -> None:
        self.changes = changes
        self.lost = lost
        self.finish = finish


class Access(enum.Enum):
    WRITABLE = "writable"
    READ_ONLY = "read-only"


class SaveResult(msgspec.Struct, frozen=True):
    session_id: str
    #: A new publication committed.
    committed: bool
    #: The committed publication head after the save (None: nothing saved yet).
    head: str | None
    #: This save created the session directory and claimed its lease.
    materialized: bool = False
    #: Logical paths whose bytes this save wrote / pointed at earlier bytes.
    written: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    #: Why nothing was published, when nothing was.
    note: str | None = None


class OpenMode(enum.Enum):
    #: Resume when the lease allows it, join read-only when another client
    #: holds it, and ask before taking over an expired foreign lease.
    AUTO = "auto"
    RESUME = "resume"
    JOIN = "join"
    TAKEOVER = "takeover"


class SessionInfo(msgspec.Struct, frozen=True):
    session_id: str
    #: The display name, or the session ID while the session is unnamed.
    display_name: str
    named: bool
    access: Access
    #: Why the session is read-only (None: writable).
    read_only_reason: str | None
    #: Host named in the lease of the client that holds a joined session.
    holder_host: str | None
    #: False until the first save creates the session directory.
    materialized: bool
    #: The committed publication head (None: nothing committed yet).
    head: str | None
    settled_turns: int
    #: Number of the turn in flight, if any.
    open_turn: int | None
    #: The reason a publication is pending (retry or abandon it).
    pending_publication: str | None
    #: The next turn will carry the reconciliation reminder.
    reconciliation_pending: bool
    #: An interrupted transaction's recovery waits (retry or abandon it);
    #: every mutation is refused until then.
    recovery_pending: str | None = None


class OpenResult(msgspec.Struct, frozen=True):
    info: SessionInfo
    #: ``resume``, ``join``, ``takeover`` or ``switch`` (already open here).
    action: str
    #: Resuming converted a turn in flight into an interrupted one.
    interrupted_turn: int | None = None


class TurnStarted(msgspec.Struct, frozen=True):
    session_id: str
    turn: int
    turn_id: str
    #: This turn's request must carry the reconciliation reminder.
    reminder: bool


class CaptureResult(msgspec.Struct, frozen=True):
    path: str
    #: ``present`` (a regular file), ``absent``, ``directory``, ``symlink``
    #: or ``gap``.
    state: str
    size: int | None = None
    gap_reason: str | None = None


class SessionChange(msgspec.Struct, frozen=True):
    """The open session's committed or access state changed."""

    session_id: str
    #: ``settled``, ``checkpoint``, ``saved``, ``renamed``, ``resumed``,
    #: ``retried``, ``read-only``, ``closed``, ``rewound``, ``redone``,
    #: ``created`` (a fork or save-as child opened here), ``recovered``,
    #: ``compacted``, ``cleared`` or ``joined`` (opened read-only: another client holds the lease).
    reason: str
    head: str | None
    settled_turns: int
    access: Access
    #: The display name after the change (the ID while unnamed).
    display_name: str = ""


class SpoolNotice(msgspec.Struct, frozen=True):
    """A save of an open session whose host could not record it: kept on
    this machine (``kept``), or, kept so, now on the host -- ``recorded``
    (pending there: a retry publishes it) or ``published`` (the committed
    state holds it). A person is told each: the save outlives this process
    only because this machine keeps it."""

    session_id: str
    event: str
    #: When the save failed (target seconds) and the machine that kept it.
    failed_at: int
    kept_by: str


class SegmentRotation(msgspec.Struct, frozen=True):
    """A compaction or /clear: the live segment closed and a new one opened."""

    session_id: str
    #: The segment that was closed.
    previous_segment: int
    #: The new live segment.
    segment: int
    #: /clear: the number of the chapter it closed (None for compaction).
    chapter: int | None
    save: SaveResult


class SessionListing(msgspec.Struct, frozen=True):
    rows: tuple[SessionRow, ...]
    inspect_rows: tuple[InspectSessionRow, ...]
    #: Sessions created here that have nothing saved yet (also in ``rows``).
    unsaved: tuple[str, ...]
