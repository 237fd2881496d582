"""Following a session owned elsewhere: the ``mevedel/session/didPublish``
notification, and the ``mevedel/session/setFollow`` and
``mevedel/session/refresh`` requests.

A session open read-only here (joined, released, or whose lease was lost)
follows the owner's committed publications while following is on (the
``followPublished`` setting, per session ``setFollow``). Updates are whole
settled turns: a mid-turn checkpoint that settles nothing sends nothing.
"""

from typing import Literal, Optional

import attrs

TurnChangeKind = Literal["new", "replaced"]
SettledState = Literal["completed", "errored", "interrupted"]
LeaseRecordState = Literal["claiming", "active", "publishing", "released", "aborted"]
RefreshStatus = Literal["advanced", "unchanged", "held-back", "writable"]


@attrs.define
class PublishedTurn:
    """A settled turn the new publication added (``new``) or changed under
    the same number (``replaced``: a Rewind followed by a new turn, a Redo).
    ``prompt`` is the prompt's preview; ``mevedel/turn/show`` has the rest."""

    turn: int
    turn_id: str
    segment: int
    change: TurnChangeKind
    state: SettledState
    prompt: str


@attrs.define
class SessionDidPublishParams:
    """This server's read-only copy of a session advanced to a newer
    committed publication (or the lease changed hands), or was held back.

    ``generation`` is the lease generation that named the adopted head.
    ``turns`` are the new or replaced settled turns, ``removedTurns`` the
    numbers of settled turns the new head no longer has. ``holderHost`` is
    the host in the lease while its holder is live (absent: nobody holds
    it); ``leaseState`` the lease record's state. ``heldBack`` is set, and
    nothing was adopted, when this client holds changes to the session it
    never committed: they are kept, never overwritten.
    """

    workspace_folder: str
    session_id: str
    generation: int
    display_name: str
    named: bool
    settled_turns: int
    turns: list[PublishedTurn]
    removed_turns: list[int]
    renamed: bool
    holder_changed: bool
    holder_host: Optional[str] = None
    lease_state: Optional[LeaseRecordState] = None
    held_back: Optional[str] = None


@attrs.define
class SetFollowParams:
    """Follow this session's publications here (``enabled``), or stop; a
    stopped session advances only on ``mevedel/session/refresh``."""

    enabled: bool
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class FollowState:
    """``following`` is true while the session is read-only here and
    followed; ``mode`` says how changes are noticed then: ``notify``
    (filesystem notifications) or ``poll`` (``sessionWatch`` cadences)."""

    session_id: str
    enabled: bool
    following: bool
    mode: Optional[Literal["notify", "poll"]] = None


@attrs.define
class SessionRefreshResult:
    """``advanced`` (``publication`` says what changed), ``unchanged`` (the
    head here is the committed one), ``held-back`` (a newer head exists but
    this client holds uncommitted changes) or ``writable`` (this client owns
    the session)."""

    session_id: str
    status: RefreshStatus
    publication: Optional[SessionDidPublishParams] = None
