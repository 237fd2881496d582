"""The committed state of a session, and snapshots cut from it at a turn
boundary: what Rewind publishes in place and what Fork publishes as a child.

:func:`load_committed_state` reads the head of the current lease generation,
verifies every byte it names and restores the conversation from them (a
conversation that does not load is refused, never guessed). Heads are
immutable, so the result is cached per ``(session, head)``: a prepare and its
commit restore a long session once.

:func:`cut_snapshot` works on the committed bytes themselves. A boundary is a
line position in one segment -- just after a turn's ``settle`` ("after this
response") or just before its ``turn_begin`` ("before this prompt"). The
segments before it are kept as they are, the segment holding it keeps its
lines up to the boundary (so it becomes the live segment again: a compaction
or ``/clear`` that followed is undone), and later segments go. The prompt and
file-snapshot indexes keep their first entries, the file history only the
contents the kept checkpoints name, the sidecar the chats closed before the
boundary's segment. Kept parts and pages keep their exact bytes, so a
publication over the same session reuses them, and only the part a boundary
cuts through is new. Every cut snapshot is restored once before anyone
publishes it: a snapshot its own loader would refuse is never handed out.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from ..targets import Target
from .checkpoints import history_path, referenced_digests
from .layout import SessionPaths
from .lease import read_lease_head
from .publication import CommittedSnapshot, load_manifest
from .sidecar import (
    SIDECAR_PATH,
    Layout,
    Sidecar,
    SidecarError,
    TurnFiles,
    encode_index_line,
    encode_sidecar,
    file_page_path,
    load_sidecar,
    prompt_page_path,
)
from .transcript import LineLog, Outcome, SegmentHeader, Settle, TurnBegin, decode_lines, encode_line, segment_part_path
from .turns import ContentError, Conversation
from .workspace import check_session_id
from .lifecycle_token import LifecycleRefused

_CACHE_LIMIT = 2


@dataclass(frozen=True)
class CommittedState:
    """A verified committed snapshot and the conversation it holds."""

    snapshot: CommittedSnapshot
    #: The client of the lease generation the head was read from.
    lease_client: str | None
    #: Target seconds of that generation's last renewal (0 without one).
    lease_renewed_at: int
    artifacts: Mapping[str, bytes]
    conversation: Conversation

    @property
    def session_id(self) -> str:
        return self.snapshot.session_id

    @property
    def head(self) -> str | None:
        return self.snapshot.head

    @property
    def sidecar(self) -> Sidecar:
        return self.conversation.sidecar


_states: OrderedDict[tuple[str, str], tuple[Mapping[str, bytes], Conversation]] = OrderedDict()


async def state_at_head(target: Target, session_id: str, head: str) -> tuple[Mapping[str, bytes], Conversation, CommittedSnapshot]:
    """The verified bytes and conversation of one (immutable) head."""
    paths = SessionPaths(check_session_id(session_id))
    manifest = await load_manifest(target, paths, head)
    snapshot = CommittedSnapshot(target, paths, 0, head, manifest)
    key = (session_id, head)
    cached = _states.get(key)
    if cached is not None:
        _states.move_to_end(key)
        return cached[0], cached[1], snapshot
    artifacts = await snapshot.read_all()
    conversation = Conversation.restore(artifacts)
    if conversation.session_id != session_id:
        raise ContentError(SIDECAR_PATH, f"the sidecar belongs to session {conversation.session_id}")
    _states[key] = (artifacts, conversation)
    while len(_states) > _CACHE_LIMIT:
        _states.popitem(last=False)
    return artifacts, conversation, snapshot


async def load_committed_state(target: Target, session_id: str) -> CommittedState:
    """The committed state a fresh reader sees (no lease is taken, nothing
    is written). A session with nothing committed is refused."""
    observation = await read_lease_head(target, session_id)
    head = observation.publication_head
    if head is None:
        raise LifecycleRefused(session_id, "nothing is committed yet", kind="missing-target")
    artifacts, conversation, snapshot = await state_at_head(target, session_id, head)
    snapshot = CommittedSnapshot(target, snapshot.paths, observation.generation, head, snapshot.manifest)
    record = observation.record
    return CommittedState(
        snapshot,
        record.client_id if record else None,
        record.renewed_at if record else 0,
        artifacts,
        conversation,
    )


class Side(enum.Enum):
    #: "After this response": the turn is the last one kept.
    AFTER = "after"
    #: "Before this prompt": the turn and its answer are discarded.
    BEFORE = "before"


@dataclass(frozen=True)
class Boundary:
    side: Side
    turn: int

    @classmethod
    def after(cls, turn: int) -> Boundary:
        return cls(Side.AFTER, turn)

    @classmethod
    def before(cls, turn: int) -> Boundary:
        return cls(Side.BEFORE, turn)

    @property
    def kept_turns(self) -> int:
        return self.turn if self.side is Side.AFTER else self.turn - 1

    def describe(self) -> str:
        return f"{'after the response of' if self.side is Side.AFTER else 'before the prompt of'} turn {self.turn}"


@dataclass(frozen=True)
class Cut:
    """Where a boundary falls in the transcript."""

    segment: int
    #: Lines of that segment that are kept.
    lines: int
    kept_turns: int


def locate(conversation: Conversation, boundary: Boundary) -> Cut:
    """The cut of a boundary at a *settled* turn of ``conversation``."""
    sid = conversation.session_id
    total = conversation.sidecar.total_turn_count
    if type(boundary.turn) is not int or not 1 <= boundary.turn <= total:
        known = f"its settled turns are 1-{total}" if total else "it has no settled turn"
        raise LifecycleRefused(sid, f"there is no settled turn {boundary.turn!r} ({known})", kind="invalid-params")
    entry = conversation.prompt_index()[boundary.turn - 1]
    records = conversation.records(entry.segment)
    wanted = Settle if boundary.side is Side.AFTER else TurnBegin
    for index, record in enumerate(records):
        if isinstance(record, wanted) and record.turn_id == entry.turn_id:
            lines = index + 1 if boundary.side is Side.AFTER else index
            return Cut(entry.segment, lines, boundary.kept_turns)
    raise ContentError(f"segment {entry.segment}", f"turn {boundary.turn} has no {wanted.__name__} record")


def take_lines(parts: list[bytes], count: int, label: str) -> list[bytes]:
    """The parts holding the first ``count`` lines, the last one cut."""
    kept: list[bytes] = []
    remaining = count
    for data in parts:
        if remaining == 0:
            break
        lines = data.count(b"\n")
        if lines <= remaining:
            kept.append(data)
            remaining -= lines
            continue
        end = -1
        for _ in range(remaining):
            end = data.index(b"\n", end + 1)
        kept.append(data[: end + 1])
        remaining = 0
    if remaining:
        raise ContentError(label, f"holds fewer than {count} lines")
    return kept


def _header_for(part: bytes, session_id: str, label: str) -> bytes:
    first, _, rest = part.partition(b"\n")
    (header,) = decode_lines([first + b"\n"], label=label)
    if not isinstance(header, SegmentHeader):
        raise ContentError(label, "does not start with a segment header")
    return encode_line(msgspec.structs.replace(header, session_id=session_id)) + rest


def kept_outcome(conversation: Conversation, cut: Cut) -> Outcome | None:
    """How the last kept turn settled (None when no turn is kept)."""
    if cut.kept_turns == 0:
        return None
    entry = conversation.prompt_index()[cut.kept_turns - 1]
    for record in reversed(conversation.records(entry.segment)):
        if isinstance(record, Settle) and record.turn_id == entry.turn_id:
            return record.outcome
    return None


def cut_snapshot(
    artifacts: Mapping[str, bytes],
    conversation: Conversation,
    cut: Cut,
    sidecar_changes: Mapping[str, object],
    *,
    retarget: Callable[[str], str] | None = None,
) -> dict[str, bytes]:
    """The logical snapshot of ``conversation`` cut at ``cut``.

    ``sidecar_changes`` go on top of the derived counters and layout (a new
    ``session_id`` also rewrites every kept segment header). ``retarget``
    maps every tracked path of the kept file checkpoints (a worktree fork's
    new checkout)."""
    sidecar = conversation.sidecar
    layout = sidecar.layout
    session_id = sidecar_changes.get("session_id", sidecar.session_id)
    out: dict[str, bytes] = {}
    segment_parts = list(layout.segment_parts[: cut.segment - 1])
    for number in range(1, cut.segment):
        for part in range(1, layout.segment_parts[number - 1] + 1):
            path = segment_part_path(number, part)
            out[path] = artifacts[path]
    label = f"segment {cut.segment}"
    last = [artifacts[segment_part_path(cut.segment, k)] for k in range(1, layout.segment_parts[cut.segment - 1] + 1)]
    last = take_lines(last, cut.lines, label)
    segment_parts.append(len(last))
    for part, data in enumerate(last, start=1):
        out[segment_part_path(cut.segment, part)] = data
    if session_id != sidecar.session_id:
        for number in range(1, cut.segment + 1):
            path = segment_part_path(number, 1)
            out[path] = _header_for(out[path], session_id, f"segment {number}")

    prompt_parts = [artifacts[prompt_page_path(k)] for k in range(1, layout.prompt_pages + 1)]
    prompt_parts = take_lines(prompt_parts, cut.kept_turns, "prompt index")
    for page, data in enumerate(prompt_parts, start=1):
        out[prompt_page_path(page)] = data

    kept_files: list[TurnFiles] = [r for r in conversation.file_snapshots() if r.turn <= cut.kept_turns]
    if retarget is None:
        file_parts = [artifacts[file_page_path(k)] for k in range(1, layout.file_pages + 1)]
        file_parts = take_lines(file_parts, len(kept_files), "file snapshots index")
    else:
        log = LineLog()
        for record in kept_files:
            files = {retarget(path): snapshot for path, snapshot in record.files.items()}
            log.append(encode_index_line(TurnFiles(turn=record.turn, turn_id=record.turn_id, files=dict(sorted(files.items())))))
        file_parts = log.parts()
    for page, data in enumerate(file_parts, start=1):
        out[file_page_path(page)] = data
    for record in kept_files:
        for digest in referenced_digests(record):
            out[history_path(digest)] = artifacts[history_path(digest)]

    prompts = conversation.prompt_index()[: cut.kept_turns]
    changes: dict[str, object] = dict(
        current_segment=cut.segment,
        total_turn_count=cut.kept_turns,
        in_flight_turn=None,
        file_snapshot_count=len(kept_files),
        layout=Layout(segment_parts=segment_parts, prompt_pages=len(prompt_parts), file_pages=len(file_parts)),
        chapters=[c for c in sidecar.chapters if c.last_segment < cut.segment],
        first_user_message=prompts[0].preview if prompts else None,
        latest_user_message=prompts[-1].preview if prompts else None,
    )
    changes.update(sidecar_changes)
    out[SIDECAR_PATH] = sidecar_bytes(replaced_sidecar(sidecar, changes))
    return out


def replaced_sidecar(sidecar: Sidecar, changes: Mapping[str, object]) -> Sidecar:
    try:
        return msgspec.structs.replace(sidecar, **changes)
    except (ValueError, msgspec.ValidationError) as exc:
        raise ContentError(SIDECAR_PATH, f"the new sidecar would be invalid: {exc}") from None


def sidecar_bytes(sidecar: Sidecar) -> bytes:
    """The encoded sidecar, refused unless its own loader accepts it."""
    data = encode_sidecar(sidecar)
    try:
        load_sidecar(data)
    except SidecarError as exc:
        raise ContentError(SIDECAR_PATH, f"the new sidecar would be invalid: {exc.reason}") from None
    return data


def checked(artifacts: Mapping[str, bytes]) -> Conversation:
    """Restore a snapshot about to be published (raises ContentError)."""
    return Conversation.restore(artifacts)
