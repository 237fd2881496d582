"""The closed, versioned session sidecar (logical artifact ``session.json``).

The sidecar holds the session-wide state that is not transcript text: names,
naming state, times, turn and segment counters, first/latest prompt previews,
closed chats, fork and worktree lineage, attached artifacts, copied settings
and the reconciliation flag. It stays small whatever the session's length, so
listing reads one small record per session.

The prompt index (rewind picker) and the per-turn file snapshots are closed
record types of this module too, but live in append-only index pages
(``index/prompts-NNNNNN.jsonl``, ``index/files-NNNNNN.jsonl``, stored like
transcript parts) whose count the sidecar's :class:`Layout` records; a save
then rewrites one small page instead of an index that grows with every turn.

:func:`load_sidecar` (and :func:`read_sidecar`, for a reader of fields)
accepts exactly :data:`SIDECAR_FORMAT_VERSION` and its complete shape;
everything else raises :class:`SidecarError` with a kind,
the reason and the version it observed, so a listing can show an *Inspect*
row instead of guessing a session. All times are whole target seconds
(integers): no float, and so no NaN or Infinity, is ever valid.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from ...lazy_decoder import LazyDecoder
from ..errors import StoreError
from .pattern_check import pattern_check
from .transcript import (
    MAX_INTEGER,
    SESSION_ID_TEXT,
    Seconds,
    SegmentNumber,
    SessionIdText,
    TurnId,
    TurnNumber,
)

SIDECAR_FORMAT_VERSION = 1
SIDECAR_PATH = "session.json"

PREVIEW_LIMIT = 200
DISPLAY_NAME_LIMIT = 1000
NAMING_INPUT_LIMIT = 2000

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]
Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]
Preview = Annotated[str, msgspec.Meta(max_length=PREVIEW_LIMIT)]
DisplayName = Annotated[str, msgspec.Meta(min_length=1, max_length=DISPLAY_NAME_LIMIT)]
NamingInput = Annotated[str, msgspec.Meta(max_length=NAMING_INPUT_LIMIT)]
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
#: A tracked file: workspace-relative or target-absolute, never empty, no NUL.
TrackedPath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00\n]+\Z")]
SettingKey = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_.-]{0,63}\Z")]
SettingValue = Annotated[str, msgspec.Meta(max_length=4096)] | Annotated[int, msgspec.Meta(ge=-MAX_INTEGER, le=MAX_INTEGER)] | bool
ArtifactId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")]
CommitId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")]
TargetPath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00\n]+\Z")]
WORKSPACE_ID_TEXT = r"^[0-9a-f]{64}\Z"


class SidecarErrorKind(enum.Enum):
    MISSING = "missing"
    EMPTY = "empty"
    TRUNCATED = "truncated"
    MALFORMED = "malformed"
    NON_FINITE = "non-finite"
    NOT_AN_OBJECT = "not-an-object"
    MISSING_VERSION = "missing-version"
    UNSUPPORTED_VERSION = "unsupported-version"
    UNKNOWN_FIELD = "unknown-field"
    MISSING_FIELD = "missing-field"
    WRONG_TYPE = "wrong-type"
    INVALID_VALUE = "invalid-value"


class SidecarError(StoreError):
    """The bytes are not a current-version sidecar."""

    def __init__(self, kind: SidecarErrorKind, reason: str, observed_version: object = None) -> None:
        super().__init__(f"{SIDECAR_PATH}: {reason}")
        self.kind = kind
        self.reason = reason
        #: The ``format_version`` the bytes claimed, when they claimed one.
        self.observed_version = observed_version


class NamingState(enum.Enum):
    PENDING = "pending"
    ATTEMPTED = "attempted"
    EXPLICIT = "explicit"


class ForkType(enum.Enum):
    CONVERSATION = "conversation"
    WORKTREE = "worktree"


# Untracked by the garbage collector (gc=False): these records nest only
# scalars, lists and dicts of records, never a cycle.
class _Closed(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, gc=False):
    pass


Mode = Annotated[int, msgspec.Meta(ge=0, le=0o7777)]
LinkTarget = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00]+\Z")]


class Present(_Closed, tag_field="state", tag="present", kw_only=True, omit_defaults=True):
    """A regular file's content, stored as ``file-history/<sha256>``, and
    its permission bits (None in a checkpoint written before modes were
    recorded: a restore keeps the mode the file has, or gives a new file
    the default; added within format 1)."""

    sha256: Sha256
    size: Size
    mode: Mode | None = None


class Absent(_Closed, tag_field="state", tag="absent", kw_only=True):
    """Nothing was there."""


class Directory(_Closed, tag_field="state", tag="directory", kw_only=True):
    """A directory and its permission bits (added within format 1)."""

    mode: Mode


class Symlink(_Closed, tag_field="state", tag="symlink", kw_only=True):
    """A symbolic link and its target text, never followed (added within
    format 1)."""

    target: LinkTarget


FileState = Present | Absent | Directory | Symlink


class FileSnapshot(_Closed, kw_only=True):
    """One tracked file in one turn.

    ``pre`` is the content before the turn's first mutation, ``None`` only
    when the turn recorded a capture gap instead (``gap`` is its reason).
    ``post`` is the content at settlement, ``None`` while the turn is in
    flight or when the caller could not say.
    """

    pre: FileState | None
    post: FileState | None = None
    gap: Reason | None = None

    def __post_init__(self) -> None:
        if (self.pre is None) == (self.gap is None):
            raise ValueError("a file snapshot has either a pre-turn capture or a capture gap, never both or neither")


class TurnFiles(_Closed, kw_only=True):
    """The file checkpoint of one turn that captured or gapped files."""

    turn: TurnNumber
    turn_id: TurnId
    files: dict[TrackedPath, FileSnapshot]


class PromptEntry(_Closed, kw_only=True):
    turn: TurnNumber
    segment: SegmentNumber
    turn_id: TurnId
    preview: Preview
    at: Seconds


class Chapter(_Closed, kw_only=True):
    """A chat closed by ``/clear``."""

    last_segment: SegmentNumber
    #: The chat's title when it closed; None under an explicit name.
    title: DisplayName | None
    closed_at: Seconds


class ForkOrigin(_Closed, kw_only=True):
    fork_type: ForkType
    session_id: SessionIdText
    turn: Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]
    fork_point_id: TurnId | None


class WorktreeOrigin(_Closed, kw_only=True):
    source_root: TargetPath
    directory: TargetPath
    branch: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    base_commit: CommitId


class EngineState(enum.Enum):
    """Where the agent's native conversation stands (spec: "External
    conversation references")."""

    #: Named, but no prompt has reached it yet.
    UNSTARTED = "unstarted"
    #: Its last turn settled: its history matches the transcript.
    READY = "ready"
    #: A turn is in flight, failed or was interrupted: the agent's history
    #: may hold work the transcript does not (or the reverse).
    UNCERTAIN = "uncertain"
    #: Abandoned by a Rewind, Redo, Fork, Save As or control transfer; the
    #: next prompt starts a new native conversation from a transcript excerpt.
    DETACHED = "detached"


class EngineRef(_Closed, kw_only=True):
    """The external agent that continues this session and its native
    conversation. No credentials or process handles: only what lets the
    same agent installation on the same machine resume it."""

    #: The name of the agent's entry in the ``agents`` setting.
    agent: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    #: sha256 of the agent's command line (argv), so a changed installation
    #: is not asked to resume a conversation it never had.
    fingerprint: Sha256
    #: The agent's own session id (ACP ``sessionId``), once it has one.
    native_session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | None = None
    #: The machine that ran the agent (its host name).
    machine: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    state: EngineState = EngineState.UNSTARTED


def agent_history_note(engine: EngineRef | None, *, copy: bool) -> str | None:
    """What a lifecycle transaction does to the agent's own history, for
    its impact: None when no native conversation is retained. ``copy``:
    the transaction makes a new session (Fork, Worktree Fork, Save As)
    rather than moving this one (Rewind, Redo)."""
    if engine is None or engine.native_session_id is None or engine.state is EngineState.DETACHED:
        return None
    if copy:
        return (
            f"the new session does not continue agent {engine.agent}'s own history of this conversation; "
            "its first prompt starts a new one from a transcript excerpt"
        )
    return (
        f"agent {engine.agent}'s own history of this conversation will be detached; "
        "the next prompt starts a new one from a transcript excerpt"
    )


#: An agent's mode or config option id, and a chosen select value.
OptionId = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=r"^[^\x00\n]+\Z")]
OptionValue = Annotated[str, msgspec.Meta(min_length=1, max_length=1024, pattern=r"^[^\x00\n]+\Z")] | bool
#: How many config choices one agent's record may hold.
MAX_CONFIG_CHOICES = 64


class AgentChoice(_Closed, kw_only=True, omit_defaults=True):
    """What the person chose for one agent of this session: its ACP session
    mode and config option values (model, reasoning effort, ...), applied
    again whenever a process of that agent opens the session (added within
    format 1)."""

    mode: OptionId | None = None
    config: dict[OptionId, OptionValue] = {}

    def __post_init__(self) -> None:
        if len(self.config) > MAX_CONFIG_CHOICES:
            raise ValueError(f"an agent choice holds at most {MAX_CONFIG_CHOICES} config options")
#: A retained agent's path: its caller's path and its name, segment by
#: segment (``reviewer``, ``reviewer/search``).
AgentPath = Annotated[str, msgspec.Meta(max_length=600, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}(/[a-z0-9][a-z0-9_-]{0,63}){0,7}\Z")]
#: Characters of a retained agent's result the registry keeps.
RESULT_TEXT_LIMIT = 32 * 1024


class AgentActivity(enum.Enum):
    IDLE = "idle"
    #: A turn of it is in flight (a resumed session's is not: see
    #: ``RetainedAgent``).
    ACTIVE = "active"


class AgentResult(_Closed, kw_only=True):
    """A retained agent's latest settled turn: what its caller got back."""

    #: The session turn it ran in.
    turn: TurnNumber
    outcome: Literal["completed", "errored", "interrupted"]
    reason: Reason | None = None
    #: Its final message (the partial one when it did not complete), cut
    #: to :data:`RESULT_TEXT_LIMIT` characters.
    text: Annotated[str, msgspec.Meta(max_length=RESULT_TEXT_LIMIT + 200)]


def agent_result(turn: int, outcome: str, reason: str | None, steps: Sequence) -> AgentResult:
    """A retained agent's settled result from its task's records
    (``steps``: anything with ``kind`` and ``text``): its final message --
    its text after its last tool call, else its last text -- kept to
    :data:`RESULT_TEXT_LIMIT` characters."""
    final = final_message(steps)
    kept = final if len(final) <= RESULT_TEXT_LIMIT else final[:RESULT_TEXT_LIMIT] + f"\n[... {len(final) - RESULT_TEXT_LIMIT} more characters not kept]"
    return AgentResult(turn=turn, outcome=outcome, reason=(reason or None) and reason[:500], text=kept)  # type: ignore[arg-type]


def final_message(steps: Sequence) -> str:
    """An agent's last message: its text after its last tool call (the
    whole last run of text when it ended on a tool call)."""
    texts: list[str] = []
    for step in steps:
        if step.kind == "tool_call":
            texts = []
        elif step.kind == "response" and step.text:
            texts.append(step.text)
    if texts:
        return "".join(texts)
    for step in reversed(steps):
        if step.kind == "response" and step.text:
            return step.text
    return ""


class RetainedAgent(_Closed, kw_only=True):
    """One entry of the session's agent registry (the ``Agent`` tool's
    sub-agents; added within format 1). No process handle, no credentials:
    what lets the same agent installation on the same machine continue its
    conversation, and what ``agent://root/PATH`` reads."""

    path: AgentPath
    agent: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    fingerprint: Sha256
    native_session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | None = None
    machine: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    #: None: the session's own directory (no override).
    working_directory: TargetPath | None = None
    #: The turn that created it (Rewind to before it removes it).
    created_turn: TurnNumber
    created_turn_id: TurnId
    activity: AgentActivity = AgentActivity.IDLE
    result: AgentResult | None = None


class Layout(_Closed, kw_only=True, omit_defaults=True):
    """How many stored parts each append-only log has (see
    :class:`~.transcript.LineLog`): a reader knows exactly which logical
    paths make up the committed conversation."""

    #: Parts of segments 1, 2, ... current_segment.
    segment_parts: list[Annotated[int, msgspec.Meta(ge=1, le=999999)]]
    prompt_pages: Annotated[int, msgspec.Meta(ge=0, le=999999)]
    file_pages: Annotated[int, msgspec.Meta(ge=0, le=999999)]
    #: Parts of each retained agent's own transcript (``agents/PATH/``;
    #: added within format 1, left out while there is none).
    agent_parts: dict[AgentPath, Annotated[int, msgspec.Meta(ge=1, le=999999)]] = {}


class Sidecar(_Closed, kw_only=True):
    format_version: Literal[1] = SIDECAR_FORMAT_VERSION
    #: Matches SESSION_ID_TEXT (checked after decoding: see .pattern_check).
    session_id: str
    #: Matches WORKSPACE_ID_TEXT.
    workspace_id: str
    #: None: the session displays its ID.
    display_name: DisplayName | None = None
    naming_state: NamingState = NamingState.PENDING
    #: The bounded authored input of an automatic naming attempt.
    naming_input: NamingInput | None = None
    created_at: Seconds
    updated_at: Seconds
    current_segment: SegmentNumber = 1
    #: Settled turns; each has one prompt index entry.
    total_turn_count: Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)] = 0
    #: The turn begun but not settled when this was written (its prompt is
    #: the last prompt index entry, one beyond ``total_turn_count``).
    in_flight_turn: TurnId | None = None
    #: Entries of the file snapshots index (turns that captured or gapped).
    file_snapshot_count: Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)] = 0
    layout: Layout
    chapters: list[Chapter] = []
    fork: ForkOrigin | None = None
    worktree: WorktreeOrigin | None = None
    attached_artifacts: list[ArtifactId] = []
    #: The artifact store item whose own conversation this is (counts only
    #: while that item names this session back; added within format 1).
    dedicated_artifact: ArtifactId | None = None
    settings: dict[SettingKey, SettingValue] = {}
    #: The next turn must carry the reconciliation reminder.
    reconciliation_pending: bool = False
    first_user_message: Preview | None = None
    latest_user_message: Preview | None = None
    #: The external agent continuing this session (added within format 1:
    #: a sidecar written before it has none, see ``OPTIONAL_FIELDS``).
    engine: EngineRef | None = None
    #: The person's mode and config choices, per agent name (added within
    #: format 1).
    agent_choices: dict[Annotated[str, msgspec.Meta(min_length=1, max_length=128)], AgentChoice] = {}
    #: The retained agents, in path order (added within format 1).
    agents: list[RetainedAgent] = []

    def __post_init__(self) -> None:
        _check_sidecar(self)

    @property
    def prompt_count(self) -> int:
        return self.total_turn_count + (self.in_flight_turn is not None)

    @property
    def working_directory(self) -> str:
        """The session's working directory, workspace-relative: a Worktree
        Fork's checkout, else "" (the workspace root)."""
        return self.worktree.directory if self.worktree is not None else ""


_session_id = pattern_check(SESSION_ID_TEXT)
#: Every sidecar of a workspace records the same one.
_workspace_id = pattern_check(WORKSPACE_ID_TEXT, remember=True)


def _check_sidecar(s: Sidecar) -> None:
    _session_id("session_id", s.session_id)
    _workspace_id("workspace_id", s.workspace_id)
    if s.updated_at < s.created_at:
        raise ValueError("updated_at is earlier than created_at")
    if s.naming_input is not None and s.naming_state is not NamingState.ATTEMPTED:
        raise ValueError("only an attempted name may carry naming_input")
    if s.naming_state is NamingState.EXPLICIT and s.display_name is None:
        raise ValueError("an explicit name needs a display_name")
    layout = s.layout
    if len(layout.segment_parts) != s.current_segment:
        raise ValueError("layout.segment_parts does not list every segment up to current_segment")
    prompts = s.prompt_count  # once: every listed session is checked
    if (prompts == 0) != (layout.prompt_pages == 0):
        raise ValueError("layout.prompt_pages disagrees with the prompt count")
    if (s.file_snapshot_count == 0) != (layout.file_pages == 0):
        raise ValueError("layout.file_pages disagrees with file_snapshot_count")
    if s.file_snapshot_count > prompts:
        raise ValueError("file_snapshot_count exceeds the number of turns")
    if (prompts == 0) != (s.first_user_message is None) or (s.first_user_message is None) != (
        s.latest_user_message is None
    ):
        raise ValueError("first/latest user message previews disagree with the prompt count")
    last = 0
    for chapter in s.chapters:
        if chapter.last_segment <= last or chapter.last_segment >= s.current_segment:
            raise ValueError("chapters are out of order or do not precede current_segment")
        last = chapter.last_segment
    if len(s.attached_artifacts) > 1 and len(set(s.attached_artifacts)) != len(s.attached_artifacts):
        raise ValueError("attached_artifacts repeats an id")
    if s.agents:
        paths = [agent.path for agent in s.agents]
        if paths != sorted(set(paths)):
            raise ValueError("agents are not in path order, or repeat a path")
        for agent in s.agents:
            parent = agent.path.rpartition("/")[0]
            if parent and parent not in paths:
                raise ValueError(f"retained agent {agent.path} has no retained caller {parent}")


_NON_FINITE_TOKEN = re.compile(rb"(?<![A-Za-z\"])(?:-?Infinity|NaN)(?![A-Za-z\"])")
_encoder = msgspec.json.Encoder(order="deterministic")


def encode_sidecar(sidecar: Sidecar) -> bytes:
    return _encoder.encode(sidecar) + b"\n"


_FIELDS = frozenset(Sidecar.__struct_fields__)
#: Fields added to format 1 after sidecars were written without them; their
#: absence means their default. Every other field must be present.
OPTIONAL_FIELDS = frozenset({"engine", "dedicated_artifact", "agent_choices", "agents"})
_REQUIRED_FIELDS = _FIELDS - OPTIONAL_FIELDS


#: The sidecar as written: every field but :data:`OPTIONAL_FIELDS` has no
#: default here (their types are the sidecar's), so one decode proves each
#: present and checks the whole sidecar. Read only: an instance is a
#: :class:`Sidecar` but compares equal only to its own type, so
#: :func:`load_sidecar` hands out a plain one.
_Stored = msgspec.defstruct(
    "StoredSidecar",
    [(f.name, f.type) for f in msgspec.structs.fields(Sidecar) if f.name in _REQUIRED_FIELDS],
    bases=(Sidecar,),
    kw_only=True,
)
_stored = msgspec.json.Decoder(_Stored)
_typed = msgspec.json.Decoder(Sidecar)


def load_sidecar(data: bytes) -> Sidecar:
    """Decode exactly the current sidecar version and its complete shape
    (every field present, none unknown), or raise SidecarError."""
    read_sidecar(data)
    return _typed.decode(data)  # accepts whatever the stored form accepts


def read_sidecar(data: bytes) -> Sidecar:
    """:func:`load_sidecar`'s sidecar, decoded once, for a reader that only
    reads its fields (a listing reads one a session): it compares equal
    only to another sidecar read this way."""
    try:
        return _stored.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    # Refused: the checks below say what is wrong.
    if not data.strip():
        raise SidecarError(SidecarErrorKind.EMPTY, "the sidecar is empty")
    try:
        raw = msgspec.json.decode(data)
    except msgspec.ValidationError as exc:
        raise SidecarError(SidecarErrorKind.NON_FINITE, f"contains a number out of range ({exc})") from None
    except msgspec.DecodeError as exc:
        message = str(exc)
        if "truncated" in message:
            raise SidecarError(SidecarErrorKind.TRUNCATED, "the sidecar is truncated") from None
        if _NON_FINITE_TOKEN.search(data):
            raise SidecarError(SidecarErrorKind.NON_FINITE, "contains a non-finite number (NaN or Infinity)") from None
        raise SidecarError(SidecarErrorKind.MALFORMED, f"the sidecar is not valid JSON ({message})") from None
    if not isinstance(raw, dict):
        raise SidecarError(SidecarErrorKind.NOT_AN_OBJECT, "the sidecar is not a JSON object")
    if "format_version" not in raw:
        raise SidecarError(SidecarErrorKind.MISSING_VERSION, "the sidecar has no format_version")
    found = raw["format_version"]
    if type(found) is not int or found != SIDECAR_FORMAT_VERSION:
        raise SidecarError(
            SidecarErrorKind.UNSUPPORTED_VERSION,
            f"format_version {found!r} is not the supported version {SIDECAR_FORMAT_VERSION}",
            found,
        )
    if not _REQUIRED_FIELDS <= raw.keys():
        missing = sorted(_REQUIRED_FIELDS - raw.keys())
        raise SidecarError(SidecarErrorKind.MISSING_FIELD, f"missing field(s) {', '.join(missing)}", found)
    try:
        return msgspec.convert(raw, _Stored, strict=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        raise SidecarError(_classify(message), message, found) from None


_prompt_decoder = LazyDecoder(msgspec.json.Decoder, PromptEntry, strict=True)
_files_decoder = LazyDecoder(msgspec.json.Decoder, TurnFiles, strict=True)
_prompt_list_decoder = LazyDecoder(msgspec.json.Decoder, list[PromptEntry], strict=True)
_files_list_decoder = LazyDecoder(msgspec.json.Decoder, list[TurnFiles], strict=True)
_line_encoder = msgspec.json.Encoder(order="deterministic")


def prompt_page_path(page: int) -> str:
    return f"index/prompts-{page:06d}.jsonl"


def file_page_path(page: int) -> str:
    return f"index/files-{page:06d}.jsonl"


def encode_index_line(entry: PromptEntry | TurnFiles) -> bytes:
    return _line_encoder.encode(entry) + b"\n"


class IndexLineError(ValueError):
    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"entry {number}: {reason}")
        self.number = number
        self.reason = reason


def decode_prompt_lines(lines: list[bytes]) -> list[PromptEntry]:
    return _decode_index_lines(lines, _prompt_decoder, _prompt_list_decoder)


def decode_files_lines(lines: list[bytes]) -> list[TurnFiles]:
    return _decode_index_lines(lines, _files_decoder, _files_list_decoder)


def _decode_index_lines(lines: list[bytes], one: msgspec.json.Decoder, many: msgspec.json.Decoder) -> list:
    if lines and all(lines):
        try:
            entries = many.decode(b"[" + b",".join(lines) + b"]")
        except msgspec.DecodeError:
            pass
        else:
            if len(entries) == len(lines):
                return entries
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entries.append(one.decode(line))
        except msgspec.DecodeError as exc:
            raise IndexLineError(number, str(exc)) from None
    return entries


def _classify(message: str) -> SidecarErrorKind:
    if "unknown field" in message:
        return SidecarErrorKind.UNKNOWN_FIELD
    if "missing required field" in message:
        return SidecarErrorKind.MISSING_FIELD
    if message.startswith("Expected `") and "`, got `" in message:
        return SidecarErrorKind.WRONG_TYPE
    return SidecarErrorKind.INVALID_VALUE


# Display names and previews -------------------------------------------------

GENERATED_TITLE_WORDS = 4
GENERATED_TITLE_CHARS = 60
#: Format characters that join emoji sequences and scripts; every other
#: format character (bidi overrides, invisible separators) is refused.
_JOINERS = {"\u200c", "\u200d"}


class NameRefused(ValueError):
    """A display name that cannot be used; the message says why."""


def normalize_display_name(text: str) -> str:
    """Collapse every whitespace run to one space, trim, and refuse names
    that are empty, too long or hold characters a person cannot read."""
    if not isinstance(text, str):
        raise NameRefused("a session name must be text")
    name = " ".join(text.split())
    if not name:
        raise NameRefused("a session name may not be empty or only whitespace")
    # Printable ASCII holds no control, format, surrogate or unassigned
    # character: only other text is looked up character by character (a
    # listing names every unnamed session from its first prompt this way).
    for char in () if name.isascii() and name.isprintable() else name:
        category = unicodedata.category(char)
        if category in ("Cc", "Cs", "Co", "Cn") or (category == "Cf" and char not in _JOINERS):
            raise NameRefused(f"a session name may not contain the unreadable character U+{ord(char):04X}")
    if len(name) > DISPLAY_NAME_LIMIT:
        raise NameRefused(f"a session name is limited to {DISPLAY_NAME_LIMIT} characters")
    return name


def bound_generated_title(text: str) -> str:
    """An automatic title within the naming limits: at most four words and
    sixty characters, cut at a word boundary when one fits. Only the words
    kept are judged: a long first prompt (past the name limit) or an
    unreadable character further on still gives its first words."""
    if not isinstance(text, str):
        raise NameRefused("a session name must be text")
    words = text.split(maxsplit=GENERATED_TITLE_WORDS)[:GENERATED_TITLE_WORDS]
    title = " ".join(words)
    while len(title) > GENERATED_TITLE_CHARS and len(words) > 1:
        words.pop()
        title = " ".join(words)
    return normalize_display_name(title[:GENERATED_TITLE_CHARS].rstrip())


def shown_name(sidecar: Sidecar | None, session_id: str) -> str:
    """What pickers and listings call a session: its display name (an
    explicit name, or the agent's title); until it has one, its first
    prompt within the title limits (four words, sixty characters; "…"
    marks a cut); else its ID."""
    if sidecar is not None and sidecar.display_name:
        return sidecar.display_name
    first = " ".join((sidecar.first_user_message or "").split()) if sidecar is not None else ""
    try:
        label = bound_generated_title(first)
    except NameRefused:  # nothing readable in it
        return session_id
    return label if label == first else label + "…"


def bound_naming_input(text: str) -> str:
    return text[:NAMING_INPUT_LIMIT]


def preview_of(text: str) -> str:
    """One line of at most :data:`PREVIEW_LIMIT` characters for pickers."""
    line = " ".join(text.split())
    if len(line) <= PREVIEW_LIMIT:
        return line
    return line[: PREVIEW_LIMIT - 1].rstrip() + "…"
