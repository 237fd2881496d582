"""Redo: restore one of the session's superseded published heads.

Every committed head is an immutable publication, so the state a Rewind
moved away from is still on disk, complete and hash-verified. :func:`redo_states`
lists the retained publications (``.publications/*/manifest.json`` that
decode and name their own directory, whose sidecar bytes match the manifest
and load) as *turn states*: grouped by the settled turn count and the turn
identity of the last settled turn (the fork point their sidecar records),
the newest generation of each group, heads captured mid-turn dropped, and
the state the session is in now dropped too. Rows are labelled like the
Rewind picker (:class:`~.two_phase.TurnLabel`).

:func:`prepare_redo` reads only immutable bytes: the chosen head, verified
entirely, and the current head. The replacement is the chosen snapshot with
the current display name (a name is the session's, not a turn's) and a new
``updated_at``. Files: the turns both states share are the common prefix;
every path the current state touched after it goes back to its content at
the prefix, and every path the chosen state touched after it gets the
content the chosen state recorded last (its post-turn content; a path whose
last record has none is a gap). :func:`commit_redo` is Rewind's in-place
transaction (:func:`~.in_place.commit_in_place`): the same recheck, journal,
restore and one ``replace`` publication, so the head it moves away from is
retained in turn and redo composes in both directions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...targets import (
    ControlProgram,
    ListDir,
    OpResult,
    Read,
    Stat,
    Status,
    Target,
    raise_for_result,
)
from ..authority.lease import read_lease_head
from ..authority.packed import EntryReader, is_volume_name, read_pack
from ..authority.publication import Publisher, decode_manifest
from ..authority.records import (
    HEAD_PATTERN,
    KeptTurnState,
    PublicationManifest,
    RecordError,
    RecordErrorKind,
)
from ..authority.workspace import check_session_id
from ..content.sidecar import (
    SIDECAR_PATH,
    PromptEntry,
    Sidecar,
    SidecarError,
    TurnFiles,
    agent_history_note,
    decode_prompt_lines,
    load_sidecar,
    prompt_page_path,
)
from ..content.turns import Conversation
from ..layout import MANIFEST_NAME, SessionPaths, head_path, publication_id_of
from .in_place import (
    FROM_TARGET,
    ExternalChange,
    FileRestore,
    InPlacePlan,
    InPlaceResult,
    KnownGap,
    Planned,
    commit_in_place,
    contents,
    files_at,
    index_git_for,
    plan_for,
    remember_plan,
    survey_files,
)
from .lifecycle_token import InvalidToken, LifecycleRefused, StateToken
from .project_files import GitCheck
from .recovery import artifacts_digest
from .snapshot_cut import (
    CommittedState,
    SessionState,
    Side,
    check_snapshot,
    replaced_sidecar,
    sidecar_bytes,
    state_at_head,
)
from .two_phase import (
    Source,
    TurnLabel,
    commit,
    committed_state,
    issue_token,
    plan_time,
    prepare,
    refuse_in_flight,
    refuse_live,
)

_BATCH = 64
#: Fields of the current sidecar that a redo keeps (the session's name is
#: not turn state).
KEPT_FIELDS = ("display_name", "naming_state", "naming_input")


@dataclass(frozen=True)
class TurnState:
    """One restorable state of the session."""

    publication_id: str
    head: str
    turn_count: int
    #: The last settled turn (None: the state has no turn).
    last_turn: TurnLabel | None
    updated_at: int

    @property
    def label(self) -> str:
        return self.last_turn.label if self.last_turn else "the empty session (no turns)"


@dataclass(frozen=True)
class SkippedHead:
    publication_id: str
    reason: str


@dataclass(frozen=True)
class RedoStates:
    session_id: str
    current_head: str | None
    #: Newest first.
    states: tuple[TurnState, ...]
    #: Publications that could not be judged (unreadable or unverifiable).
    skipped: tuple[SkippedHead, ...] = ()


@dataclass
class PublishedHead:
    """A publication whose manifest decoded, as a candidate turn state."""

    publication_id: str
    manifest: PublicationManifest
    #: The manifest's modification time (whole seconds of the target clock).
    mtime: int
    sidecar: Sidecar | None = None
    last: PromptEntry | None = None
    #: What its sidecar and last prompt say, once judged (or known).
    state: KeptTurnState | None = None

    @property
    def turn_state(self) -> tuple[int, str | None]:
        """What makes two heads one Redo state: the settled turn count and
        the identity of the last settled turn (the fork point)."""
        assert self.state is not None
        return (self.state.turn_count, self.state.last_turn)

    def judged(self) -> KeptTurnState:
        """Its turn state, from the sidecar and last prompt read."""
        assert self.sidecar is not None
        return KeptTurnState(
            sidecar_sha256=self.manifest.entries[SIDECAR_PATH].sha256,
            turn_count=self.sidecar.total_turn_count,
            last_turn=self.last.turn_id if self.last else None,
            in_flight=self.sidecar.in_flight_turn is not None,
            updated_at=self.sidecar.updated_at,
        )


async def _run_reads(target: Target, ops: list) -> list:
    out = []
    for start in range(0, len(ops), _BATCH):
        out.extend((await target.run(ControlProgram(ops[start : start + _BATCH]))).results)
    return out


def _verified(data: bytes | None, sha256: str, size: int) -> bool:
    return data is not None and len(data) == size and hashlib.sha256(data).hexdigest() == sha256


async def redo_states(target: Target, session_id: str) -> RedoStates:
    """The session's superseded heads as turn states (see the module)."""
    paths = SessionPaths(check_session_id(session_id))
    observed = await read_lease_head(target, session_id)
    current = observed.publication_head
    listing = ListDir(paths.publications_dir, optional=True)
    listed = (await target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return RedoStates(session_id, current, ())
    raise_for_result(listing, listed)
    names = [n for n in listed.value if len(n) == 32 and all(c in "0123456789abcdef" for c in n)]
    volumes = [n for n in listed.value if is_volume_name(n)]
    skipped: list[SkippedHead] = []
    ops = []
    for name in names:
        manifest = f"{paths.publication_dir(name)}/{MANIFEST_NAME}"
        ops += [Read(manifest, optional=True), Stat(manifest, optional=True)]
    results = await _run_reads(target, ops)
    heads: list[PublishedHead] = []
    for index, name in enumerate(names):
        read, stat = results[2 * index], results[2 * index + 1]
        if read.status is Status.ABSENT:
            continue  # an uncommitted publication: not a head
        if not read.ok or not stat.ok:
            skipped.append(SkippedHead(name, (read if not read.ok else stat).reason or "unreadable"))
            continue
        try:
            manifest = decode_manifest(paths.label(head_path(name)), name, read.value)
        except RecordError as error:
            skipped.append(SkippedHead(name, str(error)))
            continue
        heads.append(PublishedHead(name, manifest, stat.value.mtime))
    reader = EntryReader(target, paths)
    if volumes:  # generations collection packed (their directories are gone)
        reader.pack = await read_pack(target, paths, volumes)
        skipped += [SkippedHead(name, why) for name, why in sorted(reader.pack.unreadable.items())]
        loose = {h.publication_id for h in heads}
        for pid, packed in sorted(reader.pack.generations.items()):
            if pid in loose:
                continue
            raw = reader.pack.manifest_bytes(pid)
            if raw is None:
                skipped.append(SkippedHead(pid, "its packed manifest cannot be rebuilt from the pack"))
                continue
            try:
                heads.append(PublishedHead(pid, decode_manifest(paths.label(head_path(pid)), pid, raw), packed.mtime))
            except RecordError as error:
                skipped.append(SkippedHead(pid, str(error)))
    offered, unjudged = await turn_state_representatives(target, paths, heads, current, reader=reader)
    skipped += unjudged
    states = [
        TurnState(
            h.publication_id,
            head_path(h.publication_id),
            h.sidecar.total_turn_count,  # type: ignore[union-attr]
            TurnLabel.of(h.last) if h.last else None,
            h.sidecar.updated_at,  # type: ignore[union-attr]
        )
        for h in offered
    ]
    return RedoStates(session_id, current, tuple(states), tuple(skipped))


#: What a publication's immutable bytes say about its turn state, by
#: publication ID, or why it cannot be judged. A publication's bytes never
#: change, so the answer never does (a state applies to a manifest whose
#: sidecar digest it names).
TurnStateFacts = dict[str, "KeptTurnState | SkippedHead"]


async def turn_state_representatives(
    target: Target,
    paths: SessionPaths,
    heads: Sequence[PublishedHead],
    current: str | None,
    *,
    known: TurnStateFacts | None = None,
    settled_current: bool = False,
    reader: EntryReader | None = None,
    prefetched: Mapping[str, OpResult] | None = None,
) -> tuple[list[PublishedHead], list[SkippedHead]]:
    """What Redo offers among ``heads``: the newest settled head of each
    turn state (:attr:`PublishedHead.turn_state`), without the state of the
    ``current`` head, newest first; and the heads that could not be judged.
    Collection retains exactly these, so what Redo lists stays on disk.
    ``known`` holds facts of earlier calls (and gains this call's): a
    publication it names is not read again. ``settled_current``: when the
    current head was captured mid-turn, its state's newest settled head is
    included too (collection keeps it: once the turn settles, Redo offers
    that state, and no other head holds it settled). ``prefetched``:
    reads of :func:`turn_state_reads` another program made, by published
    path (judged here like this call's own reads)."""
    skipped: list[SkippedHead] = []
    candidates = []
    unread = []
    for h in heads:
        fact = known.get(h.publication_id) if known is not None else None
        sidecar = h.manifest.entries.get(SIDECAR_PATH)
        if isinstance(fact, SkippedHead):
            skipped.append(fact)
        elif fact is not None and sidecar is not None and fact.sidecar_sha256 == sidecar.sha256:
            h.state = fact
            candidates.append(h)
        elif sidecar is not None:
            candidates.append(h)
            unread.append(h)
        else:
            skipped.append(SkippedHead(h.publication_id, "the publication has no sidecar"))
    fresh: list[SkippedHead] = []
    # A packed head's files are read from the pack (``reader``).
    reader = reader or EntryReader(target, paths)
    pages = await _read_sidecars(reader, unread, fresh, prefetched or {})
    await _read_last_prompts(reader, unread, fresh, pages, prefetched or {})
    skipped += fresh
    for h in unread:
        if h.sidecar is not None:
            h.state = h.judged()
            if known is not None:
                known[h.publication_id] = h.state
    if known is not None:
        for skip in fresh:
            known[skip.publication_id] = skip
    current_key = None
    groups: dict[tuple[int, str | None], PublishedHead] = {}
    for h in candidates:
        if h.state is None:
            continue
        key = h.turn_state
        if head_path(h.publication_id) == current:
            if not (settled_current and h.state.in_flight):
                current_key = key
            continue
        if h.state.in_flight:
            continue
        best = groups.get(key)
        if best is None or _order(h) > _order(best):
            groups[key] = h
    if current_key is not None:
        groups.pop(current_key, None)
    return sorted(groups.values(), key=_order, reverse=True), skipped


def _order(h: PublishedHead) -> tuple:
    assert h.state is not None
    return (h.state.updated_at, h.mtime, h.publication_id)


_PROMPT_PAGE = re.compile(r"index/prompts-\d{6}\.jsonl")


def _last_page(manifest: PublicationManifest) -> str | None:
    """The published file of the last prompt page a manifest names: the
    one its sidecar's layout will name, unless the sidecar says otherwise
    (then it is read on its own)."""
    pages = sorted(logical for logical in manifest.entries if _PROMPT_PAGE.fullmatch(logical))
    return manifest.entries[pages[-1]].published if pages else None


def _digests(heads: list[PublishedHead]) -> dict[str, tuple[str, int]]:
    """Published path -> the digest and size the heads' manifests give it."""
    return {e.published: (e.sha256, e.size) for h in heads for e in h.manifest.entries.values()}


def turn_state_reads(manifest: PublicationManifest) -> list[str]:
    """The published files a publication's turn state is read from (its
    sidecar, and the last prompt page its manifest names), for another
    program to read ahead (:func:`turn_state_representatives`'s
    ``prefetched``)."""
    if SIDECAR_PATH not in manifest.entries:
        return []
    page = _last_page(manifest)
    return [manifest.entries[SIDECAR_PATH].published, *([page] if page is not None else [])]


async def _reads(target: Target, paths: SessionPaths, published: list[str], prefetched: Mapping[str, OpResult]) -> list[OpResult]:
    """Each of ``published`` read: from ``prefetched`` when it holds a
    successful read, else in this call's programs."""
    missing = [p for p in published if not (p in prefetched and prefetched[p].ok)]
    found = dict(zip(missing, await _run_reads(target, [Read(paths.inside(p), optional=True) for p in missing])))
    return [found[p] if p in found else prefetched[p] for p in published]


async def _read_sidecars(
    reader: EntryReader, heads: list[PublishedHead], skipped: list[SkippedHead], prefetched: Mapping[str, OpResult]
) -> dict[str, OpResult]:
    """Each head's sidecar, and in the same program the last prompt page
    its manifest names; returns those pages' results by published path."""
    wanted: dict[str, list[PublishedHead]] = {}
    for h in heads:
        wanted.setdefault(h.manifest.entries[SIDECAR_PATH].published, []).append(h)
    published = sorted(wanted)
    pages = sorted({page for h in heads if (page := _last_page(h.manifest)) is not None} - set(published))
    target, paths = reader.target, reader.paths
    results = await _reads(target, paths, [*published, *pages], prefetched)
    results = await reader.complete([*published, *pages], results, _digests(heads))
    for path, result in zip(published, results):
        for h in wanted[path]:
            entry = h.manifest.entries[SIDECAR_PATH]
            if not _verified(result.value if result.ok else None, entry.sha256, entry.size):
                skipped.append(SkippedHead(h.publication_id, "its sidecar bytes do not match the manifest"))
                continue
            try:
                sidecar = load_sidecar(result.value)
            except SidecarError as error:
                skipped.append(SkippedHead(h.publication_id, error.reason))
                continue
            if sidecar.session_id != paths.session_id:
                skipped.append(SkippedHead(h.publication_id, f"its sidecar belongs to session {sidecar.session_id}"))
                continue
            h.sidecar = sidecar
    return dict(zip(pages, results[len(published) :]))


async def _read_last_prompts(
    reader: EntryReader, heads: list[PublishedHead], skipped: list[SkippedHead], read: dict[str, OpResult],
    prefetched: Mapping[str, OpResult],
) -> None:
    target, paths = reader.target, reader.paths
    wanted: dict[str, list[PublishedHead]] = {}
    for h in heads:
        if h.sidecar is None or h.sidecar.total_turn_count == 0:
            continue
        page = prompt_page_path(h.sidecar.layout.prompt_pages)
        entry = h.manifest.entries.get(page)
        if entry is None:
            skipped.append(SkippedHead(h.publication_id, f"the publication has no {page}"))
            h.sidecar = None
            continue
        wanted.setdefault(entry.published, []).append(h)
    published = sorted(wanted)
    unread = [p for p in published if p not in read]
    found = await _reads(target, paths, unread, prefetched)
    results = dict(zip(unread, await reader.complete(unread, found, _digests(heads))))
    for path in published:
        result = read[path] if path in read else results[path]
        for h in wanted[path]:
            assert h.sidecar is not None
            entry = h.manifest.entries[prompt_page_path(h.sidecar.layout.prompt_pages)]
            data = result.value if result.ok else None
            if not _verified(data, entry.sha256, entry.size):
                skipped.append(SkippedHead(h.publication_id, "its prompt index does not match the manifest"))
                h.sidecar = None
                continue
            lines = [line + b"\n" for line in data[:-1].split(b"\n")] if data else []  # type: ignore[index]
            try:
                entries = decode_prompt_lines(lines)
            except ValueError as error:
                skipped.append(SkippedHead(h.publication_id, f"its prompt index is unreadable ({error})"))
                h.sidecar = None
                continue
            # The last prompt is the settled turn's unless one is in flight.
            settled = [e for e in entries if e.turn <= h.sidecar.total_turn_count]
            h.last = settled[-1] if settled else None


# Prepare and commit -----------------------------------------------------------


@dataclass(frozen=True)
class RedoImpact:
    session_id: str
    state: TurnState
    #: Turns the current and the restored state share.
    common_turns: int
    #: The restored state's turns after the common ones, in order.
    restored: tuple[TurnLabel, ...]
    #: The current state's turns after the common ones, in order.
    discarded: tuple[TurnLabel, ...]
    restores: tuple[FileRestore, ...]
    gaps: tuple[KnownGap, ...]
    externally_modified: tuple[ExternalChange, ...]
    git: GitCheck
    token: StateToken
    #: What happens to the agent's own history (None: there is none).
    agent_history: str | None = None


def _common_prefix(a: Sequence[PromptEntry], b: Sequence[PromptEntry]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x.turn_id != y.turn_id:
            break
        count += 1
    return count


def _chosen_files(files: Sequence[TurnFiles], after: int) -> tuple[dict[str, Planned], dict[str, KnownGap]]:
    """What the chosen state recorded last for each path its turns after
    ``after`` touched."""
    planned: dict[str, Planned] = {}
    gaps: dict[str, KnownGap] = {}
    for record in sorted(files, key=lambda r: r.turn):
        if record.turn <= after:
            continue
        for path, snapshot in record.files.items():
            planned.pop(path, None)
            gaps.pop(path, None)
            if snapshot.post is not None:
                planned[path] = Planned(snapshot.post, "post-turn", record.turn)
            elif snapshot.pre is None:
                gaps[path] = KnownGap(path, record.turn, snapshot.gap or "capture gap")
            else:
                gaps[path] = KnownGap(path, record.turn, f"turn {record.turn} recorded no post-turn content")
    return planned, gaps


@dataclass(frozen=True)
class _RedoPlan:
    plan: InPlacePlan
    state: TurnState
    common: int
    restored: tuple[TurnLabel, ...]
    discarded: tuple[TurnLabel, ...]


def plan_redo(current: CommittedState, chosen: SessionState, at: int) -> _RedoPlan:
    refuse_in_flight(current, "redo")
    sid = current.session_id
    sidecar_t = chosen.sidecar
    if sidecar_t.in_flight_turn is not None:
        raise LifecycleRefused(sid, "that head was captured mid-turn; it is a recovery state, not a turn state")
    now = current.state
    sidecar_c = now.sidecar
    changes = {name: getattr(sidecar_c, name) for name in KEPT_FIELDS}
    changes["updated_at"] = max(at, sidecar_c.updated_at, sidecar_t.updated_at)
    artifacts = dict(chosen.artifacts)
    artifacts[SIDECAR_PATH] = sidecar_bytes(replaced_sidecar(sidecar_t, changes))
    check_snapshot(artifacts)
    prompts_c = now.prompts[: sidecar_c.total_turn_count]
    prompts_t = chosen.prompts[: sidecar_t.total_turn_count]
    common = _common_prefix(prompts_c, prompts_t)
    back, back_gaps = files_at(now.files, common, Side.AFTER)
    forward, forward_gaps = _chosen_files(chosen.files, common)
    for path in list(back):
        if path in forward or path in forward_gaps:
            del back[path]
    for path in list(back_gaps):
        if path in forward or path in forward_gaps:
            del back_gaps[path]
    wanted = {**contents(back, now, sid), **contents(forward, chosen, sid)}
    planned = {**back, **forward}
    gaps = {**back_gaps, **forward_gaps}
    assert current.head is not None and chosen.head is not None
    plan = InPlacePlan(sid, current.head, artifacts, dict(sorted(wanted.items())), planned, gaps, artifacts_digest(artifacts))
    last = prompts_t[-1] if prompts_t else None
    state = TurnState(publication_id_of(chosen.head), chosen.head, sidecar_t.total_turn_count, TurnLabel.of(last) if last else None, sidecar_t.updated_at)
    restored = tuple(TurnLabel.of(e) for e in prompts_t[common:])
    discarded = tuple(TurnLabel.of(e) for e in prompts_c[common:])
    return _RedoPlan(plan, state, common, restored, discarded)


def _chosen_head(session_id: str, publication_id: str) -> str:
    head = head_path(publication_id) if isinstance(publication_id, str) else ""
    if not re.match(HEAD_PATTERN, head):
        raise LifecycleRefused(session_id, f"{publication_id!r} is not a publication id", kind="invalid-params")
    return head


@dataclass(frozen=True)
class Redo:
    """Restoring the turn state ``publication_id`` holds, as a plan of the
    two-phase skeleton (``at`` and ``workspace_root`` as for a Rewind)."""

    op: ClassVar[str] = "redo"
    publication_id: str
    at: int | None = None
    workspace_root: Path | None = FROM_TARGET

    async def prepare(self, source: Source) -> RedoImpact:
        sid = source.session_id
        head = _chosen_head(sid, self.publication_id)
        refuse_live(sid, source.live, "redo")
        current = await committed_state(source)
        if head == current.head:
            raise LifecycleRefused(sid, "that publication is the current state already")
        try:
            chosen, _snapshot = await state_at_head(source.target, sid, head)
        except RecordError as error:
            if error.kind is RecordErrorKind.MISSING and error.path_label == SessionPaths(sid).label(head):  # not its payload
                raise LifecycleRefused(sid, f"there is no publication {self.publication_id}", kind="missing-target") from None
            raise LifecycleRefused(sid, f"publication {self.publication_id} cannot be restored: {error}", kind="unreadable") from None
        when = plan_time(current, self.at)
        redo = plan_redo(current, chosen, when)
        git = index_git_for(source.target, self.workspace_root)
        survey = await survey_files(source, redo.plan, current.state, git)
        token = issue_token(self.op, current, when, {"publication": self.publication_id}, survey.hashes)
        remember_plan(token, redo.plan, survey if source.at_once else None)
        gaps = tuple(redo.plan.gaps[p] for p in sorted(redo.plan.gaps))
        note = agent_history_note(current.sidecar.engine, copy=False)
        return RedoImpact(
            sid, redo.state, redo.common, redo.restored, redo.discarded, survey.rows, gaps, survey.external, survey.git, token, note
        )

    @classmethod
    def from_token(cls, token: StateToken) -> Redo:
        publication_id = token.subject.get("publication")
        if not isinstance(publication_id, str):
            raise InvalidToken("it names no publication")
        _chosen_head(token.session_id, publication_id)
        return cls(publication_id, token.at)

    async def commit(self, source: Source, token: StateToken) -> InPlaceResult:
        publisher = source.publisher
        assert publisher is not None, "an in-place commit needs the held lease's publisher"
        head = _chosen_head(token.session_id, self.publication_id)

        async def replan(state: CommittedState) -> InPlacePlan:
            chosen, _snapshot = await state_at_head(state.snapshot.target, state.session_id, head)
            return plan_redo(state, chosen, token.at).plan

        plan = await plan_for(publisher, token, replan)
        return await commit_in_place(publisher, token, plan, operation="redo", source=source)


async def prepare_redo(
    target: Target,
    session_id: str,
    publication_id: str,
    *,
    live: Conversation | None = None,
    at: int | None = None,
    workspace_root: Path | None = FROM_TARGET,
    recovery_checked: bool = False,
) -> RedoImpact:
    """The impact of restoring the turn state ``publication_id`` holds
    (:class:`Redo`'s prepare, for a caller that holds no lease)."""
    return await prepare(Redo(publication_id, at, workspace_root), Source(target, session_id, live, recovery_checked=recovery_checked))


async def commit_redo(publisher: Publisher, token: StateToken | str, *, live: Conversation | None = None) -> InPlaceResult:
    """Recheck what :func:`prepare_redo` saw and restore that state."""
    lease = publisher.lease
    return await commit(Redo, Source(lease.target, lease.session_id, live, publisher), token)
