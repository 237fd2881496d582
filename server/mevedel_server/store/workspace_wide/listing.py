"""Session listing: every session of a workspace with the action its lease
allows this client.

Cost
----
Per session the listing reads what it must and nothing more: the newest
lease generation (one lease observation), the manifest that generation names
and the sidecar bytes that manifest names, checked against the manifest's
SHA-256. Those reads depend on one another, but the target follows them
itself: it lists ``.lease/``, reads the newest generation and follows its
``publication_head``, then the manifest's ``entries`` -> ``session.json`` ->
``published``. The target only dereferences; every record is decoded and
verified here, and a file counts only as the one the record before it
names. One :class:`~...targets.SurveyDirs` operation does that for every
session directory from one open descriptor of ``.mevedel/sessions/``, with
each directory's stat (so an Inspect row or a session without a lease
record finds its time), its listing (which answers unfinished children and
whether a recovery journal exists) and its newest request for control: N
sessions cost one program, up to :data:`BATCH` sessions (or
:data:`SURVEY_BUDGET` bytes of records) a program. Every program that
reads a lease record also reads the target clock, so each record is judged
against a clock reading taken in the same round trip. Only the unusual
costs more, in the next program (beside the next batch, if any): a head a
successor pruned between the target's listing and its read (past the
target's own re-listing) is surveyed again, a file the chain did not reach
as the decoded record names it is read directly (the manifest, then the
sidecar), a ``.recovery/`` directory is listed, and the answer to a
request of the live lease's transfer generation is looked for.

Each record's bytes are judged once per process: a lease head by its
generation and bytes, a manifest by its publication and bytes, a sidecar's
facts by the SHA-256 its manifest records (checked against the bytes read)
-- a listing reads every session's three records each time it lists, and
mostly finds the bytes it judged before. Refused bytes are judged again.

Bad bytes
---------
A session whose records cannot be trusted (unreadable or malformed lease
generation, missing or corrupt manifest, sidecar bytes that do not match the
manifest, a sidecar of another format version) is listed as an
:class:`InspectSessionRow` carrying the reason. It is never dropped, never guessed
into a session and nothing is deleted or repaired.

Nothing committed
-----------------
A Fork, Save As or Worktree Fork child that never reached its one
publication (it still carries the :data:`~.layout.UNPUBLISHED_CHILD`
marker, created with its directory, and has no committed head), and a
session directory that holds nothing at all, are no sessions: they are
never listed, and are reported as :class:`UnfinishedSession` (``removable``
once no live lease holds them and, never claimed, once they are a minute
old) for :mod:`.cleanup` to remove. Any other session without a head (a
first save not committed yet, perhaps with ``work://`` files) is a normal
row with ``published=False``. The survey's first program lists each
session directory beside its lease chain, so this costs no program.
"""

from __future__ import annotations

import enum
import hashlib
import operator
import re
from collections.abc import Collection

import msgspec

from ...targets import (
    Chain,
    ChainHop,
    ChainSpec,
    Clock,
    ControlProgram,
    DirSurvey,
    ListDir,
    Operation,
    OpResult,
    Read,
    Status,
    SurveyDirs,
    SurveyedDir,
    Target,
    raise_for_result,
)
from ..authority.lease import (
    ClientIdentity,
    LeaseObservation,
    LeaseStanding,
    decode_lease_generation,
)
from ..authority.publication import decode_manifest
from ..authority.records import (
    LeaseRecord,
    LeaseState,
    PublicationManifest,
    RecordError,
    RecordErrorKind,
    TransferRequest,
    decode_record,
)
from ..authority.workspace import is_session_id
from ..content.inspect import InspectRow as SidecarRefusal
from ..content.inspect import classify_sidecar
from ..content.remembered import Remembered
from ..content.sidecar import SIDECAR_PATH, Sidecar, SidecarErrorKind, shown_name
from ..layout import (
    GENERATION_FAMILY,
    LEASE_DIR,
    REQUESTS_DIR,
    SESSIONS_DIR,
    TRANSFER_DIGITS,
    UNPUBLISHED_CHILD,
    SessionPaths,
    generation_numbers,
    publication_id_of,
)
from ..transactions.recovery import RECOVERY_DIR, recovery_ids

#: Sessions surveyed per control program at most.
BATCH = 1024
#: Re-reads of a lease head that moved between its listing and its read.
_HEAD_ATTEMPTS = 4
_OK = Status.OK
#: The lease chain of a session without ``.lease/``.
_NO_CHAIN = Chain((), ())


class SessionAction(enum.Enum):
    """What opening the session means for this client."""

    #: This client has the session open and holds its lease.
    SWITCH = "Switch"
    #: Free, released, or this client's own lease (live or expired): opening
    #: it claims or reclaims the lease without asking.
    RESUME = "Resume"
    #: Another client holds a live lease: the session opens read-only.
    JOIN = "Join"
    #: Another client's lease expired: taking it over needs confirmation.
    TAKE_OVER = "Take over"


def lease_action(observation: LeaseObservation, client: ClientIdentity, open_here: bool) -> SessionAction:
    """The action ``observation`` allows ``client``. ``open_here`` says the
    caller has the session open; it only counts while the lease record is
    still this client's (a view whose lease was taken over is not ours)."""
    return _action(observation.record, observation.standing, client, open_here)


def _action(record: LeaseRecord | None, standing: LeaseStanding, client: ClientIdentity, open_here: bool) -> SessionAction:
    if record is None or standing is LeaseStanding.FREE:
        return SessionAction.RESUME
    if record.client_id == client.client_id:
        return SessionAction.SWITCH if open_here else SessionAction.RESUME
    return SessionAction.JOIN if standing is LeaseStanding.HELD else SessionAction.TAKE_OVER


# Requests, rows, surveys and sidecar facts are untracked by the garbage
# collector (gc=False): they hold values and records, never a cycle, and a
# listing makes one of each a session.
class ControlAsk(msgspec.Struct, frozen=True, gc=False):
    """A request for control of a session that its holder has not answered
    (read by the listing: see :meth:`_Probe.ops`)."""

    requester_host: str
    #: Target-clock seconds the request was filed.
    requested_at: int
    transfer_generation: int


class SessionRow(msgspec.Struct, frozen=True, gc=False):
    session_id: str
    #: The sidecar's display name; the session ID when the session is unnamed.
    display_name: str
    named: bool
    published: bool
    turn_count: int
    latest_preview: str | None
    #: Target-clock seconds of the last update: the sidecar's ``updated_at``
    #: when published, else the lease's last renewal, else the session
    #: directory's modification time.
    updated_at: int
    standing: LeaseStanding
    lease_state: LeaseState | None
    #: Host named in the lease record (display only); None without a record.
    holder_host: str | None
    holder_is_self: bool
    lease_expires_at: int | None
    action: SessionAction
    #: An interrupted Rewind or Redo left project files to repair: its
    #: recovery ID (or why its recovery directory cannot be read). Every
    #: mutation is refused until it is retried or abandoned.
    recovery_pending: str | None = None
    #: The artifact store item whose own conversation the session says it is
    #: (it is one only while the item names it back).
    dedicated_artifact: str | None = None
    #: A request for control addressed to the holder and not answered yet.
    control_request: ControlAsk | None = None
    #: Expired before its time: the holder's process was proven to have
    #: ended (on this machine).
    holder_ended: bool = False


class InspectSubject(enum.Enum):
    DIRECTORY = "directory"
    LEASE = "lease"
    MANIFEST = "manifest"
    SIDECAR = "sidecar"


class InspectSessionRow(msgspec.Struct, frozen=True):
    """A directory under ``.mevedel/sessions/`` that cannot be listed as a
    session, and why. ``name`` is the directory name (a session ID unless
    ``subject`` is DIRECTORY and the reason says it is not one)."""

    name: str
    subject: InspectSubject
    reason: str
    #: The record error or sidecar error kind, when bytes were refused.
    kind: RecordErrorKind | SidecarErrorKind | None
    #: Target-clock seconds the session directory was last modified.
    modified_at: int | None
    #: The ``format_version`` an unsupported sidecar claimed.
    observed_version: object = None


class Listing(msgspec.Struct, frozen=True):
    rows: tuple[SessionRow, ...]
    inspect_rows: tuple[InspectSessionRow, ...]
    #: Target clock reading of the listing's first lease judgement.
    now: int | None
    #: Directories left by a creation that never published (not sessions).
    unfinished: tuple["UnfinishedSession", ...] = ()
    #: The survey the listing was made from, with its clock reading (the
    #: expiry sweep that follows a listing judges the same observations).
    surveyed: tuple[list["SessionSurvey"], int | None] | None = None


class UnfinishedSession(msgspec.Struct, frozen=True):
    """A session directory with nothing committed that is no session: the
    remains of an interrupted Fork, Save As or Worktree Fork (see the module)."""

    session_id: str
    #: No live lease holds it (and, without a lease record, it is older than a lease).
    removable: bool
    #: Why it is unfinished, and why it is not removable yet.
    reason: str
    #: The lease generation it was judged at (0: never claimed).
    generation: int


class SessionSurvey(msgspec.Struct, gc=False):
    """What the listing learnt about one session directory (internal shape
    shared with cleanup, which needs the lease facts of Inspect rows too)."""

    name: str
    paths: SessionPaths | None
    modified_at: int | None = None
    observation: LeaseObservation | None = None
    manifest: PublicationManifest | None = None
    sidecar: SidecarFacts | None = None
    problem: InspectSessionRow | None = None
    vanished: bool = False
    #: It carries the :data:`~.layout.UNPUBLISHED_CHILD` marker.
    unpublished_child: bool = False
    #: The directory holds nothing at all.
    empty: bool = False
    #: A pending recovery's ID (see :attr:`SessionRow.recovery_pending`).
    recovery: str | None = None
    control_request: ControlAsk | None = None

    @property
    def last_update(self) -> int | None:
        if self.sidecar is not None and self.sidecar.updated_at is not None:
            return self.sidecar.updated_at
        record = self.observation.record if self.observation else None
        if record is not None:
            return record.renewed_at
        return self.modified_at


class SidecarFacts(msgspec.Struct, frozen=True, gc=False):
    """What listing, cleanup and collection need from a committed sidecar."""

    session_id: str
    display_name: str | None
    #: Settled turns.
    turn_count: int
    latest_preview: str | None
    #: Target seconds of the last committed change.
    updated_at: int
    #: False for a head captured mid-turn (a turn was begun and not settled).
    settled: bool
    #: The artifact store item whose own conversation the session says it is.
    dedicated_artifact: str | None = None
    #: What pickers call it (:func:`..content.sidecar.shown_name`).
    shown_name: str = ""
    #: The workspace identity it records (a resume proves it unchanged).
    workspace_id: str = ""


def sidecar_facts(data: bytes) -> SidecarFacts | SidecarRefusal:
    """The listing facts of current-version sidecar bytes, or why they are
    not a current sidecar (nothing is guessed from other versions)."""
    sidecar = classify_sidecar(data, read_only=True)
    if not isinstance(sidecar, Sidecar):
        return sidecar
    # Positional, in field order: a listing makes one a session.
    return SidecarFacts(
        sidecar.session_id,
        sidecar.display_name,
        sidecar.total_turn_count,
        sidecar.latest_user_message,
        sidecar.updated_at,
        sidecar.in_flight_turn is None,
        sidecar.dedicated_artifact,
        shown_name(sidecar, sidecar.session_id),
        sidecar.workspace_id,
    )


#: Lease records by their bytes. A record counts only as the generation it
#: records, which its name must say (bytes read under another name are
#: judged again, and refused); so the record alone is kept, and a look-up
#: makes no key and a keep no pair: a listing makes one a session.
_leases = Remembered(2 * 1024 * 1024)
#: Manifests by their bytes; one counts only in the publication directory
#: it names (read in another, it is judged again, and refused).
_manifests = Remembered(4 * 1024 * 1024)
#: Sidecar facts by the SHA-256 of the bytes they were read from (published
#: bytes never change; the listing checks the digest against the bytes).
_sidecars = Remembered(4 * 1024 * 1024)


def _facts_of_digest(digest: str, data: bytes) -> SidecarFacts | SidecarRefusal:
    """:func:`sidecar_facts` of ``data``, whose SHA-256 the caller found to
    be ``digest``."""
    facts = _sidecars.values.get(digest)
    if facts is None:
        facts = sidecar_facts(data)
        if isinstance(facts, SidecarFacts):
            _sidecars.keep(digest, facts, len(data))
    return facts


class _Stage(enum.Enum):
    #: The lease head and what it names, followed by the target in one
    #: operation (the survey's lease chain), judged against a clock of the
    #: same program.
    CHAIN = 1
    #: Direct reads of the manifest or the sidecar, only when the chain did
    #: not reach the file the decoded record names (the target's JSON
    #: reading disagreed with ours).
    MANIFEST = 2
    SIDECAR = 3
    DONE = 4


#: What the chain follows from the head lease generation: the manifest its
#: publication head names, then the sidecar that manifest publishes. Both
#: are session-relative, as the survey's hops are.
_CHAIN_KEYS = (("publication_head",), ("entries", SIDECAR_PATH, "published"))
#: What the survey reads below every session directory, beside its stat
#: and listing (the listing answers unfinished children and whether a
#: recovery journal exists; the stat gives a session without a lease record,
#: or an Inspect row, its time): the lease chain, and the newest request
#: for control (one of the live lease's transfer generation may wait for
#: its holder's answer).
_CHAINS = (
    ChainSpec(LEASE_DIR, *GENERATION_FAMILY, tuple(ChainHop(keys, "") for keys in _CHAIN_KEYS)),
    ChainSpec(REQUESTS_DIR, "request-", TRANSFER_DIGITS, ".json"),
)
#: Bytes of records one survey reads before it leaves the rest to the next
#: program (an SSH answer stays a few megabytes however many sessions).
SURVEY_BUDGET = 4 * 1024 * 1024


def _survey(*, names: tuple[str, ...] | None = None, after: str | None = None, batch: int = BATCH) -> SurveyDirs:
    return SurveyDirs(SESSIONS_DIR, _CHAINS, names, after, batch, SURVEY_BUDGET, optional=True)


class _Probe:
    """One session moving through the stages; :meth:`accept_entry` takes its
    survey entry, ``ops`` are its operations in a later program (the
    unusual: see the module), ``accept`` consumes their results."""

    # Defaults as class attributes: most sessions finish in the survey's
    # program and set only what they reach.
    stage = _Stage.CHAIN
    head_generation = 0
    generations: tuple[int, ...] = ()
    attempts = 0
    pending: InspectSessionRow | None = None
    #: The session directory's stat, from its survey entry.
    stat: OpResult | None = None
    #: The directory's listing showed ``.recovery/``, not listed yet.
    recovery_unread = False
    #: The live lease's transfer generation when its directory holds
    #: ``requests/``: that generation's request and answer, not read yet.
    requests_unread: int | None = None
    #: The stage, the recovery listing and the request reads of the last ``ops``.
    emitted: tuple[_Stage, bool, int | None] = (_Stage.CHAIN, False, None)

    def __init__(self, survey: SessionSurvey) -> None:
        self.survey = survey

    # -- helpers -----------------------------------------------------------

    def _fail(
        self,
        subject: InspectSubject,
        reason: str,
        kind: RecordErrorKind | SidecarErrorKind | None = None,
        observed_version: object = None,
    ) -> None:
        # The row is complete with the directory's time.
        self.pending = InspectSessionRow(self.survey.name, subject, reason, kind, None, observed_version)
        self._accept_directory()

    def _fail_record(self, subject: InspectSubject, error: RecordError) -> None:
        self._fail(subject, str(error), error.kind)

    def _op_failure(self, subject: InspectSubject, label: str, status: Status, reason: str | None) -> None:
        self._fail(subject, f"{label}: {reason or status.value}")

    # -- stages ------------------------------------------------------------

    def ops(self) -> list[Operation]:
        """This stage's operations, and the listing of ``.recovery/`` when
        the session directory's listing showed one (a recovery marker is
        rare: only then does it cost an operation, in the next program)."""
        paths = self.survey.paths
        assert paths is not None
        ops: list[Operation] = []
        if self.stage is _Stage.CHAIN:
            # The head moved under the first survey: this session again.
            ops.append(_survey(names=(self.survey.name,), batch=1))
        elif self.stage is _Stage.MANIFEST:
            ops.append(Read(self._manifest_path(), optional=True))
        elif self.stage is _Stage.SIDECAR:
            ops.append(Read(self._sidecar_path(), optional=True))
        if self.recovery_unread:
            ops.append(ListDir(paths.inside(RECOVERY_DIR), optional=True))
        if self.requests_unread is not None:
            # A request of the live lease's generation: answered yet? (Only
            # then does it cost an operation, in the next program.)
            ops.append(Read(paths.transfer_record("decision", self.requests_unread), optional=True))
        self.emitted = (self.stage, self.recovery_unread, self.requests_unread)
        return ops

    def _manifest_path(self) -> str:
        assert self.survey.paths is not None and self.survey.observation is not None
        head = self.survey.observation.publication_head
        assert head is not None
        return self.survey.paths.inside(head)

    def _sidecar_path(self) -> str:
        assert self.survey.paths is not None and self.survey.manifest is not None
        return self.survey.paths.inside(self.survey.manifest.entries[SIDECAR_PATH].published)

    def needs_clock(self) -> bool:
        return self.stage is _Stage.CHAIN

    def accept(self, results: list[OpResult], now: int | None) -> None:
        stage, with_recovery, asked_at = self.emitted
        if asked_at is not None:
            *results, answered = results
            self.requests_unread = None
            if answered.status is not Status.ABSENT:
                self.survey.control_request = None  # answered (or unreadable: the holder's grant or keep reports it)
        if with_recovery:
            *results, journal = results
            self.recovery_unread = False
            if journal.ok:
                self.survey.recovery = next(iter(recovery_ids(journal.value)), None)
            elif journal.status is not Status.ABSENT:  # absent: resolved since the directory was listed
                self.survey.recovery = f"its recovery directory cannot be read ({journal.reason or journal.status.value})"
        if stage is _Stage.CHAIN:
            [surveyed] = results
            if surveyed.ok and surveyed.value.entries:
                self.accept_entry(surveyed.value.entries[0], now)
            else:
                # The sessions directory itself failed: what each of the
                # entry's reads would have answered.
                self.accept_entry(SurveyedDir(self.survey.name, surveyed, surveyed, (surveyed, surveyed)), now)
        elif stage is _Stage.MANIFEST:
            read = results[0]
            self._accept_manifest(read.status, read.value, read.reason)
        elif stage is _Stage.SIDECAR:
            read = results[0]
            self._accept_sidecar(read.status, read.value, read.reason)

    def accept_entry(self, entry: SurveyedDir, now: int | None) -> None:
        """The session directory's survey entry: its stat, its listing, its
        lease chain and its newest request, read in one program with the
        clock reading ``now``."""
        self.stat = entry.stat
        survey = self.survey
        if survey.paths is None:
            self._accept_directory()
            return
        listed = entry.listing
        if listed.status is _OK:
            names = listed.value
            # A crash inside the marker's creation leaves its temporary file.
            unpublished = UNPUBLISHED_CHILD in names
            if not unpublished:
                for n in names:
                    if n.startswith(_DEBRIS_START) and _MARKER_DEBRIS.match(n):
                        unpublished = True
                        break
            survey.unpublished_child = unpublished
            survey.empty = not names
            self.recovery_unread = RECOVERY_DIR in names
        lease, requests = entry.chains
        self._accept_chain(lease, now)
        if requests.status is _OK:
            self._note_request(requests.value)

    def _note_request(self, chain: Chain) -> None:
        """Keep the newest request when it is of the live lease's transfer
        generation and addressed to its holder; whether it was answered is
        read in the next program. An unreadable one is left to the holder's
        grant or keep, which reads and reports it."""
        observation = self.survey.observation
        record = observation.record if observation is not None else None
        if record is None or record.state not in (LeaseState.ACTIVE, LeaseState.PUBLISHING):
            return
        if not chain.links or chain.links[0].data is None:
            return
        name = chain.names[-1]
        assert self.survey.paths is not None
        try:
            request = decode_record(TransferRequest, chain.links[0].data, self.survey.paths.label(f"{REQUESTS_DIR}/{name}"))
        except RecordError:
            return
        t = record.transfer_generation
        if request.transfer_generation == t and request.owner_client == record.client_id:
            self.survey.control_request = ControlAsk(request.requester_host, request.requested_at, t)
            self.requests_unread = t

    @property
    def finished(self) -> bool:
        return self.stage is _Stage.DONE and not self.recovery_unread and self.requests_unread is None

    def _accept_chain(self, result: OpResult, now: int | None) -> None:
        paths = self.survey.paths
        assert paths is not None
        status = result.status
        if status is _OK:
            chain = result.value
        elif status is Status.ABSENT:
            chain = _NO_CHAIN
        else:
            # Perhaps the session directory itself is the problem: its stat
            # decides which row this is.
            self._op_failure(InspectSubject.LEASE, paths.label(".lease"), status, result.reason)
            return
        generations = generation_numbers(chain.names)
        if not generations:
            # Never claimed: its time is the directory's.
            self.survey.observation = LeaseObservation(paths.session_id, 0, None, None, None, ())
            self._accept_directory()
            return
        head = self.head_generation = generations[-1]
        self.generations = tuple(generations)
        # Each link counts only as the file the record before it names, as
        # decoded here; the target merely followed the bytes.
        links = chain.links
        count = len(links)
        if not count or links[0].path != paths.generation(head):
            self._accept_lease(Status.ABSENT, None, None, now)  # moved away under the read
            return
        link = links[0]
        record = self._accept_lease(link.status, link.data, link.reason, now)
        if record is None or count < 2:
            return
        head_path = record.publication_head
        if head_path is None:
            return
        link = links[1]
        if link.path != paths.inside(head_path):
            return
        manifest = self._accept_manifest(link.status, link.data, link.reason, head_path)
        if manifest is not None and count > 2:
            link = links[2]
            if link.path == paths.inside(manifest.entries[SIDECAR_PATH].published):
                self._accept_sidecar(link.status, link.data, link.reason)

    def _accept_directory(self) -> None:
        """Finish with the directory's stat: its time, and the row it makes
        when the directory (or a record before) is the problem."""
        survey = self.survey
        stat = self.stat
        assert stat is not None
        self.stage = _Stage.DONE
        if stat.status is Status.ABSENT:
            survey.vanished = True  # deleted while we listed: not a session any more
            return
        problem: tuple[str, str | None] | None = None
        if not stat.ok:
            problem = (f"session {survey.name}: {stat.reason or stat.status.value}", None)
        elif stat.value.kind != "directory":
            problem = (f"{survey.name}: is not a directory", None)
        elif survey.paths is None:
            problem = (f"{survey.name}: is not a session ID (expected YYYY-MM-DDTHH-MM- and 12 lowercase hex digits)", None)
        if stat.ok:
            survey.modified_at = stat.value.mtime
        if problem is not None:
            survey.problem = InspectSessionRow(survey.name, InspectSubject.DIRECTORY, problem[0], None, survey.modified_at)
        elif self.pending is not None:
            survey.problem = msgspec.structs.replace(self.pending, modified_at=survey.modified_at)

    def _accept_lease(self, status: Status, data: bytes | None, reason: str | None, now: int | None) -> LeaseRecord | None:
        """Take the head generation's read; its record once accepted."""
        paths = self.survey.paths
        assert paths is not None
        head = self.head_generation
        if status is not _OK:
            if status is Status.ABSENT:
                # Pruned by a successor between listing and reading: list again.
                self.attempts += 1
                if self.attempts >= _HEAD_ATTEMPTS:
                    self._fail(InspectSubject.LEASE, f"session {paths.session_id}: the lease changed on every observation")
                else:
                    self.stage = _Stage.CHAIN
            else:
                self._op_failure(InspectSubject.LEASE, paths.generation_label(head), status, reason)
            return None
        assert data is not None
        record = _leases.values.get(data)
        if record is None or record.generation != head:
            try:
                record = decode_lease_generation(paths, head, data)
            except RecordError as error:
                self._fail_record(InspectSubject.LEASE, error)
                return None
            _leases.keep(data, record, len(data))
        self.survey.observation = LeaseObservation(paths.session_id, head, record, data, now, self.generations)
        self.stage = _Stage.DONE if record.publication_head is None else _Stage.MANIFEST
        return record

    def _accept_manifest(
        self, status: Status, data: bytes | None, reason: str | None, head: str | None = None
    ) -> PublicationManifest | None:
        """Take the manifest of the head's publication ``head`` (None: the
        accepted lease record's); the manifest once accepted."""
        paths = self.survey.paths
        assert paths is not None and self.survey.observation is not None
        if head is None:
            head = self.survey.observation.publication_head
        assert head is not None
        label = paths.label(head)
        if status is not _OK:
            if status is Status.ABSENT:
                self._fail(InspectSubject.MANIFEST, f"{label}: the committed manifest is missing", RecordErrorKind.MISSING)
            else:
                self._op_failure(InspectSubject.MANIFEST, label, status, reason)
            return None
        assert data is not None
        publication = publication_id_of(head)
        manifest = _manifests.values.get(data)
        if manifest is None or manifest.publication_id != publication:
            try:
                manifest = decode_manifest(label, publication, data)
            except RecordError as error:
                self._fail_record(InspectSubject.MANIFEST, error)
                return None
            _manifests.keep(data, manifest, len(data))
        if SIDECAR_PATH not in manifest.entries:
            self._fail(
                InspectSubject.SIDECAR,
                f"{label}: the publication has no sidecar ({SIDECAR_PATH})",
                RecordErrorKind.MISSING,
            )
            return None
        self.survey.manifest = manifest
        self.stage = _Stage.SIDECAR
        return manifest

    def _accept_sidecar(self, status: Status, data: bytes | None, reason: str | None) -> None:
        survey = self.survey
        paths = survey.paths
        manifest = survey.manifest
        assert paths is not None and manifest is not None
        entry = manifest.entries[SIDECAR_PATH]
        facts = None
        if status is _OK and len(data) == entry.size and hashlib.sha256(data).hexdigest() == entry.sha256:  # type: ignore[arg-type]
            facts = _facts_of_digest(entry.sha256, data)  # type: ignore[arg-type]
            if not isinstance(facts, SidecarRefusal) and facts.session_id == paths.session_id:
                survey.sidecar = facts
                self.stage = _Stage.DONE
                return
        # Refused: say why, naming the file.
        label = paths.label(f"{entry.published} ({SIDECAR_PATH})")
        if status is Status.ABSENT:
            self._fail(InspectSubject.SIDECAR, f"{label}: the published sidecar is missing", RecordErrorKind.MISSING)
        elif status is not _OK:
            self._op_failure(InspectSubject.SIDECAR, label, status, reason)
        elif facts is None:
            self._fail(
                InspectSubject.SIDECAR,
                f"{label}: published bytes do not match the manifest's SHA-256",
                RecordErrorKind.DIGEST_MISMATCH,
            )
        elif isinstance(facts, SidecarRefusal):
            self._fail(InspectSubject.SIDECAR, f"{label}: {facts.reason}", facts.kind, facts.observed_version)
        else:
            self._fail(
                InspectSubject.SIDECAR,
                f"{label}: the sidecar belongs to session {facts.session_id}",
                RecordErrorKind.INVALID_VALUE,
            )


def first_survey() -> SurveyDirs:
    """The survey :func:`survey_sessions` starts with, to run in another
    program beside a target clock reading (see its ``first``)."""
    return _survey()


async def survey_sessions(
    target: Target, *, batch: int = BATCH, first: tuple[OpResult, OpResult] | None = None
) -> tuple[list[SessionSurvey], int | None]:
    """Observe every entry of ``.mevedel/sessions/`` (dot-named entries are
    temporary files and clock probes, not sessions), ``batch`` at most per
    program. Returns the surveys and the first target clock reading (None
    when there was nothing to judge). ``first``: the results of a clock
    reading and :func:`first_survey`, run together in the caller's program
    (what the first program would have read: only the unusual costs one)."""
    if batch < 1:
        raise ValueError("a listing batch holds at least one session")
    surveys: list[SessionSurvey] = []
    active: list[_Probe] = []
    after: str | None = None
    surveyed_all = False
    first_now: int | None = None
    while not surveyed_all or active:
        # A session normally finishes in the program that surveys it; the
        # few that need another read go beside the next survey.
        clock = Clock(SESSIONS_DIR, optional=True)
        survey = None if surveyed_all else _survey(after=after, batch=batch)
        head: list[Operation] = [clock] if survey is not None or any(p.needs_clock() for p in active) else []
        if survey is not None:
            head.append(survey)
        ops: list[Operation] = list(head)
        spans: list[tuple[_Probe, int, int]] = []
        for probe in active:
            probe_ops = probe.ops()
            spans.append((probe, len(ops), len(ops) + len(probe_ops)))
            ops.extend(probe_ops)
        if first is not None:
            results, first = first, None
        else:
            results = (await target.run(ControlProgram(ops))).results
        if survey is not None:
            answer = results[1]
            if answer.status is Status.ABSENT and after is None:
                return [], None
            raise_for_result(survey, answer)
        now: int | None = None
        if head:
            raise_for_result(clock, results[0])
            now = int(results[0].value)
            if first_now is None:
                first_now = now
        for probe, start, end in spans:
            probe.accept(list(results[start:end]), now)
        active = [p for p in active if not p.finished]
        if survey is not None:
            found: DirSurvey = answer.value
            for entry in found.entries:
                surveyed = SessionSurvey(entry.name, SessionPaths(entry.name) if is_session_id(entry.name) else None)
                surveys.append(surveyed)
                probe = _Probe(surveyed)
                probe.accept_entry(entry, now)
                if not probe.finished:
                    active.append(probe)
            surveyed_all = found.complete or not found.entries
            if found.entries:
                after = found.entries[-1].name
    return surveys, first_now


def _row(survey: SessionSurvey, client: ClientIdentity, open_here: bool) -> SessionRow:
    observation = survey.observation
    assert observation is not None and survey.paths is not None
    record = observation.record
    standing = observation.standing
    sidecar = survey.sidecar
    updated = survey.last_update
    name = survey.name
    # Positional, in field order: a listing makes one a session.
    if sidecar is not None:
        shown, named, turns, preview, artifact = (
            sidecar.shown_name or sidecar.display_name or name,
            bool(sidecar.display_name),
            sidecar.turn_count,
            sidecar.latest_preview,
            sidecar.dedicated_artifact,
        )
    else:
        shown, named, turns, preview, artifact = name, False, 0, None, None
    if record is not None:
        state, host, is_self, expires = record.state, record.host, record.client_id == client.client_id, record.expires_at
    else:
        state = host = expires = None
        is_self = False
    return SessionRow(
        name,
        shown,
        named,
        survey.manifest is not None,
        turns,
        preview,
        updated if updated is not None else 0,
        standing,
        state,
        host,
        is_self,
        expires,
        _action(record, standing, client, open_here),
        survey.recovery,
        artifact,
        survey.control_request,
        standing is LeaseStanding.EXPIRED and observation.holder_ended,
    )


async def list_sessions(
    target: Target,
    client: ClientIdentity,
    open_sessions: Collection[str] = (),
    *,
    batch: int = BATCH,
) -> Listing:
    """Every session of the workspace, newest update first, each with the
    action its lease allows ``client``; ``open_sessions`` are the session IDs
    the caller has open (they list as Switch while their lease is ours)."""
    surveys, now = await survey_sessions(target, batch=batch)
    unfinished = await find_unfinished(target, surveys, now)
    skip = {u.session_id for u in unfinished}
    rows: list[SessionRow] = []
    inspect: list[InspectSessionRow] = []
    for survey in surveys:
        if survey.vanished or survey.name in skip:
            continue
        if survey.problem is not None:
            inspect.append(survey.problem)
        else:
            rows.append(_row(survey, client, survey.name in open_sessions))
    rows.sort(key=_NEWEST_FIRST, reverse=True)
    inspect.sort(key=lambda r: (r.modified_at or 0, r.name), reverse=True)
    return Listing(tuple(rows), tuple(inspect), now, tuple(unfinished), (surveys, now))


#: How rows sort (reversed): by update, then session ID.
_NEWEST_FIRST = operator.attrgetter("updated_at", "session_id")

_MARKER_DEBRIS = re.compile(rf"^\.{re.escape(UNPUBLISHED_CHILD)}\.[0-9a-z]+\.tmp\Z")
#: How every name _MARKER_DEBRIS matches starts (a cheaper test first).
_DEBRIS_START = f".{UNPUBLISHED_CHILD}."

#: A directory no lease record ever claimed is left alone this long (its
#: creator may be between the directory and its claim).
UNCLAIMED_GRACE_SECONDS = 60


async def find_unfinished(
    target: Target, surveys: list[SessionSurvey], now: int | None
) -> list[UnfinishedSession]:
    """The surveyed session directories that are no session (see the
    module); the survey already listed each directory, so this reads nothing."""
    found: list[UnfinishedSession] = []
    for s in surveys:
        observation = s.observation
        if s.vanished or s.problem is not None or observation is None or not (s.unpublished_child or s.empty):
            continue
        if observation.record is not None and observation.record.publication_head is not None:
            continue  # published: the marker's removal failed, and it means nothing
        what = "an interrupted Fork, Save As or Worktree Fork" if s.unpublished_child else "an empty session directory"
        if observation.standing is LeaseStanding.HELD:
            found.append(UnfinishedSession(s.name, False, f"{what}; its lease is still held", observation.generation))
        elif observation.record is None and (now is None or s.modified_at is None or now - s.modified_at < UNCLAIMED_GRACE_SECONDS):
            # Never claimed: its creator may be between two programs.
            found.append(UnfinishedSession(s.name, False, f"{what}; just created", observation.generation))
        else:
            found.append(UnfinishedSession(s.name, True, what, observation.generation))
    return found
