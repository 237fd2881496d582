"""Transcript segments: JSON Lines records of one conversation segment.

A segment is named ``segment-NNNN.chat.jsonl`` (``NNNN`` from 0001; the name
``history://saved`` uses). Its first line is a :class:`SegmentHeader`
carrying the format version; every other line is one tagged record
(``"kind"``). A segment only grows until it is rotated (compaction) or
closed (``/clear``), so :func:`append_bytes` extends the existing bytes with
the new lines and never re-encodes an old one.

So that a save also *publishes* only what changed, a segment is stored as
bounded parts, logical paths ``segment-NNNN/part-NNNNNN.chat.jsonl`` whose
concatenation is the segment: a part is closed once it holds
:data:`PART_LIMIT` bytes and is never rewritten, so a save of a long session
re-publishes one small part, not the whole history. :class:`LineLog` keeps
that layout (the prompt and file-snapshot indexes use it too).

:func:`decode_segment` accepts exactly the current format and a well-ordered
segment (header first; a turn is ``turn_begin``, ``prompt``, its evidence and
at most one ``settle``; nothing after ``segment_close``). Anything else is a
:class:`SegmentError` naming the line and the reason. Records carry only
integers, strings and booleans, so a non-finite number can never be valid.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal, Union

import msgspec

from ...lazy_decoder import LazyDecoder
from ..errors import StoreError

TRANSCRIPT_FORMAT_VERSION = 1
MAX_SEGMENT = 9999
MAX_INTEGER = 2**53

#: A stable turn identity, reserved before any tool runs.
TURN_ID_PATTERN = r"^[0-9a-f]{16}\Z"
TurnId = Annotated[str, msgspec.Meta(pattern=TURN_ID_PATTERN)]
Seconds = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]
TurnNumber = Annotated[int, msgspec.Meta(ge=1, le=MAX_INTEGER)]
SegmentNumber = Annotated[int, msgspec.Meta(ge=1, le=MAX_SEGMENT)]
SESSION_ID_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9a-f]{12}\Z"
SessionIdText = Annotated[str, msgspec.Meta(pattern=SESSION_ID_TEXT)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

#: A part is closed (never rewritten again) once it reaches this many bytes.
PART_LIMIT = 64 * 1024

_TURN_ID = re.compile(TURN_ID_PATTERN)
#: A retained agent's path (``reviewer``, ``reviewer/search``).
_AGENT_PATH = r"[a-z0-9][a-z0-9_-]{0,63}(?:/[a-z0-9][a-z0-9_-]{0,63}){0,7}"
_AGENT_PART = re.compile(rf"^agents/({_AGENT_PATH})/part-([0-9]{{6}})\.chat\.jsonl\Z")
_SEGMENT_NAME = re.compile(r"^segment-([0-9]{4})\.chat\.jsonl\Z")
_SEGMENT_PART = re.compile(r"^segment-([0-9]{4})/part-([0-9]{6})\.chat\.jsonl\Z")


class SegmentOpening(enum.Enum):
    START = "start"
    COMPACTION = "compaction"
    CLEAR = "clear"


class SegmentClosing(enum.Enum):
    COMPACTION = "compaction"
    CLEAR = "clear"


class Outcome(enum.Enum):
    COMPLETED = "completed"
    ERRORED = "errored"
    INTERRUPTED = "interrupted"


# Records hold only scalars, so they cannot form reference cycles; leaving
# them untracked keeps the garbage collector from rescanning a long
# session's history on every collection.
class _Line(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, tag_field="kind", gc=False):
    pass


class SegmentHeader(_Line, tag="segment", kw_only=True):
    #: Required on every header (no default): a segment states its format.
    format_version: Literal[1]
    session_id: SessionIdText
    segment: SegmentNumber
    opened_at: Seconds
    opened_by: SegmentOpening


class TurnBegin(_Line, tag="turn_begin", kw_only=True):
    turn_id: TurnId
    turn: TurnNumber
    at: Seconds
    #: The reconciliation reminder was delivered with this turn's request.
    reminder: bool = False
    #: The agent that answered the turn (None: a turn recorded by hand, or
    #: written before agents were named here; optional within the format).
    agent: Name | None = None


class Prompt(_Line, tag="prompt", kw_only=True):
    """The user's authored prompt for the turn."""

    turn_id: TurnId
    text: str


class Response(_Line, tag="response", kw_only=True):
    turn_id: TurnId
    text: str


class Reasoning(_Line, tag="reasoning", kw_only=True):
    turn_id: TurnId
    text: str


class ToolCall(_Line, tag="tool_call", kw_only=True):
    turn_id: TurnId
    call_id: Name
    name: Name
    #: The call's arguments exactly as the provider sent them (JSON text).
    arguments: str
    #: The agent's tool kind (ACP ``kind``: read, edit, execute...), if any.
    tool_kind: Name | None = None


class ToolResult(_Line, tag="tool_result", kw_only=True):
    turn_id: TurnId
    call_id: Name
    output: str
    is_error: bool = False


class Mail(_Line, tag="mail", kw_only=True):
    """A harness mailbox delivery (agent result, execution event): a
    structural span the provider sees in the user role, never an authored
    prompt."""

    turn_id: TurnId
    mail_id: Name
    sender: Name
    text: str


class Plan(_Line, tag="plan", kw_only=True):
    """The agent's plan as it stood at this point of the turn: a Markdown
    checklist (one ``- [ ]``/``- [x]`` line per entry). Each update is a new
    record; the last one of a turn is its final plan."""

    turn_id: TurnId
    text: str


class Permission(_Line, tag="permission", kw_only=True):
    """A permission question the agent asked during the turn and the
    answer it got (``decision``: the chosen option's name, or why it was
    rejected: declined, no answer in time, cancelled)."""

    turn_id: TurnId
    call_id: Name
    question: str
    decision: str
    allowed: bool


class AgentStep(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One record of a retained agent's task, as the root's records of the
    same kind hold it (``kind`` names which)."""

    kind: Literal["response", "reasoning", "tool_call", "tool_result", "plan", "permission"]
    text: str | None = None
    call_id: Name | None = None
    name: Name | None = None
    arguments: str | None = None
    output: str | None = None
    is_error: bool = False


class AgentTask(_Line, tag="agent_task", kw_only=True):
    """A retained agent's task (the ``Agent`` tool), written once when it
    settles: which agent, what it was asked, its own records and how it
    ended (added within format 1: older readers refuse it).

    The whole task is a line of the agent's own transcript
    (:func:`agent_part_path`; ``turn`` is the session turn it ran in); the
    turn it ran in holds the same record without its ``steps``, ``task``
    naming its place in that transcript. A session written before agent
    transcripts existed holds the whole task in the turn (``task`` None)."""

    turn_id: TurnId
    path: Annotated[str, msgspec.Meta(min_length=1, max_length=600, pattern=r"^[a-z0-9][a-z0-9_/-]*\Z")]
    agent: Name
    prompt: str
    steps: list[AgentStep]
    outcome: Outcome
    reason: str | None = None
    #: The workspace paths it changed (its writes, patches and commands),
    #: so a Rewind's impact can name it beside them.
    paths: list[Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]] = []
    #: In the agent's transcript: the session turn the task ran in.
    turn: TurnNumber | None = None
    #: In the turn: the task's number (from 1) in the agent's transcript.
    task: Annotated[int, msgspec.Meta(ge=1, le=MAX_INTEGER)] | None = None
    #: The caller's ``Agent`` tool call that started the task (its
    #: ``tool_call`` record's ``call_id``, in the caller's transcript), so a
    #: reader nests it under that call even among parallel calls; None when
    #: no reported call fitted, or in a task recorded before tasks kept it.
    call_id: Name | None = None


class Summary(_Line, tag="summary", kw_only=True):
    """Compaction summary opening a rotated segment."""

    summarized_segment: SegmentNumber
    text: str
    at: Seconds


class Settle(_Line, tag="settle", kw_only=True):
    turn_id: TurnId
    outcome: Outcome
    at: Seconds
    reason: str | None = None
    #: The agent's stop reason (ACP: end_turn, max_tokens...), if it gave one.
    stop_reason: Name | None = None


class SegmentClose(_Line, tag="segment_close", kw_only=True):
    reason: SegmentClosing
    at: Seconds


Record = Union[
    SegmentHeader, TurnBegin, Prompt, Response, Reasoning, ToolCall, ToolResult, Mail, Plan, Permission, AgentTask, Summary,
    Settle, SegmentClose,
]
#: What a live turn may append between its prompt and its settlement.
Evidence = Union[Response, Reasoning, ToolCall, ToolResult, Mail, Plan, Permission, AgentTask]
EVIDENCE_TYPES = (Response, Reasoning, ToolCall, ToolResult, Mail, Plan, Permission, AgentTask)

_encoder = msgspec.json.Encoder()
_decoder = LazyDecoder(msgspec.json.Decoder, Record, strict=True)
_list_decoder = LazyDecoder(msgspec.json.Decoder, list[Record], strict=True)


class TranscriptError(StoreError):
    """A record cannot be encoded (for example text with a lone surrogate)."""


class SegmentError(StoreError):
    """A segment's bytes are not a valid current-format segment."""

    def __init__(self, label: str, line: int | None, reason: str) -> None:
        where = f"{label} line {line}" if line is not None else label
        super().__init__(f"{where}: {reason}")
        self.label = label
        self.line = line
        self.reason = reason


def segment_name(number: int) -> str:
    """The canonical segment name (``segment-0001.chat.jsonl``)."""
    _check_segment(number)
    return f"segment-{number:04d}.chat.jsonl"


def segment_number(name: str) -> int | None:
    """The number a canonical segment name carries, or None."""
    match = _SEGMENT_NAME.match(name)
    if match is None or int(match.group(1)) == 0:
        return None
    return int(match.group(1))


def segment_part_path(number: int, part: int) -> str:
    """Logical path of one stored part of a segment (parts count from 1)."""
    _check_segment(number)
    if not 1 <= part <= 999999:
        raise ValueError(f"part number {part} is outside 1-999999")
    return f"segment-{number:04d}/part-{part:06d}.chat.jsonl"


def parse_segment_part(logical: str) -> tuple[int, int] | None:
    """``(segment, part)`` for a segment part's logical path, else None."""
    match = _SEGMENT_PART.match(logical)
    if match is None:
        return None
    segment, part = int(match.group(1)), int(match.group(2))
    if segment == 0 or part == 0:
        return None
    return segment, part


def agent_part_path(path: str, part: int) -> str:
    """Logical path of one stored part of retained agent ``path``'s own
    transcript (``agents/reviewer/part-000001.chat.jsonl``; an agent's
    name never holds a dot, so a part name is never an agent's)."""
    if not 1 <= part <= 999999:
        raise ValueError(f"part number {part} is outside 1-999999")
    if not re.fullmatch(_AGENT_PATH, path):
        raise ValueError(f"{path!r} is not a retained agent's path")
    return f"agents/{path}/part-{part:06d}.chat.jsonl"


def parse_agent_part(logical: str) -> tuple[str, int] | None:
    """``(agent path, part)`` for an agent transcript part's logical path,
    else None."""
    match = _AGENT_PART.match(logical)
    if match is None or int(match.group(2)) == 0:
        return None
    return match.group(1), int(match.group(2))


def decode_agent_transcript(data: bytes, *, label: str) -> list[AgentTask]:
    """The tasks of a retained agent's transcript (its parts joined): whole
    ``agent_task`` lines, each naming its turn, in turn order."""
    if data and not data.endswith(b"\n"):
        raise SegmentError(label, None, "the last line is not terminated: the transcript is truncated")
    records = decode_lines(data.split(b"\n")[:-1], label=label) if data else []
    previous = 0
    for number, record in enumerate(records, start=1):
        if not isinstance(record, AgentTask) or record.turn is None or record.task is not None:
            raise SegmentError(label, number, "an agent transcript holds only its own agent_task records, each naming its turn")
        if record.turn < previous:
            raise SegmentError(label, number, f"a task of turn {record.turn} follows one of turn {previous}")
        previous = record.turn
    return records


def _check_segment(number: int) -> None:
    if not 1 <= number <= MAX_SEGMENT:
        raise ValueError(f"segment number {number} is outside 1-{MAX_SEGMENT}")


class LineLog:
    """Append-only JSON Lines kept as bounded parts.

    Closed parts keep their byte objects, so an unchanged part is the very
    same ``bytes`` from save to save; only the last part is re-joined, and
    only after it changed. Part boundaries loaded from storage are kept, so
    a restored log republishes nothing until it grows.
    """

    def __init__(self, part_limit: int = PART_LIMIT) -> None:
        self.part_limit = part_limit
        self._parts: list[list[bytes]] = []
        self._sizes: list[int] = []
        self._joined: list[bytes | None] = []
        self._dirty: set[int] = set()
        self._count = 0

    @classmethod
    def from_parts(cls, parts: Sequence[bytes], *, label: str, part_limit: int = PART_LIMIT) -> LineLog:
        log = cls(part_limit)
        for index, data in enumerate(parts, start=1):
            if not data:
                raise SegmentError(label, None, f"part {index} is empty")
            if not data.endswith(b"\n"):
                raise SegmentError(label, None, f"part {index} does not end with a complete line: it is truncated")
            lines = [line + b"\n" for line in data[:-1].split(b"\n")]
            log._parts.append(lines)
            log._sizes.append(len(data))
            log._joined.append(data)
            log._count += len(lines)
        return log

    def __len__(self) -> int:
        return self._count

    @property
    def part_count(self) -> int:
        return len(self._parts)

    def lines(self) -> list[bytes]:
        return [line for part in self._parts for line in part]

    def append(self, line: bytes) -> None:
        if not self._parts or self._sizes[-1] >= self.part_limit:
            self._parts.append([])
            self._sizes.append(0)
            self._joined.append(None)
        self._parts[-1].append(line)
        self._sizes[-1] += len(line)
        self._joined[-1] = None
        self._dirty.add(len(self._parts) - 1)
        self._count += 1

    def replace_last(self, line: bytes) -> None:
        if not self._count:
            raise IndexError("the log is empty")
        old = self._parts[-1][-1]
        self._parts[-1][-1] = line
        self._sizes[-1] += len(line) - len(old)
        self._joined[-1] = None
        self._dirty.add(len(self._parts) - 1)

    def parts(self) -> list[bytes]:
        """The stored bytes of every part, in order."""
        for index in sorted(self._dirty):
            self._join(index)
        return list(self._joined)  # type: ignore[arg-type]

    def take_changed(self) -> list[tuple[int, bytes]]:
        """``(part number from 1, bytes)`` of the parts changed since the
        last call (a new log reports all its parts)."""
        changed = [(index + 1, self._join(index)) for index in sorted(self._dirty)]
        self._dirty.clear()
        return changed

    def _join(self, index: int) -> bytes:
        joined = self._joined[index]
        if joined is None:
            joined = self._joined[index] = b"".join(self._parts[index])
        return joined


def encode_line(record: Record) -> bytes:
    """One record's line. Python construction does not enforce the field
    constraints, so the line is decoded again: a record its own loader would
    refuse is never written."""
    try:
        line = _encoder.encode(record) + b"\n"
    except UnicodeEncodeError as exc:
        raise TranscriptError(f"a {type(record).__name__} record holds text that is not valid Unicode ({exc.reason})") from None
    except (TypeError, msgspec.EncodeError) as exc:
        raise TranscriptError(f"a {type(record).__name__} record cannot be encoded ({exc})") from None
    try:
        _decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise TranscriptError(f"a {type(record).__name__} record is invalid: {exc}") from None
    return line


def encode_records(records: Iterable[Record]) -> bytes:
    return b"".join(encode_line(record) for record in records)


def append_bytes(existing: bytes, new_records: Iterable[Record]) -> bytes:
    """``existing`` followed by the new lines; old lines are not re-encoded."""
    if existing and not existing.endswith(b"\n"):
        raise TranscriptError("the existing segment does not end with a complete line")
    return existing + encode_records(new_records)


def _reason(exc: Exception) -> str:
    message = str(exc)
    if "truncated" in message:
        return "the record is truncated"
    return message


def decode_segment(data: bytes, *, label: str = "segment", expected: int | None = None) -> list[Record]:
    """Decode and check one segment. ``expected`` is the segment number its
    logical name promises."""
    if not data:
        raise SegmentError(label, None, "the segment is empty (no header line)")
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise SegmentError(label, len(lines), "the last line is not terminated: the segment is truncated")
    lines.pop()
    records = decode_lines(lines, label=label)
    check_order(records, label=label, expected=expected)
    return records


def decode_lines(lines: Sequence[bytes], *, label: str = "segment") -> list[Record]:
    """Decode record lines (no order check); errors name the line."""
    if lines and all(lines):
        # One decoder call for the whole run; only a failure pays for the
        # line-by-line pass that names the bad line.
        try:
            records = _list_decoder.decode(b"[" + b",".join(lines) + b"]")
        except msgspec.DecodeError:
            pass
        else:
            if len(records) == len(lines):
                return records
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(_decoder.decode(line))
        except msgspec.DecodeError as exc:
            raise SegmentError(label, number, _reason(exc)) from None
    return records


def is_turn_id(text: object) -> bool:
    return isinstance(text, str) and _TURN_ID.match(text) is not None


def check_order(records: Sequence[Record], *, label: str = "segment", expected: int | None = None) -> None:
    """Raise :class:`SegmentError` unless ``records`` form a well-ordered
    segment."""
    if not records or not isinstance(records[0], SegmentHeader):
        raise SegmentError(label, 1, "the first line must be the segment header")
    header = records[0]
    if expected is not None and header.segment != expected:
        raise SegmentError(label, 1, f"the header names segment {header.segment}, not {expected}")
    open_turn: str | None = None
    awaiting_prompt = False
    closed = False
    for number, record in enumerate(records[1:], start=2):
        if closed:
            raise SegmentError(label, number, "a record follows the segment_close line")
        if isinstance(record, SegmentHeader):
            raise SegmentError(label, number, "a second segment header")
        if isinstance(record, Summary):
            if number != 2 or header.opened_by is not SegmentOpening.COMPACTION:
                raise SegmentError(label, number, "a summary may only directly follow the header of a compacted segment")
            if record.summarized_segment != header.segment - 1:
                raise SegmentError(label, number, f"the summary names segment {record.summarized_segment}, not the predecessor")
            continue
        if isinstance(record, SegmentClose):
            if open_turn is not None:
                raise SegmentError(label, number, f"the segment closes while turn {open_turn} is unsettled")
            closed = True
            continue
        if isinstance(record, TurnBegin):
            if open_turn is not None:
                raise SegmentError(label, number, f"turn {record.turn_id} begins before turn {open_turn} settled")
            open_turn, awaiting_prompt = record.turn_id, True
            continue
        if open_turn is None:
            raise SegmentError(label, number, f"a {_kind(record)} record outside any turn")
        if record.turn_id != open_turn:
            raise SegmentError(label, number, f"a {_kind(record)} record names turn {record.turn_id} inside turn {open_turn}")
        if awaiting_prompt:
            if not isinstance(record, Prompt):
                raise SegmentError(label, number, f"turn {open_turn} has a {_kind(record)} record before its prompt")
            awaiting_prompt = False
            continue
        if isinstance(record, Prompt):
            raise SegmentError(label, number, f"turn {open_turn} has a second prompt")
        if isinstance(record, Settle):
            open_turn = None
    if header.opened_by is SegmentOpening.COMPACTION and not (len(records) > 1 and isinstance(records[1], Summary)):
        raise SegmentError(label, 2, "a compacted segment must begin with its summary")
    if awaiting_prompt:
        raise SegmentError(label, len(records), f"turn {open_turn} has no prompt")


def _kind(record: Record) -> str:
    return type(record).__struct_config__.tag
