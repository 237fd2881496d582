"""Expired-session cleanup: remove sessions nobody has used for a configured
age, always keeping the most recent ones.

Eligibility is judged against the target clock read by the listing survey
(:func:`~.listing.survey_sessions`), never the client's wall clock. A session
is removed only when all of these hold:

- it is not among the ``keep_recent`` most recently updated sessions (a long
  absence must not delete the very session the user came back to resume);
- its last update -- the latest of the sidecar's ``updated_at``, the lease's
  last renewal and the session directory's modification time -- is older
  than ``max_age_days``;
- its lease is free (no record, released, aborted) or an expired claiming or
  active record without an unsettled mutation; a live lease (any client's,
  this one's included), an expired *publishing* record and an unsettled
  mutation keep it;
- the caller does not have it open;
- it holds no recovery marker (``.recovery/``, :mod:`.recovery`): an
  interrupted Rewind or Redo whose file changes may still need rolling back
  or finishing is left for recovery, even when the marker is unreadable;
- its lease record is readable (a session whose lease cannot be judged is
  never removed); an unreadable manifest or sidecar does not protect an
  expired session.

A session directory with nothing committed that is no session -- the
remains of an interrupted Fork, Save As or Worktree Fork, or of a first
save cut short (:func:`~.listing.find_unfinished`) -- is removed whatever
its age once no live lease holds it (:func:`remove_unfinished_sessions`,
also run by every cleanup), and never counts among the recent sessions.

Removal claims the next lease generation (no prompt: the previous owner's
lease has expired), checks that the generation it claimed over is the one it
judged, rechecks the recovery marker (none can appear once the claim is held:
a marker is written behind the lease), walks the session tree, and deletes it in one control program that
first proves the claim is still the newest generation. A competing claim
keeps the session; a kept session's claim is released.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping

import msgspec

from ...targets import (
    ControlProgram,
    ListDir,
    Operation,
    Remove,
    Stat,
    Status,
    Target,
    TargetError,
    Verify,
    read_target_clock,
)
from ..authority.lease import (
    ClientIdentity,
    LeaseHandle,
    LeaseStanding,
    acquire_lease,
    observe_lease,
)
from ..authority.records import LeaseState
from ..authority.workspace import check_session_id
from ..errors import StoreError
from ..layout import SessionPaths
from ..transactions.recovery import find_recovery
from .listing import (
    InspectSubject,
    SessionSurvey,
    UnfinishedSession,
    find_unfinished,
    survey_sessions,
)

DEFAULT_MAX_AGE_DAYS = 30
DEFAULT_KEEP_RECENT = 3
_DAY = 86_400
#: Lease taken for the deletion itself.
_CLAIM_SECONDS = 60
#: Extra attempts at the final empty-directory removal (an observer's clock
#: probe can sit in the session directory for an instant).
_ROOT_ATTEMPTS = 3


class RemovedSession(msgspec.Struct, frozen=True):
    session_id: str
    last_update: int
    #: Why it qualified, for people.
    reason: str


class KeptSession(msgspec.Struct, frozen=True):
    name: str
    reason: str


class CleanupReport(msgspec.Struct, frozen=True):
    removed: tuple[RemovedSession, ...]
    kept: tuple[KeptSession, ...]
    #: Target clock reading the ages were judged against.
    now: int | None


def _days(seconds: int) -> str:
    days = seconds // _DAY
    return f"{days} day{'s' if days != 1 else ''}"


def _last_update(survey: SessionSurvey) -> int | None:
    times = [survey.modified_at]
    if survey.sidecar is not None:
        times.append(survey.sidecar.updated_at)
    if survey.observation is not None and survey.observation.record is not None:
        times.append(survey.observation.record.renewed_at)
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _lease_keeps(survey: SessionSurvey) -> str | None:
    observation = survey.observation
    if observation is None:
        problem = survey.problem
        return f"its lease cannot be judged: {problem.reason}" if problem else "its lease was not observed"
    record = observation.record
    if record is None:
        return None
    standing = observation.standing
    if standing is LeaseStanding.HELD:
        return f"its lease is held by {record.host or 'a live client'}"
    if standing is LeaseStanding.EXPIRED and record.state is LeaseState.PUBLISHING:
        return "its lease expired inside a publishing window (left for recovery)"
    if record.unsettled_mutation:
        return "an unsettled mutation is recorded (left for recovery)"
    return None


async def remove_expired_sessions(
    target: Target,
    client: ClientIdentity,
    *,
    max_age_days: int | None = DEFAULT_MAX_AGE_DAYS,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    open_sessions: Collection[str] = (),
    exempt: Mapping[str, str] | Callable[[], Awaitable[Mapping[str, str]]] | None = None,
    surveyed: tuple[list[SessionSurvey], int | None] | None = None,
) -> CleanupReport:
    """Remove the workspace's expired sessions; report each removal and why
    every other session was kept. ``max_age_days=None`` disables removal.

    ``exempt`` maps sessions to the reason they are kept whatever their age;
    given as a coroutine function it is asked only once a session is old
    enough to be removed (asking costs the artifact store a read, and most
    sweeps find nothing old). ``surveyed`` is a survey the caller just took
    (a listing's), which spares taking another; every removal claims the
    session and checks it again, so it may be a moment old."""
    if max_age_days is not None and (isinstance(max_age_days, bool) or not isinstance(max_age_days, int) or max_age_days < 1):
        raise ValueError("max_age_days is a positive whole number of days (or None to disable cleanup)")
    if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
        raise ValueError("keep_recent is a whole number of sessions")
    surveys, now = surveyed if surveyed is not None else await survey_sessions(target)
    surveys = [s for s in surveys if not s.vanished]
    if now is None:
        now = await read_target_clock(target, ".")
    unfinished = await find_unfinished(target, surveys, now)
    first = await remove_unfinished_sessions(target, client, unfinished, open_sessions=open_sessions)
    removed: list[RemovedSession] = list(first.removed)
    kept: list[KeptSession] = list(first.kept)
    skip = {u.session_id for u in unfinished}
    surveys = [s for s in surveys if s.name not in skip]
    sessions: list[SessionSurvey] = []
    for survey in surveys:
        if survey.paths is None or (survey.problem and survey.problem.subject is InspectSubject.DIRECTORY):
            reason = survey.problem.reason if survey.problem else "not a session directory"
            kept.append(KeptSession(survey.name, f"not removable: {reason}"))
        else:
            sessions.append(survey)
    ranked = sorted(sessions, key=lambda s: (_last_update(s) or 0, s.name), reverse=True)
    for rank, survey in enumerate(ranked):
        last = _last_update(survey)
        if max_age_days is None:
            kept.append(KeptSession(survey.name, "cleanup is disabled"))
            continue
        if rank < keep_recent:
            kept.append(KeptSession(survey.name, f"among the {keep_recent} most recently updated sessions"))
            continue
        if last is None:
            kept.append(KeptSession(survey.name, "its last update is unknown"))
            continue
        age = now - last
        if age < max_age_days * _DAY:
            kept.append(KeptSession(survey.name, f"updated {_days(max(age, 0))} ago (limit {max_age_days} days)"))
            continue
        if survey.name in open_sessions:
            kept.append(KeptSession(survey.name, "open in this client"))
            continue
        if callable(exempt):
            exempt = await exempt()
        if exempt and survey.name in exempt:
            kept.append(KeptSession(survey.name, exempt[survey.name]))
            continue
        lease_reason = _lease_keeps(survey) or await _recovery_keeps(target, survey.name)
        if lease_reason:
            kept.append(KeptSession(survey.name, lease_reason))
            continue
        outcome = await _remove_session(target, client, survey)
        if outcome is None:
            why = f"not updated for {_days(age)} (limit {max_age_days} days)"
            if survey.problem:
                why += f"; unreadable: {survey.problem.reason}"
            removed.append(RemovedSession(survey.name, last, why))
        else:
            kept.append(KeptSession(survey.name, outcome))
    return CleanupReport(tuple(removed), tuple(kept), now)


async def _recovery_keeps(target: Target, session_id: str) -> str | None:
    try:
        state = await find_recovery(target, session_id)
    except (StoreError, TargetError) as exc:
        return f"its recovery record cannot be judged: {exc}"
    if state.pending:
        return f"recovery {state.recovery_id} is pending (left for recovery)"
    return None


async def remove_unfinished_sessions(
    target: Target, client: ClientIdentity, unfinished: Collection[UnfinishedSession], *, open_sessions: Collection[str] = ()
) -> CleanupReport:
    """Remove the directories :func:`~.listing.find_unfinished` found
    removable (claimed first, and only while still nothing is committed)."""
    removed: list[RemovedSession] = []
    kept: list[KeptSession] = []
    for u in unfinished:
        if not u.removable:
            kept.append(KeptSession(u.session_id, f"{u.reason} (not a session; removed once its lease is free)"))
            continue
        if u.session_id in open_sessions:
            kept.append(KeptSession(u.session_id, f"{u.reason}; open in this client"))
            continue
        outcome = await _remove_claimed(target, client, SessionPaths(u.session_id), u.generation, unpublished=True)
        if outcome is None:
            removed.append(RemovedSession(u.session_id, 0, f"{u.reason}: nothing was ever committed"))
        else:
            kept.append(KeptSession(u.session_id, outcome))
    return CleanupReport(tuple(removed), tuple(kept), None)


async def remove_session(target: Target, client: ClientIdentity, session_id: str) -> str | None:
    """Remove one session that no client holds (an artifact's conversation
    deleted with its item): claimed first, so a client that opened it
    meanwhile keeps it. ``None`` when removed, else why kept."""
    paths = SessionPaths(check_session_id(session_id))
    observation = await observe_lease(target, session_id)
    if observation.standing is LeaseStanding.HELD and not (observation.record and observation.record.client_id == client.client_id):
        return "another client holds it"
    return await _remove_claimed(target, client, paths, observation.generation)


async def _remove_session(target: Target, client: ClientIdentity, survey: SessionSurvey) -> str | None:
    """Claim, re-check, walk and delete; ``None`` when removed, else why kept."""
    assert survey.paths is not None and survey.observation is not None
    return await _remove_claimed(target, client, survey.paths, survey.observation.generation)


async def _remove_claimed(
    target: Target, client: ClientIdentity, paths: SessionPaths, judged_generation: int, *, unpublished: bool = False
) -> str | None:
    """Claim, re-check, walk and delete; ``None`` when removed, else why
    kept. ``unpublished``: only while the claim still names no head."""
    session_id = paths.session_id
    try:
        lease = await acquire_lease(
            target, session_id, client, duration_seconds=_CLAIM_SECONDS, confirm_takeover=True
        )
    except (StoreError, TargetError) as exc:  # held, raced, or unreadable meanwhile
        return f"its lease could not be claimed for removal: {exc}"
    # A claim writes two generations above the one it observed: anything
    # else means the session was used after it was judged.
    if lease.generation - 2 != judged_generation:
        await _release_quietly(lease)
        return "it was used while cleanup ran"
    if unpublished and lease.publication_head is not None:
        await _release_quietly(lease)
        return "it was published while cleanup ran"
    recovery = await _recovery_keeps(target, session_id)
    if recovery:
        await _release_quietly(lease)
        return recovery
    try:
        files, directories = await _walk(target, paths.root)
    except _Unremovable as exc:
        await _release_quietly(lease)
        return f"not removable: {exc}"
    except TargetError as exc:
        await _release_quietly(lease)
        return f"not removable: {exc}"
    return await _delete(target, lease, files, directories)


class _Unremovable(Exception):
    pass


async def _walk(target: Target, root: str) -> tuple[list[str], list[str]]:
    """Every file and directory under ``root`` (directories deepest first,
    ending with ``root``), one program per tree level."""
    files: list[str] = []
    directories: list[str] = [root]
    level = [root]
    while level:
        listed = await target.run(ControlProgram([ListDir(d) for d in level]))
        if not listed.completed:
            failed = listed[listed.stopped_at or 0]
            raise _Unremovable(failed.reason or failed.status.value)
        children = [f"{d}/{name}" for d, r in zip(level, listed) for name in r.value]
        if not children:
            break
        stats = await target.run(ControlProgram([Stat(c) for c in children]))
        if not stats.completed:
            failed = stats[stats.stopped_at or 0]
            raise _Unremovable(failed.reason or failed.status.value)
        level = []
        for child, stat in zip(children, stats):
            kind = stat.value.kind
            if kind == "directory":
                level.append(child)
                directories.append(child)
            elif kind == "file":
                files.append(child)
            else:
                raise _Unremovable(f"{child.rsplit('/', 1)[-1]} is neither a file nor a directory")
    directories.sort(key=lambda d: d.count("/"), reverse=True)
    return files, directories


def _file_order(path: str) -> tuple[int, str]:
    # Publications go before the lease records: a stop part-way leaves a
    # head naming a missing manifest (an Inspect row), never a session that
    # looks free and empty while its publications remain.
    if "/.publications/" in path:
        return (0, path)
    if "/.lease/" in path:
        return (2, path)
    return (1, path)


async def _delete(target: Target, lease: LeaseHandle, files: list[str], directories: list[str]) -> str | None:
    paths = lease.paths
    ops: list[Operation] = [
        Verify(paths.generation(lease.generation), lease.raw),
        Verify(paths.generation(lease.generation + 1), None),
    ]
    ops += [Remove(f) for f in sorted(files, key=_file_order)]
    ops += [Remove(d) for d in directories]
    result = await target.run(ControlProgram(ops))
    if result.completed:
        return None
    stop = result.stopped_at
    assert stop is not None
    if stop < 2:
        await _release_quietly(lease)
        return "another client claimed it while cleanup ran"
    if stop == len(ops) - 1:
        for _ in range(_ROOT_ATTEMPTS):
            again = (await target.run(ControlProgram([Remove(paths.root)])))[0]
            if again.ok or again.status is Status.ABSENT:
                return None
    failed = result[stop]
    where = ops[stop].path[len(paths.root) + 1 :] or "the session directory"
    await _release_quietly(lease)
    return f"removal stopped part-way at {where}: {failed.reason or failed.status.value}"


async def _release_quietly(lease: LeaseHandle) -> None:
    try:
        await lease.release()
    except (StoreError, TargetError):
        pass
