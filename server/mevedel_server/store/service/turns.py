"""``Turns``: the turn in flight and its checkpoint -- begin, capture
(:meth:`Turns.record_pre_state`, the one checkpoint seam), append, settle,
abort, mid-turn checkpoints, compaction and /clear -- and the views of
settled turns (summaries, one turn's records, diffs, a file restored as a
turn of its own, the transcript an agent continues from).

The service's front holds it as ``service.turns``; it works on the sessions
of the :class:`~.table.SessionTable` it is given and reads a followed
session through :class:`~.following.Following` first (a read sees the
owner's committed head).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ...targets import (
    ControlProgram,
    Entry,
    InvalidTargetPath,
    OpResult,
    ReadEntry,
    Status,
    TargetError,
    raise_for_result,
    split_target_path,
)
from ..authority.publication import read_committed
from ..authority.records import RecordError
from ..authority.workspace import check_session_id
from ..content.checkpoints import capture_gap_reason
from ..content.transcript import Outcome
from ..content.turns import Conversation, ConversationError, OpenTurn
from ..errors import InvalidSessionId, SessionMissing
from ..layout import STATE_DIR
from .background import STOP_CHECKPOINTS
from .checks import outcome_of, refused_in, require_turn
from .errors import InvalidSessionInput, SessionIncompatible, TurnStateConflict, quoted
from .evidence import ENGINE_KINDS, EVIDENCE_KINDS, EvidenceInput, make_evidence
from .following import Following
from .mutation_latch import LatchState
from .open_session import OpenSession
from .table import SessionTable
from .values import (
    ABORT_REASON,
    CHANGES_UNKNOWN,
    DEFAULT_MAX_SNAPSHOT_BYTES,
    CaptureResult,
    SaveResult,
    SegmentRotation,
    StoppedTurnChanges,
    TurnStarted,
)

# Turn views, diffs and file restores are imported by the methods that
# build them: listing or opening a session never needs them.
if TYPE_CHECKING:
    from ..content.diff import TreeDiff
    from .file_restore import FileRestore
    from .turn_views import TurnDetail, TurnSummary


#: Post-turn reads (:meth:`Turns.post_turn_reads`) and their results.
PostTurnRead = tuple[Sequence[ReadEntry], Sequence[OpResult]]

#: Looks up what a turn a stopped process left in flight changed: called
#: with the session's id, the turn's id, its working directory and the
#: snapshot limit; None when nothing of it can be found
#: (``SessionService(stopped_turn_changes=...)``).
StoppedTurnLookup = Callable[[str, str, str, int], Awaitable["StoppedTurnChanges | None"]]

_log = logging.getLogger(__name__)


class StoppedFold(NamedTuple):
    """What :meth:`Turns.fold_stopped_turn` recorded: the turn's post-turn
    states (the tree now), what to await once its settlement committed,
    and why its changes could not be recovered (its settle reason says so)."""

    current: Mapping[str, Entry | None]
    finish: Callable[[], Awaitable[None]] | None
    lost: str | None

    def reason(self, reason: str) -> str:
        """``reason`` the turn settles with, naming what was lost."""
        if self.lost is None:
            return reason
        return f"{reason}; {CHANGES_UNKNOWN}: {self.lost}"


class Turns:
    def __init__(
        self, table: SessionTable, following: Following, *, max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        stopped_turn_changes: StoppedTurnLookup | None = None,
    ) -> None:
        #: The sessions the turns belong to (a file restore reads them too).
        self.table = table
        self._following = following
        #: Files larger than this are recorded as capture gaps, not snapshots.
        self.max_snapshot_bytes = max_snapshot_bytes
        #: The front end's file-state record, asked what a turn a stopped
        #: process left in flight changed (None: nothing is asked).
        self.stopped_turn_changes = stopped_turn_changes

    # The turn in flight ---------------------------------------------------------

    async def begin_turn(self, session_id: str, prompt: str, *, agent: str | None = None) -> TurnStarted:
        session = await self.table.gated(session_id, "begin a turn", commands=True)
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidSessionInput(f"prompt {quoted(prompt)}", "is blank; a turn needs the user's prompt")
        _require_settled(session, "beginning another")
        turn_id = session.conversation.begin_turn(prompt, at=self.table.time_now(), agent=_label(agent, "agent"))
        opened = session.conversation.open_turn
        assert opened is not None
        if agent is not None:
            session.agent_turn(True)
        if session.checkpoints is not None:
            session.checkpoints.start()
        return TurnStarted(session_id, opened.turn, turn_id, opened.reminder)

    async def capture_file(self, session_id: str, path: str, *, gap: str | None = None) -> CaptureResult:
        """Record a tracked path's whole state before this turn first
        mutates it, read from the workspace through the target. ``gap``
        records instead that the path may change without a capture (and
        why). See :meth:`record_pre_state` for the one rule of what becomes
        a gap."""
        self.table.mutable(session_id, "capture a file")
        tracked = _tracked_path(path)
        if gap is not None:
            return self.record_pre_state(session_id, tracked, None, gap=gap)
        return self.record_pre_state(session_id, tracked, await self._read_tracked(tracked))

    def captured(self, session_id: str, path: str) -> bool:
        """Whether the turn in flight already recorded ``path``'s pre-turn
        state (a capture or a gap); a later capture would be ignored."""
        session = self.table.get(session_id, "check a capture")
        opened = session.conversation.open_turn
        snapshots = session.conversation.file_snapshots()
        if opened is None or not snapshots or snapshots[-1].turn_id != opened.turn_id:
            return False
        return _tracked_path(path) in snapshots[-1].files

    def turn_paths(self, session_id: str, turn_id: str | None) -> list[str]:
        """The paths turn ``turn_id``'s checkpoint recorded (captured or
        gapped: the files it changed or was about to change), sorted; none
        for a turn that recorded nothing or is not this session's."""
        session = self.table.get(session_id, "read a turn's paths")
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
        session = self.table.mutable(session_id, "capture a file")
        require_turn(session, "capture a file")
        tracked = _tracked_path(path)
        unreadable = _not_utf8(tracked)
        if unreadable is not None:
            tracked = unreadable
            gap = "its name is not UTF-8 text, so mevedel can neither record, restore nor remove it"
        if gap is None:
            gap = capture_gap_reason(before, self.max_snapshot_bytes)
        with refused_in(session):
            if gap is not None:
                session.conversation.capture_gap(tracked, gap)
            else:
                session.conversation.capture_file(tracked, before)
        recorded = _recorded_state(session.conversation, tracked)
        assert recorded is not None
        return recorded

    async def append(self, session_id: str, item: EvidenceInput) -> None:
        """Add a response, reasoning, tool call, tool result or mail record to
        the turn in flight (not saved until settlement or a checkpoint)."""
        if item.kind in ENGINE_KINDS:
            raise InvalidSessionInput(repr(item.kind), f"is not a record kind (use one of {', '.join(EVIDENCE_KINDS)})")
        self.append_now(session_id, item)

    def append_now(self, session_id: str, item: EvidenceInput) -> None:
        """:meth:`append` for the agent engine, synchronously (it keeps the
        order of the agent's stream) and with the engine's own kinds."""
        session = self.table.mutable(session_id, "append to a turn")
        opened = require_turn(session, "append a record")
        with refused_in(session):
            session.conversation.append(make_evidence(item, opened.turn_id))

    async def settle(self, session_id: str, outcome: Outcome | str = Outcome.COMPLETED, *, reason: str | None = None,
                     stop_reason: str | None = None, read: PostTurnRead | None = None) -> SaveResult:
        """End the turn in flight and save: one publication. The post-turn
        content of every captured file is read from the workspace (``read``:
        :meth:`post_turn_reads` run since the turn's mutations ended, in
        another program; the paths they do not answer are read here)."""
        session = await self.table.gated(session_id, "settle a turn", turn_work=True)
        outcome = outcome_of(outcome)
        require_turn(session, "settle a turn")
        if session.checkpoints is not None:
            session.checkpoints.cancel()  # a checkpoint already under way finishes first
        current = await self._post_turn_content(session, read)
        session.conversation.settle(outcome, at=self.table.time_now(), current=current, reason=_reason(reason),
                                    stop_reason=_label(stop_reason, "stop_reason"))
        # The settlement's own generation no longer names a process that
        # need not outlive it (its turn has ended) -- unless that process
        # runs the session's turns to its end (``mevedel prompt``), whose
        # exit hands the lease to its client (OpenSession.hand_to_client).
        session.agent_turn(False)
        result = await session.save(session.conversation.artifacts_for_save())
        self.table.changed(session, "settled")
        return result

    async def abort(self, session_id: str, reason: str | None = None, *, stopped: bool = False) -> SaveResult:
        """Settle the turn in flight as interrupted (the next turn carries the
        reconciliation reminder) and save. ``stopped``: the process that ran
        it is gone (killed mid-turn), so what it changed in the tree since
        its last checkpoint is recorded first (:meth:`fold_stopped_turn`)."""
        if not stopped:
            return await self.settle(session_id, Outcome.INTERRUPTED, reason=reason or ABORT_REASON)
        session = await self.table.gated(session_id, "settle a turn", turn_work=True)
        require_turn(session, "settle a turn")
        # The settlement reads the post-turn states, once, and a failed read
        # refuses it as it refuses any settlement.
        fold = await self.fold_stopped_turn(session, read=False)
        result = await self.settle(session_id, Outcome.INTERRUPTED, reason=fold.reason(reason or ABORT_REASON))
        if result.committed and fold.finish is not None:
            await fold.finish()
        return result

    async def fold_stopped_turn(self, session: OpenSession, *, read: bool = True) -> StoppedFold:
        """Record in ``session``'s turn in flight, which a stopped process
        left there, every change of the tree since the baseline the agent
        engine held for it before dispatching its agent (its file-state
        record's), through the one checkpoint seam: a path its checkpoint
        holds already keeps that record (the first wins). The post-turn
        states are read from the tree (a failed read leaves them unknown,
        which the diff says); not with ``read`` False, for a caller whose
        settlement reads them (:meth:`abort`). Nothing is found for a turn
        whose agent was never dispatched, or without a front end's record."""
        opened = session.conversation.open_turn
        lookup = self.stopped_turn_changes
        if opened is None or lookup is None:
            return StoppedFold({}, None, None)
        working = session.conversation.sidecar.working_directory
        found: StoppedTurnChanges | None = None
        lost: str | None = None
        try:
            found = await lookup(session.session_id, opened.turn_id, working, self.max_snapshot_bytes)
        except Exception as error:  # the target failed, or the record is unreadable: said, not hidden
            _log.warning("session %s: the changes of turn %s could not be recovered: %s", session.session_id, opened.turn, error)
            lost = f"they could not be read ({getattr(error, 'reason', None) or error})"
        for path, before, gap in found.changes if found is not None else ():
            try:
                self.record_pre_state(session.session_id, path, before, gap=gap)
            except (InvalidSessionInput, TurnStateConflict) as refused:  # one odd path must not lose the others
                _log.warning("session %s: could not record %s: %s", session.session_id, path, refused)
        current: Mapping[str, Entry | None] = {}
        try:  # what its checkpoint holds now, as the tree has it
            if read:
                current = await self._post_turn_content(session)
        except TargetError as error:  # their states after stay unknown, and the diff says so
            _log.warning("session %s: the files of turn %s could not be read after it: %s", session.session_id, opened.turn, error)
        if found is None:
            return StoppedFold(current, None, lost)
        return StoppedFold(current, found.finish, found.lost)

    async def checkpoint(self, session_id: str) -> SaveResult:
        """Save the unfinished turn in flight without settling it."""
        session = await self.table.gated(session_id, "checkpoint a turn", turn_work=True)
        result = await session.save(session.conversation.checkpoint())
        if result.committed:
            self.table.changed(session, "checkpoint")
        return result

    # Commands of a previous owner --------------------------------------------------

    async def require_commands_settled(self, session_id: str, action: str) -> None:
        """Refuse (:class:`UnsettledMutation`) while a previous owner's
        command may still run; an agent engine asks before it starts."""
        await self.table.require_commands_settled(self.table.get(session_id, action), action)

    async def unsettled_mutation(self, session_id: str) -> LatchState:
        """Whether a command of a previous owner may still run (the lease's
        unsettled-mutation latch, inherited at takeover or resume). Records
        of groups proven gone are removed, and the latch with them."""
        session = self.table.get(session_id, "check its commands")
        if session.lease is None or session.lease.lost or session.read_only is not None:
            return LatchState(False)
        return await session.latch.check(session.lease)

    async def acknowledge_unsettled_mutation(self, session_id: str) -> bool:
        """The owner confirmed no previous command still runs: the latch is
        cleared. True when one was set."""
        session = self.table.get(session_id, "acknowledge its commands")
        session.require_writable()
        if session.lease is None or not session.lease.record.unsettled_mutation:
            return False
        await session.latch.acknowledge(session.lease)
        return True

    # Segments ------------------------------------------------------------------

    async def compact(self, session_id: str, summary: str) -> SegmentRotation:
        """Compaction: close the live segment and open the next one, which
        starts with ``summary`` (supplied by the caller, who ran the model),
        and save. Refused while a turn is in flight."""
        session = await self.table.gated(session_id, "compact it")
        if not isinstance(summary, str) or not summary.strip():
            raise InvalidSessionInput(f"summary {quoted(summary)}", "is blank; compaction needs the summary that replaces the segment")
        _require_settled(session, "compacting")
        previous = session.conversation.current_segment
        try:
            segment = session.conversation.rotate_segment(summary, at=self.table.time_now())
        except ConversationError as refused:
            raise TurnStateConflict(session.session_id, f"cannot be compacted: {refused}") from None
        return await self._rotated(session, previous, segment, None, "compacted")

    async def clear(self, session_id: str) -> SegmentRotation:
        """/clear: close the current chat as a chapter, open a new segment
        and save. Refused while a turn is in flight."""
        session = await self.table.gated(session_id, "clear it")
        _require_settled(session, "clearing")
        await self.table.require_no_pending_input(session, "clear it")
        previous = session.conversation.current_segment
        try:
            segment = session.conversation.clear(at=self.table.time_now())
        except ConversationError as refused:
            raise TurnStateConflict(session.session_id, f"cannot be cleared: {refused}") from None
        chapter = len(session.conversation.sidecar.chapters)
        return await self._rotated(session, previous, segment, chapter, "cleared")

    async def _rotated(
        self, session: OpenSession, previous: int, segment: int, chapter: int | None, reason: str
    ) -> SegmentRotation:
        result = await session.save(session.conversation.artifacts_for_save())
        self.table.changed(session, reason)
        return SegmentRotation(session.session_id, previous, segment, chapter, result)

    # Views of the turns ------------------------------------------------------

    def open_turn(self, session_id: str) -> OpenTurn | None:
        """The open session's turn in flight (its number, the agent running
        it), if any."""
        return self.table.get(session_id, "ask about it").conversation.open_turn

    def turn_in_flight(self, session_id: str) -> int | None:
        """The number of the open session's turn in flight, if any."""
        opened = self.open_turn(session_id)
        return None if opened is None else opened.turn

    async def in_flight_turn_id(self, session_id: str) -> str | None:
        """The id of session ``session_id``'s turn in flight -- here, or in its
        committed state --; None when none is, or no such session is saved.
        Raises when the session cannot be read (its target unreachable)."""
        try:
            conversation = await self._readable(session_id)
        except (SessionMissing, InvalidSessionId, RecordError, SessionIncompatible, KeyError):
            return None
        return conversation.sidecar.in_flight_turn

    def transcript_records(self, session_id: str) -> list:
        """The open session's current-segment records, oldest first (the
        excerpt an agent continues from)."""
        session = self.table.get(session_id, "read its transcript")
        return list(session.conversation.records())

    async def summaries(self, session_id: str) -> list[TurnSummary]:
        """The turns of an open session (live, unsaved ones included) or,
        for a session not open here, of its committed snapshot."""
        from .turn_views import turn_summaries

        return turn_summaries(await self._readable(session_id))

    async def detail(self, session_id: str, number: int) -> TurnDetail:
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

        await self.table.gated(session_id, "restore a file", commands=True)
        return await restore_file(self, session_id, _tracked_path(path), before_turn, commit=commit)

    # Internals -----------------------------------------------------------------

    async def checkpoint_tick(self, session: OpenSession) -> None:
        """One mid-turn checkpoint of ``session``, if it still has a turn in
        flight here (else the timer stops)."""
        if self.table.sessions.get(session.session_id) is not session or session.read_only is not None:
            raise STOP_CHECKPOINTS
        if session.conversation.open_turn is None:
            raise STOP_CHECKPOINTS
        if session.pending is not None or session.recovery is not None:
            return  # a retry or a recovery decides; the next tick looks again
        await self.checkpoint(session.session_id)

    async def _readable(self, session_id: str) -> Conversation:
        session = self.table.sessions.get(check_session_id(session_id))
        if session is not None:
            await self._following.refresh(session)
            return session.conversation
        listed = self.table.listed.get(session_id)
        if listed is not None:
            try:
                return await self.table.conversation_of(listed[0])
            except (RecordError, SessionIncompatible, KeyError):
                self.table.listed.pop(session_id, None)  # moved on (collected, replaced) since the listing: read it afresh, which reports what is wrong
        return await self.table.conversation_of(await read_committed(self.table.target, session_id))

    async def _read_tracked(self, path: str) -> Entry | None:
        read = ReadEntry(path, max_bytes=self.max_snapshot_bytes, optional=True)
        got = (await self.table.target.run(ControlProgram([read])))[0]
        if got.status is Status.ABSENT:
            return None
        raise_for_result(read, got)
        return got.value

    def post_turn_reads(self, session_id: str) -> list[ReadEntry]:
        """The reads of the post-turn content of the files the turn in
        flight captured so far, for a program of the caller's once the
        turn's mutations are over (:meth:`settle`'s ``read``)."""
        session = self.table.get(session_id, "read its post-turn content")
        return [ReadEntry(path, max_bytes=self.max_snapshot_bytes, optional=True) for path in _captured_paths(session)]

    async def _post_turn_content(self, session: OpenSession, read: PostTurnRead | None = None) -> Mapping[str, Entry | None]:
        """Current content of the files this turn captured (gaps stay unknown;
        a file that cannot be read, or grew past the limit, too)."""
        paths = _captured_paths(session)
        if not paths:
            return {}
        answered: dict[str, OpResult] = {}
        if read is not None:
            answered = {op.path: got for op, got in zip(*read) if got.status is not Status.SKIPPED}
        missing = [path for path in paths if path not in answered]
        if missing:
            ops = [ReadEntry(p, max_bytes=self.max_snapshot_bytes, optional=True) for p in missing]
            answered.update(zip(missing, await self.table.target.run(ControlProgram(ops))))
        current: dict[str, Entry | None] = {}
        for path, op_result in ((path, answered[path]) for path in paths):
            if op_result.status is Status.ABSENT:
                current[path] = None
            elif op_result.ok and capture_gap_reason(op_result.value, self.max_snapshot_bytes) is None:
                current[path] = op_result.value
        return current


def _captured_paths(session: OpenSession) -> list[str]:
    """The paths the turn in flight captured with a pre-turn state (gaps
    stay unknown after the turn too)."""
    opened = session.conversation.open_turn
    snapshots = session.conversation.file_snapshots()
    if opened is None or not snapshots or snapshots[-1].turn_id != opened.turn_id:
        return []
    return [p for p, snap in snapshots[-1].files.items() if snap.pre is not None]


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


def _require_settled(session: OpenSession, doing: str) -> None:
    opened = session.conversation.open_turn
    if opened is not None:
        raise TurnStateConflict(
            session.session_id, f"has turn {opened.turn} in flight; settle or abort it before {doing}"
        )


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
