"""``SessionService``: the one facade the LSP server and the CLI call.

One service is one client (``ClientIdentity``) of one workspace's session
store (``Target``). It lists sessions, creates them lazily, opens them
(resume, join read-only, or take over an expired lease after confirmation),
runs turns through the conversation state machine and saves them: a turn
settles in one publication, a checkpoint saves an unfinished turn, an
explicit save publishes even an unchanged snapshot, a rename publishes only
display metadata. Every open writable session renews its lease in the
background; losing it makes the session read-only and is reported through
``on_change``.

Times written into records are target seconds (:mod:`.clock`); authority
decisions are the lease layer's, against the target clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...targets import (
    Clock,
    ControlProgram,
    Entry,
    InvalidTargetPath,
    OpResult,
    ReadEntry,
    Status,
    Target,
    TargetError,
    raise_for_result,
    split_target_path,
)
from ..authority.lease import (
    DEFAULT_LEASE_SECONDS,
    ClientIdentity,
    LeaseObservation,
    LeaseStanding,
    acquire_lease,
    observe_lease,
)
from ..authority.publication import CommittedSnapshot, load_manifest, read_committed
from ..authority.records import LeaseState, RecordError
from ..authority.workspace import (
    ExcludesProbe,
    allocate_session_id,
    check_session_id,
    ensure_generated_excludes,
    ensure_workspace_id,
    ensure_workspace_id_with,
    read_workspace_id,
    sessions_listing,
)
from ..content.checkpoints import capture_gap_reason
from ..content.inspect import InspectRow, classify_sidecar
from ..content.projection import retained_tasks
from ..content.sidecar import (
    SIDECAR_PATH,
    AgentChoice,
    EngineRef,
    NameRefused,
    SidecarErrorKind,
    normalize_display_name,
    shown_name,
)
from ..content.transcript import AgentTask, Outcome
from ..content.turns import Conversation, ConversationError
from ..errors import IdentityNeedsConfirmation, StoreError, TakeoverNeedsConfirmation
from ..layout import STATE_DIR, SessionPaths
from ..transactions.pending_publication import pending_listing
from ..transactions.recovery import find_recovery, recovery_listing
from ..workspace_wide.cleanup import (
    DEFAULT_MAX_AGE_DAYS,
    CleanupReport,
    remove_expired_sessions,
    remove_session,
    remove_unfinished_sessions,
)
from ..workspace_wide.collection import (
    DEFAULT_KEEP_RECENT as DEFAULT_PUBLICATION_KEEP_RECENT,
)
from ..workspace_wide.input_history import HistoryRead, InputHistory
from ..workspace_wide.listing import (
    InspectSessionRow,
    SessionAction,
    SessionRow,
    list_sessions,
)
from .background import DEFAULT_CHECKPOINT_SECONDS, STOP_CHECKPOINTS, TurnCheckpoints
from .clock import TargetTime
from .errors import (
    InvalidSessionInput,
    SessionConflict,
    SessionIncompatible,
    SessionNotOpen,
    TurnStateConflict,
    quoted,
)
from .evidence import (
    AGENT_STEP_KINDS,
    ENGINE_KINDS,
    EVIDENCE_KINDS,
    EvidenceInput,
    agent_step,
    make_evidence,
)
from .following import SessionFollowing
from .lifecycle import SessionLifecycle
from .live_history import LiveHistory
from .mutation_latch import LatchState
from .open_session import Access, OpenSession, SaveResult
from .renewal import renewal_interval

# Turn views, diffs and file restores are imported by the methods that
# build them: listing or opening a session never needs them.
if TYPE_CHECKING:
    from ..content.diff import TreeDiff
    from .file_restore import FileRestore
    from .turn_views import TurnDetail, TurnSummary

_log = logging.getLogger(__name__)

#: Files larger than this are recorded as capture gaps, not snapshots.
DEFAULT_MAX_SNAPSHOT_BYTES = 1024 * 1024
#: Spec default: the most recently updated sessions cleanup always keeps.
DEFAULT_SESSION_KEEP_RECENT = 3
#: Expired sessions are swept at most this often per service (ages count in days).
SWEEP_EVERY_SECONDS = 86_400
#: How long a CLI process lets a running publication collection finish before it exits.
DETACH_COLLECT_SECONDS = 5.0
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


class OpenMode(enum.Enum):
    #: Resume when the lease allows it, join read-only when another client
    #: holds it, and ask before taking over an expired foreign lease.
    AUTO = "auto"
    RESUME = "resume"
    JOIN = "join"
    TAKEOVER = "takeover"


@dataclass(frozen=True)
class SessionInfo:
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


@dataclass(frozen=True)
class OpenResult:
    info: SessionInfo
    #: ``resume``, ``join``, ``takeover`` or ``switch`` (already open here).
    action: str
    #: Resuming converted a turn in flight into an interrupted one.
    interrupted_turn: int | None = None


@dataclass(frozen=True)
class TurnStarted:
    session_id: str
    turn: int
    turn_id: str
    #: This turn's request must carry the reconciliation reminder.
    reminder: bool


@dataclass(frozen=True)
class CaptureResult:
    path: str
    #: ``present`` (a regular file), ``absent``, ``directory``, ``symlink``
    #: or ``gap``.
    state: str
    size: int | None = None
    gap_reason: str | None = None


@dataclass(frozen=True)
class SessionChange:
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


@dataclass(frozen=True)
class SegmentRotation:
    """A compaction or /clear: the live segment closed and a new one opened."""

    session_id: str
    #: The segment that was closed.
    previous_segment: int
    #: The new live segment.
    segment: int
    #: /clear: the number of the chapter it closed (None for compaction).
    chapter: int | None
    save: SaveResult


@dataclass(frozen=True)
class SessionListing:
    rows: tuple[SessionRow, ...]
    inspect_rows: tuple[InspectSessionRow, ...]
    #: Sessions created here that have nothing saved yet (also in ``rows``).
    unsaved: tuple[str, ...]


class SessionService(SessionLifecycle, SessionFollowing):
    def __init__(
        self,
        target: Target,
        client: ClientIdentity,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        renew_every: float | None = None,
        max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        publication_keep_recent: int | None = None,
        checkpoint_seconds: float | None = None,
        session_max_age_days: int | None = None,
        session_keep_recent: int = DEFAULT_SESSION_KEEP_RECENT,
        git_excludes: bool = False,
        one_command: bool = False,
    ) -> None:
        self.target = target
        self.client = client
        self.lease_seconds = lease_seconds
        #: Newest publication generations kept by collection beyond the head
        #: and the settled-turn states (None: no collection).
        self.publication_keep_recent = publication_keep_recent
        #: The service serves one CLI command (a process of its own): its
        #: collection runs once, when it detaches, instead of after every
        #: publication, and a session read that is not open here starts
        #: from what the command's listing just read of it (its committed
        #: head, manifest and recovery journal) instead of reading them again.
        self.one_command = one_command
        self._listed: dict[str, tuple[CommittedSnapshot, str | None, LeaseObservation]] = {}
        #: A turn in flight is checkpointed this often (None or 0: never).
        self.checkpoint_seconds = checkpoint_seconds
        #: Sessions unused this many days are removed (None: never), except
        #: the ``session_keep_recent`` most recently updated.
        self.session_max_age_days = session_max_age_days
        self.session_keep_recent = session_keep_recent
        #: Add the generated-state excludes to ``.git/info/exclude`` when
        #: this service first writes the workspace (once per service).
        self.git_excludes = git_excludes
        self._swept_at: float | None = None
        self._sweeping: asyncio.Future | None = None
        #: The last expired-session cleanup's report.
        self.last_cleanup: CleanupReport | None = None
        self.renew_every = renew_every if renew_every is not None else renewal_interval(lease_seconds)
        self.max_snapshot_bytes = max_snapshot_bytes
        #: Called with every :class:`SessionChange`.
        self.on_change: list[Callable[[SessionChange], None]] = []
        self._sessions: dict[str, OpenSession] = {}
        self._time: TargetTime | None = None
        self._init_following()
        #: Whether a control transfer of the session is in flight here
        #: (:class:`~.control.SessionControl` installs the real answer).
        self.transfer_in_flight: Callable[[str], bool] = lambda _session_id: False
        #: Sessions expired-session cleanup must keep, with why (the artifact
        #: store installs its items' dedicated sessions).
        self.expiry_exemptions: Callable[[], Awaitable[Mapping[str, str]]] | None = None

    # Introspection ----------------------------------------------------------

    def open_sessions(self) -> list[str]:
        return list(self._sessions)

    def is_open(self, session_id: str) -> bool:
        return session_id in self._sessions

    def session(self, session_id: str) -> OpenSession:
        """The open session (raises SessionNotOpen)."""
        return self._open(session_id, "use it")

    def info(self, session_id: str) -> SessionInfo:
        return self._info(self._open(session_id, "ask about it"))

    def live_history(self, session_id: str) -> LiveHistory:
        return self._open(session_id, "read its history").history

    # Listing ------------------------------------------------------------------

    async def list(self) -> SessionListing:
        """Every session of the workspace with the action its lease allows
        this client, plus the sessions created here and not saved yet.
        Expired sessions are removed (at most once a day per service, see
        :meth:`sweep_expired`) once the listing has proven the workspace
        reachable and valid -- a cleanup that cannot reach it would only
        report the same failure in its own, misleading words -- and are not
        listed."""
        here = [sid for sid, s in self._sessions.items() if s.access is Access.WRITABLE]
        listing = await list_sessions(self.target, self.client, here)
        swept = await self.sweep_expired(surveyed=listing.surveyed)
        gone = {r.session_id for r in swept.removed} if swept is not None else set()
        if gone:
            listing = replace(
                listing,
                rows=tuple(r for r in listing.rows if r.session_id not in gone),
                inspect_rows=tuple(r for r in listing.inspect_rows if r.name not in gone),
            )
        if listing.now is not None:
            self._clock_from(listing.now)
        if self.one_command:
            self._listed = {
                survey.name: (CommittedSnapshot(self.target, survey.paths, survey.observation.generation,
                                                survey.observation.publication_head, survey.manifest), survey.recovery,
                              survey.observation)
                for survey in (listing.surveyed[0] if listing.surveyed else ())
                if survey.paths is not None and survey.observation is not None and survey.problem is None
                and (survey.manifest is not None or survey.observation.publication_head is None)
            }
        if any(u.removable and u.session_id not in self._sessions for u in listing.unfinished):
            # Remains of a creation that never published: no session, gone
            # once no lease holds them (never one open here).
            try:
                report = await remove_unfinished_sessions(
                    self.target, self.client, listing.unfinished, open_sessions=set(self._sessions)
                )
            except (StoreError, TargetError) as error:
                _log.warning("removing unfinished session directories failed: %s", error)
            else:
                for removed in report.removed:
                    _log.info("removed %s: %s", removed.session_id, removed.reason)
        listed = {row.session_id for row in listing.rows}
        # Sessions created here and not saved yet (or whose first save has
        # not committed): this client's own, listed from memory.
        unsaved = [s for sid, s in self._sessions.items() if sid not in listed and s.head is None and s.access is Access.WRITABLE]
        extra = tuple(self._unsaved_row(s) for s in unsaved)
        rows = tuple(sorted(listing.rows + extra, key=lambda r: (r.updated_at, r.session_id), reverse=True))
        return SessionListing(rows, listing.inspect_rows, tuple(s.session_id for s in unsaved))

    def _unsaved_row(self, session: OpenSession) -> SessionRow:
        sidecar = session.conversation.sidecar
        return SessionRow(
            session_id=session.session_id,
            display_name=shown_name(sidecar, session.session_id),
            named=sidecar.display_name is not None,
            published=False,
            turn_count=sidecar.total_turn_count,
            latest_preview=sidecar.latest_user_message,
            updated_at=sidecar.updated_at,
            standing=LeaseStanding.FREE,
            lease_state=None,
            holder_host=None,
            holder_is_self=True,
            lease_expires_at=None,
            action=SessionAction.SWITCH,
            dedicated_artifact=sidecar.dedicated_artifact,
        )

    # Creating and opening -------------------------------------------------------

    async def create(self, name: str | None = None) -> SessionInfo:
        """A new session, open and writable here. Nothing of it is written
        until its first save (the workspace identity is ensured now, since
        the session records it)."""
        display_name = _display_name(name) if name is not None else None
        # One program: the identity, the clock, the saved sessions (for a
        # new ID) and git's exclude file.
        probe = ExcludesProbe() if self.git_excludes else None
        clock, listing = Clock(STATE_DIR), sessions_listing()
        workspace_id, found = await ensure_workspace_id_with(self.target, [clock, listing, *(probe.ops if probe else ())])
        if probe is not None:
            probe.found = found[2:]
        await self._note_use(probe)
        if self._time is None:
            raise_for_result(clock, found[0])
            self._clock_from(int(found[0].value))
        now = await self._now()
        session_id = await allocate_session_id(self.target, live_ids=self._sessions, listed=found[1])
        conversation = Conversation.new(session_id=session_id, workspace_id=workspace_id, at=now, display_name=display_name)
        session = self._new_open(conversation, materialized=False)
        self._sessions[session_id] = session
        return self._info(session)

    async def open(
        self,
        session_id: str,
        mode: OpenMode | str = OpenMode.AUTO,
        *,
        confirm_takeover: bool = False,
        confirm_identity: bool = False,
    ) -> OpenResult:
        """Open a saved session.

        ``resume`` and ``takeover`` claim the lease (a foreign *expired* lease
        raises :class:`TakeoverNeedsConfirmation` unless ``confirm_takeover``;
        a foreign live one raises :class:`LeaseHeld`). ``join`` opens the last
        committed publication read-only. ``auto`` resumes a free or own lease,
        joins a foreign live one and asks (the same error) for an expired one.
        Resuming a session whose last save had a turn in flight settles that
        turn as interrupted and queues the reconciliation reminder; reopening
        a session whose lease is still this client's continues it unchanged.
        Resuming a session whose sidecar records another workspace's identity
        (a session directory copied from another project) raises
        :class:`IdentityNeedsConfirmation`, before anything is written,
        unless ``confirm_identity``: then it is bound to this workspace
        (recorded by its next save; the agent's own history is detached).
        """
        mode = _mode(mode)
        check_session_id(session_id)
        existing = self._sessions.get(session_id)
        if existing is not None:
            if existing.access is Access.WRITABLE:
                return OpenResult(self._info(existing), "switch")
            if mode in (OpenMode.AUTO, OpenMode.JOIN):
                await self._refresh(existing)
                return OpenResult(self._info(existing), "join")
            self._sessions.pop(session_id)
        listed = self._listed.get(session_id)
        # This command's listing observed the lease a moment ago (a claim
        # from it is proven current by the claim itself).
        observation = listed[2] if listed is not None and listed[2].now is not None else await observe_lease(self.target, session_id)
        self._clock_from(observation.now)
        if mode is OpenMode.JOIN:
            return await self._join(session_id, observation)
        record = observation.record
        foreign = record is not None and record.client_id != self.client.client_id
        if mode is OpenMode.AUTO and foreign and observation.standing is LeaseStanding.HELD:
            return await self._join(session_id, observation)
        if foreign and observation.standing is LeaseStanding.EXPIRED and not confirm_takeover:
            raise TakeoverNeedsConfirmation(
                f"session {session_id} was held by {record.host or 'another client'}, whose lease expired; "
                "taking it over needs confirmation",
                session_id=session_id,
                holder_client=record.client_id,
                holder_host=record.host,
                state=record.state.value,
                expires_at=record.expires_at,
                now=observation.now,
            )
        return await self._resume(session_id, observation, confirm_takeover, confirm_identity)

    async def _join(self, session_id: str, observation: LeaseObservation) -> OpenResult:
        snapshot = await read_committed(self.target, session_id)
        conversation = await self._conversation_of(snapshot)
        record = observation.record
        holder = record.host if record is not None and observation.standing is not LeaseStanding.FREE else None
        why = f"joined; {holder or 'another client'} holds the lease" if holder else "joined read-only"
        session = self._new_open(conversation, read_only=why, holder_host=holder, head=snapshot.head)
        session.recovery = (await find_recovery(self.target, session_id)).recovery_id
        self._sessions[session_id] = session
        self._seen_at_join(session_id, observation)
        self._changed(session, "joined")
        return OpenResult(self._info(session), "join")

    async def _resume(
        self, session_id: str, observation: LeaseObservation, confirm_takeover: bool, confirm_identity: bool = False
    ) -> OpenResult:
        record = observation.record
        own = record is not None and record.client_id == self.client.client_id
        continuing = own and record.state in (LeaseState.ACTIVE, LeaseState.PUBLISHING)
        took_over = (
            record is not None and not own and observation.standing is LeaseStanding.EXPIRED
        )
        # The committed state is read and checked before the lease is
        # claimed: a session whose bytes cannot be trusted is refused without
        # a single write to it.
        snapshot, conversation = await self._committed_conversation(session_id)
        # The identity and git's exclude file are read in one program.
        probe = ExcludesProbe() if self.git_excludes else None
        workspace_id = await self._bound_identity(session_id, conversation, confirm_identity, probe)
        await self._note_use(probe)
        lease = await acquire_lease(
            self.target,
            session_id,
            self.client,
            duration_seconds=self.lease_seconds,
            confirm_takeover=confirm_takeover,
            observation=observation,
        )
        if lease.publication_head != snapshot.head:  # a save landed in between
            try:
                paths = SessionPaths(session_id)
                head = lease.publication_head
                manifest = await load_manifest(self.target, paths, head) if head else None
                snapshot = CommittedSnapshot(self.target, paths, lease.generation, head, manifest)
                conversation = await self._conversation_of(snapshot)
            except BaseException:
                await _release_quietly(lease)
                raise
        self._clock_from(lease.now)
        if workspace_id != conversation.sidecar.workspace_id:
            conversation.bind_workspace(workspace_id, at=self._time_now())
            _log.info("session %s: bound to this workspace (identity %s) as confirmed", session_id, workspace_id)
        session = self._new_open(conversation, lease=lease)
        if snapshot.head is not None and snapshot.manifest is not None and session.publisher is not None:
            session.publisher.know_committed(snapshot.head, snapshot.manifest)  # the first save plans over it
        self._sessions[session_id] = session
        # The recovery journal and the pending publication, listed in one program.
        journals = (recovery_listing(session.paths), pending_listing(session.paths))
        listed = await self.target.run(ControlProgram(list(journals)))
        session.recovery = (await find_recovery(self.target, session_id, listed=listed[0])).recovery_id
        session.recovery_clear = session.recovery is None
        interrupted: int | None = None
        if await self._restored_pending(session, listed[1]):
            session.repair_due = not continuing
        elif not continuing and session.recovery is None:
            interrupted = await self._repair_resumed(session)
        return OpenResult(self._info(session), "takeover" if took_over else "resume", interrupted)

    async def _repair_resumed(self, session: OpenSession) -> int | None:
        """Settle a turn a stopped owner left in flight as interrupted and
        save that; the turn's number, when there was one."""
        conversation = session.conversation
        in_flight = conversation.open_turn
        if not (conversation.resume(at=self._time_now()) and in_flight is not None):
            return None
        try:
            await session.save(conversation.artifacts_for_save())
        except (StoreError, TargetError) as error:
            # The session is open with the repair pending; info says so.
            _log.warning("session %s: saving the resume repair failed: %s", session.session_id, error)
        else:
            self._changed(session, "resumed")
        return in_flight.turn

    async def _note_use(self, probe: ExcludesProbe | None = None) -> None:
        """This service writes the workspace: the first time, make sure git
        ignores mevedel's generated state (best effort: a failure is logged)."""
        if not self.git_excludes:
            return
        self.git_excludes = False
        try:
            added = await ensure_generated_excludes(self.target, probe)
        except (StoreError, TargetError) as error:
            _log.info("could not add mevedel's generated state to .git/info/exclude: %s", error)
            return
        if added:
            _log.info("added %s to .git/info/exclude", ", ".join(added))

    async def _bound_identity(
        self, session_id: str, conversation: Conversation, confirmed: bool, probe: ExcludesProbe | None = None
    ) -> str:
        """The workspace identity a resumed session is bound to: its own
        when it matches this workspace's; this workspace's (created if it
        has none) when the mismatch is ``confirmed``."""
        recorded = conversation.sidecar.workspace_id
        current = await read_workspace_id(self.target, excludes=probe)
        if current == recorded:
            return recorded
        if not confirmed:
            raise IdentityNeedsConfirmation(session_id, recorded, current)
        return current if current is not None else await ensure_workspace_id(self.target)

    async def _committed_conversation(self, session_id: str) -> tuple[CommittedSnapshot, Conversation]:
        """The committed snapshot and its conversation: from what this
        command's listing read, unless it moved on since (then afresh)."""
        listed = self._listed.pop(session_id, None)
        if listed is not None:
            try:
                return listed[0], await self._conversation_of(listed[0])
            except (RecordError, SessionIncompatible, KeyError):
                pass  # moved on since the listing: read afresh, which reports what is wrong
        snapshot = await read_committed(self.target, session_id)
        return snapshot, await self._conversation_of(snapshot)

    async def _conversation_of(self, snapshot: CommittedSnapshot) -> Conversation:
        """The conversation a committed snapshot holds; an unpublished session
        is an empty one."""
        if snapshot.manifest is None:
            workspace_id = await read_workspace_id(self.target)
            if workspace_id is None:  # a session directory made by hand
                raise SessionIncompatible(
                    snapshot.session_id, InspectRow(SidecarErrorKind.MISSING, "the workspace has no identity")
                )
            return Conversation.new(session_id=snapshot.session_id, workspace_id=workspace_id, at=await self._now())
        # Everything in one program; the sidecar is judged first all the
        # same, so a session that does not load is told as one even when
        # other bytes are also bad (those are read again, alone, to say so).
        try:
            everything: dict[str, bytes] | None = await snapshot.read_all()
        except RecordError:
            everything = None
        if everything is not None:
            data = everything.get(SIDECAR_PATH)
        else:
            data = await snapshot.read(SIDECAR_PATH) if SIDECAR_PATH in snapshot.manifest.entries else None
        sidecar = classify_sidecar(data)
        if isinstance(sidecar, InspectRow):
            raise SessionIncompatible(snapshot.session_id, sidecar)
        if sidecar.session_id != snapshot.session_id:
            row = InspectRow(SidecarErrorKind.INVALID_VALUE, f"the sidecar belongs to session {sidecar.session_id}")
            raise SessionIncompatible(snapshot.session_id, row)
        return Conversation.restore(everything if everything is not None else await snapshot.read_all())

    # Closing -----------------------------------------------------------------

    async def close(self, session_id: str) -> SaveResult | None:
        """Save the session, release its lease and forget it. A pending
        publication refuses the close (retry or abandon it first)."""
        session = self._open(session_id, "close it")
        result: SaveResult | None = None
        if session.access is Access.WRITABLE:
            session.require_mutable()
            result = await session.save(session.conversation.artifacts_for_save())
            await session.release()
        else:
            await session.stop_renewal()
        self._sessions.pop(session_id, None)
        self._forget_following(session_id)
        self._changed(session, "closed")
        return result

    async def detach(self, *, collect_seconds: float = DETACH_COLLECT_SECONDS) -> None:
        """Stop background renewal without releasing anything (a CLI process
        ends; its leases stay until they expire or it reopens them). A
        publication collection still running gets ``collect_seconds`` to
        finish, then stops after its current step."""
        for session in self._sessions.values():
            if session.checkpoints is not None:
                await session.checkpoints.stop()
            if session.collector is not None:
                await session.collector.finish(collect_seconds)
            await session.stop_renewal()
        self._sessions.clear()
        await self._stop_sweep()

    async def close_all(self) -> None:
        """Close every open session, best effort (a server shutting down)."""
        await self._stop_sweep()
        for session_id in list(self._sessions):
            try:
                await self.close(session_id)
            except Exception as error:  # one failure must not keep the others open
                _log.warning("session %s: not closed cleanly: %s", session_id, error)
                session = self._sessions.pop(session_id)
                await session.stop_background()
                await session.stop_renewal()

    def configure(
        self,
        *,
        publication_keep_recent: int | None = None,
        checkpoint_seconds: float | None = None,
        session_max_age_days: int | None = None,
        session_keep_recent: int | None = None,
    ) -> None:
        """New storage settings: the checkpoint interval applies to the
        sessions open now too (from their next turn)."""
        self.publication_keep_recent = publication_keep_recent
        self.checkpoint_seconds = checkpoint_seconds
        self.session_max_age_days = session_max_age_days
        if session_keep_recent is not None:
            self.session_keep_recent = session_keep_recent
        for session in self._sessions.values():
            if session.checkpoints is not None:
                session.checkpoints.interval = checkpoint_seconds

    # Expired sessions --------------------------------------------------------------

    async def sweep_expired(self, *, force: bool = False, surveyed=None) -> CleanupReport | None:
        """Remove the workspace's expired sessions (older than
        ``session_max_age_days``, beyond the ``session_keep_recent`` most
        recent, lease free, no recovery pending, not open here), at most
        once per :data:`SWEEP_EVERY_SECONDS` (ages count in days) unless
        ``force``; ``surveyed`` is a listing's survey to judge instead of
        taking another. Failures are logged, never raised: a listing goes on."""
        if self.session_max_age_days is None:
            return None
        running = self._sweeping
        if running is not None and not running.done():
            await asyncio.shield(running)
            return self.last_cleanup
        if not force and self._swept_at is not None and time.monotonic() - self._swept_at < SWEEP_EVERY_SECONDS:
            return None
        self._sweeping = asyncio.ensure_future(self._sweep(surveyed))
        await asyncio.shield(self._sweeping)
        return self.last_cleanup

    def sweep_expired_soon(self) -> None:
        """:meth:`sweep_expired` in the background (a server starting)."""
        if self.session_max_age_days is None or (self._sweeping is not None and not self._sweeping.done()):
            return
        self._sweeping = asyncio.ensure_future(self._sweep())

    async def _sweep(self, surveyed=None) -> None:
        self._swept_at = time.monotonic()
        try:
            report = await remove_expired_sessions(
                self.target,
                self.client,
                max_age_days=self.session_max_age_days,
                keep_recent=self.session_keep_recent,
                open_sessions=set(self._sessions),
                exempt=self.expiry_exemptions,
                surveyed=surveyed,
            )
        except (StoreError, TargetError, ValueError) as error:
            _log.warning("expired-session cleanup failed: %s", error)
            return
        self.last_cleanup = report
        for removed in report.removed:
            _log.info("removed expired session %s: %s", removed.session_id, removed.reason)

    async def _stop_sweep(self) -> None:
        task, self._sweeping = self._sweeping, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
            except Exception:
                pass

    # Names ---------------------------------------------------------------------

    async def rename(self, session_id: str, name: str) -> SessionInfo:
        """Give the session an explicit display name; a saved session
        publishes only its display metadata."""
        session = await self._gated(session_id, "rename it")
        display_name = _display_name(name)
        candidate = session.conversation.rename(display_name)
        if candidate is not None and session.materialized:
            result = await session.save(candidate)
            if result.committed:
                self._changed(session, "renamed")
        return self._info(session)

    async def apply_title(self, session_id: str, title: str) -> str | None:
        """The agent's title for the session (ACP ``session_info_update``)
        as its display name, bounded to four words and sixty characters.
        An explicit name (creation, rename, Save As) always wins: None then,
        and for a title with nothing readable in it."""
        session = await self._gated(session_id, "name it", turn_work=True)
        try:
            session.conversation.apply_generated_title(title)
        except ConversationError as why:
            _log.info("session %s: the agent's title %r is not used: %s", session_id, title[:80], why)
            return None
        candidate = session.conversation.metadata_candidate()
        if candidate is not None and session.materialized:
            result = await session.save(candidate)
            if result.committed:
                self._changed(session, "renamed")
        return session.conversation.sidecar.display_name

    # Artifact store attachments ------------------------------------------------

    def attached_artifacts(self, session_id: str) -> tuple[str, ...]:
        """The artifact store items the open session has attached."""
        return tuple(self._open(session_id, "ask about it").conversation.sidecar.attached_artifacts)

    def dedicated_artifact(self, session_id: str) -> str | None:
        return self._open(session_id, "ask about it").conversation.sidecar.dedicated_artifact

    def turn_in_flight(self, session_id: str) -> int | None:
        """The number of the open session's turn in flight, if any."""
        opened = self._open(session_id, "ask about it").conversation.open_turn
        return None if opened is None else opened.turn

    async def set_attached_artifacts(self, session_id: str, item_ids: Sequence[str]) -> tuple[str, ...]:
        """Attach exactly ``item_ids`` (one small metadata publication of a
        saved session; an unsaved one keeps them for its first save)."""
        session = await self._gated(session_id, "attach artifacts to it")
        if tuple(item_ids) != tuple(session.conversation.sidecar.attached_artifacts):
            candidate = session.conversation.set_attached_artifacts(item_ids)
            if candidate is not None and session.materialized:
                await session.save(candidate)
        return tuple(session.conversation.sidecar.attached_artifacts)

    async def delete_session(self, session_id: str) -> None:
        """Close the session here and remove it from the workspace (an
        artifact's conversation deleted with its item). Refused while
        another client holds it."""
        if self.is_open(session_id):
            await self.close(session_id)
        kept = await remove_session(self.target, self.client, session_id)
        if kept is not None:
            raise SessionConflict(session_id, f"was not deleted: {kept}")

    async def set_dedicated_artifact(self, session_id: str, item_id: str | None) -> None:
        """Make the session an artifact's own conversation (or not), saved
        at once so the pair can be checked from either side."""
        session = await self._gated(session_id, "make it an artifact's conversation")
        session.conversation.set_dedicated_artifact(item_id)
        await session.save(session.conversation.artifacts_for_save(), force=True)

    # Turns ---------------------------------------------------------------------

    async def begin_turn(self, session_id: str, prompt: str, *, agent: str | None = None) -> TurnStarted:
        session = await self._gated(session_id, "begin a turn", commands=True)
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidSessionInput(f"prompt {quoted(prompt)}", "is blank; a turn needs the user's prompt")
        _require_settled(session, "beginning another")
        turn_id = session.conversation.begin_turn(prompt, at=self._time_now(), agent=_label(agent, "agent"))
        opened = session.conversation.open_turn
        assert opened is not None
        if session.checkpoints is not None:
            session.checkpoints.start()
        return TurnStarted(session_id, opened.turn, turn_id, opened.reminder)

    async def capture_file(self, session_id: str, path: str, *, gap: str | None = None) -> CaptureResult:
        """Record a tracked path's whole state before this turn first
        mutates it, read from the workspace through the target. ``gap``
        records instead that the path may change without a capture (and
        why). See :meth:`record_pre_state` for the one rule of what becomes
        a gap."""
        self._mutable(session_id, "capture a file")
        tracked = _tracked_path(path)
        if gap is not None:
            return self.record_pre_state(session_id, tracked, None, gap=gap)
        return self.record_pre_state(session_id, tracked, await self._read_tracked(tracked))

    def captured(self, session_id: str, path: str) -> bool:
        """Whether the turn in flight already recorded ``path``'s pre-turn
        state (a capture or a gap); a later capture would be ignored."""
        session = self._open(session_id, "check a capture")
        opened = session.conversation.open_turn
        snapshots = session.conversation.file_snapshots()
        if opened is None or not snapshots or snapshots[-1].turn_id != opened.turn_id:
            return False
        return _tracked_path(path) in snapshots[-1].files

    def turn_paths(self, session_id: str, turn_id: str | None) -> list[str]:
        """The paths turn ``turn_id``'s checkpoint recorded (captured or
        gapped: the files it changed or was about to change), sorted; none
        for a turn that recorded nothing or is not this session's."""
        session = self._open(session_id, "read a turn's paths")
        for snapshot in session.conversation.file_snapshots():
            if snapshot.turn_id == turn_id:
                return sorted(snapshot.files)
        return []

    def record_pre_state(self, session_id: str, path: str, before: Entry | bytes | None, *, gap: str | None = None) -> CaptureResult:
        """The one checkpoint seam: record ``path``'s state before the
        turn's first mutation of it -- an :class:`Entry` (kind, mode, bytes
        or link target), bare bytes (a file of unknown mode) or None (nothing
        there) -- as observed by the caller (the agent's
        ``fs/write_text_file``, the tool server's ApplyPatch, the shell's
        pre-command record, an editor's explicit capture). The first record
        of a path in a turn wins. The one rule of what becomes a capture
        gap instead: ``gap`` given by the caller (content it could not
        keep), or a previous regular file whose bytes are over the snapshot
        limit (or were not read for their size), or a link whose target
        cannot be recorded. A path that did not exist is never a gap,
        whatever the turn then puts there.

        A name that is not UTF-8 text (a shell command can make one; the
        agent's own requests are refused such names at the door) cannot be
        stored in a checkpoint: it is recorded as a gap under its name with
        the bytes escaped (``bad\\xffname``), so Rewind names it and never
        claims to restore or remove it."""
        session = self._mutable(session_id, "capture a file")
        _require_turn(session, "capture a file")
        tracked = _tracked_path(path)
        unreadable = _not_utf8(tracked)
        if unreadable is not None:
            tracked = unreadable
            gap = "its name is not UTF-8 text, so mevedel can neither record, restore nor remove it"
        if gap is None:
            gap = capture_gap_reason(before, self.max_snapshot_bytes)
        with _refused_in(session):
            if gap is not None:
                session.conversation.capture_gap(tracked, gap)
            else:
                session.conversation.capture_file(tracked, before)
        recorded = _recorded_state(session.conversation, tracked)
        assert recorded is not None
        return recorded

    def engine(self, session_id: str) -> EngineRef | None:
        """The external agent recorded for an open session."""
        return self._open(session_id, "read its agent").conversation.sidecar.engine

    def set_engine(self, session_id: str, engine: EngineRef | None) -> None:
        """Record the session's external agent and its conversation state
        (published with the next save, settlement or checkpoint)."""
        session = self._mutable(session_id, "record its agent")
        with _refused_in(session):
            session.conversation.set_engine(engine, at=self._time_now())

    def agent_choice(self, session_id: str, agent: str) -> AgentChoice | None:
        """The person's mode and config choices for ``agent`` in an open
        session (None: none)."""
        return self._open(session_id, "read its agent choices").conversation.sidecar.agent_choices.get(agent)

    async def set_agent_choice(self, session_id: str, agent: str, choice: AgentChoice | None) -> None:
        """Remember the person's choices for ``agent`` in the session: in
        the sidecar at once when the session is saved already (a
        metadata-only publication), else with its first save."""
        session = await self._gated(session_id, "remember its agent choices", turn_work=True)
        with _refused_in(session):
            session.conversation.set_agent_choice(agent, choice, at=self._time_now())
        candidate = session.conversation.metadata_candidate()
        if candidate is not None and session.materialized and candidate.changed:
            await session.save(candidate)
    def retained_agents(self, session_id: str) -> list:
        """The open session's retained-agent registry, in path order."""
        return list(self._open(session_id, "read its retained agents").conversation.sidecar.agents)

    def set_retained_agents(self, session_id: str, agents: list) -> None:
        """Record the session's retained-agent registry (published with
        the next save, settlement or checkpoint)."""
        session = self._mutable(session_id, "record its retained agents")
        with _refused_in(session):
            session.conversation.set_agents(agents, at=self._time_now())

    def append_agent_task(self, session_id: str, path: str, agent: str, prompt: str, steps: Sequence[EvidenceInput],
                          outcome: Outcome | str, reason: str | None = None, paths: Sequence[str] = ()) -> None:
        """Record a retained agent's settled task in the turn in flight:
        the next line of the agent's own transcript holds its own records
        (``steps``: response, reasoning, tool call and result, plan,
        permission), and the turn a line naming it; both are published
        with the turn's next checkpoint or settlement, in one publication
        with the registry."""
        session = self._mutable(session_id, "record an agent's task")
        opened = _require_turn(session, "record an agent's task")
        record = AgentTask(
            turn_id=opened.turn_id, path=path, agent=agent, prompt=prompt, outcome=_outcome(outcome), reason=reason,
            steps=[agent_step(step) for step in steps if step.kind in AGENT_STEP_KINDS], paths=sorted(set(paths)),
        )
        with _refused_in(session):
            session.conversation.record_agent_task(record)

    def agent_tasks(self, session_id: str, path: str) -> list:
        """Retained agent ``path``'s settled tasks, oldest first, as
        ``(session turn, task)``: its own transcript's, after those a
        session written before agent transcripts holds in its current
        segment."""
        conversation = self._open(session_id, "read its agents' tasks").conversation
        entry = next((agent for agent in conversation.sidecar.agents if agent.path == path), None)
        since = entry.created_turn if entry is not None else 1
        return retained_tasks(conversation.records(), path, conversation.agent_tasks(path), since)

    def transcript_records(self, session_id: str) -> list:
        """The open session's current-segment records, oldest first (the
        excerpt an agent continues from)."""
        session = self._open(session_id, "read its transcript")
        return list(session.conversation.records())

    async def append(self, session_id: str, item: EvidenceInput) -> None:
        """Add a response, reasoning, tool call, tool result or mail record to
        the turn in flight (not saved until settlement or a checkpoint)."""
        if item.kind in ENGINE_KINDS:
            raise InvalidSessionInput(repr(item.kind), f"is not a record kind (use one of {', '.join(EVIDENCE_KINDS)})")
        self.append_now(session_id, item)

    def append_now(self, session_id: str, item: EvidenceInput) -> None:
        """:meth:`append` for the agent engine, synchronously (it keeps the
        order of the agent's stream) and with the engine's own kinds."""
        session = self._mutable(session_id, "append to a turn")
        opened = _require_turn(session, "append a record")
        with _refused_in(session):
            session.conversation.append(make_evidence(item, opened.turn_id))

    async def settle(self, session_id: str, outcome: Outcome | str = Outcome.COMPLETED, *, reason: str | None = None,
                     stop_reason: str | None = None) -> SaveResult:
        """End the turn in flight and save: one publication. The post-turn
        content of every captured file is read from the workspace."""
        session = await self._gated(session_id, "settle a turn", turn_work=True)
        outcome = _outcome(outcome)
        _require_turn(session, "settle a turn")
        if session.checkpoints is not None:
            session.checkpoints.cancel()  # a checkpoint already under way finishes first
        current = await self._post_turn_content(session)
        session.conversation.settle(outcome, at=self._time_now(), current=current, reason=_reason(reason),
                                    stop_reason=_label(stop_reason, "stop_reason"))
        result = await session.save(session.conversation.artifacts_for_save())
        self._changed(session, "settled")
        return result

    async def abort(self, session_id: str, reason: str | None = None) -> SaveResult:
        """Settle the turn in flight as interrupted (the next turn carries the
        reconciliation reminder) and save."""
        return await self.settle(session_id, Outcome.INTERRUPTED, reason=reason or ABORT_REASON)

    async def checkpoint(self, session_id: str) -> SaveResult:
        """Save the unfinished turn in flight without settling it."""
        session = await self._gated(session_id, "checkpoint a turn", turn_work=True)
        result = await session.save(session.conversation.checkpoint())
        if result.committed:
            self._changed(session, "checkpoint")
        return result

    async def save(self, session_id: str) -> SaveResult:
        """An explicit save: publishes a new snapshot even when nothing
        changed (a fresh empty conversation still has nothing to save)."""
        session = await self._gated(session_id, "save it")
        result = await session.save(session.conversation.artifacts_for_save(), force=True)
        if result.committed:
            self._changed(session, "saved")
        return result

    async def retry_publication(self, session_id: str) -> SaveResult:
        session = self._open(session_id, "retry its publication")
        restored = session.pending is not None and session.pending.candidate is None
        result = await session.retry()
        if restored:
            await self._after_recorded_pending(session)
        self._changed(session, "retried")
        return result

    async def abandon_publication(self, session_id: str) -> bool:
        """Drop a pending publication (and its durable record); True when
        there was one."""
        session = self._open(session_id, "abandon its publication")
        dropped = await session.abandon()
        if dropped is not None and dropped.candidate is None:
            await self._after_recorded_pending(session)
        return dropped is not None

    async def unsettled_mutation(self, session_id: str) -> LatchState:
        """Whether a command of a previous owner may still run (the lease's
        unsettled-mutation latch, inherited at takeover or resume). Records
        of groups proven gone are removed, and the latch with them."""
        session = self._open(session_id, "check its commands")
        if session.lease is None or session.lease.lost or session.read_only is not None:
            return LatchState(False)
        return await session.latch.check(session.lease)

    async def input_history(self) -> HistoryRead:
        """The workspace's chat input history (:mod:`..workspace_wide.input_history`)."""
        return await InputHistory(self.target).read()

    async def record_input(self, session_id: str, text: str, *, queued_for_runner: bool = False) -> str | None:
        """Record a prompt sent (or queued, or sent as steering) to
        ``session_id`` in the input history when this client holds the
        session writable -- here, or (``queued_for_runner``) in this
        client's other process, whose queue accepted it; what to tell the
        person (a corrupt history renamed aside, or a write that failed), if
        anything. Never raises: a history that cannot be written does not
        refuse the prompt."""
        if not queued_for_runner and (not self.is_open(session_id) or self._open(session_id, "record its input").read_only is not None):
            return None
        try:
            return (await InputHistory(self.target).record(text)).warning
        except Exception as error:  # the prompt goes on; the person is told
            reason = getattr(error, "reason", None) or str(error)
            return f"the prompt was not recorded in the input history: {reason}"

    async def acknowledge_unsettled_mutation(self, session_id: str) -> bool:
        """The owner confirmed no previous command still runs: the latch is
        cleared. True when one was set."""
        session = self._open(session_id, "acknowledge its commands")
        session.require_writable()
        if session.lease is None or not session.lease.record.unsettled_mutation:
            return False
        await session.latch.acknowledge(session.lease)
        return True

    async def _restored_pending(self, session: OpenSession, listed: OpResult | None = None) -> bool:
        """A publication a stopped process left pending is pending here again."""
        try:
            return await session.restore_pending(listed) is not None
        except (StoreError, TargetError) as error:
            _log.warning("session %s: looking for a pending publication failed: %s", session.session_id, error)
            return False

    async def _after_recorded_pending(self, session: OpenSession) -> None:
        """A recorded publication was retried or abandoned: the live
        conversation is the committed one, and the resume repair the record
        held back runs now."""
        self._adopt(session, await self._conversation_of(await read_committed(self.target, session.session_id)))
        if session.repair_due and session.recovery is None:
            session.repair_due = False
            await self._repair_resumed(session)

    # Segments ------------------------------------------------------------------

    async def compact(self, session_id: str, summary: str) -> SegmentRotation:
        """Compaction: close the live segment and open the next one, which
        starts with ``summary`` (supplied by the caller, who ran the model),
        and save. Refused while a turn is in flight."""
        session = await self._gated(session_id, "compact it")
        if not isinstance(summary, str) or not summary.strip():
            raise InvalidSessionInput(f"summary {quoted(summary)}", "is blank; compaction needs the summary that replaces the segment")
        _require_settled(session, "compacting")
        previous = session.conversation.current_segment
        try:
            segment = session.conversation.rotate_segment(summary, at=self._time_now())
        except ConversationError as refused:
            raise TurnStateConflict(session.session_id, f"cannot be compacted: {refused}") from None
        return await self._rotated(session, previous, segment, None, "compacted")

    async def clear(self, session_id: str) -> SegmentRotation:
        """/clear: close the current chat as a chapter, open a new segment
        and save. Refused while a turn is in flight."""
        session = await self._gated(session_id, "clear it")
        _require_settled(session, "clearing")
        await self._require_no_pending_input(session, "clear it")
        previous = session.conversation.current_segment
        try:
            segment = session.conversation.clear(at=self._time_now())
        except ConversationError as refused:
            raise TurnStateConflict(session.session_id, f"cannot be cleared: {refused}") from None
        chapter = len(session.conversation.sidecar.chapters)
        return await self._rotated(session, previous, segment, chapter, "cleared")

    async def _rotated(
        self, session: OpenSession, previous: int, segment: int, chapter: int | None, reason: str
    ) -> SegmentRotation:
        result = await session.save(session.conversation.artifacts_for_save())
        self._changed(session, reason)
        return SegmentRotation(session.session_id, previous, segment, chapter, result)

    async def recovery_pending(self, session_id: str) -> str | None:
        """The recovery ID of an interrupted Rewind or Redo of the session;
        None when nothing waits."""
        listed = self._listed.get(check_session_id(session_id))
        if listed is not None and session_id not in self._sessions:
            return listed[1]  # this command's listing read the journal a moment ago
        state = await find_recovery(self.target, check_session_id(session_id))
        session = self._sessions.get(session_id)
        if session is not None:
            session.recovery = state.recovery_id
            session.recovery_clear = state.recovery_id is None and session.lease is not None
        return state.recovery_id

    async def turns(self, session_id: str) -> list[TurnSummary]:
        """The turns of an open session (live, unsaved ones included) or,
        for a session not open here, of its committed snapshot."""
        from .turn_views import turn_summaries

        return turn_summaries(await self._readable(session_id))

    async def turn(self, session_id: str, number: int) -> TurnDetail:
        from .turn_views import turn_detail

        if isinstance(number, bool) or not isinstance(number, int):
            raise InvalidSessionInput("the turn number", f"must be a whole number, not {number!r}")
        return turn_detail(await self._readable(session_id), number)

    async def diff(
        self, session_id: str, first: int | None = None, last: int | None = None, *, contents: bool = False
    ) -> TreeDiff:
        """What turns ``first..last`` changed in the tree (default: the
        latest turn), from their checkpoints: every path with its kind of
        change and a line diff of text files. A session not open here is
        read from its committed snapshot in one program."""
        from .turn_views import turn_diff

        return turn_diff(await self._readable(session_id), first, last, contents=contents)

    async def restore_file(self, session_id: str, path: str, before_turn: int, *, commit: bool = False) -> FileRestore:
        """What restoring ``path`` to its state before ``before_turn`` does
        (content, mode, kind) and, with ``commit``, do it as a new turn of
        its own, so that it can itself be rewound (``file_restore.py``)."""
        from .file_restore import restore_file

        await self._gated(session_id, "restore a file", commands=True)
        return await restore_file(self, session_id, _tracked_path(path), before_turn, commit=commit)

    # Internals -----------------------------------------------------------------

    async def _readable(self, session_id: str) -> Conversation:
        session = self._sessions.get(check_session_id(session_id))
        if session is not None:
            await self._refresh(session)
            return session.conversation
        listed = self._listed.get(session_id)
        if listed is not None:
            try:
                return await self._conversation_of(listed[0])
            except (RecordError, SessionIncompatible, KeyError):
                self._listed.pop(session_id, None)  # moved on (collected, replaced) since the listing: read it afresh, which reports what is wrong
        return await self._conversation_of(await read_committed(self.target, session_id))

    def _open(self, session_id: str | None, action: str) -> OpenSession:
        if session_id is None:
            raise SessionNotOpen(None, action)
        session = self._sessions.get(check_session_id(session_id))
        if session is None:
            raise SessionNotOpen(session_id, action)
        return session

    def _mutable(self, session_id: str, action: str) -> OpenSession:
        session = self._open(session_id, action)
        session.require_mutable()
        session.track_operation()
        return session

    def _new_open(self, conversation: Conversation, **kwargs) -> OpenSession:
        session = OpenSession(
            target=self.target,
            client=self.client,
            conversation=conversation,
            time=self._clock(),
            lease_seconds=self.lease_seconds,
            renew_every=self.renew_every,
            on_lost=self._lost,
            collect_keep_recent=self.publication_keep_recent,
            collect_deferred=self.one_command,
            **kwargs,
        )
        session.checkpoints = TurnCheckpoints(
            session.session_id, lambda: self._checkpoint_tick(session), interval=self.checkpoint_seconds
        )
        if conversation.open_turn is not None and session.read_only is None and session.lease is not None:
            session.checkpoints.start()  # continuing a turn left in flight by this client
        return session

    async def _checkpoint_tick(self, session: OpenSession) -> None:
        """One mid-turn checkpoint of ``session``, if it still has a turn in
        flight here (else the timer stops)."""
        if self._sessions.get(session.session_id) is not session or session.read_only is not None:
            raise STOP_CHECKPOINTS
        if session.conversation.open_turn is None:
            raise STOP_CHECKPOINTS
        if session.pending is not None or session.recovery is not None:
            return  # a retry or a recovery decides; the next tick looks again
        await self.checkpoint(session.session_id)

    def _lost(self, session: OpenSession, why: str) -> None:
        _log.warning("session %s is now read-only: %s", session.session_id, why)
        self._changed(session, "read-only")

    def _changed(self, session: OpenSession, reason: str) -> None:
        # What this command's listing read of it is no longer what a read sees.
        self._listed.pop(session.session_id, None)
        sidecar = session.conversation.sidecar
        change = SessionChange(
            session.session_id,
            reason,
            session.head,
            sidecar.total_turn_count,
            session.access,
            shown_name(sidecar, session.session_id),
        )
        for listener in list(self.on_change):
            try:
                listener(change)
            except Exception:
                _log.exception("session change listener failed")

    def _info(self, session: OpenSession) -> SessionInfo:
        conversation = session.conversation
        sidecar = conversation.sidecar
        opened = conversation.open_turn
        return SessionInfo(
            session_id=session.session_id,
            display_name=shown_name(sidecar, session.session_id),
            named=sidecar.display_name is not None,
            access=session.access,
            read_only_reason=session.read_only,
            holder_host=session.holder_host,
            materialized=session.materialized,
            head=session.head,
            settled_turns=sidecar.total_turn_count,
            open_turn=opened.turn if opened else None,
            pending_publication=session.pending.reason if session.pending else None,
            reconciliation_pending=sidecar.reconciliation_pending,
            recovery_pending=session.recovery,
        )

    # Time ---------------------------------------------------------------------

    def _clock_from(self, reading: int | None) -> None:
        if reading is None:
            return
        if self._time is None:
            self._time = TargetTime(reading)
            for session in self._sessions.values():
                session.time = self._time
        else:
            self._time.anchor(reading)

    async def _now(self) -> int:
        if self._time is None:
            op = Clock(STATE_DIR)
            result = (await self.target.run(ControlProgram([op])))[0]
            raise_for_result(op, result)
            self._clock_from(int(result.value))
        assert self._time is not None
        return self._time.now()

    def _clock(self) -> TargetTime:
        if self._time is None:  # every path that opens a session read the clock first
            raise RuntimeError("the target clock was never read")
        return self._time

    def _time_now(self) -> int:
        return self._clock().now()

    # Tracked files ---------------------------------------------------------------

    async def _read_tracked(self, path: str) -> Entry | None:
        read = ReadEntry(path, max_bytes=self.max_snapshot_bytes, optional=True)
        got = (await self.target.run(ControlProgram([read])))[0]
        if got.status is Status.ABSENT:
            return None
        raise_for_result(read, got)
        return got.value

    async def _post_turn_content(self, session: OpenSession) -> Mapping[str, Entry | None]:
        """Current content of the files this turn captured (gaps stay unknown;
        a file that cannot be read, or grew past the limit, too)."""
        opened = session.conversation.open_turn
        snapshots = session.conversation.file_snapshots()
        if opened is None or not snapshots or snapshots[-1].turn_id != opened.turn_id:
            return {}
        paths = [p for p, snap in snapshots[-1].files.items() if snap.pre is not None]
        if not paths:
            return {}
        ops = [ReadEntry(p, max_bytes=self.max_snapshot_bytes, optional=True) for p in paths]
        result = await self.target.run(ControlProgram(ops))
        current: dict[str, Entry | None] = {}
        for path, op_result in zip(paths, result):
            if op_result.status is Status.ABSENT:
                current[path] = None
            elif op_result.ok and capture_gap_reason(op_result.value, self.max_snapshot_bytes) is None:
                current[path] = op_result.value
        return current


def _recorded_state(conversation: Conversation, path: str) -> CaptureResult | None:
    snapshots = conversation.file_snapshots()
    opened = conversation.open_turn
    if not snapshots or opened is None or snapshots[-1].turn_id != opened.turn_id:
        return None
    snapshot = snapshots[-1].files.get(path)
    if snapshot is None:
        return None
    if snapshot.pre is None:
        return CaptureResult(path, "gap", gap_reason=snapshot.gap)
    size = getattr(snapshot.pre, "size", None)
    return CaptureResult(path, snapshot.pre.__struct_config__.tag, size)  # type: ignore[arg-type]


def _require_turn(session: OpenSession, action: str):
    opened = session.conversation.open_turn
    if opened is None:
        raise TurnStateConflict(session.session_id, f"has no turn in flight; begin one before you {action}")
    return opened


@contextlib.contextmanager
def _refused_in(session: OpenSession) -> Iterator[None]:
    """A refusal of the turn in flight names its session, not the request."""
    try:
        yield
    except SessionConflict:
        raise
    except ConversationError as refused:
        raise SessionConflict(session.session_id, str(refused)) from None


def _require_settled(session: OpenSession, doing: str) -> None:
    opened = session.conversation.open_turn
    if opened is not None:
        raise TurnStateConflict(
            session.session_id, f"has turn {opened.turn} in flight; settle or abort it before {doing}"
        )


def _display_name(name: str) -> str:
    if isinstance(name, str) and not name.split():
        raise InvalidSessionInput(f"name {quoted(name)}", "is blank; a session name needs a visible character")
    try:
        return normalize_display_name(name)
    except NameRefused as refused:
        raise InvalidSessionInput(f"name {quoted(name)}", str(refused)) from None


def _not_utf8(path: str) -> str | None:
    """``path`` with its undecodable bytes escaped, when it is not UTF-8
    text (a surrogate-escaped file name); None when it is."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def _tracked_path(path: str) -> str:
    if not isinstance(path, str) or not path:
        raise InvalidSessionInput("the tracked file path", "is empty")
    try:
        parts = split_target_path(path)
    except InvalidTargetPath as invalid:
        raise InvalidSessionInput(repr(path), f"is not a workspace-relative file path: it {invalid.reason}") from None
    if not parts:
        raise InvalidSessionInput(repr(path), "names the workspace itself, not a file")
    if parts[0] == STATE_DIR:
        raise InvalidSessionInput(repr(path), f"is inside {STATE_DIR}/, which holds mevedel's own state")
    return "/".join(parts)


def _mode(mode: OpenMode | str) -> OpenMode:
    try:
        return OpenMode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in OpenMode)
        raise InvalidSessionInput(f"open mode {mode!r}", f"is not one of {choices}") from None


def _outcome(outcome: Outcome | str) -> Outcome:
    try:
        return Outcome(outcome)
    except ValueError:
        choices = ", ".join(o.value for o in Outcome)
        raise InvalidSessionInput(f"outcome {outcome!r}", f"is not one of {choices}") from None


def _label(value: str | None, what: str) -> str | None:
    """An agent-given label (agent name, stop reason): one line of at most
    256 characters, or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidSessionInput(f"the {what}", "must be text")
    return " ".join(value.split())[:256] or None


def _reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidSessionInput("the settle reason", "must be text")
    return " ".join(reason.split()) or None


async def _release_quietly(lease) -> None:
    try:
        await lease.release()
    except Exception as error:  # the original failure is what the caller must see
        _log.warning("session %s: releasing after a failed open: %s", lease.session_id, error)

