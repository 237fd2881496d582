"""The two-phase skeleton every whole-session transaction runs: Rewind,
Redo, Fork, Worktree Fork and Save As.

1. **prepare** (:func:`prepare`) reads only: the committed state
   (:func:`committed_state`) and whatever the plan surveys, and returns the
   impact the user confirms with a self-contained
   :class:`~.lifecycle_token.StateToken` (:func:`issue_token`);
2. **commit** (:func:`commit`) takes that token, rechecks what the prepare
   saw (a moved state refuses with ``stale-head``) and acts.

Each operation is a :class:`Plan` in a module of its own: :mod:`.rewind`
and :mod:`.redo` restore in place (:mod:`.in_place`); :mod:`.fork`,
:mod:`.worktree_fork` and :mod:`.save_as` create a child session. What they
share is done here, once per phase:

- the session ID is checked, and a commit's token is parsed and matched to
  its session once (:func:`parse_token`); the plan gets the parsed token;
- a pending recovery is looked for once: not at all when the caller's gate
  has just looked (``Source.recovery_checked``), else in the first program
  the phase runs anyway, beside the plan's own reads (:func:`gate_reads`),
  so it costs no round trip of its own on an SSH workspace;
- the committed state comes from the lease this client holds when the
  bytes it holds are proven to be the committed ones (every logical path
  and hash of the head's manifest), and from the target otherwise;
- the plan's time (:func:`plan_time`) and the refusals of a turn in
  flight (:func:`refuse_live`, :func:`refuse_in_flight`) are spelled alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from ...targets import ControlProgram, Operation, OpResult, Target
from ..authority.publication import CommittedSnapshot
from ..authority.workspace import check_session_id
from ..content.sidecar import PromptEntry
from ..content.turns import Conversation
from ..layout import SessionPaths
from .lifecycle_token import InvalidToken, LifecycleRefused, StateToken
from .pending_inputs import input_listing, load_inputs
from .recovery import RecoveryPending, RecoveryState, find_recovery, recovery_listing
from .snapshot_cut import (
    CommittedState,
    SessionState,
    known_state,
    load_committed_state,
    remember_state,
)

if TYPE_CHECKING:
    from ..authority.publication import Publisher

ImpactT = TypeVar("ImpactT", covariant=True)
ResultT = TypeVar("ResultT", covariant=True)


@dataclass(frozen=True)
class Source:
    """The session a transaction works on, as its caller sees it."""

    target: Target
    session_id: str
    #: The caller's open conversation (a turn in flight refuses).
    live: Conversation | None = None
    #: The publisher of the lease this client holds on it (None: none held).
    publisher: Publisher | None = None
    #: The caller's gate has just looked for a pending recovery.
    recovery_checked: bool = False
    #: Refuse while prompts wait in the session's queue: the refusal for
    #: that many waiting (None: the queue does not matter).
    queued: Callable[[int], Exception] | None = None
    #: The commit follows the prepare at once, its impact shown to nobody
    #: (``--yes``): the prepare's gate looks for a recovery whatever the
    #: caller's gate saw (unless ``remains`` says what it holds), and the
    #: commit rechecks with the prepare's own reads -- or predictions --
    #: instead of reading again (every write it makes is still conditional
    #: on the state those saw).
    at_once: bool = False
    #: What the recovery journal's directory held when the caller's claim
    #: listed it, known to be unchanged since (no marker: only this
    #: holder's in-place transactions write one): the remains an in-place
    #: commit sweeps. None: not known, looked at where it is needed.
    remains: RecoveryState | None = None
    #: The queue's listing the caller's claim took, unchanged since (queued
    #: input is written behind the lease's proof): judged instead of
    #: listing again. None: listed by the gate.
    queue_listed: OpResult | None = None

    @property
    def paths(self) -> SessionPaths:
        return SessionPaths(self.session_id)


class Plan(Protocol[ImpactT, ResultT]):
    """One transaction: ``op`` names its tokens; :meth:`prepare` reads and
    returns the impact; the class's :meth:`from_token` is the plan a token
    was prepared for, whose :meth:`commit` rechecks and acts."""

    op: ClassVar[str]

    async def prepare(self, source: Source) -> ImpactT: ...

    @classmethod
    def from_token(cls, token: StateToken, **options) -> Plan[ImpactT, ResultT]: ...

    async def commit(self, source: Source, token: StateToken) -> ResultT: ...


async def prepare(plan: Plan[ImpactT, ResultT], source: Source) -> ImpactT:
    """Phase one: the impact of ``plan`` on ``source`` and its token."""
    check_session_id(source.session_id)
    return await plan.prepare(source)


async def commit(kind: type[Plan[ImpactT, ResultT]], source: Source, token: StateToken | str, **options) -> ResultT:
    """Phase two: the ``kind`` plan ``token`` was prepared for (with the
    commit's ``options``), committed."""
    parsed = parse_token(token, (kind.op,), source.session_id)
    return await kind.from_token(parsed, **options).commit(source, parsed)


async def prepare_and_commit(plan: Plan[object, ResultT], source: Source, **options) -> ResultT:
    """Both phases at once (``--yes``): nobody is shown the impact, so the
    commit need not read again what the prepare has just read."""
    source = replace(source, at_once=True)
    impact = await prepare(plan, source)
    return await commit(type(plan), source, impact.token, **options)  # type: ignore[attr-defined]


def parse_token(token: StateToken | str, ops: Sequence[str], session_id: str | None = None) -> StateToken:
    """The token of one of ``ops``, parsed once; refused when it was
    prepared for another session than ``session_id`` (a commit must never
    land on a session the user did not confirm)."""
    parsed = StateToken.parse(token, tuple(ops))
    if session_id is not None and parsed.session_id != session_id:
        raise InvalidToken(f"it was prepared for session {parsed.session_id}, not {session_id}")
    return parsed


def issue_token(op: str, state: CommittedState, at: int, subject: Mapping, files: Mapping[str, str]) -> StateToken:
    """The token of a plan prepared over ``state``."""
    return StateToken.make(
        op=op,
        session_id=state.session_id,
        lease_generation=state.snapshot.lease_generation,
        lease_client=state.lease_client,
        head=state.head,
        at=at,
        subject=dict(subject),
        files=dict(files),
    )


# The gate ----------------------------------------------------------------------


@dataclass(frozen=True)
class Gated:
    """What the gate found: the recovery journal's remains (None: not
    looked at) and the results of the plan's own reads."""

    recovery: RecoveryState | None
    results: tuple[OpResult, ...]


async def gate_reads(source: Source, reads: Sequence[Operation] = (), *, recovery: bool | None = None) -> Gated:
    """Run ``reads`` in one program with what the gate must see: the
    recovery journal (unless the caller looked: ``recovery`` False, or by
    default ``source.recovery_checked``) and the queue when it matters.
    Refuses with :class:`~.recovery.RecoveryPending` or ``source.queued``'s
    refusal before the plan sees its reads."""
    if recovery is None:
        recovery = source.remains is None and (source.at_once or not source.recovery_checked)
    paths = source.paths
    queue = source.queued is not None and source.queue_listed is None
    gate: list[Operation] = []
    if recovery:
        gate.append(recovery_listing(paths))
    if queue:
        gate.append(input_listing(paths))
    results: Sequence[OpResult] = ()
    if gate or reads:
        results = (await source.target.run(ControlProgram([*gate, *reads]))).results
    found = None
    position = 0
    if recovery:
        found = await find_recovery(source.target, source.session_id, listed=results[0])
        position = 1
        if found.recovery_id is not None:
            raise RecoveryPending(source.session_id, found.recovery_id, found.problem)
    if source.queued is not None:
        listed = results[position] if queue else source.queue_listed
        records, problems = await load_inputs(source.target, paths, listed=listed)
        waiting = len(records) + len(problems)
        if waiting:
            raise source.queued(waiting)
        position += 1 if queue else 0
    return Gated(found, tuple(results[position:]))


# The committed state ------------------------------------------------------------


async def committed_state(source: Source) -> CommittedState:
    """The committed state the plan starts from: the one this client holds
    when proven, else read from the target (refused when nothing is
    committed)."""
    held = held_state(source)
    return held if held is not None else await load_committed_state(source.target, source.session_id)


def held_state(source: Source) -> CommittedState | None:
    """The committed state from the lease this client holds and the bytes
    its live conversation last committed, when the head's manifest proves
    them (the same logical paths, each with its size and SHA-256); None
    otherwise. Nobody else publishes under a held lease, and every write a
    commit makes is behind that lease's proof, so a lease lost meanwhile
    refuses the commit before it writes."""
    publisher, live = source.publisher, source.live
    if publisher is None or live is None:
        return None
    lease = publisher.lease
    head = lease.publication_head
    if lease.lost or lease.released or lease.needs_resync or head is None or lease.session_id != source.session_id:
        return None
    manifest = publisher.known_manifest(head)
    if manifest is None:
        return None
    state = known_state(source.session_id, head)
    if state is None:
        artifacts = live.committed_artifacts
        if artifacts is None or set(artifacts) != set(manifest.entries):
            return None
        for logical, entry in manifest.entries.items():
            data = artifacts[logical]
            if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
                return None
        try:
            state = SessionState(source.session_id, head, artifacts)
        except Exception:  # noqa: BLE001 -- not loadable here: the target read says why
            return None
        remember_state(state, manifest)
    snapshot = CommittedSnapshot(source.target, source.paths, lease.generation, head, manifest)
    return CommittedState(snapshot, lease.record.client_id, lease.record.renewed_at, state)


# What every plan refuses alike ---------------------------------------------------


@dataclass(frozen=True)
class TurnLabel:
    """How the Rewind, Redo and Fork pickers name a turn (:attr:`label`)."""

    turn: int
    segment: int
    turn_id: str
    preview: str

    @classmethod
    def of(cls, entry: PromptEntry) -> TurnLabel:
        return cls(entry.turn, entry.segment, entry.turn_id, entry.preview)

    @property
    def label(self) -> str:
        return f"turn {self.turn} (segment {self.segment}): {self.preview}"


def refuse_live(session_id: str, live: Conversation | None, action: str) -> None:
    if live is not None and live.open_turn is not None:
        raise LifecycleRefused(
            session_id, f"turn {live.open_turn.turn} is in flight; settle or abort it before you {action}"
        )


def refuse_in_flight(state: CommittedState, action: str) -> None:
    if state.sidecar.in_flight_turn is not None:
        raise LifecycleRefused(
            state.session_id,
            f"the committed state has turn {state.sidecar.prompt_count} in flight; settle or abort it before you {action}",
        )


def plan_time(state: CommittedState, at: int | None) -> int:
    """The target second the new sidecar records: the caller's reading, or
    the latest target time the committed records prove (no clock probe: a
    prepare writes nothing)."""
    floor = max(state.sidecar.updated_at, state.lease_renewed_at)
    if at is None:
        return floor
    if type(at) is not int or at < 0:
        raise LifecycleRefused(state.session_id, f"{at!r} is not a target time in whole seconds", kind="invalid-params")
    return max(at, floor)

