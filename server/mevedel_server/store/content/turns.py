"""The live conversation of one session: a pure state machine over its
transcript segments, prompt index, file checkpoints and sidecar.

Nothing here touches storage. A :class:`Conversation` turns each mutation
into records and produces :class:`SaveCandidate` snapshots (logical path ->
bytes) for the publication layer; it consumes the committed snapshot's bytes
through :meth:`Conversation.restore`. Times are whole target seconds the
caller read from the target clock.

A turn: :meth:`~Conversation.begin_turn` reserves its identity and records
the prompt before any tool runs; :meth:`~Conversation.capture_file` and
:meth:`~Conversation.capture_gap` record pre-turn file state before the first
mutation; :meth:`~Conversation.append` adds responses, reasoning, tool calls
and results, and mail; :meth:`~Conversation.settle` ends it as completed,
errored or interrupted. :meth:`~Conversation.checkpoint` saves an unfinished
turn without settling it, and :meth:`~Conversation.resume` settles a turn
that was in flight when the session was last saved as interrupted.

Candidates and the committed projection: a candidate built by
:meth:`~Conversation.artifacts_for_save` carries the complete snapshot and,
in ``changed``, only the artifacts that differ from the last committed
candidate (unchanged artifacts are the very same ``bytes`` objects). The
owner publishes one candidate at a time and reports success with
:meth:`~Conversation.mark_committed`. Sidecar-only writes (rename) use the
committed conversation fields, never live ones whose transcript is not
durable yet.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping, Sequence

import msgspec

from ...targets import Entry
from ..errors import ContentError, ConversationError
from .checkpoints import (
    CaptureError,
    FileHistory,
    Observed,
    TurnCapture,
    history_digest,
    history_path,
    referenced_digests,
)
from .sidecar import (
    SIDECAR_PATH,
    AgentChoice,
    Chapter,
    EngineRef,
    EngineState,
    ForkOrigin,
    IndexLineError,
    Layout,
    NameRefused,
    NamingState,
    PromptEntry,
    Sidecar,
    SidecarError,
    TurnFiles,
    WorktreeOrigin,
    bound_generated_title,
    bound_naming_input,
    decode_files_lines,
    decode_prompt_lines,
    encode_index_line,
    encode_sidecar,
    file_page_path,
    load_sidecar,
    normalize_display_name,
    preview_of,
    prompt_page_path,
)
from .transcript import (
    EVIDENCE_TYPES,
    MAX_INTEGER,
    MAX_SEGMENT,
    TRANSCRIPT_FORMAT_VERSION,
    AgentTask,
    Evidence,
    LineLog,
    Outcome,
    Prompt,
    Record,
    SegmentClose,
    SegmentClosing,
    SegmentError,
    SegmentHeader,
    SegmentOpening,
    Settle,
    Summary,
    ToolCall,
    ToolResult,
    TranscriptError,
    TurnBegin,
    agent_part_path,
    check_order,
    decode_agent_transcript,
    decode_lines,
    encode_line,
    is_turn_id,
    parse_agent_part,
    parse_segment_part,
    segment_name,
    segment_part_path,
)

RESUME_REASON = "the session was resumed while this turn was in flight"

#: What a display-only (rename) candidate takes from the live sidecar; every
#: other field, the conversation's counters and layout above all, stays as
#: committed.
#: Sidecar fields a metadata-only publication carries from the live state
#: (a rename, an artifact attached or detached).
METADATA_FIELDS = ("display_name", "naming_state", "naming_input", "attached_artifacts", "dedicated_artifact", "agent_choices")


class OpenTurn(msgspec.Struct, frozen=True):
    turn_id: str
    turn: int
    segment: int
    #: This turn's request must carry the reconciliation reminder.
    reminder: bool
    #: The agent that runs it (None: a turn driven by hand, ``mevedel turn``).
    agent: str | None = None


class SaveCandidate(msgspec.Struct, frozen=True):
    """One snapshot to publish."""

    #: Every logical path of the session's conversation state.
    artifacts: ArtifactSnapshot
    #: The subset that differs from the last committed candidate; publishing
    #: just these over the committed manifest gives the same snapshot.
    changed: Mapping[str, bytes]
    sidecar: Sidecar
    #: "full" (conversation and sidecar) or "sidecar" (metadata only).
    kind: str
    #: Which write of the conversation this candidate includes (internal).
    write_mark: int = 0

    @property
    def unchanged(self) -> bool:
        return not self.changed


class ArtifactSnapshot(Mapping[str, bytes]):
    """A read-only logical snapshot: a small dict of mutable-path artifacts
    (sidecar, segment parts, index pages) plus the first ``count`` contents
    of the append-only file history, which it shares instead of copying."""

    __slots__ = ("_small", "_history", "_count")

    def __init__(self, small: dict[str, bytes], history: FileHistory, count: int) -> None:
        self._small = small
        self._history = history
        self._count = count

    def __getitem__(self, logical: str) -> bytes:
        data = self._small.get(logical)
        if data is None:
            digest = history_digest(logical)
            data = self._history.get(digest, self._count) if digest else None
            if data is None:
                raise KeyError(logical)
        return data

    def __iter__(self):
        yield from self._small
        for digest in self._history.digests(self._count):
            yield history_path(digest)

    def __len__(self) -> int:
        return len(self._small) + self._count

    def with_path(self, logical: str, data: bytes) -> ArtifactSnapshot:
        return ArtifactSnapshot({**self._small, logical: data}, self._history, self._count)


class _Segment(msgspec.Struct):
    records: list[Record]
    log: LineLog

    def add(self, record: Record) -> None:
        self.log.append(encode_line(record))
        self.records.append(record)


class _AgentLog(msgspec.Struct):
    """A retained agent's own transcript: its settled tasks, in order."""

    tasks: list[AgentTask]
    log: LineLog


def _new_turn_id() -> str:
    return secrets.token_hex(8)


class _Live(msgspec.Struct):
    """Mutable state of the turn in flight."""

    turn: OpenTurn
    calls: set[str] = msgspec.field(default_factory=set)
    capture: TurnCapture | None = None


class Conversation:
    """Use :meth:`new` or :meth:`restore`."""

    def __init__(self, sidecar: Sidecar, *, turn_ids: Callable[[], str] = _new_turn_id) -> None:
        self._sidecar = sidecar
        self._turn_ids = turn_ids
        self._segments: list[_Segment] = []
        #: Retained agent path -> its own transcript.
        self._agents: dict[str, _AgentLog] = {}
        self._prompt_log = LineLog()
        self._prompts: list[PromptEntry] = []
        self._file_log = LineLog()
        self._files: list[TurnFiles] = []
        self._capture_logged = False
        self._history = FileHistory()
        self._live: _Live | None = None
        self._committed: SaveCandidate | None = None
        self._sidecar_cache: tuple[Sidecar, bytes] | None = None
        self._known_ids: set[str] = set()
        # Every artifact but the file history (which ArtifactSnapshot shares),
        # kept up to date incrementally, and the paths written since the
        # committed candidate (with the write that last touched them), so a
        # save costs its change, not the session's length.
        self._artifacts: dict[str, bytes] = {}
        self._uncommitted: dict[str, int] = {}
        self._writes = 0

    # Construction ---------------------------------------------------------

    @classmethod
    def new(
        cls,
        *,
        session_id: str,
        workspace_id: str,
        at: int,
        display_name: str | None = None,
        fork: ForkOrigin | None = None,
        worktree: WorktreeOrigin | None = None,
        settings: Mapping[str, str | int | bool] | None = None,
        attached_artifacts: Sequence[str] = (),
        turn_ids: Callable[[], str] = _new_turn_id,
    ) -> Conversation:
        """A fresh, unmaterialized conversation. A ``display_name`` given at
        creation is explicit; otherwise the session displays its ID."""
        try:
            name = normalize_display_name(display_name) if display_name is not None else None
            sidecar = Sidecar(
                session_id=session_id,
                workspace_id=workspace_id,
                display_name=name,
                naming_state=NamingState.EXPLICIT if name else NamingState.PENDING,
                created_at=at,
                updated_at=at,
                layout=Layout(segment_parts=[1], prompt_pages=0, file_pages=0),
                fork=fork,
                worktree=worktree,
                settings=dict(settings or {}),
                attached_artifacts=list(attached_artifacts),
            )
            # Construction does not check field constraints; a round trip does.
            sidecar = load_sidecar(encode_sidecar(sidecar))
        except SidecarError as exc:
            raise ConversationError(f"cannot create session {session_id}: {exc.reason}") from None
        except ValueError as exc:
            raise ConversationError(f"cannot create session {session_id}: {exc}") from None
        conversation = cls(sidecar, turn_ids=turn_ids)
        conversation._open_segment(SegmentOpening.START, at)
        return conversation

    @classmethod
    def restore(cls, artifacts: Mapping[str, bytes], *, turn_ids: Callable[[], str] = _new_turn_id) -> Conversation:
        """The conversation a committed snapshot holds, checked for
        consistency. No repair happens here (read-only inspection uses it
        too); :meth:`resume` performs the resume repairs. Raises
        :class:`SidecarError` for a sidecar that is not the current format
        and :class:`ContentError` for anything else inconsistent."""
        data = artifacts.get(SIDECAR_PATH)
        if data is None:
            raise ContentError(SIDECAR_PATH, "the snapshot has no sidecar")
        sidecar = load_sidecar(data)
        conversation = cls(sidecar, turn_ids=turn_ids)
        try:
            _Restorer(conversation, artifacts).run()
        except SegmentError as exc:
            where = f"{exc.label} line {exc.line}" if exc.line is not None else exc.label
            raise ContentError(where, exc.reason) from None
        conversation._sidecar_cache = (sidecar, data)
        conversation._artifacts = {p: d for p, d in artifacts.items() if history_digest(p) is None}
        conversation._committed = SaveCandidate(conversation._snapshot(), {}, sidecar, "full")
        for segment in conversation._segments:
            segment.log.take_changed()
        for kept in conversation._agents.values():
            kept.log.take_changed()
        conversation._prompt_log.take_changed()
        conversation._file_log.take_changed()
        conversation._history.take_new()
        return conversation

    # Reading --------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._sidecar.session_id

    @property
    def sidecar(self) -> Sidecar:
        """The live sidecar (including state not yet committed)."""
        self._sync()
        return self._sidecar

    @property
    def committed_sidecar(self) -> Sidecar | None:
        return self._committed.sidecar if self._committed else None

    @property
    def committed_artifacts(self) -> Mapping[str, bytes] | None:
        """The complete snapshot last marked committed (read-only; None
        when nothing was): what a reader of that head would get."""
        return self._committed.artifacts if self._committed else None

    @property
    def open_turn(self) -> OpenTurn | None:
        return self._live.turn if self._live else None

    @property
    def current_segment(self) -> int:
        return len(self._segments)

    def records(self, segment: int | None = None, start: int = 0) -> Sequence[Record]:
        """The records of ``segment`` (default: the live one) from index
        ``start`` on: a projection kept by the caller extends with just the
        new ones."""
        number = segment or len(self._segments)
        if not 1 <= number <= len(self._segments):
            raise ConversationError(f"session {self.session_id} has no segment {number}")
        return tuple(self._segments[number - 1].records[start:])

    def prompt_index(self) -> list[PromptEntry]:
        return list(self._prompts)

    def agent_tasks(self, path: str) -> Sequence[AgentTask]:
        """The tasks of retained agent ``path``'s own transcript, oldest
        first (a task written before agent transcripts existed is in the
        turn it ran in instead)."""
        kept = self._agents.get(path)
        return tuple(kept.tasks) if kept else ()

    def file_snapshots(self) -> list[TurnFiles]:
        """Every turn's file checkpoint, the one in flight included."""
        self._sync()
        return list(self._files)

    def tracked_files(self) -> list[str]:
        """Paths the turn in flight captured or gapped: the ones whose
        current content :meth:`settle` (or :meth:`resume`) wants."""
        if self._live is None or self._live.capture is None:
            return []
        return sorted(self._live.capture.files)

    def file_content(self, sha256: str) -> bytes | None:
        return self._history.get(sha256)

    # Turns ----------------------------------------------------------------

    def begin_turn(self, prompt: str, *, at: int, agent: str | None = None) -> str:
        """Reserve the next turn's identity and record its prompt."""
        if self._live is not None:
            raise ConversationError(f"turn {self._live.turn.turn} is still in flight; settle it before beginning another")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConversationError("an empty prompt starts no turn")
        at = self._time(at)
        turn_id = self._fresh_turn_id()
        turn = len(self._prompts) + 1
        segment = len(self._segments)
        reminder = self._sidecar.reconciliation_pending
        begin = TurnBegin(turn_id=turn_id, turn=turn, at=at, reminder=reminder, agent=agent)
        prompt_record = Prompt(turn_id=turn_id, text=prompt)
        # Encode both before changing anything, so a bad prompt changes nothing.
        lines = [encode_line(begin), encode_line(prompt_record)]
        current = self._segments[-1]
        for record, line in zip((begin, prompt_record), lines):
            current.log.append(line)
            current.records.append(record)
        entry = PromptEntry(turn=turn, segment=segment, turn_id=turn_id, preview=preview_of(prompt), at=at)
        self._prompts.append(entry)
        self._prompt_log.append(encode_index_line(entry))
        self._known_ids.add(turn_id)
        self._live = _Live(OpenTurn(turn_id, turn, segment, reminder, agent))
        self._update(
            at,
            in_flight_turn=turn_id,
            reconciliation_pending=False,
            first_user_message=self._prompts[0].preview,
            latest_user_message=entry.preview,
        )
        return turn_id

    def capture_file(self, path: str, content: Observed) -> None:
        """Record ``path``'s state before this turn first mutates it: an
        :class:`Entry` (kind, mode, bytes or link target), bare bytes (a
        file of unknown mode) or ``None`` (nothing there). A second capture
        of the same path in the same turn keeps the first."""
        live = self._require_turn("capture a file")
        if content is not None and not isinstance(content, (bytes, bytearray, memoryview, Entry)):
            raise ConversationError("captured content must be an entry, bytes or None")
        if isinstance(content, (bytearray, memoryview)):
            content = bytes(content)
        try:
            self._capture(live).capture(path, content, self._history)
        except CaptureError as exc:
            raise ConversationError(str(exc)) from None

    def capture_gap(self, path: str, reason: str) -> None:
        """Record that ``path`` may change in this turn without a capture."""
        live = self._require_turn("record a capture gap")
        try:
            self._capture(live).gap(path, reason)
        except CaptureError as exc:
            raise ConversationError(str(exc)) from None

    def append(self, record: Evidence) -> None:
        """Add a response, reasoning, tool call, tool result or mail record
        to the turn in flight."""
        live = self._require_turn("append a record")
        if not isinstance(record, EVIDENCE_TYPES):
            raise ConversationError(f"a {type(record).__name__} cannot be appended to a turn")
        if record.turn_id != live.turn.turn_id:
            raise ConversationError(f"the record names turn {record.turn_id}, but turn {live.turn.turn_id} is in flight")
        if isinstance(record, ToolCall):
            if record.call_id in live.calls:
                raise ConversationError(f"tool call {record.call_id} was already recorded in this turn")
        if isinstance(record, ToolResult) and record.call_id not in live.calls:
            raise ConversationError(f"a result for tool call {record.call_id}, which this turn never made")
        try:
            self._segments[-1].add(record)
        except TranscriptError as exc:
            raise ConversationError(str(exc)) from None
        if isinstance(record, ToolCall):
            live.calls.add(record.call_id)

    def record_agent_task(self, task: AgentTask) -> None:
        """A retained agent's settled task in the turn in flight: the whole
        task (its own records) is the next line of the agent's transcript,
        and the turn records it without them, naming its place there (so
        the turn stays as long as what its own agent did)."""
        live = self._require_turn("record an agent's task")
        if not isinstance(task, AgentTask):
            raise ConversationError(f"a {type(task).__name__} is not an agent's task")
        kept = self._agents.get(task.path)
        number = len(kept.tasks) + 1 if kept else 1
        whole = msgspec.structs.replace(task, turn_id=live.turn.turn_id, turn=live.turn.turn, task=None)
        reference = msgspec.structs.replace(task, turn_id=live.turn.turn_id, steps=[], turn=None, task=number)
        try:
            line = encode_line(whole)  # both refused before anything changes
            agent_part_path(task.path, 1)
            encode_line(reference)
        except (TranscriptError, ValueError) as exc:
            raise ConversationError(str(exc)) from None
        if kept is None:
            kept = self._agents[task.path] = _AgentLog([], LineLog())
        kept.log.append(line)
        kept.tasks.append(whole)
        self.append(reference)
        self._sync()

    def settle(
        self,
        outcome: Outcome,
        *,
        at: int,
        current: Mapping[str, Observed] | None = None,
        reason: str | None = None,
        stop_reason: str | None = None,
    ) -> None:
        """End the turn in flight. ``current`` gives the post-turn content of
        tracked files (None: absent); a tracked file it omits keeps an
        unknown post-turn state."""
        live = self._require_turn("settle a turn")
        try:
            outcome = Outcome(outcome)
        except ValueError:
            raise ConversationError(f"{outcome!r} is not a turn outcome (completed, errored, interrupted)") from None
        at = self._time(at)
        current = dict(current or {})
        for path, content in current.items():
            if content is not None and not isinstance(content, (bytes, Entry)):
                raise ConversationError(f"the post-turn content of {path!r} must be an entry, bytes or None")
        if current and live.capture is None:
            raise ConversationError(f"post-turn content given for {', '.join(map(repr, sorted(current)))}, which this turn does not track")
        record = Settle(turn_id=live.turn.turn_id, outcome=outcome, at=at, reason=reason, stop_reason=stop_reason)
        try:
            line = encode_line(record)  # refuse a bad reason before anything changes
        except TranscriptError as exc:
            raise ConversationError(str(exc)) from None
        if live.capture is not None:
            try:
                live.capture.settle(current, self._history)
            except CaptureError as exc:
                raise ConversationError(str(exc)) from None
        self._segments[-1].log.append(line)
        self._segments[-1].records.append(record)
        self._sync()
        self._live = None
        self._capture_logged = False
        changes: dict = dict(in_flight_turn=None, total_turn_count=self._sidecar.total_turn_count + 1)
        if outcome is Outcome.INTERRUPTED:
            changes["reconciliation_pending"] = True
        self._update(at, **changes)

    def resume(self, *, at: int, current: Mapping[str, Observed] | None = None, reason: str = RESUME_REASON) -> bool:
        """Resume repairs after acquiring the session: a turn that was in
        flight becomes interrupted (``current``: its files' post-turn
        states), and the next turn carries the reconciliation reminder.
        Returns whether a turn was interrupted."""
        interrupted = self._live is not None
        if interrupted:
            self.settle(Outcome.INTERRUPTED, at=at, current=current, reason=reason)
        elif current:
            raise ConversationError("post-turn content was given, but no turn was in flight")
        self._update(self._time(at), reconciliation_pending=True)
        return interrupted

    # Segments ---------------------------------------------------------------

    def rotate_segment(self, summary: str, *, at: int) -> int:
        """Compaction: close the live segment and open the next one with
        ``summary``. Returns the new segment number."""
        self._require_settled("compact")
        if not isinstance(summary, str) or not summary.strip():
            raise ConversationError("compaction needs a non-empty summary")
        if not any(isinstance(r, TurnBegin) for r in self._segments[-1].records):
            raise ConversationError("the live segment has no turn to compact")
        at = self._time(at)
        previous = self._next_segment_allowed()
        summary_record = Summary(summarized_segment=previous, text=summary, at=at)
        summary_line = encode_line(summary_record)  # fail before any change
        self._segments[-1].add(SegmentClose(reason=SegmentClosing.COMPACTION, at=at))
        self._open_segment(SegmentOpening.COMPACTION, at)
        self._segments[-1].log.append(summary_line)
        self._segments[-1].records.append(summary_record)
        self._update(at, current_segment=previous + 1)
        return previous + 1

    def clear(self, *, at: int) -> int:
        """/clear: close the current chat as a chapter and open a new
        segment. An automatic name becomes pending again (the title stays
        until a new one arrives); an explicit name survives."""
        self._require_settled("clear")
        if not self._chat_has_turns():
            raise ConversationError("the current chat has no turns to clear")
        at = self._time(at)
        sidecar = self._sidecar
        previous = self._next_segment_allowed()
        explicit = sidecar.naming_state is NamingState.EXPLICIT
        chapter = Chapter(last_segment=previous, title=None if explicit else sidecar.display_name, closed_at=at)
        self._segments[-1].add(SegmentClose(reason=SegmentClosing.CLEAR, at=at))
        self._open_segment(SegmentOpening.CLEAR, at)
        changes: dict = dict(current_segment=previous + 1, chapters=[*sidecar.chapters, chapter])
        if not explicit:
            changes.update(naming_state=NamingState.PENDING, naming_input=None)
        self._update(at, **changes)
        return previous + 1

    # Names ----------------------------------------------------------------

    def rename(self, new_name: str) -> SaveCandidate | None:
        """Give the session an explicit display name. Returns the
        display-only candidate to publish, or None while nothing is
        committed (the name then goes out with the first save)."""
        try:
            name = normalize_display_name(new_name)
        except NameRefused as exc:
            raise ConversationError(str(exc)) from None
        self._replace(display_name=name, naming_state=NamingState.EXPLICIT, naming_input=None)
        return self.metadata_candidate()

    def set_attached_artifacts(self, item_ids: Sequence[str]) -> SaveCandidate | None:
        """The artifact store items attached to the session (ids only; the
        store keeps the items). Returns the metadata-only candidate, or
        None while nothing is committed (the ids go out with the first save)."""
        ids = list(dict.fromkeys(item_ids))
        self._replace(attached_artifacts=ids)
        return self.metadata_candidate()

    def set_dedicated_artifact(self, item_id: str | None) -> SaveCandidate | None:
        """Make this the given item's own conversation (None: an ordinary
        session again)."""
        self._replace(dedicated_artifact=item_id)
        return self.metadata_candidate()

    def note_naming_attempt(self, authored_input: str) -> None:
        """An automatic title request is about to run: pending becomes
        attempted, recording its bounded input."""
        if not isinstance(authored_input, str):
            raise ConversationError("naming input must be text")
        if self._sidecar.naming_state is not NamingState.PENDING:
            raise ConversationError(f"automatic naming is {self._sidecar.naming_state.value}, not pending")
        self._replace(naming_state=NamingState.ATTEMPTED, naming_input=bound_naming_input(authored_input))

    def set_engine(self, engine: EngineRef | None, *, at: int) -> None:
        """Record which external agent continues the conversation, and where
        its native conversation stands (saved with the next publication)."""
        if engine == self._sidecar.engine:
            return
        self._update(self._time(at), engine=engine)

    def set_agents(self, agents: list, *, at: int) -> None:
        """Record the retained-agent registry (saved with the next
        publication); entries in path order."""
        agents = sorted(agents, key=lambda agent: agent.path)
        if agents == self._sidecar.agents:
            return
        self._update(self._time(at), agents=agents)

    def bind_workspace(self, workspace_id: str, *, at: int) -> None:
        """Bind a session made in another workspace to this one (resumed
        after the user confirmed): the next save records ``workspace_id``,
        and the external agent's own history, made elsewhere, is detached."""
        if workspace_id == self._sidecar.workspace_id:
            return
        self._update(self._time(at), workspace_id=workspace_id)
        self.detach_engine(at=at)

    def detach_engine(self, *, at: int) -> None:
        """Give up the external agents' own histories (control passes to
        another client): the next owner's first prompt starts a new native
        conversation from a transcript excerpt, and a retained agent's next
        task one from its own transcript's."""
        engine = self._sidecar.engine
        if engine is not None and engine.state is not EngineState.DETACHED:
            self.set_engine(msgspec.structs.replace(engine, native_session_id=None, state=EngineState.DETACHED), at=at)
        if any(agent.native_session_id is not None for agent in self._sidecar.agents):
            self.set_agents([msgspec.structs.replace(agent, native_session_id=None) for agent in self._sidecar.agents], at=at)

    def set_agent_choice(self, agent: str, choice: AgentChoice | None, *, at: int) -> None:
        """Record the person's mode and config choices for ``agent`` (None:
        none), published with the next save or metadata write."""
        if choice is not None:
            try:  # the sidecar is decoded strictly: what it cannot hold is refused here
                choice = msgspec.convert(msgspec.to_builtins(choice), AgentChoice, strict=True)
                if not isinstance(agent, str) or not 1 <= len(agent) <= 128:
                    raise msgspec.ValidationError(f"agent name {agent!r} is not 1-128 characters")
            except (msgspec.ValidationError, ValueError, TypeError) as exc:
                raise ConversationError(f"the choice for agent {agent!r} cannot be kept: {exc}") from None
        choices = dict(self._sidecar.agent_choices)
        if choice is None or choice == AgentChoice():
            choices.pop(agent, None)
        else:
            choices[agent] = choice
        if choices != self._sidecar.agent_choices:
            self._update(self._time(at), agent_choices=choices)

    def apply_generated_title(self, title: str) -> str:
        """Install an automatic title (bounded to four words and sixty
        characters). Refused under an explicit name."""
        if self._sidecar.naming_state is NamingState.EXPLICIT:
            raise ConversationError("the session has an explicit name; an automatic title does not replace it")
        try:
            bounded = bound_generated_title(title)
        except NameRefused as exc:
            raise ConversationError(str(exc)) from None
        self._replace(display_name=bounded, naming_state=NamingState.ATTEMPTED)
        return bounded

    # Saving ---------------------------------------------------------------

    def artifacts_for_save(self) -> SaveCandidate | None:
        """The complete snapshot of the live conversation, or None for a
        conversation that has nothing to save (never materialized, no turn,
        no artifact store item of its own)."""
        if (
            self._committed is None
            and not self._prompts
            and len(self._segments) == 1
            and self._sidecar.dedicated_artifact is None
        ):
            return None
        self._sync()
        self._writes += 1
        for number, segment in enumerate(self._segments, start=1):
            for part, data in segment.log.take_changed():
                self._write(segment_part_path(number, part), data)
        for path, kept in self._agents.items():
            for part, data in kept.log.take_changed():
                self._write(agent_part_path(path, part), data)
        for page, data in self._prompt_log.take_changed():
            self._write(prompt_page_path(page), data)
        for page, data in self._file_log.take_changed():
            self._write(file_page_path(page), data)
        for digest, _ in self._history.take_new():
            self._uncommitted[history_path(digest)] = self._writes
        sidecar_bytes = self._encoded_sidecar(self._sidecar)
        if self._artifacts.get(SIDECAR_PATH) is not sidecar_bytes:
            self._write(SIDECAR_PATH, sidecar_bytes)
        return self._candidate(self._snapshot(), self._sidecar, "full")

    def checkpoint(self) -> SaveCandidate:
        """Save the unfinished turn in flight without settling it."""
        self._require_turn("checkpoint")
        candidate = self.artifacts_for_save()
        assert candidate is not None  # a turn in flight has a prompt
        return candidate

    def metadata_candidate(self) -> SaveCandidate | None:
        """A sidecar-only candidate: the committed sidecar with the live
        metadata (display name, attached artifacts). None while nothing is
        committed."""
        if self._committed is None:
            return None
        committed = self._committed.sidecar
        sidecar = msgspec.structs.replace(committed, **{name: getattr(self._sidecar, name) for name in METADATA_FIELDS})
        data = self._encoded_sidecar(sidecar)
        artifacts = self._committed.artifacts.with_path(SIDECAR_PATH, data)
        base = self._committed.artifacts.get(SIDECAR_PATH)
        changed = {} if base == data else {SIDECAR_PATH: data}
        return SaveCandidate(artifacts, changed, sidecar, "sidecar", self._committed.write_mark)

    def mark_committed(self, candidate: SaveCandidate) -> None:
        """``candidate``'s publication committed: it is now the baseline for
        ``changed`` and for sidecar-only writes."""
        if candidate.sidecar.session_id != self.session_id:
            raise ConversationError(f"the candidate belongs to session {candidate.sidecar.session_id}")
        self._committed = candidate
        mark = candidate.write_mark
        self._uncommitted = {path: write for path, write in self._uncommitted.items() if write > mark}
        if candidate.kind == "sidecar":
            # The live sidecar differs from the one just committed.
            self._uncommitted[SIDECAR_PATH] = self._writes

    # Internals --------------------------------------------------------------

    def _snapshot(self) -> ArtifactSnapshot:
        return ArtifactSnapshot(dict(self._artifacts), self._history, len(self._history))

    def _write(self, logical: str, data: bytes) -> None:
        self._artifacts[logical] = data
        self._uncommitted[logical] = self._writes

    def _candidate(self, artifacts: ArtifactSnapshot, sidecar: Sidecar, kind: str) -> SaveCandidate:
        base = self._committed.artifacts if self._committed else {}
        changed = {}
        for logical in self._uncommitted:
            data = artifacts[logical]
            # Equal bytes (same object, or rewritten identically) are unchanged.
            if base.get(logical) != data:
                changed[logical] = data
        return SaveCandidate(artifacts, changed, sidecar, kind, self._writes)

    def _encoded_sidecar(self, sidecar: Sidecar) -> bytes:
        cached = self._sidecar_cache
        if cached is not None and cached[0] == sidecar:
            return cached[1]
        data = encode_sidecar(sidecar)
        try:
            load_sidecar(data)  # never hand out a sidecar the loader refuses
        except SidecarError as exc:
            raise ConversationError(f"session {self.session_id}: the sidecar would be invalid: {exc.reason}") from None
        self._sidecar_cache = (sidecar, data)
        return data

    def _open_segment(self, opened_by: SegmentOpening, at: int) -> None:
        number = len(self._segments) + 1
        segment_name(number)  # refuses a number beyond the naming range
        segment = _Segment([], LineLog())
        segment.add(SegmentHeader(format_version=TRANSCRIPT_FORMAT_VERSION, session_id=self.session_id, segment=number, opened_at=at, opened_by=opened_by))
        self._segments.append(segment)

    def _capture(self, live: _Live) -> TurnCapture:
        if live.capture is None:
            live.capture = TurnCapture(live.turn.turn, live.turn.turn_id)
        return live.capture

    def _sync(self) -> None:
        """Bring the sidecar's counts and layout up to date."""
        self._replace()

    def _replace(self, **changes) -> None:
        """Apply ``changes`` to the sidecar together with the current counts
        and layout, writing the in-flight file checkpoint into its index."""
        live = self._live
        if live is not None and live.capture is not None and live.capture.files:
            record = live.capture.record()
            if not self._capture_logged:
                self._files.append(record)
                self._file_log.append(encode_index_line(record))
                self._capture_logged = True
            elif self._files[-1] != record:
                self._files[-1] = record
                self._file_log.replace_last(encode_index_line(record))
        layout = Layout(
            segment_parts=[segment.log.part_count for segment in self._segments],
            prompt_pages=self._prompt_log.part_count,
            file_pages=self._file_log.part_count,
            agent_parts={path: kept.log.part_count for path, kept in sorted(self._agents.items())},
        )
        if layout != self._sidecar.layout or len(self._files) != self._sidecar.file_snapshot_count:
            changes.update(layout=layout, file_snapshot_count=len(self._files))
        if not changes:
            return
        try:
            self._sidecar = msgspec.structs.replace(self._sidecar, **changes)
        except (ValueError, msgspec.ValidationError) as exc:
            raise ConversationError(f"session {self.session_id}: {exc}") from None

    def _update(self, at: int, **changes) -> None:
        self._replace(updated_at=max(self._sidecar.updated_at, at), **changes)

    def _time(self, at: int) -> int:
        if type(at) is not int or not 0 <= at <= MAX_INTEGER:
            raise ConversationError(f"a time must be whole target seconds, not {at!r}")
        return at

    def _fresh_turn_id(self) -> str:
        for _ in range(16):
            candidate = self._turn_ids()
            if not is_turn_id(candidate):
                raise ConversationError(f"the turn id source produced {candidate!r}, not 16 lowercase hex digits")
            if candidate not in self._known_ids:
                return candidate
        raise ConversationError("could not draw an unused turn id")

    def _require_turn(self, action: str) -> _Live:
        if self._live is None:
            raise ConversationError(f"cannot {action}: no turn is in flight")
        return self._live

    def _require_settled(self, action: str) -> None:
        if self._live is not None:
            raise ConversationError(f"cannot {action} while turn {self._live.turn.turn} is in flight")

    def _next_segment_allowed(self) -> int:
        """The live segment's number, once sure another may follow it."""
        previous = len(self._segments)
        if previous >= MAX_SEGMENT:
            raise ConversationError(f"session {self.session_id} already has the last segment number ({MAX_SEGMENT})")
        return previous

    def _chat_has_turns(self) -> bool:
        last_clear = self._sidecar.chapters[-1].last_segment if self._sidecar.chapters else 0
        return any(
            isinstance(record, TurnBegin)
            for segment in self._segments[last_clear:]
            for record in segment.records
        )


_INDEX_DIR = "index/"


class _Restorer:
    """Checks a committed snapshot and loads it into a conversation."""

    def __init__(self, conversation: Conversation, artifacts: Mapping[str, bytes]) -> None:
        self.c = conversation
        self.artifacts = artifacts
        self.sidecar = conversation._sidecar

    def run(self) -> None:
        self._load_history()
        self._check_paths()
        self._load_segments()
        self._load_agents()
        self._load_prompts()
        self._load_files()
        self._check_sidecar_fields()

    def _get(self, logical: str) -> bytes:
        data = self.artifacts.get(logical)
        if data is None:
            raise ContentError(logical, "the sidecar's layout names it, but the snapshot does not hold it")
        return data

    def _check_paths(self) -> None:
        """Every part and page the snapshot holds is one the layout names."""
        layout = self.sidecar.layout
        expected = {prompt_page_path(k) for k in range(1, layout.prompt_pages + 1)}
        expected |= {file_page_path(k) for k in range(1, layout.file_pages + 1)}
        for logical in self.artifacts:
            parsed = parse_segment_part(logical)
            if parsed is not None:
                segment, part = parsed
                if segment > len(layout.segment_parts) or part > layout.segment_parts[segment - 1]:
                    raise ContentError(logical, "a segment part the sidecar's layout does not name")
            elif logical.startswith(_INDEX_DIR) and logical not in expected:
                raise ContentError(logical, "an index page the sidecar's layout does not name")
            elif (agent := parse_agent_part(logical)) is not None and agent[1] > layout.agent_parts.get(agent[0], 0):
                raise ContentError(logical, "an agent transcript part the sidecar's layout does not name")

    def _load_agents(self) -> None:
        for path, parts in self.sidecar.layout.agent_parts.items():
            label = f"agents/{path}"
            log = LineLog.from_parts([self._get(agent_part_path(path, k)) for k in range(1, parts + 1)], label=label)
            tasks = decode_agent_transcript(b"".join(log.lines()), label=label)
            for number, task in enumerate(tasks, start=1):
                if task.path != path:
                    raise ContentError(f"{label} line {number}", f"a task of retained agent {task.path}")
            self.c._agents[path] = _AgentLog(tasks, log)

    def _load_segments(self) -> None:
        c = self.c
        previous_close: SegmentClosing | None = None
        for number, parts in enumerate(self.sidecar.layout.segment_parts, start=1):
            label = segment_name(number)
            log = LineLog.from_parts([self._get(segment_part_path(number, k)) for k in range(1, parts + 1)], label=label)
            records = decode_lines(log.lines(), label=label)
            check_order(records, label=label, expected=number)
            header = records[0]
            assert isinstance(header, SegmentHeader)
            if header.session_id != self.sidecar.session_id:
                raise ContentError(label, f"the header names session {header.session_id}")
            expected_opening = {
                None: SegmentOpening.START,
                SegmentClosing.COMPACTION: SegmentOpening.COMPACTION,
                SegmentClosing.CLEAR: SegmentOpening.CLEAR,
            }[previous_close]
            if header.opened_by is not expected_opening:
                raise ContentError(label, f"opened by {header.opened_by.value}, but its predecessor calls for {expected_opening.value}")
            last = records[-1]
            is_live = number == len(self.sidecar.layout.segment_parts)
            if is_live and isinstance(last, SegmentClose):
                raise ContentError(label, "the live segment is closed")
            if not is_live:
                if not isinstance(last, SegmentClose):
                    raise ContentError(label, "an earlier segment does not end with segment_close")
                previous_close = last.reason
            c._segments.append(_Segment(records, log))

    def _load_prompts(self) -> None:
        c = self.c
        derived: list[PromptEntry] = []
        settled = 0
        live: _Live | None = None
        begin: TurnBegin | None = None
        for number, segment in enumerate(c._segments, start=1):
            for record in segment.records:
                if isinstance(record, TurnBegin):
                    begin = record
                    if record.turn != len(derived) + 1:
                        raise ContentError(segment_name(number), f"turn {record.turn} follows turn {len(derived)}")
                    if record.turn_id in c._known_ids:
                        raise ContentError(segment_name(number), f"turn id {record.turn_id} is used twice")
                    c._known_ids.add(record.turn_id)
                    live = _Live(OpenTurn(record.turn_id, record.turn, number, record.reminder, record.agent))
                elif isinstance(record, Prompt):
                    assert begin is not None
                    derived.append(
                        PromptEntry(turn=begin.turn, segment=number, turn_id=begin.turn_id, preview=preview_of(record.text), at=begin.at)
                    )
                elif isinstance(record, ToolCall) and live is not None:
                    live.calls.add(record.call_id)
                elif isinstance(record, Settle):
                    settled += 1
                    live = None
        pages = self.sidecar.layout.prompt_pages
        log = LineLog.from_parts([self._get(prompt_page_path(k)) for k in range(1, pages + 1)], label="prompt index")
        stored = _decode_index(log.lines(), decode_prompt_lines, "prompt index")
        if stored != derived:
            where = next((i for i, (a, b) in enumerate(zip(stored, derived)) if a != b), min(len(stored), len(derived)))
            raise ContentError("prompt index", f"entry {where + 1} disagrees with the transcript")
        if settled != self.sidecar.total_turn_count:
            raise ContentError(SIDECAR_PATH, f"total_turn_count is {self.sidecar.total_turn_count}, but the transcript settles {settled} turns")
        in_flight = live.turn.turn_id if live else None
        if in_flight != self.sidecar.in_flight_turn:
            raise ContentError(SIDECAR_PATH, f"in_flight_turn is {self.sidecar.in_flight_turn}, but the transcript has {in_flight or 'none'} in flight")
        c._prompts, c._prompt_log, c._live = stored, log, live

    def _load_files(self) -> None:
        c = self.c
        pages = self.sidecar.layout.file_pages
        log = LineLog.from_parts([self._get(file_page_path(k)) for k in range(1, pages + 1)], label="file snapshots index")
        records = _decode_index(log.lines(), decode_files_lines, "file snapshots index")
        if len(records) != self.sidecar.file_snapshot_count:
            raise ContentError(SIDECAR_PATH, f"file_snapshot_count is {self.sidecar.file_snapshot_count}, but the index holds {len(records)}")
        previous = 0
        for record in records:
            if record.turn <= previous or record.turn > len(c._prompts) or c._prompts[record.turn - 1].turn_id != record.turn_id:
                raise ContentError("file snapshots index", f"turn {record.turn} ({record.turn_id}) is out of order or not a turn of this session")
            previous = record.turn
            for digest in referenced_digests(record):
                if digest not in c._history:
                    raise ContentError(history_path(digest), "the file snapshots index names it, but the snapshot does not hold it")
        if c._live is not None and records and records[-1].turn_id == c._live.turn.turn_id:
            c._live.capture = TurnCapture.from_record(records[-1])
            c._capture_logged = True
        c._files, c._file_log = records, log

    def _check_sidecar_fields(self) -> None:
        c = self.c
        s = self.sidecar
        first = c._prompts[0].preview if c._prompts else None
        latest = c._prompts[-1].preview if c._prompts else None
        if (s.first_user_message, s.latest_user_message) != (first, latest):
            raise ContentError(SIDECAR_PATH, "first/latest user message previews disagree with the prompt index")
        cleared = [n for n, seg in enumerate(c._segments, start=1) if isinstance(seg.records[-1], SegmentClose) and seg.records[-1].reason is SegmentClosing.CLEAR]
        if [chapter.last_segment for chapter in s.chapters] != cleared:
            raise ContentError(SIDECAR_PATH, "chapters do not match the segments /clear closed")

    def _load_history(self) -> None:
        """Adopt every stored file content, in name order, checking each."""
        for logical in sorted(p for p in self.artifacts if p.startswith("file-history/")):
            digest = history_digest(logical)
            if digest is None:
                raise ContentError(logical, "not a file history name (file-history/<sha256>)")
            data = self.artifacts[logical]
            if hashlib.sha256(data).hexdigest() != digest:
                raise ContentError(logical, "the bytes do not match their SHA-256 name")
            self.c._history.adopt(digest, data)


def _decode_index(lines: list[bytes], decode: Callable[[list[bytes]], list], label: str) -> list:
    try:
        return decode(lines)
    except IndexLineError as exc:
        raise ContentError(f"{label} entry {exc.number}", exc.reason) from None
