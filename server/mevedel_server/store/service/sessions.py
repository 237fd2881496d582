"""``Sessions``: the sessions of one client of one workspace's store --
list them, create one (lazily: nothing is written until its first save),
open one (resume, join read-only, or take over an expired lease after
confirmation), save, rename, close, delete, the storage settings, the
expired-session sweep, artifact attachments and the input history.

The service's front holds it as ``service.sessions``. It works on the
:class:`~.table.SessionTable` it is given (a session it opens is open for
every capability) and tells :class:`~.following.Following` when a session
is joined or closed. Every open writable session renews its lease in the
background; losing it makes the session read-only and is reported through
the table's ``on_change``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from msgspec.structs import replace

from ...targets import (
    Clock,
    ControlProgram,
    Operation,
    OpResult,
    Status,
    TargetError,
    raise_for_result,
)
from ..authority.lease import (
    LeadStopped,
    LeaseHandle,
    LeaseObservation,
    LeaseStanding,
    Rider,
    acquire_lease,
    observe_lease,
    takeover_needs_confirmation,
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
    identity_proof,
    read_workspace_id,
    saved_session_ids,
    sessions_listing,
    workspace_id_from,
    workspace_id_reads,
)
from ..content.sidecar import NameRefused, normalize_display_name, shown_name
from ..errors import (
    IdentityNeedsConfirmation,
    LeaseObservationError,
    StoreError,
)
from ..layout import STATE_DIR, SessionPaths
from ..transactions.recovery import find_recovery, recovery_listing
from ..workspace_wide.cleanup import (
    CleanupReport,
    remove_expired_sessions,
    remove_session,
    remove_unfinished_sessions,
)
from ..workspace_wide.collection import kept_read, opening_ops
from ..workspace_wide.input_history import (
    HistoryRead,
    InputHistory,
    history_read,
    record_ops,
    recorded,
)
from ..workspace_wide.listing import (
    SessionAction,
    SessionRow,
    first_survey,
    list_sessions,
    survey_sessions,
)
from .errors import InvalidSessionInput, SessionConflict, SessionIncompatible, quoted
from .following import Following
from .table import SessionTable
from .values import (
    DEFAULT_SESSION_KEEP_RECENT,
    Access,
    OpenMode,
    OpenResult,
    SaveResult,
    SessionInfo,
    SessionListing,
)

# An open session and its conversation are imported where a session is
# opened or created: a listing makes neither.
if TYPE_CHECKING:
    from ..content.turns import Conversation
    from .open_session import OpenSession

_log = logging.getLogger(__name__)

#: Expired sessions are swept at most this often per service (ages count in days).
SWEEP_EVERY_SECONDS = 86_400
#: How long a CLI process lets a running publication collection finish before it exits.
DETACH_COLLECT_SECONDS = 5.0


class Sessions:
    def __init__(
        self,
        table: SessionTable,
        following: Following,
        *,
        session_max_age_days: int | None = None,
        session_keep_recent: int = DEFAULT_SESSION_KEEP_RECENT,
        git_excludes: bool = False,
    ) -> None:
        self._table = table
        self._following = following
        #: Sessions unused this many days are removed (None: never), except
        #: the ``session_keep_recent`` most recently updated.
        self.session_max_age_days = session_max_age_days
        self.session_keep_recent = session_keep_recent
        #: Add the generated-state excludes to ``.git/info/exclude`` when
        #: this service first writes the workspace (once per service).
        self._git_excludes = git_excludes
        self._swept_at: float | None = None
        self._sweeping: asyncio.Future | None = None
        #: One open at a time per session: two requests opening the same
        #: session at once (an editor's panel and its chat) would both pass
        #: the "already open" check and both claim its lease.
        self._opening: dict[str, asyncio.Lock] = {}
        #: The last expired-session cleanup's report.
        self.last_cleanup: CleanupReport | None = None
        #: Sessions expired-session cleanup must keep, with why (the artifact
        #: store installs its items' dedicated sessions).
        self.expiry_exemptions: Callable[[], Awaitable[Mapping[str, str]]] | None = None
        #: A prompt will be recorded in the input history (``mevedel
        #: prompt``): the history is read in the program that creates or
        #: resumes the session (``record_input`` starts from that read).
        self.reads_input_history = False
        self._history_read: OpResult | None = None
        #: The prompt ``mevedel prompt`` will record: a resume writes it in
        #: the claim's program (holding the history's lock), after the claim.
        self.input_to_record: str | None = None
        self._recorded_input: str | None = None
        #: The prompt's history write riding a commit: the session, the
        #: rider and the text (see :meth:`input_recorded`).
        self._riding_input: tuple[OpenSession, Rider, str] | None = None
        #: A front end's reads of a session it resumes, run in the program
        #: that reads the committed bytes and judged before the lease is
        #: claimed (``mevedel prompt``: is another of its processes running
        #: the session's turns?); see :class:`ResumeCheck`.
        self.resume_check: ResumeCheck | None = None
        #: A front end's reads of the workspace, run in the program that
        #: creates a session or reads the committed bytes of one it resumes
        #: (``mevedel prompt``: the file-state record's kept index, which the
        #: turn's first walk would otherwise read in its own program, too
        #: late to know which files to read again); their results in
        #: :attr:`open_found` (None: no such program ran them whole).
        self.open_reads: Sequence[Operation] = ()
        self.open_found: tuple[OpResult, ...] | None = None
        #: This process creates or resumes sessions to run agent turns in
        #: them (``mevedel prompt``): where its leases otherwise name it only
        #: while a turn is open (they outlive it), they name it from the
        #: claim to its end, so that its death is proven at any point until
        #: then -- before its turn begins, and after its last settlement
        #: too; :meth:`detach` hands them to its client
        #: (:meth:`OpenSession.hand_to_client`).
        self.opens_for_turn = False
        #: The sessions the last listing surveyed in this command (one
        #: command only): a session created after it judges the held ones
        #: from them instead of surveying again.
        self._listed_surveys: list | None = None

    # Listing ------------------------------------------------------------------

    async def list(self) -> SessionListing:
        """Every session of the workspace with the action its lease allows
        this client, plus the sessions created here and not saved yet.
        Expired sessions are removed (at most once a day per service, see
        :meth:`sweep_expired`) once the listing has proven the workspace
        reachable and valid -- a cleanup that cannot reach it would only
        report the same failure in its own, misleading words -- and are not
        listed."""
        here = [sid for sid, s in self._table.sessions.items() if s.access is Access.WRITABLE]
        listing = await list_sessions(self._table.target, self._table.client, here)
        swept = await self.sweep_expired(surveyed=listing.surveyed)
        gone = {r.session_id for r in swept.removed} if swept is not None else set()
        if gone:
            listing = replace(
                listing,
                rows=tuple(r for r in listing.rows if r.session_id not in gone),
                inspect_rows=tuple(r for r in listing.inspect_rows if r.name not in gone),
            )
        if listing.now is not None:
            self._table.clock_from(listing.now)
        if self._table.one_command:
            self._listed_surveys = listing.surveyed[0] if listing.surveyed else []
            self._table.listed = {
                survey.name: (CommittedSnapshot(self._table.target, survey.paths, survey.observation.generation,
                                                survey.observation.publication_head, survey.manifest), survey.recovery,
                              survey.observation, survey.sidecar.workspace_id if survey.sidecar is not None else None)
                for survey in (listing.surveyed[0] if listing.surveyed else ())
                if survey.paths is not None and survey.observation is not None and survey.problem is None
                and (survey.manifest is not None or survey.observation.publication_head is None)
            }
        if any(u.removable and u.session_id not in self._table.sessions for u in listing.unfinished):
            # Remains of a creation that never published: no session, gone
            # once no lease holds them (never one open here).
            try:
                report = await remove_unfinished_sessions(
                    self._table.target, self._table.client, listing.unfinished, open_sessions=set(self._table.sessions)
                )
            except (StoreError, TargetError) as error:
                _log.warning("removing unfinished session directories failed: %s", error)
            else:
                for removed in report.removed:
                    _log.info("removed %s: %s", removed.session_id, removed.reason)
        listed = {row.session_id for row in listing.rows}
        # Sessions created here and not saved yet (or whose first save has
        # not committed): this client's own, listed from memory.
        unsaved = [s for sid, s in self._table.sessions.items() if sid not in listed and s.head is None and s.access is Access.WRITABLE]
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

    async def create(self, name: str | None = None, *, warn_beside_held: bool = False) -> SessionInfo:
        """A new session, open and writable here. Nothing of it is written
        until its first save (the workspace identity is ensured now, since
        the session records it). ``warn_beside_held``: while another session
        of the workspace is held (:mod:`.held_beside`), raise
        :class:`~.held_beside.BesideHeld` naming them instead, before
        anything is written for the new one."""
        display_name = _display_name(name) if name is not None else None
        # One program: the identity, the clock, the saved sessions (for a
        # new ID) and git's exclude file.
        probe = ExcludesProbe() if self._git_excludes else None
        clock, listing = Clock(STATE_DIR), sessions_listing()
        excludes = list(probe.ops) if probe else []
        history = [history_read()] if self.reads_input_history else []
        extra, self.open_found = list(self.open_reads), None
        # The sessions' leases, for the held ones -- unless this command's
        # listing read them already.
        survey = [first_survey()] if warn_beside_held and self._listed_surveys is None else []
        workspace_id, found = await ensure_workspace_id_with(
            self._table.target, [clock, listing, *excludes, *history, *extra, *survey]
        )
        if probe is not None:
            probe.found = found[2 : 2 + len(excludes)]
        if history:
            self._history_read = found[2 + len(excludes)]
        self.open_found = _tail(found, 2 + len(excludes) + len(history), len(extra))
        if warn_beside_held:
            held = await self._held(found[1], (found[0], found[-1]) if survey else None)
            if held:
                from .held_beside import BesideHeld

                raise BesideHeld(tuple(held))
        await self._note_use(probe)
        if not self._table.clock_read:
            raise_for_result(clock, found[0])
            self._table.clock_from(int(found[0].value))
        now = await self._table.now()
        session_id = await allocate_session_id(self._table.target, live_ids=self._table.sessions, listed=found[1])
        from ..content.turns import Conversation

        conversation = Conversation.new(session_id=session_id, workspace_id=workspace_id, at=now, display_name=display_name)
        session = self._table.new_open(conversation, materialized=False, for_turns=self.opens_for_turn)
        self._table.sessions[session_id] = session
        return self._table.info_of(session)

    async def _held(self, listed: OpResult, surveyed: tuple[OpResult, OpResult] | None) -> list:
        """The held sessions beside which a new one would start: those open
        here, and of the saved others those another client or process holds,
        judged from this command's listing when it made one, else from
        ``surveyed`` (the clock and the first survey, read in the create's
        program: a session needing another read costs one). ``listed``: the
        program's listing of the sessions directory."""
        from .held_beside import held_here, held_surveyed

        held = held_here(self._table.sessions)
        saved = [sid for sid in await saved_session_ids(self._table.target, listed=listed) if sid not in self._table.sessions]
        if not saved:
            return held
        surveys = self._listed_surveys
        if surveys is None:
            surveys, _now = await survey_sessions(self._table.target, first=surveyed)
        return held + held_surveyed(surveys, self._table.client, skip=self._table.sessions)

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
        # Kept for the service's life (one small lock per session opened):
        # dropping one a waiter still holds a turn on would let a third
        # open run beside that waiter.
        async with self._opening.setdefault(session_id, asyncio.Lock()):
            return await self._open(session_id, mode, confirm_takeover, confirm_identity)

    async def _open(self, session_id: str, mode: OpenMode, confirm_takeover: bool, confirm_identity: bool) -> OpenResult:
        existing = self._table.sessions.get(session_id)
        if existing is not None:
            if existing.access is Access.WRITABLE:
                return OpenResult(self._table.info_of(existing), "switch")
            if mode in (OpenMode.AUTO, OpenMode.JOIN):
                await self._following.refresh(existing)
                return OpenResult(self._table.info_of(existing), "join")
            self._table.sessions.pop(session_id)
        listed = self._table.listed.get(session_id)
        # This command's listing observed the lease a moment ago (a claim
        # from it is proven current by the claim itself).
        observation = listed[2] if listed is not None and listed[2].now is not None else await observe_lease(self._table.target, session_id)
        self._table.clock_from(observation.now)
        if mode is OpenMode.JOIN:
            return await self._join(session_id, observation)
        record = observation.record
        foreign = record is not None and record.client_id != self._table.client.client_id
        if mode is OpenMode.AUTO and foreign and observation.standing is LeaseStanding.HELD:
            return await self._join(session_id, observation)
        if foreign and observation.standing is LeaseStanding.EXPIRED and not confirm_takeover:
            raise takeover_needs_confirmation(observation)
        return await self._resume(session_id, observation, confirm_takeover, confirm_identity)

    async def _join(self, session_id: str, observation: LeaseObservation) -> OpenResult:
        snapshot = await read_committed(self._table.target, session_id)
        conversation = await self._table.conversation_of(snapshot)
        record = observation.record
        holder = record.host if record is not None and observation.standing is not LeaseStanding.FREE else None
        why = f"joined; {holder or 'another client'} holds the lease" if holder else "joined read-only"
        session = self._table.new_open(conversation, read_only=why, holder_host=holder, head=snapshot.head)
        session.recovery = (await find_recovery(self._table.target, session_id)).recovery_id
        self._table.sessions[session_id] = session
        self._following.seen_at_join(session_id, observation)
        self._table.changed(session, "joined")
        return OpenResult(self._table.info_of(session), "join")

    async def _resume(
        self, session_id: str, observation: LeaseObservation, confirm_takeover: bool, confirm_identity: bool = False
    ) -> OpenResult:
        record = observation.record
        own = record is not None and record.client_id == self._table.client.client_id
        continuing = own and record.state in (LeaseState.ACTIVE, LeaseState.PUBLISHING)
        took_over = (
            record is not None and not own and observation.standing is LeaseStanding.EXPIRED
        )
        # The committed state is read and checked before the lease is
        # claimed: a session whose bytes cannot be trusted is refused without
        # a single write to it. The identity and git's exclude file are read
        # in the same program as the committed state, when that is read in one.
        probe = ExcludesProbe() if self._git_excludes else None
        identity_reads = workspace_id_reads(probe)
        history = [history_read()] if self.reads_input_history else []
        check = self.resume_check
        paths = SessionPaths(session_id)
        checked = list(check.reads(paths)) if check is not None else []
        # The recovery journal and the pending publication, listed in the
        # claim's program (after it: nobody else writes them then).
        from ..transactions.pending_inputs import input_listing
        from ..transactions.pending_publication import pending_listing

        journals = (recovery_listing(paths), pending_listing(paths))
        inputs = input_listing(paths)  # for the prompt queue's first load
        extra, self.open_found = list(self.open_reads), None
        # What the command's collection at exit will judge, listed now so
        # that its first commit can survey it, and the turn states earlier
        # processes kept (``PublicationCollector.listed``).
        publications = self._collection_listing(paths)
        reads = [*identity_reads, *history, *checked, *extra]
        extra_at = len(reads) - len(extra)
        folded = await self._claim_with_reads(session_id, observation, confirm_takeover, reads, (*journals, inputs, *publications))
        if folded is not None:
            lease, snapshot, conversation, found = folded
            try:
                current = workspace_id_from(identity_reads, found[: len(identity_reads)], probe)
                workspace_id = await self._bound_identity(session_id, conversation, confirm_identity, current)
            except BaseException:
                await _release_quietly(lease)
                raise
            if history:
                self._history_read = found[len(identity_reads)]
            self.open_found = _tail(found, extra_at, len(extra))
            await self._note_use(probe)
        else:
            found_apart: list[tuple] = []
            snapshot, conversation = await self._committed_conversation(session_id, also=reads, found=found_apart)
            if check is not None:  # it may refuse the resume: nothing is written yet
                at = len(identity_reads) + len(history)
                await check.judge(session_id, tuple(found_apart[0][at:extra_at]) if found_apart else None)
            if found_apart:
                self.open_found = _tail(found_apart[0], extra_at, len(extra))
                current = workspace_id_from(identity_reads, found_apart[0][: len(identity_reads)], probe)
                if history:
                    self._history_read = found_apart[0][len(identity_reads)]
            else:
                current = await read_workspace_id(self._table.target, excludes=probe)
            workspace_id = await self._bound_identity(session_id, conversation, confirm_identity, current)
            await self._note_use(probe)
            recording = None
            if self.input_to_record is not None and self._history_read is not None:
                recording = record_ops(self._history_read, self.input_to_record)
            lease = await self._acquire(
                session_id, observation, confirm_takeover,
                riders=(*journals, inputs, *publications, *(recording or ())), lock=STATE_DIR if recording else None,
            )
            if recording and recorded(lease.riders[len(journals) + 1 + len(publications) :]):
                self._recorded_input, self._history_read = self.input_to_record, None
        if lease.publication_head != snapshot.head:  # a save landed in between
            try:
                snapshot, conversation = await self._claimed_head(lease)
            except BaseException:
                await _release_quietly(lease)
                raise
        self._table.clock_from(lease.now)
        if workspace_id != conversation.sidecar.workspace_id:
            conversation.bind_workspace(workspace_id, at=self._table.time_now())
            _log.info("session %s: bound to this workspace (identity %s) as confirmed", session_id, workspace_id)
        session = self._table.new_open(conversation, lease=lease, for_turns=self.opens_for_turn)
        if snapshot.head is not None and snapshot.manifest is not None and session.publisher is not None:
            session.publisher.know_committed(snapshot.head, snapshot.manifest)  # the first save plans over it
        self._table.sessions[session_id] = session
        if publications and session.collector is not None and len(lease.riders) > len(journals) + 2:
            session.collector.listed(*lease.riders[len(journals) + 1 : len(journals) + 3])
        listed = lease.riders[: len(journals) + 1]
        if len(listed) != len(journals) + 1 or any(r.status is Status.SKIPPED for r in listed):
            listed = (await self._table.target.run(ControlProgram(list(journals)))).results  # in one program of their own
        else:
            session.inputs_listed = listed[-1]
        found = await find_recovery(self._table.target, session_id, listed=listed[0])
        session.recovery, session.recovery_remains = found.recovery_id, found
        session.recovery_clear = session.recovery is None
        interrupted: int | None = None
        if await self._restored_pending(session, listed[1]):
            session.repair_due = not continuing
        elif not continuing and session.recovery is None:
            interrupted = await self._repair_resumed(session)
        return OpenResult(self._table.info_of(session), "takeover" if took_over else "resume", interrupted)

    def _collection_listing(self, paths: SessionPaths) -> tuple[Operation, ...]:
        """The publications' listing and kept turn states a claim carries
        for the collection a one-command service runs at its exit (none for
        a long-lived one: its collector surveys once and keeps what it
        learnt)."""
        if not self._table.one_command or self._table.publication_keep_recent is None:
            return ()
        return (opening_ops(paths)[1], kept_read(paths))

    async def _acquire(self, session_id: str, observation: LeaseObservation, confirm_takeover: bool, **program) -> LeaseHandle:
        """This client's claim of ``session_id`` from ``observation``
        (``program``: :func:`acquire_lease`'s lead, riders and lock)."""
        return await acquire_lease(
            self._table.target, session_id, self._table.client, duration_seconds=self._table.lease_seconds,
            confirm_takeover=confirm_takeover, observation=observation,
            names_holder=not self._table.leases_outlive_process or self.opens_for_turn, **program,
        )

    async def _claim_with_reads(
        self, session_id: str, observation: LeaseObservation, confirm_takeover: bool, reads: Sequence[Operation],
        riders: Sequence[Operation],
    ) -> tuple[LeaseHandle, CommittedSnapshot, Conversation, tuple[OpResult, ...]] | None:
        """Resume from what this command's listing read in one program: the
        committed bytes and ``reads`` (their results returned), the proofs
        that nothing read before the claim would refuse the resume (the
        workspace identity the listed sidecar records, byte for byte; the
        resume check's guards), the claim, ``riders``. None, with nothing
        written, when there is no listing to start from or a proof failed:
        the caller reads and judges before it claims. Bytes the claim's
        program finds untrustworthy refuse the resume and release the lease
        it took."""
        listed = self._table.listed.get(session_id)
        check = self.resume_check
        if listed is None or listed[0].manifest is None or not listed[3] or observation.now is None:
            return None
        snapshot, paths = listed[0], SessionPaths(session_id)
        payload = snapshot.payload_reads()
        guards = [identity_proof(listed[3]), *(check.guards(paths) if check is not None else ())]
        try:
            lease = await self._acquire(session_id, observation, confirm_takeover, lead=[*payload, *reads, *guards], riders=riders)
        except LeadStopped:
            return None
        self._table.listed.pop(session_id, None)
        led = lease.led or ()
        try:
            if len(led) < len(payload) + len(reads):
                raise LeaseObservationError(session_id, "the claim's program did not read the committed bytes")
            if lease.publication_head == snapshot.head:
                conversation = self._table.conversation_from(snapshot, await snapshot.verified(led[: len(payload)]))
            else:  # a save landed since the listing: its head is read instead
                snapshot, conversation = await self._claimed_head(lease)
        except BaseException:
            await _release_quietly(lease)
            raise
        return lease, snapshot, conversation, tuple(led[len(payload) : len(payload) + len(reads)])

    async def _claimed_head(self, lease: LeaseHandle) -> tuple[CommittedSnapshot, Conversation]:
        """The committed state ``lease`` names, read afresh (a save landed
        between the read the resume started from and its claim)."""
        head = lease.publication_head
        manifest = await load_manifest(self._table.target, lease.paths, head) if head else None
        snapshot = CommittedSnapshot(self._table.target, lease.paths, lease.generation, head, manifest)
        return snapshot, await self._table.conversation_of(snapshot)

    async def _repair_resumed(self, session: OpenSession) -> int | None:
        """Settle a turn a stopped owner left in flight as interrupted and
        save that; the turn's number, when there was one."""
        from ..content.turns import RESUME_REASON

        conversation = session.conversation
        in_flight = conversation.open_turn
        fold = None
        if in_flight is not None and self._table.fold_stopped_turn is not None:
            # What its stopped process changed since its last checkpoint.
            fold = await self._table.fold_stopped_turn(session)
        reason = fold.reason(RESUME_REASON) if fold is not None else RESUME_REASON
        if not (conversation.resume(at=self._table.time_now(), current=fold.current if fold else None, reason=reason) and in_flight is not None):
            return None
        try:
            result = await session.save(conversation.artifacts_for_save())
        except (StoreError, TargetError) as error:
            # The session is open with the repair pending; info says so.
            _log.warning("session %s: saving the resume repair failed: %s", session.session_id, error)
        else:
            self._table.changed(session, "resumed")
            if result.committed and fold is not None and fold.finish is not None:
                await fold.finish()
        return in_flight.turn

    async def _note_use(self, probe: ExcludesProbe | None = None) -> None:
        """This service writes the workspace: the first time, make sure git
        ignores mevedel's generated state (best effort: a failure is logged)."""
        if not self._git_excludes:
            return
        self._git_excludes = False
        try:
            added = await ensure_generated_excludes(self._table.target, probe)
        except (StoreError, TargetError) as error:
            _log.info("could not add mevedel's generated state to .git/info/exclude: %s", error)
            return
        if added:
            _log.info("added %s to .git/info/exclude", ", ".join(added))

    async def _bound_identity(self, session_id: str, conversation: Conversation, confirmed: bool, current: str | None) -> str:
        """The workspace identity a resumed session is bound to: its own
        when it matches this workspace's (``current``, as read); this
        workspace's (created if it has none) when the mismatch is
        ``confirmed``."""
        recorded = conversation.sidecar.workspace_id
        if current == recorded:
            return recorded
        if not confirmed:
            raise IdentityNeedsConfirmation(session_id, recorded, current)
        return current if current is not None else await ensure_workspace_id(self._table.target)

    async def _committed_conversation(
        self, session_id: str, *, also: list | tuple = (), found: list | None = None
    ) -> tuple[CommittedSnapshot, Conversation]:
        """The committed snapshot and its conversation: from what this
        command's listing read, unless it moved on since (then afresh).
        ``also``: reads run in the program that reads the committed bytes
        (their results appended to ``found``; nothing appended when no such
        program ran whole)."""
        listed = self._table.listed.pop(session_id, None)
        if listed is not None:
            try:
                return listed[0], await self._table.conversation_of(listed[0], also=also, found=found)
            except (RecordError, SessionIncompatible, KeyError):
                if found:
                    found.clear()
                # moved on since the listing: read afresh, which reports what is wrong
        snapshot = await read_committed(self._table.target, session_id)
        return snapshot, await self._table.conversation_of(snapshot, also=also, found=found)

    # Saving ---------------------------------------------------------------------

    async def save(self, session_id: str) -> SaveResult:
        """An explicit save: publishes a new snapshot even when nothing
        changed (a fresh empty conversation still has nothing to save)."""
        session = await self._table.gated(session_id, "save it")
        result = await session.save(session.conversation.artifacts_for_save(), force=True)
        if result.committed:
            self._table.changed(session, "saved")
        return result

    async def retry_publication(self, session_id: str) -> SaveResult:
        session = self._table.get(session_id, "retry its publication")
        restored = session.pending is not None and session.pending.candidate is None
        result = await session.retry()
        if restored:
            await self._after_recorded_pending(session)
        self._table.changed(session, "retried")
        return result

    async def abandon_publication(self, session_id: str) -> bool:
        """Drop a pending publication (and its durable record); True when
        there was one."""
        session = self._table.get(session_id, "abandon its publication")
        dropped = await session.abandon()
        if dropped is not None and dropped.candidate is None:
            await self._after_recorded_pending(session)
        return dropped is not None

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
        self._table.adopt(session, await self._table.conversation_of(await read_committed(self._table.target, session.session_id)))
        if session.repair_due and session.recovery is None:
            session.repair_due = False
            await self._repair_resumed(session)

    # Closing -----------------------------------------------------------------

    async def close(self, session_id: str) -> SaveResult | None:
        """Save the session, release its lease and forget it. A pending
        publication refuses the close (retry or abandon it first)."""
        session = self._table.get(session_id, "close it")
        result: SaveResult | None = None
        if session.access is Access.WRITABLE:
            session.require_mutable()
            result = await session.save(session.conversation.artifacts_for_save())
            await session.release()
        else:
            await session.stop_renewal()
        self._table.sessions.pop(session_id, None)
        self._following.forget(session_id)
        self._table.changed(session, "closed")
        return result

    async def detach(self, *, collect_seconds: float = DETACH_COLLECT_SECONDS) -> None:
        """Stop background renewal without releasing anything (a CLI process
        ends; its leases stay until they expire or it reopens them). A
        publication collection still running gets ``collect_seconds`` to
        finish, then stops after its current step. A lease claimed to run
        agent turns stops naming this process (see :attr:`opens_for_turn`)."""
        said = await self.input_recorded()
        if said:
            _log.warning("%s", said)
        for session in self._table.sessions.values():
            if session.checkpoints is not None:
                await session.checkpoints.stop()
            if session.collector is not None:
                await session.collector.finish(collect_seconds)
            await session.stop_renewal()
            try:
                await session.hand_to_client()
            except (StoreError, TargetError) as error:
                # Its head names a process that is about to end: another
                # client here is offered the session before its expiry.
                _log.warning("session %s: its lease still names this process: %s", session.session_id, error)
        self._table.sessions.clear()
        await self._stop_sweep()

    async def close_all(self) -> None:
        """Close every open session, best effort (a server shutting down)."""
        await self._stop_sweep()
        for session_id in list(self._table.sessions):
            try:
                await self.close(session_id)
            except Exception as error:  # one failure must not keep the others open
                _log.warning("session %s: not closed cleanly: %s", session_id, error)
                session = self._table.sessions.pop(session_id)
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
        self._table.publication_keep_recent = publication_keep_recent
        self._table.checkpoint_seconds = checkpoint_seconds
        self.session_max_age_days = session_max_age_days
        if session_keep_recent is not None:
            self.session_keep_recent = session_keep_recent
        for session in self._table.sessions.values():
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
                self._table.target,
                self._table.client,
                max_age_days=self.session_max_age_days,
                keep_recent=self.session_keep_recent,
                open_sessions=set(self._table.sessions),
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
        session = await self._table.gated(session_id, "rename it")
        display_name = _display_name(name)
        candidate = session.conversation.rename(display_name)
        if candidate is not None and session.materialized:
            result = await session.save(candidate)
            if result.committed:
                self._table.changed(session, "renamed")
        return self._table.info_of(session)

    async def apply_title(self, session_id: str, title: str) -> str | None:
        """The agent's title for the session (ACP ``session_info_update``)
        as its display name, bounded to four words and sixty characters.
        An explicit name (creation, rename, Save As) always wins: None then,
        and for a title with nothing readable in it."""
        from ..content.turns import ConversationError

        session = await self._table.gated(session_id, "name it", turn_work=True)
        try:
            session.conversation.apply_generated_title(title)
        except ConversationError as why:
            _log.info("session %s: the agent's title %r is not used: %s", session_id, title[:80], why)
            return None
        candidate = session.conversation.metadata_candidate()
        if candidate is not None and session.materialized:
            result = await session.save(candidate)
            if result.committed:
                self._table.changed(session, "renamed")
        return session.conversation.sidecar.display_name

    # Artifact store attachments ------------------------------------------------

    def attached_artifacts(self, session_id: str) -> tuple[str, ...]:
        """The artifact store items the open session has attached."""
        return tuple(self._table.get(session_id, "ask about it").conversation.sidecar.attached_artifacts)

    def dedicated_artifact(self, session_id: str) -> str | None:
        return self._table.get(session_id, "ask about it").conversation.sidecar.dedicated_artifact

    async def set_attached_artifacts(self, session_id: str, item_ids: Sequence[str]) -> tuple[str, ...]:
        """Attach exactly ``item_ids`` (one small metadata publication of a
        saved session; an unsaved one keeps them for its first save)."""
        session = await self._table.gated(session_id, "attach artifacts to it")
        if tuple(item_ids) != tuple(session.conversation.sidecar.attached_artifacts):
            candidate = session.conversation.set_attached_artifacts(item_ids)
            if candidate is not None and session.materialized:
                await session.save(candidate)
        return tuple(session.conversation.sidecar.attached_artifacts)

    async def delete_session(self, session_id: str) -> None:
        """Close the session here and remove it from the workspace (an
        artifact's conversation deleted with its item). Refused while
        another client holds it."""
        if session_id in self._table.sessions:
            await self.close(session_id)
        kept = await remove_session(self._table.target, self._table.client, session_id)
        if kept is not None:
            raise SessionConflict(session_id, f"was not deleted: {kept}")

    async def set_dedicated_artifact(self, session_id: str, item_id: str | None) -> None:
        """Make the session an artifact's own conversation (or not), saved
        at once so the pair can be checked from either side."""
        session = await self._table.gated(session_id, "make it an artifact's conversation")
        session.conversation.set_dedicated_artifact(item_id)
        await session.save(session.conversation.artifacts_for_save(), force=True)

    # Input history ---------------------------------------------------------------

    async def input_history(self) -> HistoryRead:
        """The workspace's chat input history (:mod:`..workspace_wide.input_history`)."""
        return await InputHistory(self._table.target).read()

    async def record_input(self, session_id: str, text: str, *, queued_for_runner: bool = False) -> str | None:
        """Record a prompt sent (or queued, or sent as steering) to
        ``session_id`` in the input history when this client holds the
        session writable -- here, or (``queued_for_runner``) in this
        client's other process, whose queue accepted it; what to tell the
        person (a corrupt history renamed aside, or a write that failed), if
        anything. Never raises: a history that cannot be written does not
        refuse the prompt."""
        if not queued_for_runner and (session_id not in self._table.sessions or self._table.get(session_id, "record its input").read_only is not None):
            return None
        if self._recorded_input is not None and self._recorded_input == text and not queued_for_runner:
            self._recorded_input = None
            return None  # written in the claim's program
        read, self._history_read = self._history_read, None
        ops = record_ops(read, text) if read is not None and not queued_for_runner else None
        if ops is not None and self._riding_input is None:
            # The write rides the session's next head commit (the turn's
            # first publication), under the history's lock, guarded by the
            # bytes read; see :meth:`input_recorded`.
            session = self._table.sessions[session_id]
            self._riding_input = (session, session.ride_next_commit(ops, lock=STATE_DIR), text)
            return None
        return await self._record_apart(text, read)

    async def input_recorded(self) -> str | None:
        """Finish a prompt's input history write that rode a commit
        (:meth:`record_input`): when no commit carried it, or its guard found
        the history changed meanwhile, it is written on its own now; what to
        tell the person, if anything. Never raises."""
        riding, self._riding_input = self._riding_input, None
        if riding is None:
            return None
        session, rider, text = riding
        if not session.withdraw(rider) and rider.results is not None and recorded(rider.results):
            return None
        return await self._record_apart(text, None)

    async def _record_apart(self, text: str, read: OpResult | None) -> str | None:
        try:
            return (await InputHistory(self._table.target).record(text, read=read)).warning
        except Exception as error:  # the prompt goes on; the person is told
            reason = getattr(error, "reason", None) or str(error)
            return f"the prompt was not recorded in the input history: {reason}"


class ResumeCheck(Protocol):
    """What a front end reads of a session it resumes, before its lease is
    claimed (:attr:`Sessions.resume_check`)."""

    def reads(self, paths: SessionPaths) -> Sequence[Operation]:
        """Optional reads, run in the program that reads the committed bytes."""
        ...

    async def judge(self, session_id: str, results: tuple[OpResult, ...] | None) -> None:
        """Raise to stop the resume (nothing written). ``results``: the
        reads' (None: that program did not run them whole; read on your own)."""
        ...

    def guards(self, paths: SessionPaths) -> Sequence[Operation]:
        """Preconditions under which :meth:`judge` could not refuse: while
        they hold, the claim shares the reads' program (and ``judge`` is not
        asked); one that fails stops that program before the claim."""
        ...


def _display_name(name: str) -> str:
    if isinstance(name, str) and not name.split():
        raise InvalidSessionInput(f"name {quoted(name)}", "is blank; a session name needs a visible character")
    try:
        return normalize_display_name(name)
    except NameRefused as refused:
        raise InvalidSessionInput(f"name {quoted(name)}", str(refused)) from None


def _mode(mode: OpenMode | str) -> OpenMode:
    try:
        return OpenMode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in OpenMode)
        raise InvalidSessionInput(f"open mode {mode!r}", f"is not one of {choices}") from None


def _tail(found: Sequence[OpResult], at: int, count: int) -> tuple[OpResult, ...] | None:
    """The ``count`` results from ``at`` (:attr:`Sessions.open_reads`'),
    None when there are none or the program did not run them all."""
    taken = tuple(found[at : at + count])
    if not count or len(taken) != count or any(result.status is Status.SKIPPED for result in taken):
        return None
    return taken


async def _release_quietly(lease) -> None:
    try:
        await lease.release()
    except Exception as error:  # the original failure is what the caller must see
        _log.warning("session %s: releasing after a failed open: %s", lease.session_id, error)
