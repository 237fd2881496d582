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
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...targets import (
    Clock,
    ControlProgram,
    CreateExclusive,
    ListDir,
    Operation,
    OpResult,
    Read,
    Remove,
    Stat,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from ..authority.lease import LeaseHandle
from ..authority.publication import decode_manifest
from ..authority.records import PublicationManifest, RecordError
from ..errors import LeaseLost
from ..layout import MANIFEST_NAME, SessionPaths, head_path

if TYPE_CHECKING:
    from ..transactions.redo import TurnStateFacts

DEFAULT_KEEP_RECENT = 3
DEFAULT_MAX_REMOVALS = 64
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


@dataclass(frozen=True)
class KeptPublication:
    publication_id: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CollectionReport:
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


@dataclass
class CollectionCache:
    """What earlier steps learnt, for the next step of the same lease holder:
    a generation directory's survey (only this holder changes its session's
    publications, and a step forgets every directory it touches) and each
    generation's turn state (immutable bytes). Without it every step
    surveys and judges every generation again."""

    #: Publication ID -> (entries, directory mtime, manifest mtime, manifest).
    surveys: dict[str, tuple[tuple[str, ...], int, int | None, PublicationManifest | None]] = field(default_factory=dict)
    turn_states: TurnStateFacts = field(default_factory=dict)
    #: The lease generation these facts were gathered under.
    holder: tuple[str, str] | None = None


@dataclass
class _Directory:
    publication_id: str
    entries: tuple[str, ...] = ()
    modified_at: int = 0
    manifest_mtime: int | None = None
    manifest: PublicationManifest | None = None
    manifest_problem: str | None = None
    marked: bool = False
    unusable: str | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def is_generation(self) -> bool:
        return self.manifest is not None and not self.marked


def _survey_ops(paths: SessionPaths, pid: str) -> list[Operation]:
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


async def collect(
    lease: LeaseHandle,
    *,
    max_removals: int = DEFAULT_MAX_REMOVALS,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    quiesced: bool = False,
    cache: CollectionCache | None = None,
) -> CollectionReport:
    """One bounded collection step for the session ``lease`` holds.

    Removes at most ``max_removals`` files and directories, in one program
    that first proves ``lease`` is still the current generation. Call again
    while ``remaining`` is non-zero. Raises :class:`LeaseLost` when the handle
    no longer holds the lease. ``quiesced``: the caller holds the
    publisher's lock, so nothing newer than the head can be in flight.
    ``cache``: facts earlier steps of this lease holder learnt (see
    :class:`CollectionCache`).
    """
    if isinstance(max_removals, bool) or not isinstance(max_removals, int) or max_removals < 1:
        raise ValueError("max_removals is a positive whole number")
    if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
        raise ValueError("keep_recent is a whole number of generations")
    if lease.lost or lease.released:
        raise LeaseLost(lease.session_id, "this client no longer holds the lease")
    target, paths = lease.target, lease.paths
    head = lease.publication_head

    clock = Clock(paths.root)
    listing = ListDir(paths.publications_dir, optional=True)
    first = await target.run(ControlProgram([clock, listing]))
    raise_for_result(clock, first[0])
    now = int(first[0].value)
    if first[1].status is Status.ABSENT:
        return CollectionReport((), (), 0)
    raise_for_result(listing, first[1])

    foreign: list[KeptPublication] = []
    directories: list[_Directory] = []
    markers: set[str] = set()
    debris: list[str] = []
    for name in first[1].value:
        if _PUBLICATION_NAME.match(name):
            directories.append(_Directory(name))
        elif name.startswith(COLLECTING_MARKER) and _PUBLICATION_NAME.match(name[len(COLLECTING_MARKER) :]):
            markers.add(name[len(COLLECTING_MARKER) :])
        elif _MARKER_DEBRIS.match(name):
            debris.append(f"{paths.publications_dir}/{name}")
        elif not name.startswith("."):
            foreign.append(KeptPublication(name, ("not a publication directory",)))
    if cache is not None and cache.holder != (lease.session_id, lease.identity.client_id):
        cache.surveys.clear()
        cache.turn_states.clear()
        cache.holder = (lease.session_id, lease.identity.client_id)
    unknown = [d for d in directories if cache is None or d.publication_id not in cache.surveys]
    surveyed = await _run_batched(target, [_survey_ops(paths, d.publication_id) for d in unknown], _SURVEY_BATCH)
    for d, results in zip(unknown, surveyed):
        _accept_survey(paths, d, results)
        # A directory without a manifest may be a publication in flight,
        # unless the caller holds the publisher's lock.
        settled = d.manifest is not None or (quiesced and d.publication_id not in markers)
        if cache is not None and settled and not d.unusable and not d.manifest_problem:
            cache.surveys[d.publication_id] = (d.entries, d.modified_at, d.manifest_mtime, d.manifest)
    fresh = {d.publication_id for d in unknown}
    for d in directories:
        if cache is not None and d.publication_id not in fresh:
            d.entries, d.modified_at, d.manifest_mtime, d.manifest = cache.surveys[d.publication_id]
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
    head_dir = by_id.get(head.split("/")[1])
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
    offered, unjudged = await turn_state_representatives(
        target, paths, candidates, head, known=cache.turn_states if cache is not None else None, settled_current=True
    )

    retained: dict[str, _Directory] = {}

    def retain(d: _Directory, why: str) -> None:
        d.reasons.append(why)
        retained[d.publication_id] = d

    retain(head_dir, "current head")
    for d in _newest(generations, keep_recent):
        if d is not head_dir:
            retain(d, "recent generation")
    for skipped in unjudged:
        retain(by_id[skipped.publication_id], f"turn state unknown: {skipped.reason}")
    for h in offered:
        turns = h.turn_state[0]
        retain(by_id[h.publication_id], f"representative of {turns} settled turn{'' if turns == 1 else 's'} (offered by Redo)")
    named_files: dict[str, set[str]] = {}
    for d in list(retained.values()):
        assert d.manifest is not None
        for entry in d.manifest.entries.values():
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
    if not candidates and not trims and not stale_markers and not debris:
        return CollectionReport((), kept, 0)

    if now + _RENEW_MARGIN >= lease.record.expires_at:
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
    for path in [*debris, *(_marker(paths, pid) for pid in stale_markers)][:budget]:
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
    if cache is not None:  # what this step touches is surveyed afresh next time
        for d in candidates:
            cache.surveys.pop(d.publication_id, None)
        for d, _names in trims:
            cache.surveys.pop(d.publication_id, None)
    result = await target.run(ControlProgram(ops))

    if result.stopped_at is not None and result.stopped_at < proof:
        failed = result[result.stopped_at]
        return CollectionReport(
            (), kept, len(candidates) + len(stale_markers),
            stopped=f"the lease moved before the removal ({failed.reason or failed.status.value})",
        )
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
