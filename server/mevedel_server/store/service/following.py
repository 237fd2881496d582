"""Following a session owned elsewhere: a session open read-only here (joined,
handed over, or whose lease was lost) advances through the owner's committed
publications.

One step (:meth:`Following.follow`) is one lease observation; only
when the lease head names a publication other than the one held here are its
manifest and artifacts read, through the same restore a resume uses, and the
copy here replaced whole. A session holding changes that were never
committed here (a save pending, or records the lost lease could not publish)
is never advanced: the step reports it as held back, once per new head.

Every step that has something to tell (settled turns new, replaced or
removed, a new name, another lease holder, or a held-back head) is reported
to the ``on_follow`` listeners, whichever path ran it: the watcher, an
explicit refresh, or a read (``turns``) of a followed session. A mid-turn
checkpoint that settles nothing is adopted silently: a follower sees whole
turns, never work in progress.

A session's following can be switched off here (``set_follow``): it then
advances only on an explicit refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from ..authority.lease import LeaseObservation, read_lease_head
from ..authority.publication import CommittedSnapshot, load_manifest
from ..authority.records import LeaseState
from ..content.sidecar import shown_name
from ..layout import SessionPaths
from .table import SessionTable
from .values import Access

if TYPE_CHECKING:
    from ..watching.follow import PublicationChange
    from .open_session import OpenSession

_log = logging.getLogger(__name__)

ADVANCED = "advanced"
UNCHANGED = "unchanged"
HELD_BACK = "held-back"
WRITABLE = "writable"

_LIVE = (LeaseState.CLAIMING, LeaseState.ACTIVE, LeaseState.PUBLISHING)


class FollowUpdate(msgspec.Struct, frozen=True):
    session_id: str
    #: ``advanced``, ``unchanged``, ``held-back`` or ``writable`` (this
    #: client owns the session: there is nobody to follow).
    status: str
    #: The lease generation observed (0: never claimed).
    generation: int
    #: The committed head held here after the step.
    head: str | None
    display_name: str
    named: bool
    settled_turns: int
    #: What the adopted publication changed (``advanced`` only).
    change: PublicationChange | None = None
    #: The host in the lease record while its holder is live.
    holder_host: str | None = None
    #: The lease record's state (None: never claimed).
    lease_state: str | None = None
    holder_changed: bool = False
    #: Why a newer head was not adopted (``held-back``).
    held_back: str | None = None
    #: The step has something to tell a view.
    report: bool = False


class _Seen(msgspec.Struct):
    #: Who held the lease at the last step: (client id, host) while live.
    holder: tuple[str, str] | None
    #: The newest head already reported as held back.
    held_back_head: str | None = None


class _Book(msgspec.Struct):
    default: bool = True
    overrides: dict[str, bool] = msgspec.field(default_factory=dict)
    seen: dict[str, _Seen] = msgspec.field(default_factory=dict)
    #: One step at a time per session: two overlapping steps (the watcher's
    #: and a read's) would both adopt the same head and report it twice.
    locks: dict[str, asyncio.Lock] = msgspec.field(default_factory=dict)


def _holder(observation: LeaseObservation) -> tuple[str, str] | None:
    record = observation.record
    if record is None or record.state not in _LIVE:
        return None
    return (record.client_id, record.host)


class Following:
    """Following the sessions of ``table`` that are read-only here."""

    def __init__(self, table: SessionTable) -> None:
        self._table = table
        self._book = _Book()
        #: Called with every :class:`FollowUpdate` that has something to tell.
        self.on_follow: list[Callable[[FollowUpdate], None]] = []

    # Opting out ---------------------------------------------------------------

    @property
    def follow_default(self) -> bool:
        return self._book.default

    @follow_default.setter
    def follow_default(self, enabled: bool) -> None:
        self._book.default = bool(enabled)

    def set_follow(self, session_id: str, enabled: bool) -> None:
        """Follow ``session_id``'s publications here, or stop (an explicit
        refresh still advances it)."""
        self._table.get(session_id, "change whether it is followed")
        self._book.overrides[session_id] = bool(enabled)

    def follows(self, session_id: str) -> bool:
        """Following is on for this session (it advances only while it is
        read-only here)."""
        book = self._book
        return book.overrides.get(session_id, book.default)

    def active(self, session_id: str) -> bool:
        """The session is read-only here and following is on."""
        session = self._table.sessions.get(session_id)
        return session is not None and session.access is Access.READ_ONLY and self.follows(session_id)

    def forget(self, session_id: str) -> None:
        book = self._book
        book.overrides.pop(session_id, None)
        book.seen.pop(session_id, None)
        book.locks.pop(session_id, None)

    def seen_at_join(self, session_id: str, observation: LeaseObservation) -> None:
        self._book.seen[session_id] = _Seen(_holder(observation))

    # Stepping -----------------------------------------------------------------

    async def follow(self, session_id: str) -> FollowUpdate:
        """One step: observe the lease; adopt a newer committed publication
        unless changes made here were never committed."""
        session = self._table.get(session_id, "follow it")
        return await self._follow_step(session)

    async def _follow_step(self, session: OpenSession) -> FollowUpdate:
        lock = self._book.locks.setdefault(session.session_id, asyncio.Lock())
        async with lock:
            return await self._follow_step_locked(session)

    async def _follow_step_locked(self, session: OpenSession) -> FollowUpdate:
        book = self._book
        sid = session.session_id
        if session.access is Access.WRITABLE:
            return self._update(session, WRITABLE, 0)
        observation = await read_lease_head(self._table.target, sid)
        seen = book.seen.get(sid)
        if seen is None:
            # Read-only without a join: this client held the lease until now.
            seen = book.seen[sid] = _Seen((self._table.client.client_id, self._table.client.host))
        holder = _holder(observation)
        holder_changed = holder != seen.holder
        seen.holder = holder
        session.holder_host = holder[1] if holder is not None and holder[0] != self._table.client.client_id else None
        head = observation.publication_head
        if head == session.head:
            update = self._update(session, UNCHANGED, observation.generation, observation, holder_changed=holder_changed)
            return self._tell(update, holder_changed)
        edits = _uncommitted_here(session)
        if edits is not None:
            first = seen.held_back_head != head
            seen.held_back_head = head
            update = self._update(
                session, HELD_BACK, observation.generation, observation, holder_changed=holder_changed, held_back=edits
            )
            return self._tell(update, first or holder_changed)
        paths = SessionPaths(sid)
        manifest = await load_manifest(self._table.target, paths, head) if head else None
        conversation = await self._table.conversation_of(CommittedSnapshot(self._table.target, paths, observation.generation, head, manifest))
        # The diff of conversations is loaded by the first follow step, not
        # by every command that builds a service (``session list``).
        from ..watching.follow import diff_conversations

        change = diff_conversations(session.conversation, conversation)
        session.conversation = conversation
        session.history.rebind(conversation)
        session._head = head
        seen.held_back_head = None
        update = self._update(session, ADVANCED, observation.generation, observation, change=change, holder_changed=holder_changed)
        return self._tell(update, change.changes_turns or change.renamed or holder_changed)

    async def refresh(self, session: OpenSession) -> None:
        """A read of a followed session sees the committed head."""
        if session.access is Access.READ_ONLY and self.follows(session.session_id):
            await self._follow_step(session)

    def _update(
        self,
        session: OpenSession,
        status: str,
        generation: int,
        observation: LeaseObservation | None = None,
        **facts,
    ) -> FollowUpdate:
        sidecar = session.conversation.sidecar
        record = observation.record if observation is not None else None
        live = record is not None and record.state in _LIVE
        return FollowUpdate(
            session_id=session.session_id,
            status=status,
            generation=generation,
            head=session.head,
            display_name=shown_name(sidecar, session.session_id),
            named=sidecar.display_name is not None,
            settled_turns=sidecar.total_turn_count,
            holder_host=record.host if live else None,
            lease_state=record.state.value if record is not None else None,
            **facts,
        )

    def _tell(self, update: FollowUpdate, report: bool) -> FollowUpdate:
        if not report:
            return update
        update = msgspec.structs.replace(update, report=True)
        for listener in list(self.on_follow):
            try:
                listener(update)
            except Exception:
                _log.exception("follow listener failed")
        return update


def _uncommitted_here(session: OpenSession) -> str | None:
    """Why the copy here holds changes that were never committed (None: it
    is exactly a committed publication)."""
    held = "this client holds changes to the session that were never committed; they are kept, so the newer publication is not shown"
    if session.pending is not None:
        return f"{held} (a save is pending: {session.pending.reason})"
    candidate = session.conversation.artifacts_for_save()
    if candidate is not None and not candidate.unchanged:
        return held
    return None
