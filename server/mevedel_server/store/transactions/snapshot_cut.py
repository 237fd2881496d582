"""The committed state of a session, and snapshots cut from it at a turn
boundary: what Rewind publishes in place and what Fork publishes as a child.

:func:`load_committed_state` reads the head of the current lease generation
and verifies every byte it names. A transaction needs far less than the
whole conversation, so a :class:`SessionState` decodes only the sidecar and
the prompt and file-snapshot indexes; a boundary's line position is found by
decoding just the lines of that turn. Heads are immutable, so states are
cached per ``(session, head)``: a prepare and its commit read a long session
once.

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
cuts through is new.

Before anything is published, :func:`check_snapshot` proves the cut
snapshot's structure (a sidecar its loader accepts; exactly the parts and
pages its layout names, each whole; index lengths equal to its counters;
segment headers naming the session; a live segment that is not closed; every
content the checkpoints name present under its digest). The full
:class:`~.turns.Conversation` of a result is restored only when the caller
asks for it (:class:`LazyConversation`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import msgspec

from ...targets import Target
from ..authority.lease import read_lease_head_and_manifest
from ..authority.publication import CommittedSnapshot, decode_manifest, load_manifest
from ..authority.records import HEAD_PATTERN, PublicationManifest
from ..authority.workspace import check_session_id
from ..content.checkpoints import history_digest, history_path, referenced_digests
from ..content.sidecar import (
    SIDECAR_PATH,
    AgentActivity,
    EngineState,
    IndexLineError,
    Layout,
    PromptEntry,
    RetainedAgent,
    Sidecar,
    SidecarError,
    TurnFiles,
    agent_result,
    decode_files_lines,
    decode_prompt_lines,
    encode_index_line,
    encode_sidecar,
    file_page_path,
    load_sidecar,
    prompt_page_path,
)
from ..content.transcript import (
    AgentTask,
    LineLog,
    Outcome,
    SegmentClose,
    SegmentError,
    SegmentHeader,
    Settle,
    TurnBegin,
    agent_part_path,
    decode_agent_transcript,
    decode_lines,
    encode_line,
    parse_agent_part,
    parse_segment_part,
    segment_part_path,
)
from ..content.turns import ContentError, Conversation
from ..layout import SessionPaths, publication_id_of
from .lifecycle_token import LifecycleRefused

_CACHE_LIMIT = 2


def _lines(parts: list[bytes]) -> list[bytes]:
    return [line + b"\n" for data in parts for line in data[:-1].split(b"\n")]


def _parts(artifacts: Mapping[str, bytes], path_of: Callable[[int], str], count: int, label: str) -> list[bytes]:
    parts = []
    for k in range(1, count + 1):
        data = artifacts.get(path_of(k))
        if data is None:
            raise ContentError(path_of(k), "the sidecar's layout names it, but the snapshot does not hold it")
        if not data or not data.endswith(b"\n"):
            raise ContentError(path_of(k), f"{label} part {k} is empty or truncated")
        parts.append(data)
    return parts


class SessionState:
    """The verified logical snapshot of one head, with the sidecar and the
    two indexes decoded. Read-only: shared by every caller of the cache."""

    def __init__(self, session_id: str, head: str | None, artifacts: Mapping[str, bytes]) -> None:
        data = artifacts.get(SIDECAR_PATH)
        if data is None:
            raise ContentError(SIDECAR_PATH, "the snapshot has no sidecar")
        sidecar = load_sidecar(data)
        if sidecar.session_id != session_id:
            raise ContentError(SIDECAR_PATH, f"the sidecar belongs to session {sidecar.session_id}")
        layout = sidecar.layout
        try:
            prompts = decode_prompt_lines(_lines(_parts(artifacts, prompt_page_path, layout.prompt_pages, "prompt index")))
            files = decode_files_lines(_lines(_parts(artifacts, file_page_path, layout.file_pages, "file snapshots index")))
        except IndexLineError as exc:
            raise ContentError("index", str(exc)) from None
        if len(prompts) != sidecar.prompt_count or len(files) != sidecar.file_snapshot_count:
            raise ContentError(SIDECAR_PATH, "the index lengths disagree with the sidecar's counters")
        self.session_id = session_id
        self.head = head
        self.artifacts = artifacts
        self.sidecar: Sidecar = sidecar
        #: Every prompt, the one in flight included.
        self.prompts: list[PromptEntry] = prompts
        #: Every file checkpoint, the one in flight included.
        self.files: list[TurnFiles] = files

    def file_content(self, sha256: str) -> bytes | None:
        return self.artifacts.get(history_path(sha256))

    def segment_parts(self, segment: int) -> list[bytes]:
        count = self.sidecar.layout.segment_parts[segment - 1]
        return _parts(self.artifacts, lambda k: segment_part_path(segment, k), count, f"segment {segment}")

    def turn_records(self, entry: PromptEntry) -> list[tuple[int, object]]:
        """(line index, record) of the lines of ``entry``'s turn in its
        segment: a byte search for the turn id, then an exact decode."""
        needle = entry.turn_id.encode("ascii")
        found = []
        before = 0  # lines in the parts already searched
        for data in self.segment_parts(entry.segment):
            position = data.find(needle)
            seen_end = -1
            while position != -1:
                start = data.rfind(b"\n", 0, position) + 1
                end = data.index(b"\n", position) + 1
                if end > seen_end:  # one decode per line, however often it names the id
                    seen_end = end
                    index = before + data.count(b"\n", 0, start)
                    try:
                        (record,) = decode_lines([data[start:end]], label=f"segment {entry.segment}")
                    except SegmentError as exc:
                        raise ContentError(f"segment {entry.segment} line {index + 1}", exc.reason) from None
                    if getattr(record, "turn_id", None) == entry.turn_id:
                        found.append((index, record))
                position = data.find(needle, end)
            before += data.count(b"\n")
        return found


#: Verified states of immutable heads with their manifests, newest last.
_states: OrderedDict[tuple[str, str], tuple[SessionState, PublicationManifest]] = OrderedDict()


def known_state(session_id: str, head: str) -> SessionState | None:
    """The verified state of ``head`` when this process holds it."""
    cached = _states.get((session_id, head))
    return cached[0] if cached is not None else None


def remember_state(state: SessionState, manifest: PublicationManifest) -> None:
    """Keep ``state`` (verified against ``manifest``, its head's) for the
    next reader of the same head: a head's bytes never change."""
    assert state.head is not None
    key = (state.session_id, state.head)
    _states[key] = (state, manifest)
    _states.move_to_end(key)
    while len(_states) > _CACHE_LIMIT:
        _states.popitem(last=False)


async def state_at_head(
    target: Target, session_id: str, head: str, *, manifest: PublicationManifest | None = None
) -> tuple[SessionState, CommittedSnapshot]:
    """The verified state of one (immutable) head (``manifest``: its
    manifest, already read and validated by the caller)."""
    paths = SessionPaths(check_session_id(session_id))
    cached = _states.get((session_id, head))
    if cached is not None:
        remember_state(*cached)
        return cached[0], CommittedSnapshot(target, paths, 0, head, cached[1])
    if manifest is None:
        manifest = await load_manifest(target, paths, head)
    snapshot = CommittedSnapshot(target, paths, 0, head, manifest)
    state = SessionState(session_id, head, await snapshot.read_all())
    remember_state(state, manifest)
    return state, snapshot


@dataclass(frozen=True)
class CommittedState:
    """A verified committed head as a fresh reader saw it."""

    snapshot: CommittedSnapshot
    #: The client of the lease generation the head was read from.
    lease_client: str | None
    #: Target seconds of that generation's last renewal (0 without one).
    lease_renewed_at: int
    state: SessionState

    @property
    def session_id(self) -> str:
        return self.snapshot.session_id

    @property
    def head(self) -> str | None:
        return self.snapshot.head

    @property
    def sidecar(self) -> Sidecar:
        return self.state.sidecar

    @property
    def artifacts(self) -> Mapping[str, bytes]:
        return self.state.artifacts


async def load_committed_state(target: Target, session_id: str) -> CommittedState:
    """The committed state a fresh reader sees (no lease is taken, nothing
    is written): the lease head and the manifest it names in one program,
    the bytes in a second (none when this process holds that head's). A
    session with nothing committed is refused."""
    paths = SessionPaths(check_session_id(session_id))
    observation, raw = await read_lease_head_and_manifest(target, paths)
    head = observation.publication_head
    if head is None:
        raise LifecycleRefused(session_id, "nothing is committed yet", kind="missing-target")
    manifest = decode_manifest(paths.label(head), publication_id_of(head), raw) if raw is not None and re.match(HEAD_PATTERN, head) else None
    state, snapshot = await state_at_head(target, session_id, head, manifest=manifest)
    snapshot = CommittedSnapshot(target, snapshot.paths, observation.generation, head, snapshot.manifest)
    record = observation.record
    return CommittedState(snapshot, record.client_id if record else None, record.renewed_at if record else 0, state)


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


def locate(state: SessionState, boundary: Boundary) -> Cut:
    """The cut of a boundary at a *settled* turn of ``state``."""
    total = state.sidecar.total_turn_count
    if type(boundary.turn) is not int or not 1 <= boundary.turn <= total:
        known = f"its settled turns are 1-{total}" if total else "it has no settled turn"
        raise LifecycleRefused(state.session_id, f"there is no settled turn {boundary.turn!r} ({known})", kind="invalid-params")
    entry = state.prompts[boundary.turn - 1]
    wanted = Settle if boundary.side is Side.AFTER else TurnBegin
    for index, record in state.turn_records(entry):
        if isinstance(record, wanted):
            lines = index + 1 if boundary.side is Side.AFTER else index
            return Cut(entry.segment, lines, boundary.kept_turns)
    raise ContentError(f"segment {entry.segment}", f"turn {boundary.turn} has no {wanted.__name__} record")


def whole(state: SessionState) -> Cut:
    """The cut keeping everything (a settled state)."""
    segment = state.sidecar.current_segment
    lines = sum(data.count(b"\n") for data in state.segment_parts(segment))
    return Cut(segment, lines, state.sidecar.total_turn_count)


def kept_outcome(state: SessionState, cut: Cut) -> Outcome | None:
    """How the last kept turn settled (None when no turn is kept)."""
    if cut.kept_turns == 0:
        return None
    for _index, record in state.turn_records(state.prompts[cut.kept_turns - 1]):
        if isinstance(record, Settle):
            return record.outcome
    return None


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


def cut_snapshot(
    state: SessionState,
    cut: Cut,
    sidecar_changes: Mapping[str, object],
    *,
    retarget: Callable[[str], str] | None = None,
) -> dict[str, bytes]:
    """The logical snapshot of ``state`` cut at ``cut``, checked.

    ``sidecar_changes`` go on top of the derived counters and layout (a new
    ``session_id`` also rewrites every kept segment header). ``retarget``
    maps every tracked path of the kept file checkpoints (a worktree fork's
    new checkout)."""
    sidecar = state.sidecar
    artifacts = state.artifacts
    layout = sidecar.layout
    session_id = sidecar_changes.get("session_id", sidecar.session_id)
    out: dict[str, bytes] = {}
    segment_parts = list(layout.segment_parts[: cut.segment - 1])
    for number in range(1, cut.segment):
        for part in range(1, layout.segment_parts[number - 1] + 1):
            path = segment_part_path(number, part)
            out[path] = artifacts[path]
    last = take_lines(state.segment_parts(cut.segment), cut.lines, f"segment {cut.segment}")
    segment_parts.append(len(last))
    for part, data in enumerate(last, start=1):
        out[segment_part_path(cut.segment, part)] = data
    if session_id != sidecar.session_id:
        for number in range(1, cut.segment + 1):
            path = segment_part_path(number, 1)
            out[path] = _header_for(out[path], session_id, f"segment {number}")  # type: ignore[arg-type]

    prompt_parts = [artifacts[prompt_page_path(k)] for k in range(1, layout.prompt_pages + 1)]
    prompt_parts = take_lines(prompt_parts, cut.kept_turns, "prompt index")
    for page, data in enumerate(prompt_parts, start=1):
        out[prompt_page_path(page)] = data

    kept_files = [r for r in state.files if r.turn <= cut.kept_turns]
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

    prompts = state.prompts[: cut.kept_turns]
    changes: dict[str, object] = dict(
        current_segment=cut.segment,
        total_turn_count=cut.kept_turns,
        in_flight_turn=None,
        file_snapshot_count=len(kept_files),
        layout=Layout(segment_parts=segment_parts, prompt_pages=len(prompt_parts), file_pages=len(file_parts)),
        chapters=[c for c in sidecar.chapters if c.last_segment < cut.segment],
        first_user_message=prompts[0].preview if prompts else None,
        latest_user_message=prompts[-1].preview if prompts else None,
        # A retained agent made by a turn cut off goes with it (and its
        # sub-agents, made no earlier).
        agents=[agent for agent in sidecar.agents if agent.created_turn <= cut.kept_turns],
    )
    changes.update(sidecar_changes)
    agent_parts, last_kept = _cut_agents(state, cut, out)
    changes["layout"] = msgspec.structs.replace(changes["layout"], agent_parts=agent_parts)  # type: ignore[type-var]
    # An agent's result from a task of a turn cut off is its latest kept task's.
    changes["agents"] = [
        _kept_result(agent, last_kept.get(agent.path), cut.kept_turns) for agent in changes["agents"]  # type: ignore[attr-defined]
    ]
    out[SIDECAR_PATH] = sidecar_bytes(replaced_sidecar(sidecar, changes))
    check_snapshot(out)
    return out


def _kept_result(agent: RetainedAgent, last: AgentTask | None, kept_turns: int) -> RetainedAgent:
    if agent.result is None or agent.result.turn <= kept_turns:
        return agent
    if last is None or last.turn is None:
        return msgspec.structs.replace(agent, result=None)
    return msgspec.structs.replace(agent, result=agent_result(last.turn, last.outcome.value, last.reason, last.steps))


def _cut_agents(state: SessionState, cut: Cut, out: dict[str, bytes]) -> tuple[dict[str, int], dict[str, AgentTask]]:
    """The retained agents' own transcripts, each cut to its tasks of the
    kept turns (parts kept whole keep their bytes), into ``out``; their
    layout, and each one's last kept task. An agent made after the cut has
    none left. A Fork keeps them too (the turns it copies name their
    tasks), though it drops the registry: the child has the conversations,
    not the agents."""
    artifacts = state.artifacts
    parts_of: dict[str, int] = {}
    last_kept: dict[str, AgentTask] = {}
    for path, count in state.sidecar.layout.agent_parts.items():
        parts = _parts(artifacts, lambda k, path=path: agent_part_path(path, k), count, f"agents/{path}")
        tasks = decode_agent_transcript(b"".join(parts), label=f"agents/{path}")
        keep = sum(1 for task in tasks if task.turn is not None and task.turn <= cut.kept_turns)
        if not keep:
            continue
        taken = take_lines(parts, keep, f"agents/{path}")
        for part, data in enumerate(taken, start=1):
            out[agent_part_path(path, part)] = data
        parts_of[path] = len(taken)
        last_kept[path] = tasks[keep - 1]
    return parts_of, last_kept


def replaced_sidecar(sidecar: Sidecar, changes: Mapping[str, object]) -> Sidecar:
    """``sidecar`` with ``changes``: the sidecar of a Rewind, Redo, Fork,
    Worktree Fork or Save As. Each detaches the external agent's own
    history (its native conversation no longer matches this transcript, or
    belongs to another session): the next prompt starts a new native
    conversation from a transcript excerpt (a deviation: the spec refuses
    these transactions while a native history is retained)."""
    engine = sidecar.engine
    if engine is not None and "engine" not in changes and engine.state is not EngineState.DETACHED:
        changes = {**changes, "engine": msgspec.structs.replace(engine, native_session_id=None, state=EngineState.DETACHED)}
    # The retained agents' own histories are detached the same way (and none
    # is in flight in a replacement or a copy).
    agents = changes.get("agents", sidecar.agents)
    changes = {**changes, "agents": [
        msgspec.structs.replace(agent, native_session_id=None, activity=AgentActivity.IDLE) for agent in agents  # type: ignore[union-attr]
    ]}
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


def check_snapshot(artifacts: Mapping[str, bytes]) -> Sidecar:
    """The structural proof a snapshot gets before it is published (see the
    module); raises ContentError naming what is wrong."""
    sidecar = load_sidecar(artifacts[SIDECAR_PATH])
    layout = sidecar.layout
    named = {SIDECAR_PATH}
    for segment, parts in enumerate(layout.segment_parts, start=1):
        named.update(segment_part_path(segment, k) for k in range(1, parts + 1))
    named.update(prompt_page_path(k) for k in range(1, layout.prompt_pages + 1))
    named.update(file_page_path(k) for k in range(1, layout.file_pages + 1))
    for path, count in layout.agent_parts.items():
        named.update(agent_part_path(path, k) for k in range(1, count + 1))
        _parts(artifacts, lambda k, path=path: agent_part_path(path, k), count, f"agents/{path}")
    for logical, data in artifacts.items():
        digest = history_digest(logical)
        if digest is not None:
            if hashlib.sha256(data).hexdigest() != digest:
                raise ContentError(logical, "the bytes do not match their SHA-256 name")
        elif logical not in named and (
            parse_segment_part(logical) is not None or parse_agent_part(logical) is not None or logical.startswith("index/")
        ):
            raise ContentError(logical, "a part or page the sidecar's layout does not name")
    prompt_lines = _lines(_parts(artifacts, prompt_page_path, layout.prompt_pages, "prompt index"))
    file_lines = _lines(_parts(artifacts, file_page_path, layout.file_pages, "file snapshots index"))
    if len(prompt_lines) != sidecar.prompt_count or len(file_lines) != sidecar.file_snapshot_count:
        raise ContentError(SIDECAR_PATH, "the index lengths disagree with the sidecar's counters")
    for record in decode_files_lines(file_lines):
        for digest in referenced_digests(record):
            if history_path(digest) not in artifacts:
                raise ContentError(history_path(digest), "the file snapshots index names it, but the snapshot does not hold it")
    for segment in range(1, sidecar.current_segment + 1):
        parts = _parts(artifacts, lambda k: segment_part_path(segment, k), layout.segment_parts[segment - 1], f"segment {segment}")
        first = parts[0][: parts[0].index(b"\n") + 1]
        (header,) = decode_lines([first], label=f"segment {segment}")
        if not isinstance(header, SegmentHeader) or header.session_id != sidecar.session_id or header.segment != segment:
            raise ContentError(f"segment {segment}", "its header does not name this session and segment")
        last = parts[-1][parts[-1].rstrip(b"\n").rfind(b"\n") + 1 :]
        (record,) = decode_lines([last], label=f"segment {segment}")
        if isinstance(record, SegmentClose) == (segment == sidecar.current_segment):
            raise ContentError(f"segment {segment}", "the live segment is closed, or an earlier one is not")
    return sidecar


class LazyConversation:
    """A snapshot's :class:`~.turns.Conversation`, restored on first use."""

    def __init__(self, artifacts: Mapping[str, bytes]) -> None:
        self.artifacts = artifacts

    @cached_property
    def conversation(self) -> Conversation:
        return Conversation.restore(self.artifacts)


class CommittedSnapshotResult:
    """What a transaction that committed a whole snapshot hands back: the
    snapshot, and its conversation restored only when first asked for (most
    callers never adopt it, and restoring a long session costs)."""

    def __init__(self, lazy: LazyConversation) -> None:
        self._lazy = lazy

    @property
    def artifacts(self) -> Mapping[str, bytes]:
        """The committed snapshot."""
        return self._lazy.artifacts

    @property
    def conversation(self) -> Conversation:
        """The committed conversation: a fresh object the caller may adopt
        as its live one (restored on first access)."""
        return self._lazy.conversation
