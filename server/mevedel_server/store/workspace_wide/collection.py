"""Publication collection: remove superseded publication directories by
reference, in bounded steps, under the session's lease.

What is retained
----------------
- the current head (the lease generation's ``publication_head``);
- exactly what Redo offers (:func:`~.redo.turn_state_representatives`): the
  newest generation of each turn state -- settled turn count and the identity
  of the last settled turn, so two branches of the same length both stay --
  not captured mid-turn; and, while the head is a mid-turn checkpoint, the
  newest settled generation of the head's own state (Redo offers it once
  the turn settles, and no other generation holds it settled);
- the newest :data:`DEFAULT_KEEP_RECENT` generations;
- every file a retained manifest names: unchanged payloads reuse the
  immutable bytes of earlier publications, so a retained manifest can pin a
  file inside an older directory.

A retained generation's directory is kept whole. Any other directory that
a retained manifest names is *trimmed*: its own obsolete manifest is
retired (it stops being a generation) and the files no retained manifest
names are removed; the directory and the named files stay until the last
reference to them disappears, and it is removed then. Generations are
ordered by their manifest's modification time, in whole seconds of the
target clock; generations sharing the boundary second are all retained, so
a tie never drops a newer one.

What is never removed
---------------------
- a directory whose manifest is unreadable or whose turn state (sidecar,
  last prompt) cannot be established: Redo cannot judge it either (reported
  with the reason; an unreadable head or an unreadable manifest inside the
  recent window blocks the whole collection);
- a manifest-less directory (an uncommitted publication) modified at or after
  the head's manifest: a publication of this very writer may be in flight;
  only orphans strictly older than the head are collected -- unless the
  caller holds the publisher's lock (``quiesced``), so that no publication
  of this writer can be in flight, and no other writer can publish without
  the lease this step proves;
- anything that is not a ``<32 hex>`` directory of plain files (a step that
  meets a subdirectory or a symlink stops there and says so).

How removal runs
----------------
Each step is one control program: ``Verify`` of this client's exact lease
generation bytes, ``Verify`` that the next generation is absent (nobody
claimed or superseded the lease), then at most ``max_removals`` removals.
Every obsolete manifest the step retires goes before any payload, so an
interruption never leaves a discoverable generation whose bytes were
collected. Before a directory that goes whole loses anything, a marker
``.publications/.collecting-<id>`` is created beside it; then the directory
loses its manifest (so it no longer reads as a generation), its payloads and
itself, and the marker goes last. A step cut short by its budget or by a
crash leaves the marker, and the next step resumes that directory without
re-judging it (once files are gone its remains look newer than the head,
which would otherwise protect them). Trimming needs no marker: every step
judges a trimmed directory afresh by the references to its files.
The lease is renewed first when the target clock shows it close to expiry.
A holder's head commit may carry a step's removal instead, judged from
what is in hand before it (:func:`plan_riding_removal`): the commit's
rotation is then the proof, and the removal runs after it.

What a step reads
-----------------
A step reads what it does not know yet: the clock and the listing, the
survey of each directory, the turn state of each generation (Redo's
reads), the pack volumes. A holder's head commits may read all of it
ahead (:class:`Ahead`: each commit carries what the last listing, the
manifests known and the volumes listed call for), so a step after them
runs only its removal. The turn states judged are kept beside the
publications (:data:`KEPT_TURN_STATES`), bound to the sidecar digest each
was judged from, so that the next process need not read them: a state is
used only for a manifest whose sidecar has that digest; a kept file is
written only behind the lease proof, like the removals, and one that does
not decode is ignored.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from ...targets import (
    Clock,
    ControlProgram,
    CreateExclusive,
    ListDir,
    Operation,
    OpResult,
    Read,
    Remove,
    Replace,
    Stat,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from ..authority.lease import LeaseHandle
from ..authority.packed import (
    MAX_CHAIN,
    VOLUME_DEBRIS,
    EntryReader,
    Pack,
    PackedBlob,
    PackedGeneration,
    PackVolume,
    VolumeCache,
    decode_volume,
    encode_volume,
    is_volume_name,
    make_blob,
    read_pack,
    volume_name,
)
from ..authority.publication import decode_manifest
from ..authority.records import (
    KeptTurnState,
    KeptTurnStates,
    PublicationManifest,
    RecordError,
    decode_record,
    encode_record,
)
from ..content.sidecar import SIDECAR_PATH
from ..errors import LeaseLost
from ..layout import MANIFEST_NAME, SessionPaths, head_path, publication_id_of

if TYPE_CHECKING:
    from ..transactions.redo import TurnStateFacts

DEFAULT_KEEP_RECENT = 3
#: Generations packed together: fewer stay loose, more make a volume.
DEFAULT_PACK_BATCH = 8
#: A volume whose blobs hold less than this is folded into the next one.
SMALL_VOLUME = 1024 * 1024
DEFAULT_MAX_REMOVALS = 64
#: The turn states judged so far, kept beside the publications for the
#: next process (:class:`~..authority.records.KeptTurnStates`).
KEPT_TURN_STATES = ".turn-states.json"
#: Prefix of the marker created beside a directory when its removal starts.
COLLECTING_MARKER = ".collecting-"
#: Directories surveyed per planning program.
_SURVEY_BATCH = 64
#: Renew first when the lease has fewer seconds than this left.
_RENEW_MARGIN = 10

_PUBLICATION_NAME = re.compile(r"^[0-9a-f]{32}\Z")
_NAMED = "named by a retained manifest"
#: A temporary file a crash left while a marker was being created.
_MARKER_DEBRIS = re.compile(r"^\.\.collecting-[0-9a-f]{32}\.[0-9a-z]+\.tmp\Z")


class KeptPublication(msgspec.Struct, frozen=True):
    publication_id: str
    reasons: tuple[str, ...]


class CollectionReport(msgspec.Struct, frozen=True):
    #: Publication directories removed completely by this step.
    removed: tuple[str, ...]
    #: Every directory kept, with why.
    kept: tuple[KeptPublication, ...]
    #: Collectable directories still present after this step.
    remaining: int
    #: Files and directories this step removed.
    removed_entries: int = 0
    #: Why nothing could be removed, when collection was refused outright.
    blocked: str | None = None
    #: Why the removal program stopped early (the lease moved, a removal failed).
    stopped: str | None = None
    #: Directories this step trimmed (manifest retired, unnamed files removed).
    trimmed: tuple[str, ...] = ()
    #: Generations this step wrote into the session's pack (their loose
    #: directories go in the next step).
    packed: tuple[str, ...] = ()


class CollectionCache(msgspec.Struct):
    """What earlier steps learnt, for the next step of the same lease holder:
    a generation directory's survey (only this holder changes its session's
    publications, and a step forgets every directory it touches) and each
    generation's turn state (immutable bytes). Without it every step
    surveys and judges every generation again."""

    #: Publication ID -> (entries, directory mtime, manifest mtime, manifest).
    surveys: dict[str, tuple[tuple[str, ...], int, int | None, PublicationManifest | None]] = msgspec.field(default_factory=dict)
    turn_states: TurnStateFacts = msgspec.field(default_factory=dict)
    #: The lease generation these facts were gathered under.
    holder: tuple[str, str] | None = None
    #: Pack volumes read (immutable under their names).
    volumes: VolumeCache = msgspec.field(default_factory=dict)
    #: Packed generations' manifests, decoded (None: they do not decode).
    packed_manifests: dict[str, PublicationManifest | None] = msgspec.field(default_factory=dict)
    #: Reads of generations' turn-state files other programs made ahead
    #: (published path -> result; see :func:`ahead_ops`), judged at the
    #: next step.
    reads: dict[str, OpResult] = msgspec.field(default_factory=dict)
    #: The turn states :data:`KEPT_TURN_STATES` holds, as last read or
    #: written (None: not known).
    kept: dict[str, KeptTurnState] | None = None

    def hold(self, lease: LeaseHandle) -> None:
        """Forget everything when ``lease`` is not the holder these facts
        were gathered under."""
        holder = (lease.session_id, lease.identity.client_id)
        if self.holder != holder:
            self.surveys.clear()
            self.turn_states.clear()
            self.volumes.clear()
            self.packed_manifests.clear()
            self.reads.clear()
            self.kept = None
            self.holder = holder

    def judged(self, publication_id: str, manifest: PublicationManifest) -> bool:
        """Whether the turn state of the generation ``manifest`` describes
        is known (a kept state only for the sidecar it names)."""
        fact = self.turn_states.get(publication_id)
        if isinstance(fact, KeptTurnState):
            sidecar = manifest.entries.get(SIDECAR_PATH)
            return sidecar is not None and sidecar.sha256 == fact.sidecar_sha256
        return fact is not None

    def read_kept(self, paths: SessionPaths, result: OpResult) -> None:
        """Take the turn states another holder kept (a read of
        :data:`KEPT_TURN_STATES`); a file that does not decode is ignored:
        those states are read again."""
        if not result.ok:
            return
        try:
            record = decode_record(KeptTurnStates, result.value, paths.label(f".publications/{KEPT_TURN_STATES}"))
        except RecordError:
            return
        if record.session_id != paths.session_id:
            return
        self.kept = dict(record.states)
        for pid, state in record.states.items():
            self.turn_states.setdefault(pid, state)

    def kept_ops(self, paths: SessionPaths, listed: Iterable[str]) -> tuple[dict[str, KeptTurnState], list[Operation]]:
        """The turn states known of the generations ``listed``, and the
        write that keeps them when :data:`KEPT_TURN_STATES` holds others
        (to run behind the lease proof). A cache of immutable facts: not
        flushed, and never read without checking each state's sidecar
        digest against the manifest it is used for."""
        states = {pid: fact for pid in sorted(set(listed)) if isinstance(fact := self.turn_states.get(pid), KeptTurnState)}
        if states == self.kept or (not states and self.kept is None):
            return states, []
        record = KeptTurnStates(session_id=paths.session_id, states=states)
        return states, [Replace(f"{paths.publications_dir}/{KEPT_TURN_STATES}", encode_record(record), deferred=True, optional=True)]

    def absorb(self, paths: SessionPaths, publication_id: str, results: list[OpResult], *, quiesced: bool, marked: bool = False) -> _Directory:
        """Judge one directory's :func:`survey_ops` results, and keep the
        survey when it is settled: a directory without a manifest may be a
        publication in flight, unless the caller holds the publisher's lock."""
        d = _Directory(publication_id)
        _accept_survey(paths, d, results)
        settled = d.manifest is not None or (quiesced and not marked)
        if settled and not d.unusable and not d.manifest_problem:
            self.surveys[publication_id] = (d.entries, d.modified_at, d.manifest_mtime, d.manifest)
        return d


class _Directory(msgspec.Struct):
    publication_id: str
    entries: tuple[str, ...] = ()
    modified_at: int = 0
    manifest_mtime: int | None = None
    manifest: PublicationManifest | None = None
    manifest_problem: str | None = None
    marked: bool = False
    unusable: str | None = None
    reasons: list[str] = msgspec.field(default_factory=list)

    @property
    def is_generation(self) -> bool:
        return self.manifest is not None and not self.marked


#: Operations in one directory's :func:`survey_ops` (its results are cut
#: out of a longer program by this count).
SURVEY_OPS = 4


def survey_ops(paths: SessionPaths, pid: str) -> list[Operation]:
    directory = paths.publication_dir(pid)
    return [
        ListDir(directory, optional=True),
        Stat(directory, optional=True),
        Stat(f"{directory}/{MANIFEST_NAME}", optional=True),
        Read(f"{directory}/{MANIFEST_NAME}", optional=True),
    ]


def _accept_survey(paths: SessionPaths, d: _Directory, results: list[OpResult]) -> None:
    listed, stat, manifest_stat, manifest_read = results
    if not listed.ok:
        d.unusable = f"cannot be listed ({listed.reason or listed.status.value})"
        return
    if not stat.ok:
        d.unusable = f"cannot be examined ({stat.reason or stat.status.value})"
        return
    d.entries = tuple(listed.value)
    d.modified_at = stat.value.mtime
    if manifest_read.status is Status.ABSENT:
        return
    label = paths.label(head_path(d.publication_id))
    if not manifest_read.ok or not manifest_stat.ok:
        failed = manifest_read if not manifest_read.ok else manifest_stat
        d.manifest_problem = f"{label}: {failed.reason or failed.status.value}"
        return
    d.manifest_mtime = manifest_stat.value.mtime
    try:
        d.manifest = decode_manifest(label, d.publication_id, manifest_read.value)
    except RecordError as error:
        d.manifest_problem = str(error)


async def _run_batched(target: Target, groups: list[list[Operation]], per_program: int) -> list[list[OpResult]]:
    """Run independent groups of operations, ``per_program`` groups a program."""
    out: list[list[OpResult]] = []
    for start in range(0, len(groups), per_program):
        chunk = groups[start : start + per_program]
        ops = [op for group in chunk for op in group]
        result = await target.run(ControlProgram(ops))
        at = 0
        for group in chunk:
            out.append(list(result.results[at : at + len(group)]))
            at += len(group)
    return out


def _newest(directories: Iterable[_Directory], count: int) -> list[_Directory]:
    """The ``count`` newest by manifest time, plus every one tied with the last."""
    ordered = sorted(directories, key=lambda d: d.manifest_mtime or 0, reverse=True)
    if count <= 0 or not ordered:
        return []
    boundary = ordered[min(count, len(ordered)) - 1].manifest_mtime
    return [d for d in ordered if (d.manifest_mtime or 0) >= (boundary or 0)]


def _marker(paths: SessionPaths, publication_id: str) -> str:
    return f"{paths.publications_dir}/{COLLECTING_MARKER}{publication_id}"


def _removal_ops(paths: SessionPaths, d: _Directory, budget: int) -> tuple[list[Operation], int]:
    """The operations removing ``d`` (a prefix when they exceed ``budget``
    removals) and how many removals they hold."""
    directory = paths.publication_dir(d.publication_id)
    marker = _marker(paths, d.publication_id)
    removes: list[Operation] = [Remove(f"{directory}/{name}") for name in sorted(d.entries, key=lambda n: n != MANIFEST_NAME)]
    removes += [Remove(directory), Remove(marker)]
    removes = removes[:budget]
    lead: list[Operation] = [] if d.marked else [CreateExclusive(marker, b"")]
    return lead + removes, len(removes)


def opening_ops(paths: SessionPaths) -> tuple[Clock, ListDir]:
    """What a step starts from: the target clock and the publications'
    listing (to run in another program: :func:`collect`'s ``opened``)."""
    return Clock(paths.root), ListDir(paths.publications_dir, optional=True)


def kept_read(paths: SessionPaths) -> Read:
    """The read of the turn states kept for this process
    (:meth:`CollectionCache.read_kept`)."""
    return Read(f"{paths.publications_dir}/{KEPT_TURN_STATES}", optional=True)


class Ahead(msgspec.Struct):
    """Reads a holder's head commit carries for its next collection step,
    after :func:`opening_ops`: the survey of the directories the last
    listing showed that ``cache`` has not surveyed, the one the commit
    publishes included; the turn-state files of the generations whose
    manifests are known and whose turn state is not; the pack volumes not
    read. A step that finds all of it in ``cache`` runs no program before
    its removal (:func:`collect` with the commit's ``opened``). The commit
    also keeps the turn states known for the next process
    (:meth:`CollectionCache.kept_ops`)."""

    surveyed: list[str]
    read: list[str]
    volumes: list[str]
    #: Surveyed directories a collecting marker was listed beside.
    marked: set[str]
    #: The turn states the commit writes (None: it writes none).
    keeping: dict[str, KeptTurnState] | None = None

    @classmethod
    def plan(
        cls, paths: SessionPaths, cache: CollectionCache, listed: Iterable[str], manifests: Mapping[str, PublicationManifest],
        publishing: str | None = None,
    ) -> tuple[Ahead, list[Operation]]:
        """``manifests``: those of generations this holder knows without
        a survey (the head it resumed from, the one it commits);
        ``publishing``: the ID of the publication the commit makes."""
        from ..transactions.redo import turn_state_reads

        names = set(listed)
        pids = sorted(n for n in names if _PUBLICATION_NAME.match(n) and n not in cache.surveys)
        known = {pid: survey[3] for pid, survey in cache.surveys.items() if survey[3] is not None}
        known.update(manifests)
        if publishing is not None and publishing not in cache.surveys and publishing not in pids:
            pids.append(publishing)
        reads = sorted(
            {
                path
                for pid, manifest in known.items()
                if not cache.judged(pid, manifest)
                for path in turn_state_reads(manifest)
                if path not in cache.reads
            }
        )
        volumes = sorted(n for n in names if is_volume_name(n) and n not in cache.volumes)
        ops: list[Operation] = [*opening_ops(paths)]
        for pid in pids:
            ops += survey_ops(paths, pid)
        ops += [Read(paths.inside(path), optional=True) for path in reads]
        ops += [Read(f"{paths.publications_dir}/{name}", optional=True) for name in volumes]
        keeping, write = cache.kept_ops(paths, names | ({publishing} if publishing else set()))
        ops += write
        marked = {pid for pid in pids if f"{COLLECTING_MARKER}{pid}" in names}
        return cls(pids, reads, volumes, marked, keeping if write else None), ops

    def absorb(self, paths: SessionPaths, cache: CollectionCache, results: tuple[OpResult, ...]) -> None:
        """Keep what the carrying commit read (under the publisher's lock:
        no publication of this holder was in flight)."""
        at = len(opening_ops(paths))
        for pid in self.surveyed:
            cache.absorb(paths, pid, list(results[at : at + SURVEY_OPS]), quiesced=True, marked=pid in self.marked)
            at += SURVEY_OPS
        for path in self.read:
            if results[at].ok:
                cache.reads[path] = results[at]
            at += 1
        for name in self.volumes:
            result = results[at]
            at += 1
            if result.ok:
                try:
                    cache.volumes[name] = decode_volume(paths.label(f".publications/{name}"), result.value, paths.session_id)
                except RecordError:
                    pass  # the step reads it again and reports it
        if self.keeping is not None:
            cache.kept = self.keeping if results[at].ok else None


class _Missing(Exception):
    """A judgement wanted a file no commit read ahead."""


class _InHand:
    """A target for judging only what is in hand: any program it would
    have to run means a read is missing (raised before any I/O)."""

    async def run(self, program: ControlProgram):
        raise _Missing


def judge_ahead(paths: SessionPaths, cache: CollectionCache) -> None:
    """Judge now, without a program, the turn states of the generations
    whose files a commit read ahead (:class:`Ahead`), so that the next
    commit keeps them; a generation whose sidecar names another prompt page
    than the one read is left for the step (its judgement would read it)."""
    from ..transactions.redo import (
        PublishedHead,
        turn_state_reads,
        turn_state_representatives,
    )

    in_hand = _InHand()
    for pid, (_entries, _dir_mtime, mtime, manifest) in list(cache.surveys.items()):
        if manifest is None or cache.judged(pid, manifest):
            continue
        wanted = turn_state_reads(manifest)
        if not wanted or not all(path in cache.reads for path in wanted):
            continue
        judging = turn_state_representatives(
            in_hand, paths, [PublishedHead(pid, manifest, mtime or 0)], None,  # type: ignore[arg-type]
            known=cache.turn_states, prefetched=cache.reads, reader=EntryReader(in_hand, paths, Pack(paths.session_id)),  # type: ignore[arg-type]
        )
        # Everything it reads is in hand, so it runs to its end at once.
        try:
            judging.send(None)
        except StopIteration:
            continue
        except _Missing:
            continue
        judging.close()


def plan_riding_removal(
    lease: LeaseHandle, cache: CollectionCache, listed: Iterable[str], committing: PublicationManifest | None, *,
    keep_recent: int = DEFAULT_KEEP_RECENT, max_removals: int = DEFAULT_MAX_REMOVALS,
) -> tuple[list[Operation], CollectionReport] | None:
    """The removal :func:`collect` would run now (quiesced: the caller
    holds the publisher's lock), judged from ``cache`` and the publications
    last ``listed`` alone, for a head commit of this holder to carry after
    its rotation (the rotation is the step's lease proof); ``committing``:
    the manifest that commit makes the head (every file it names is
    retained). What the commit removes could only be retained again by a
    newer head naming it, and that head is ``committing``: a newer head
    shrinks the recent window and supersedes, never revives. None when the
    judgement wants a read no program made, a pack is due (a program of its
    own) or nothing is listed. The report's ``removed`` and ``trimmed`` are
    what the operations remove and trim when they all succeed."""
    ops: list[Operation] = []
    names = tuple(listed)
    if not names or lease.publication_head is None:
        return None
    opened = (OpResult(Status.OK, lease.now), OpResult(Status.OK, names))
    step = collect(
        lease, keep_recent=keep_recent, max_removals=max_removals, quiesced=True, cache=cache, opened=opened,
        _planning=ops, _committing=committing,
    )
    try:
        step.send(None)
    except StopIteration as done:
        return ops, done.value
    except _Missing:
        return None
    step.close()  # it waited for something: not in hand
    return None


async def collect(
    lease: LeaseHandle,
    *,
    max_removals: int = DEFAULT_MAX_REMOVALS,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    quiesced: bool = False,
    cache: CollectionCache | None = None,
    pack_batch: int | None = DEFAULT_PACK_BATCH,
    opened: tuple[OpResult, ...] | None = None,
    _planning: list[Operation] | None = None,
    _committing: PublicationManifest | None = None,
) -> CollectionReport:
    """One bounded collection step for the session ``lease`` holds.

    Removes at most ``max_removals`` files and directories, in one program
    that first proves ``lease`` is still the current generation. Call again
    while ``remaining`` is non-zero. Raises :class:`LeaseLost` when the handle
    no longer holds the lease. ``quiesced``: the caller holds the
    publisher's lock, so nothing newer than the head can be in flight.
    ``cache``: facts earlier steps of this lease holder learnt (see
    :class:`CollectionCache`). ``pack_batch``: once this many retained
    generations lie outside the recent window, they are written into the
    session's pack (:mod:`~..authority.packed`) in one step (None: never).
    ``opened``: the results of :func:`opening_ops`, run by a program of
    this holder after which nothing was published (the head commit that
    carried them), so the step need not run them again.
    """
    if isinstance(max_removals, bool) or not isinstance(max_removals, int) or max_removals < 1:
        raise ValueError("max_removals is a positive whole number")
    if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
        raise ValueError("keep_recent is a whole number of generations")
    if pack_batch is not None and (isinstance(pack_batch, bool) or not isinstance(pack_batch, int) or pack_batch < 1):
        raise ValueError("pack_batch is a positive whole number of generations")
    if lease.lost or lease.released:
        raise LeaseLost(lease.session_id, "this client no longer holds the lease")
    # Planning judges only what is in hand (:func:`plan_riding_removal`).
    target, paths = (lease.target if _planning is None else _InHand()), lease.paths
    head = lease.publication_head

    clock, listing = opening_ops(paths)
    first = tuple(opened) if opened is not None else (await target.run(ControlProgram([clock, listing]))).results
    raise_for_result(clock, first[0])
    now = int(first[0].value)
    if first[1].status is Status.ABSENT:
        return CollectionReport((), (), 0)
    raise_for_result(listing, first[1])

    foreign: list[KeptPublication] = []
    directories: list[_Directory] = []
    markers: set[str] = set()
    debris: list[str] = []
    volume_names: list[str] = []
    for name in first[1].value:
        if is_volume_name(name):
            volume_names.append(name)
        elif _PUBLICATION_NAME.match(name):
            directories.append(_Directory(name))
        elif name.startswith(COLLECTING_MARKER) and _PUBLICATION_NAME.match(name[len(COLLECTING_MARKER) :]):
            markers.add(name[len(COLLECTING_MARKER) :])
        elif _MARKER_DEBRIS.match(name) or VOLUME_DEBRIS.match(name):
            debris.append(f"{paths.publications_dir}/{name}")
        elif not name.startswith("."):
            foreign.append(KeptPublication(name, ("not a publication directory",)))
    if cache is not None:
        cache.hold(lease)
    unknown = [d.publication_id for d in directories if cache is None or d.publication_id not in cache.surveys]
    surveyed = await _run_batched(target, [survey_ops(paths, pid) for pid in unknown], _SURVEY_BATCH)
    judging = cache if cache is not None else CollectionCache()
    fresh = {pid: judging.absorb(paths, pid, results, quiesced=quiesced, marked=pid in markers) for pid, results in zip(unknown, surveyed)}
    for at, d in enumerate(directories):
        if d.publication_id in fresh:
            d = directories[at] = fresh[d.publication_id]
        else:
            d.entries, d.modified_at, d.manifest_mtime, d.manifest = judging.surveys[d.publication_id]
        d.marked = d.publication_id in markers
    if cache is not None:
        for gone in set(cache.surveys) - {d.publication_id for d in directories}:
            del cache.surveys[gone]
    by_id = {d.publication_id: d for d in directories}
    #: Markers whose directory is already gone (a step stopped just before
    #: removing the marker).
    stale_markers = sorted(markers - set(by_id))

    def report_kept(blocked: str | None = None) -> CollectionReport:
        kept = [KeptPublication(d.publication_id, tuple(d.reasons)) for d in directories if d.reasons]
        return CollectionReport((), tuple(foreign + kept), 0, blocked=blocked)

    def block(why: str) -> CollectionReport:
        for d in directories:
            d.reasons.append("collection blocked")
        return report_kept(blocked=why)

    if head is None:
        for d in directories:
            d.reasons.append("the session has no committed head yet")
        return report_kept()
    head_dir = by_id.get(publication_id_of(head))
    if head_dir is None or head_dir.manifest is None:
        problem = head_dir.manifest_problem if head_dir is not None else None
        return block(problem or "the committed head is missing")
    head_time = head_dir.manifest_mtime or 0

    for d in directories:
        if d.unusable:
            d.reasons.append(d.unusable)
        elif d.marked:
            continue
        elif d.manifest_problem:
            d.reasons.append(f"unreadable manifest: {d.manifest_problem}")
        elif quiesced:
            continue
        elif d.manifest is None and d.modified_at >= head_time:
            d.reasons.append("uncommitted and not older than the head (a publication may be in flight)")
        elif d.manifest is not None and d is not head_dir and (d.manifest_mtime or 0) >= head_time:
            d.reasons.append("not older than the head (a publication may be in flight)")

    # An unreadable manifest inside the recency window blocks collection: we
    # cannot know which bytes it names.
    judged = [d for d in directories if d.manifest_mtime is not None and not d.marked and not d.unusable]
    for d in _newest(judged, keep_recent):
        if d.manifest_problem:
            return block(f"a recent manifest is unreadable: {d.manifest_problem}")

    generations = [d for d in directories if d.is_generation and not d.unusable]
    # Redo's module (and Rewind's below it) only once there is something to
    # judge: an open session's collector is built by every CLI command.
    from ..transactions.redo import PublishedHead, turn_state_representatives

    candidates = [PublishedHead(d.publication_id, d.manifest, d.manifest_mtime or 0) for d in generations]  # type: ignore[arg-type]
    pack = await read_pack(target, paths, volume_names, cache=cache.volumes if cache is not None else None)
    foreign += [KeptPublication(name, (f"unreadable pack volume: {why}",)) for name, why in sorted(pack.unreadable.items())]
    loose_ids = {d.publication_id for d in generations}
    manifests = cache.packed_manifests if cache is not None else {}
    for gone in set(manifests) - set(pack.generations):
        del manifests[gone]
    for pid, packed_generation in sorted(pack.generations.items()):
        manifest = _packed_manifest(paths, pack, pid, manifests) if pid not in loose_ids else None
        if manifest is not None:  # else Redo skips it too; the pack keeps it
            candidates.append(PublishedHead(pid, manifest, packed_generation.mtime))
    offered, unjudged = await turn_state_representatives(
        target, paths, candidates, head, known=cache.turn_states if cache is not None else None, settled_current=True,
        reader=EntryReader(target, paths, pack), prefetched=cache.reads if cache is not None else None,
    )
    if cache is not None:
        cache.reads.clear()  # judged: their facts are in ``turn_states`` now
    recent = {d.publication_id for d in _newest(generations, keep_recent)}

    retained: dict[str, _Directory] = {}

    def retain(d: _Directory, why: str) -> None:
        d.reasons.append(why)
        retained[d.publication_id] = d

    retain(head_dir, "current head")
    for d in _newest(generations, keep_recent):
        if d is not head_dir:
            retain(d, "recent generation")
    for skipped in unjudged:
        if skipped.publication_id in by_id:
            retain(by_id[skipped.publication_id], f"turn state unknown: {skipped.reason}")
    to_pack: list[_Directory] = []
    for h in offered:
        d = by_id.get(h.publication_id)
        if d is None:
            continue  # it lives in the pack already
        turns = h.turn_state[0]
        why = f"representative of {turns} settled turn{'' if turns == 1 else 's'} (offered by Redo)"
        if d is head_dir or d.publication_id in recent:
            retain(d, why)
        elif d.publication_id in pack.generations:
            pass  # packed: the loose copy goes like a superseded directory
        else:
            retain(d, why)
            to_pack.append(d)
    if pack_batch is not None and len(to_pack) >= pack_batch:
        if _planning is not None:
            raise _Missing  # packing is a program of its own
        # What the pack must go on holding: what Redo offers, and what
        # cannot be judged.
        keep = {h.publication_id for h in offered} | {k.publication_id for k in unjudged}
        packing = await _pack_step(lease, pack, to_pack, volume_names, report_kept(), keep, manifests)
        if packing is not None:
            return packing
        # None of them could be read whole now: they stay loose, and the
        # step goes on with the rest of collection.
    named_files: dict[str, set[str]] = {}
    # A head being committed is retained like the head (it may reuse bytes
    # of any directory).
    naming = [(d, d.manifest) for d in retained.values()] + ([(None, _committing)] if _committing is not None else [])
    for d, manifest in naming:
        assert manifest is not None
        for entry in manifest.entries.values():
            _, pid, name = entry.published.split("/")
            named = by_id.get(pid)
            named_files.setdefault(pid, set()).add(name)
            if named is not None and named is not d and _NAMED not in named.reasons:
                named.reasons.append(_NAMED)
    for d in directories:
        if d.marked and d.reasons:
            # Cannot happen through this module (nothing retained is ever
            # marked, and retention only grows with newer generations), but a
            # marker never outranks a reference.
            d.reasons.append("marked for collection but still retained")

    # Directories kept only for files a retained manifest names lose the rest.
    trims: list[tuple[_Directory, list[str]]] = []
    for d in directories:
        if d.reasons != [_NAMED] or d.publication_id in retained:
            continue
        keep = named_files.get(d.publication_id, set())
        extra = [name for name in d.entries if name not in keep]
        if extra:
            trims.append((d, sorted(extra, key=lambda n: n != MANIFEST_NAME)))
            d.reasons[0] = f"{_NAMED} (trimmed to the {len(keep)} file{'' if len(keep) == 1 else 's'} retained manifests name)"

    candidates = [d for d in directories if not d.reasons]
    candidates.sort(key=lambda d: (not d.marked, d.manifest_mtime if d.manifest_mtime is not None else d.modified_at, d.publication_id))
    kept = tuple(foreign + [KeptPublication(d.publication_id, tuple(d.reasons)) for d in directories if d.reasons])
    superseded_volumes = _superseded_volumes(pack, volume_names)
    if not candidates and not trims and not stale_markers and not debris and not superseded_volumes:
        return CollectionReport((), kept, 0)

    if _planning is None and now + _RENEW_MARGIN >= lease.record.expires_at:
        await lease.renew()
    generation, raw = lease.generation, lease.raw
    ops: list[Operation] = [
        # The proof: exactly our generation, and no generation above it.
        Verify(paths.generation(generation), raw),
        Verify(paths.generation(generation + 1), None),
    ]
    proof = len(ops)
    # What this step removes, within the budget: obsolete manifests first
    # (retired before any payload goes), then the payloads.
    retire: list[Operation] = []
    payloads: list[Operation] = []
    budget = max_removals
    stale = [*debris, *(_marker(paths, pid) for pid in stale_markers), *(f"{paths.publications_dir}/{n}" for n in superseded_volumes)]
    for path in stale[:budget]:
        retire.append(Remove(path))
        budget -= 1
    for d in candidates:
        if budget == 0:
            break
        removal, count = _removal_ops(paths, d, budget)
        # Its marker and its manifest retire it; the rest are payloads.
        retiring = [op for op in removal if isinstance(op, CreateExclusive) or op.path.endswith(f"/{MANIFEST_NAME}")]
        retire += retiring
        payloads += [op for op in removal if not any(op is r for r in retiring)]
        budget -= count
    for d, names in trims:
        if budget == 0:
            break
        directory = paths.publication_dir(d.publication_id)
        for name in names[:budget]:
            (retire if name == MANIFEST_NAME else payloads).append(Remove(f"{directory}/{name}"))
        budget -= min(budget, len(names))
    ops += retire + payloads
    keeping: dict[str, KeptTurnState] | None = None
    if cache is not None and _planning is None:  # the turn states of what stays, for the next process
        keeping, write = cache.kept_ops(paths, [d.publication_id for d in directories if d not in candidates])
        ops += write
        keeping = keeping if write else None
    if cache is not None:  # what this step touches is surveyed afresh next time
        for d in candidates:
            cache.surveys.pop(d.publication_id, None)
        for d, _names in trims:
            cache.surveys.pop(d.publication_id, None)
    if _planning is not None:  # the carrying commit's rotation is the proof
        _planning += ops[proof:]
        planned = {op.path for op in ops[proof:] if isinstance(op, Remove)}
        return CollectionReport(
            tuple(d.publication_id for d in candidates if paths.publication_dir(d.publication_id) in planned), kept,
            len(candidates) + len(trims), trimmed=tuple(d.publication_id for d, _names in trims),
        )
    result = await target.run(ControlProgram(ops))

    if result.stopped_at is not None and result.stopped_at < proof:
        failed = result[result.stopped_at]
        return CollectionReport(
            (), kept, len(candidates) + len(stale_markers),
            stopped=f"the lease moved before the removal ({failed.reason or failed.status.value})",
        )
    if keeping is not None and result.results[-1].ok:
        cache.kept = keeping  # type: ignore[union-attr]
    removed_paths = {op.path for op, r in zip(ops[proof:], result.results[proof:]) if isinstance(op, Remove) and r.ok}
    removed = tuple(d.publication_id for d in candidates if paths.publication_dir(d.publication_id) in removed_paths)
    trimmed = tuple(
        d.publication_id
        for d, names in trims
        if all(f"{paths.publication_dir(d.publication_id)}/{name}" in removed_paths for name in names)
    )
    # Markers whose directory is gone but which this step did not remove.
    orphaned_markers = sum(1 for pid in (*stale_markers, *removed) if _marker(paths, pid) not in removed_paths)
    orphaned_markers += sum(1 for path in debris if path not in removed_paths)
    orphaned_markers += sum(1 for n in superseded_volumes if f"{paths.publications_dir}/{n}" not in removed_paths)
    stopped = None
    if result.stopped_at is not None:
        failed = result[result.stopped_at]
        where = ops[result.stopped_at].path[len(paths.root) + 1 :]
        stopped = f"{where}: {failed.reason or failed.status.value}"
    return CollectionReport(
        removed=removed,
        kept=kept,
        remaining=len(candidates) - len(removed) + len(trims) - len(trimmed) + orphaned_markers,
        removed_entries=len(removed_paths),
        stopped=stopped,
        trimmed=trimmed,
    )


def _superseded_volumes(pack: Pack, listed: list[str]) -> list[str]:
    """Listed volumes another listed volume says it holds (a packing step
    was cut short before removing them)."""
    replaced = {name for volume in pack.volumes.values() for name in volume.replaces}
    return sorted(name for name in listed if name in replaced)


async def _pack_step(
    lease: LeaseHandle, pack: Pack, to_pack: list[_Directory], listed: list[str], kept: CollectionReport, keep: set[str],
    manifests: dict[str, PublicationManifest | None],
) -> CollectionReport | None:
    """Write ``to_pack`` (retained generations outside the recent window)
    into a new pack volume, with the records of the small volumes folded in,
    in one program under the lease proof; the folded volumes are removed
    after it. Of the folded records only the generations in ``keep`` and
    the blobs they need (with their delta bases) are copied: a packed
    generation Redo no longer offers goes then. The loose directories are
    judged again by the next step, which finds them packed and removes
    them like superseded ones. None: none of them could be read whole."""
    target, paths = lease.target, lease.paths
    reader = EntryReader(target, paths, pack)
    unpacked = []
    for d in to_pack:
        assert d.manifest is not None
        unpacked += [e for e in d.manifest.entries.values() if e.sha256 not in pack.blobs]
    found = await reader.read(unpacked, batch=_SURVEY_BATCH)
    loose = {(e.sha256, e.size): data for e, data in zip(unpacked, found) if data is not None}

    # Each logical file's new version is a delta of its version in the
    # previously packed generation (the newest of the pack, then each new one).
    previous: dict[str, str] = {}
    newest = max(pack.generations.values(), key=lambda g: (g.mtime, g.publication_id), default=None)
    newest_manifest = _packed_manifest(paths, pack, newest.publication_id, manifests) if newest is not None else None
    if newest is not None and newest_manifest is not None:
        previous = {logical: e.sha256 for logical, e in newest_manifest.entries.items()}
        previous[_MANIFEST_KEY] = newest.manifest
    blobs: dict[str, PackedBlob] = {}
    content: dict[str, bytes] = {}
    depth: dict[str, int] = {}

    def bytes_of(sha: str) -> bytes | None:
        if sha in content:
            return content[sha]
        entry = pack.blobs.get(sha)
        return pack.get(sha, entry.size) if entry is not None else None

    def add(logical: str, data: bytes, sha: str) -> None:
        if sha in blobs or sha in pack.blobs:
            return
        base_sha = previous.get(logical)
        base_bytes = bytes_of(base_sha) if base_sha else None
        base_depth = depth.get(base_sha, pack.depth(base_sha)) if base_sha else 0  # type: ignore[arg-type]
        base = (base_sha, base_bytes) if base_bytes is not None and base_depth < MAX_CHAIN else None
        blob = make_blob(data, base)  # type: ignore[arg-type]
        blobs[sha] = blob
        content[sha] = data
        depth[sha] = base_depth + 1 if blob.base is not None else 0

    generations: list[PackedGeneration] = []
    packed: list[str] = []
    for d in sorted(to_pack, key=lambda d: (d.manifest_mtime or 0, d.publication_id)):
        assert d.manifest is not None
        entries = d.manifest.entries
        if any(e.sha256 not in pack.blobs and (e.sha256, e.size) not in loose for e in entries.values()):
            continue  # its bytes cannot be read now: it stays loose
        for logical, e in sorted(entries.items()):
            if e.sha256 not in pack.blobs:
                add(logical, loose[(e.sha256, e.size)], e.sha256)
        raw = encode_record(d.manifest)
        sha = hashlib.sha256(raw).hexdigest()
        add(_MANIFEST_KEY, raw, sha)
        generations.append(PackedGeneration(d.publication_id, sha, len(raw), d.manifest_mtime or 0))
        packed.append(d.publication_id)
        previous = {logical: e.sha256 for logical, e in entries.items()}
        previous[_MANIFEST_KEY] = sha
    if not generations:
        return None

    small = [n for n, v in sorted(pack.volumes.items()) if sum(len(b.data) for b in v.blobs) < SMALL_VOLUME]
    replaces = sorted(set(small) | {r for n in small for r in pack.volumes[n].replaces if r in listed})
    folded_generations = [g for n in small for g in pack.volumes[n].generations if g.publication_id in keep]
    # The new generations may name, or be deltas of, folded blobs too.
    roots = [sha for d in to_pack if d.publication_id in packed for sha in (e.sha256 for e in d.manifest.entries.values())]  # type: ignore[union-attr]
    roots += [b.base for b in blobs.values() if b.base is not None] + [g.manifest for g in generations]
    folded_blobs = _needed(paths, pack, [b for n in small for b in pack.volumes[n].blobs], folded_generations, roots, manifests)
    volume = PackVolume(
        format=1,
        session_id=paths.session_id,
        replaces=replaces,
        generations=_first_of(folded_generations + generations, lambda g: g.publication_id),
        blobs=_first_of(folded_blobs + list(blobs.values()), lambda b: b.sha256),
    )
    name = volume_name(os.urandom(16).hex())
    clock = Clock(paths.root)
    now = (await target.run(ControlProgram([clock])))[0]
    raise_for_result(clock, now)
    if int(now.value) + _RENEW_MARGIN >= lease.record.expires_at:
        await lease.renew()
    ops: list[Operation] = [
        Verify(paths.generation(lease.generation), lease.raw),
        Verify(paths.generation(lease.generation + 1), None),
        # Flushed before it is linked under its name (not deferred): the
        # removals after it rely on it, and a power loss must not tear it.
        CreateExclusive(f"{paths.publications_dir}/{name}", encode_volume(volume)),
    ]
    written = len(ops)
    ops += [Remove(f"{paths.publications_dir}/{n}", optional=True) for n in replaces]
    result = await target.run(ControlProgram(ops))
    if result.stopped_at is not None and result.stopped_at < written:
        failed = result[result.stopped_at]
        why = failed.reason or failed.status.value
        where = "the lease moved before packing" if result.stopped_at < 2 else "packing stopped"
        return CollectionReport((), kept.kept, len(to_pack), stopped=f"{where} ({why})")
    return CollectionReport((), kept.kept, len(packed), packed=tuple(packed))


def _packed_manifest(
    paths: SessionPaths, pack: Pack, publication_id: str, manifests: dict[str, PublicationManifest | None]
) -> PublicationManifest | None:
    """A packed generation's manifest, decoded once (None: it does not
    rebuild or decode; Redo reports it)."""
    if publication_id not in manifests:
        raw = pack.manifest_bytes(publication_id)
        try:
            manifests[publication_id] = decode_manifest(paths.label(head_path(publication_id)), publication_id, raw) if raw else None
        except RecordError:
            manifests[publication_id] = None
    return manifests[publication_id]


def _needed(
    paths: SessionPaths,
    pack: Pack,
    blobs: list[PackedBlob],
    generations: list[PackedGeneration],
    roots: list[str],
    manifests: dict[str, PublicationManifest | None],
) -> list[PackedBlob]:
    """The ``blobs`` that ``generations`` name (their manifests and every
    entry), that ``roots`` name, or that those are deltas of, however deep."""
    by_sha = {b.sha256: b for b in blobs}
    pending = list(roots)
    for g in generations:
        pending.append(g.manifest)
        manifest = _packed_manifest(paths, pack, g.publication_id, manifests)
        if manifest is None:
            return blobs  # cannot tell what it names: keep everything
        pending += [e.sha256 for e in manifest.entries.values()]
    needed: set[str] = set()
    while pending:
        sha = pending.pop()
        if sha in needed:
            continue
        needed.add(sha)
        blob = by_sha.get(sha) or pack.blobs.get(sha)
        if blob is not None and blob.base is not None:
            pending.append(blob.base)
    return [b for b in blobs if b.sha256 in needed]


#: The key a generation's manifest blob is chained under.
_MANIFEST_KEY = "\x00manifest"


def _first_of(items: list, key) -> list:
    seen: set = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out
