"""Lease generations: which client may write a session.

On disk
-------
``<session>/.lease/generation-<20 digits>.json``: one immutable
:class:`~.records.LeaseRecord` per generation, created by exclusive creation
and never rewritten. Every state change is a new generation. The
highest-numbered generation present is the *head*, and the head alone says
who holds the session, judged against the target clock read in the same
program as the head record:

- no generation, or a ``released`` / ``aborted`` head: free;
- a ``claiming`` / ``active`` / ``publishing`` head with ``now < expires_at``:
  held by its client (a claiming head is a claim in flight, or one a crash
  interrupted; it fences like an owner until it expires);
- the same states with ``now >= expires_at``: expired. Its own client
  reclaims it without asking; any other client only with
  ``confirm_takeover=True``.
- the same states before their expiry, when the process that wrote the head
  (its ``holder``) is proven to have ended: expired too, for every client
  but its own (which adopts its live record as before). Only a client on
  the holder's machine, in the same boot and PID namespace, can prove that
  (:func:`~mevedel_server.targets.process_has_ended`: PID, start time);
  a holder elsewhere, a generation without a holder, or any doubt leaves
  the expiry to decide. Over SSH the record lives on the SSH host but names
  the client's process: the proof is made, or not, on the client machine,
  never from the host's boot. The takeover that follows is the ordinary
  one (confirmation, generation election, the interrupted turn settled):
  a dead holder renews nothing, so the claim's verify of its generation
  still elects exactly one successor. A generation names its writer only
  while the lease lives and dies with that process
  (:attr:`LeaseHandle.names_holder`): a server's always; a CLI command's,
  whose lease outlives it by design for its client's next command, only
  while an agent turn it runs is open (that turn dies with it), and
  ``mevedel prompt``'s from its claim until its exit hands the lease to
  its client (killed at any point before, its agent starting, mid-turn or
  stopping its agent after its last settlement, it is proven dead).

Transitions
-----------
Each transition writes generation ``N+1`` by exclusive creation in one
control program. Exclusive creation elects one writer per name, but a name
can come back: pruning removes old generations, and a stale writer whose
verify of ``N`` passed just before a prune can re-create a pruned ``N+1``
below the real head. So a writer decides whether it won from proof that its
``N+1`` was *fresh* (that name had never existed), never from what writers
after it did:

- after its create, ``N`` still holds exactly the bytes the writer knew.
  A pruned name comes back only once its predecessor is gone for good,
  because every prune removes in ascending order and a generation's bytes
  (client, generation, times) are never written twice; or
- ``N+1`` is the highest generation listed after its create: the highest
  generation ever written is never pruned, so a re-created name is always
  below it.

A fresh ``N+1`` was the head when it was written: that is the commit point.
A generation written above it later (a claim right after a release, a
takeover after expiry) is a later event, not a failure of this write.

- Claim: ``[create N+1 claiming, verify N, create N+2 active, list, prune]``.
  The verify after the candidate proves the candidate fresh; if it fails,
  the candidate is aborted with an ``aborted`` generation above it, so it
  does not fence anyone. The activation is proven by the listing (a
  successor above a fresh activation would need it to expire first).
- Renewal, release, publishing window, head commit, latch changes:
  ``[verify N, create N+1, verify N, list, prune]``. The first verify refuses
  a stale owner before it writes; the second proves ``N+1`` fresh. A
  publication prepends its artifact and manifest writes to this same program
  (:mod:`.publication`).
- A writer whose ``N+1`` was taken by another client's *claiming* record
  (a claim that has not activated) steps over it with ``N+2``: a claim only
  ends a lease once it is active.

Outcomes: a rotation whose ``N+1`` cannot be proven fresh raises
:class:`LeaseLost` (for a head commit that lost a race with an expiry
takeover in the same instant, the commit may in fact have landed: the
successor carries it). :meth:`LeaseHandle.release` raises :class:`LeaseLost`
only when it wrote nothing because this handle's generation was already
superseded; once its released generation is written it returns, proven or
not, since either way the session is no longer this client's and what it
wrote fences no one.

The times of a generation a claim activates, a renewal writes or an adoption
writes come from a target clock reading taken inside the writing operation
itself (:class:`~mevedel_server.targets.program.StampedCreate`), so a renewal
is one round trip and such a deadline is never older than the program that
writes it. A claim's candidate carries the observation's reading: it only
fences while the claim is in flight.

``publication_head``, ``unsettled_mutation`` and ``transfer_generation`` are
copied into every new generation, so rotations carry them; the one exception
is the claim of a granted release, which opens the next transfer generation
(so the grant's fence reserves that release only, see :mod:`.transfer`). After a success at
generation ``G`` the generations below ``G-2`` seen earlier are removed
best-effort, in ascending order, in the same program (optional operations).

Times are whole seconds of the target clock (:mod:`mevedel_server.targets.clock`),
read before the write they stamp, so an expiry errs early, never late. A
client id belongs to one live process at a time (a restart reuses it; two
live processes sharing one are one client to this protocol).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone

import msgspec

from ...targets import (
    ChainHop,
    Clock,
    ClockStamp,
    ControlProgram,
    CreateExclusive,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    ProgramResult,
    Read,
    ReadChain,
    ReadNewest,
    Remove,
    StampedCreate,
    Stat,
    Status,
    Target,
    TargetError,
    Verify,
    process_has_ended,
    raise_for_result,
    this_process,
)
from ..errors import (
    ClaimRaced,
    LeaseHeld,
    LeaseLost,
    LeaseObservationError,
    SessionMissing,
    TakeoverNeedsConfirmation,
    TransferReserved,
)
from ..layout import GENERATION_FAMILY, SessionPaths, generation_numbers
from .records import (
    CLIENT_ID_PATTERN,
    LeaseRecord,
    LeaseState,
    RecordError,
    RecordErrorKind,
    TransferFence,
    decode_record,
    encode_record,
)
from .workspace import check_session_id

_log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60
#: How many generations below the head survive a prune.
_KEPT_PREDECESSORS = 2
#: Observation attempts when listed generations are gone before the read
#: (only a session being deleted removes the newest one).
_OBSERVE_ATTEMPTS = 16

_LIVE_STATES = (LeaseState.CLAIMING, LeaseState.ACTIVE, LeaseState.PUBLISHING)


class ClientIdentity(msgspec.Struct, frozen=True):
    """One client of the store: an opaque id (authority) and a host name
    (shown to people only)."""

    client_id: str
    host: str

    def __post_init__(self) -> None:
        if not re.match(CLIENT_ID_PATTERN, self.client_id):
            raise ValueError(f"client id {self.client_id!r} must be 1-128 of [A-Za-z0-9._-]")
        if len(self.host) > 255:
            raise ValueError("host name longer than 255 characters")

    @classmethod
    def generate(cls, host: str | None = None) -> ClientIdentity:
        return cls(os.urandom(16).hex(), (host if host is not None else socket.gethostname())[:255])


class LeaseStanding(enum.Enum):
    FREE = "free"
    HELD = "held"
    EXPIRED = "expired"


# Untracked by the garbage collector (gc=False): it holds a record, bytes
# and numbers, never a cycle, and a listing makes one a session.
class LeaseObservation(msgspec.Struct, frozen=True, gc=False):
    session_id: str
    #: The head generation, 0 when the session was never claimed.
    generation: int
    record: LeaseRecord | None
    raw: bytes | None
    #: Target clock, read in the same program as ``record`` (None if not read).
    now: int | None
    generations: tuple[int, ...] = ()

    @property
    def standing(self) -> LeaseStanding:
        """Free, held, or expired -- also before its expiry once its holder
        process is proven to have ended (what any other client sees)."""
        standing = self.clock_standing
        if standing is LeaseStanding.HELD and holder_has_ended(self.record):
            return LeaseStanding.EXPIRED
        return standing

    @property
    def clock_standing(self) -> LeaseStanding:
        """The standing by the target clock alone (what the holder's own
        client goes by: it adopts its own live record, whichever of its
        processes wrote it)."""
        if self.record is None or self.record.state not in _LIVE_STATES:
            return LeaseStanding.FREE
        if self.now is None:
            raise ValueError("this observation did not read the target clock")
        if self.now >= self.record.expires_at:
            return LeaseStanding.EXPIRED
        return LeaseStanding.HELD

    @property
    def holder_ended(self) -> bool:
        """The lease is expired before its time: the target clock says held,
        and its holder process is proven, from this machine, to have ended."""
        return self.now is not None and self.clock_standing is LeaseStanding.HELD and holder_has_ended(self.record)

    @property
    def publication_head(self) -> str | None:
        return self.record.publication_head if self.record else None


def holder_has_ended(record: LeaseRecord | None) -> bool:
    """Whether ``record``'s holder process is proven, from this machine, to
    have ended (the one judge of it; False: alive, elsewhere, or unknown)."""
    return record is not None and record.holder is not None and process_has_ended(record.holder)


async def _observe(target: Target, paths: SessionPaths, with_clock: bool) -> LeaseObservation:
    listing = ListDir(paths.lease_dir, optional=True)
    newest = ReadNewest(paths.lease_dir, *GENERATION_FAMILY, optional=True)
    # The clock probe proves the session exists; without it, a stat does.
    presence = Clock(paths.root) if with_clock else Stat(paths.root, optional=True)
    for _ in range(_OBSERVE_ATTEMPTS):
        result = await target.run(ControlProgram([listing, newest, presence]))
        if result[2].status is Status.ABSENT:
            raise SessionMissing(paths.session_id)
        raise_for_result(presence, result[2])
        now = result[2].value if with_clock else None
        gens = _listed(listing, result[0])
        if result[1].status is Status.ABSENT:
            if gens:
                continue  # listed, then gone before the read: look again
            return LeaseObservation(paths.session_id, 0, None, None, now, ())
        raise_for_result(newest, result[1])
        name, raw = result[1].value
        head = generation_numbers([name])[0]
        record = decode_lease_generation(paths, head, raw)
        return LeaseObservation(paths.session_id, head, record, raw, now, tuple(sorted({*gens, head})))
    raise LeaseObservationError(paths.session_id, "the lease changed on every observation")


def _listed(op: Operation, result) -> list[int]:
    if result.status is Status.ABSENT:
        return []
    raise_for_result(op, result)
    return generation_numbers(result.value)


def decode_lease_generation(paths: SessionPaths, generation: int, raw: bytes) -> LeaseRecord:
    """A lease record, refused unless it is the generation its name says
    (every reader of a lease generation decodes it here)."""
    try:
        record = decode_record(LeaseRecord, raw, "")
    except RecordError as error:  # the label is built only for a refusal (a listing decodes many)
        raise RecordError(error.kind, paths.generation_label(generation), error.reason) from None
    if record.generation != generation:
        raise RecordError(
            RecordErrorKind.INVALID_VALUE,
            paths.generation_label(generation),
            f"records generation {record.generation} under the name of generation {generation}",
        )
    return record


async def read_lease_head_and_manifest(target: Target, paths: SessionPaths) -> tuple[LeaseObservation, bytes | None]:
    """:func:`read_lease_head` and, in the same program, the bytes of the
    manifest its publication head names (``None`` when it names none or the
    file could not be read there: the caller reads it the usual way, which
    reports why). A reader of committed state pays one round trip for both.
    The target only follows the bytes: the manifest counts only because its
    path is the one the record decoded here names."""
    chain_op = ReadChain(paths.lease_dir, *GENERATION_FAMILY, (ChainHop(("publication_head",), paths.root),), optional=True)
    presence = Stat(paths.root, optional=True)
    for _ in range(_OBSERVE_ATTEMPTS):
        result = await target.run(ControlProgram([chain_op, presence]))
        if result[1].status is Status.ABSENT:
            raise SessionMissing(paths.session_id)
        raise_for_result(presence, result[1])
        if result[0].status is Status.ABSENT:
            return LeaseObservation(paths.session_id, 0, None, None, None, ()), None
        raise_for_result(chain_op, result[0])
        chain = result[0].value
        gens = generation_numbers(chain.names)
        if not gens:
            return LeaseObservation(paths.session_id, 0, None, None, None, ()), None
        head = gens[-1]
        links = list(chain.links)
        if not links or links[0].path != paths.generation(head) or links[0].status is not Status.OK:
            continue  # listed, then gone or replaced before the read: look again
        raw = links[0].data
        assert raw is not None
        record = decode_lease_generation(paths, head, raw)
        observation = LeaseObservation(paths.session_id, head, record, raw, None, tuple(gens))
        publication = record.publication_head
        manifest = None
        if publication is not None and len(links) > 1 and links[1].path == paths.inside(publication):
            manifest = links[1].data if links[1].status is Status.OK else None
        return observation, manifest
    raise LeaseObservationError(paths.session_id, "the lease changed on every observation")


async def observe_lease(target: Target, session_id: str) -> LeaseObservation:
    """The head generation and the target clock, read together."""
    return await _observe(target, SessionPaths(check_session_id(session_id)), with_clock=True)


async def read_lease_head(target: Target, session_id: str) -> LeaseObservation:
    """The head generation without reading the clock (pure reads; for
    readers that only need the publication head)."""
    return await _observe(target, SessionPaths(check_session_id(session_id)), with_clock=False)


def describe_target_time(seconds: int) -> str:
    """A target clock reading for people (UTC; the target's own clock)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _describe_holder(obs: LeaseObservation) -> dict:
    rec = obs.record
    assert rec is not None
    return dict(
        holder_client=rec.client_id,
        holder_host=rec.host,
        state=rec.state.value,
        expires_at=rec.expires_at,
        now=obs.now,
        holder_ended=obs.holder_ended,
    )


def describe_lapse(obs: LeaseObservation) -> str:
    """Why another client's lease no longer holds, for people: its holder
    process ended, or its expiry passed."""
    rec = obs.record
    assert rec is not None
    holder = rec.host or "another client"
    if rec.holder is not None and obs.holder_ended:
        return f"was held by {holder}, whose process there (pid {rec.holder.pid}) has ended"
    return f"was held by {holder}, whose lease expired at {describe_target_time(rec.expires_at)} (target clock)"


def takeover_needs_confirmation(obs: LeaseObservation) -> TakeoverNeedsConfirmation:
    """The refusal of a takeover of another client's lapsed lease that the
    user has not confirmed (``obs``: that lease, observed with the clock)."""
    return TakeoverNeedsConfirmation(
        obs.session_id, f"{describe_lapse(obs)}; taking it over needs confirmation", **_describe_holder(obs)
    )


class _Prune(msgspec.Struct):
    """The prune that ends a lease program. Only a generation whose exact
    bytes are known to be a sound record is removed, behind a ``Verify`` of
    them; any other old generation is read instead, and judged afterwards
    (:meth:`judge`): a sound one is removed by the next program, a damaged
    one (bytes that do not decode, a FIFO or a directory in its place) is
    reported once and left for inspection, never removed."""

    ops: list[Operation]
    #: Generations removed by ``ops`` (when they run to their end), and
    #: generations read, with the index of their read in ``ops``.
    removing: tuple[int, ...]
    reading: tuple[tuple[int, int], ...]

    def judge(
        self, paths: SessionPaths, results: list[OpResult], sound: dict[int, bytes], damaged: set[int]
    ) -> set[int]:
        """Learn from the reads (``results`` are this prune's); the
        generations it removed."""
        for generation, index in self.reading:
            if index >= len(results):
                break
            result = results[index]
            if result.status is Status.ABSENT:
                continue
            try:
                if not result.ok:
                    raise RecordError(
                        RecordErrorKind.INVALID_VALUE, paths.generation_label(generation), result.reason or result.status.value
                    )
                decode_lease_generation(paths, generation, result.value)
            except RecordError as error:
                if generation not in damaged:
                    damaged.add(generation)
                    _log.warning("session %s: an old lease generation is damaged and kept for inspection: %s", paths.session_id, error)
                continue
            sound[generation] = result.value
        removed: set[int] = set()
        at = 0
        for generation in self.removing:
            verify_at, remove_at = at, at + 1
            at += 2
            if verify_at < len(results) and not results[verify_at].ok and results[verify_at].status is not Status.ABSENT:
                sound.pop(generation, None)  # not the bytes it had: judge it afresh
            elif remove_at < len(results) and results[remove_at].status in (Status.OK, Status.ABSENT):
                removed.add(generation)
        return removed


def _prune_ops(paths: SessionPaths, known: tuple[int, ...], new_generation: int, sound: dict[int, bytes], damaged: set[int]) -> _Prune:
    floor = new_generation - _KEPT_PREDECESSORS
    ops: list[Operation] = []
    removing: list[int] = []
    reading: list[tuple[int, int]] = []
    for g in known:
        if g < floor and g in sound:
            # Unflushed (deferred, no barrier follows): a prune a crash undoes
            # only leaves an old generation below the head, as before the prune.
            ops += [Verify(paths.generation(g), sound[g], optional=True), Remove(paths.generation(g), optional=True, deferred=True)]
            removing.append(g)
    for g in known:
        if g < floor and g not in sound and g not in damaged:
            reading.append((g, len(ops)))
            ops.append(Read(paths.generation(g), optional=True))
    return _Prune(ops, tuple(removing), tuple(reading))


_TIME_FIELDS = (b'"renewed_at":', b'"expires_at":')


def stamped_record(record: msgspec.Struct, duration: int) -> tuple[bytes | ClockStamp, ...]:
    """The encoding of ``record`` with ``renewed_at`` left to the target
    clock reading and ``expires_at`` to that reading plus ``duration``.

    A quoted key followed by a colon occurs in the encoding only as that key
    (inside a JSON string every quote is escaped), so it marks the value."""
    encoded = encode_record(msgspec.structs.replace(record, renewed_at=0, expires_at=0))
    parts: list[bytes | ClockStamp] = []
    rest = encoded
    for key, offset in zip(_TIME_FIELDS, (0, duration)):
        before, found, rest = rest.partition(key + b"0")
        if not found or rest[:1] not in (b",", b"}"):
            raise AssertionError(f"no {key.decode()} in an encoded lease record")
        parts += [before + key, ClockStamp(offset)]
    parts.append(rest)
    return tuple(parts)


def _stamped_written(
    paths: SessionPaths, generation: int, op: StampedCreate, result: OpResult
) -> tuple[LeaseRecord, bytes, int]:
    """The record, exact bytes and clock reading a successful stamped
    creation of ``generation`` wrote."""
    reading = int(result.value)
    raw = op.content(reading)
    return decode_lease_generation(paths, generation, raw), raw, reading


async def acquire_lease(
    target: Target,
    session_id: str,
    identity: ClientIdentity,
    *,
    duration_seconds: int = DEFAULT_LEASE_SECONDS,
    confirm_takeover: bool = False,
    observation: LeaseObservation | None = None,
    lead: Sequence[Operation] = (),
    riders: Sequence[Operation] = (),
    lock: str | None = None,
    names_holder: bool = True,
) -> LeaseHandle:
    """Take the session's lease for ``identity``.

    ``names_holder``: the generations the handle writes name this process
    as their holder (:attr:`LeaseHandle.names_holder`; off for a lease meant
    to outlive its process).

    ``lead`` runs first in the program that writes the claim: optional
    reads the caller judges after it (the handle's ``led``: their results,
    ``None`` when the claim took another program than the one they ran in,
    so the caller reads them itself) and preconditions (a ``Verify``) that
    stop the program, nothing of the lease written, when they fail: then
    :class:`LeadStopped` carries the program's results.

    ``riders`` (optional reads) run after the claim in its own program;
    their results are the handle's ``riders`` (empty when the claim took
    another way, :data:`~...targets.program.SKIPPED` where they did not
    run: the caller reads them itself then). A rider may be a write whose
    own ``Verify`` guards it (it runs after the claim, behind its proof);
    ``lock``: the lock directory that program holds for it.

    ``observation`` is one the caller has just made (with the clock): the
    claim starts from it instead of observing again (a round trip fewer over
    SSH). The claim program proves it still current (the head's bytes, the
    next generation absent); if it moved meanwhile, nothing was written and
    the acquisition is made again from a fresh observation -- as is one
    the observation would refuse (held; a takeover to confirm), so that no
    refusal rests on a head that may have moved on.

    Free: claimed. Our own live record (a restart with the same client id):
    adopted and renewed; a publishing window left open is normalised back to
    active. Our own expired or claiming record: reclaimed without asking.
    Another client's live record: :class:`LeaseHeld`. Another client's
    expired record: :class:`TakeoverNeedsConfirmation` unless
    ``confirm_takeover``. Losing a simultaneous election: :class:`ClaimRaced`.
    """
    if isinstance(duration_seconds, bool) or not isinstance(duration_seconds, int) or duration_seconds < 1:
        raise ValueError("a lease duration is a positive whole number of seconds")
    paths = SessionPaths(check_session_id(session_id))
    if observation is not None and observation.now is not None and observation.session_id == paths.session_id:
        try:
            # Its race is never shown: who won is not worth a program.
            return await _acquire_from(target, paths, identity, duration_seconds, confirm_takeover, observation, lead, riders, lock,
                                       name_rival=False, names_holder=names_holder)
        except (ClaimRaced, LeaseHeld, TakeoverNeedsConfirmation):
            # The observation may be stale: a refusal is judged afresh. A
            # holder seen live, which released and ended since, was taken
            # for one that died holding it (a takeover to confirm) when its
            # liveness was proved against the old head.
            pass
    obs = await _observe(target, paths, with_clock=True)
    return await _acquire_from(target, paths, identity, duration_seconds, confirm_takeover, obs, lead, riders, lock,
                               names_holder=names_holder)


async def _acquire_from(
    target: Target, paths: SessionPaths, identity: ClientIdentity, duration_seconds: int, confirm_takeover: bool, obs: LeaseObservation,
    lead: Sequence[Operation] = (),
    riders: Sequence[Operation] = (),
    lock: str | None = None,
    name_rival: bool = True,
    names_holder: bool = True,
) -> LeaseHandle:
    session_id = paths.session_id
    rec = obs.record
    assert obs.now is not None
    own = rec is not None and rec.client_id == identity.client_id
    standing = obs.clock_standing if own else obs.standing
    if rec is not None and standing is not LeaseStanding.FREE:
        if own and standing is LeaseStanding.HELD and rec.state is not LeaseState.CLAIMING:
            handle = LeaseHandle(target, paths, identity, duration_seconds, obs.generation, rec, obs.raw or b"", obs.generations, obs.now,
                                 names_holder=names_holder)
            try:
                adopted = await handle._rotate(lead, stamped=True, state=LeaseState.ACTIVE, trailing=riders, lock=lock)
            except LeaseLost as lost:
                raise ClaimRaced(session_id, f"the lease moved while it was being adopted ({lost.reason})") from None
            if adopted.stopped_at is not None and adopted.stopped_at < len(lead):
                raise LeadStopped(adopted)
            handle.led = handle._led
            if riders:
                handle.riders = tuple(adopted.results[len(adopted.results) - len(riders) :])
            return handle
        if not own and standing is LeaseStanding.HELD:
            raise LeaseHeld(
                session_id,
                f"is held by {rec.host or 'another client'} until {describe_target_time(rec.expires_at)} (target clock)",
                **_describe_holder(obs),
            )
        if not own and not confirm_takeover:
            raise takeover_needs_confirmation(obs)
    granted = False
    if rec is not None and rec.state is LeaseState.RELEASED and rec.transfer_generation > 0:
        granted = await _refuse_fenced(target, paths, identity, rec)
    return await _claim(target, paths, identity, duration_seconds, obs, consumes_grant=granted, lead=lead, trailing=riders, lock=lock,
                        name_rival=name_rival, names_holder=names_holder)


def fence_applies(fence: TransferFence, released: LeaseRecord) -> bool:
    """Whether ``fence`` reserves the ``released`` head: the grant that wrote
    it released the lease of its owner and opened the next transfer
    generation in that same write (so the match survives the release having
    to step over a claim, when its generation number moved)."""
    return (
        released.state is LeaseState.RELEASED
        and released.client_id == fence.owner_client
        and released.transfer_generation == fence.transfer_generation + 1
    )


async def _refuse_fenced(target: Target, paths: SessionPaths, identity: ClientIdentity, released: LeaseRecord) -> bool:
    """A release written by a granted transfer is claimable only by its
    requester until the fence expires (judged against the target clock).
    Returns whether ``released`` is such a release (and may be claimed)."""
    granted = released.transfer_generation - 1
    read = Read(paths.transfer_record("fence", granted), optional=True)
    clock = Clock(paths.lease_dir)
    result = await target.run(ControlProgram([read, clock]))
    if result[0].status is Status.ABSENT:
        return False
    raise_for_result(read, result[0])
    raise_for_result(clock, result[1])
    fence = decode_record(TransferFence, result[0].value, paths.transfer_label("fence", granted))
    now = int(result[1].value)
    if not fence_applies(fence, released):
        return False
    if fence.requester_client == identity.client_id or now >= fence.expires_at:
        return True
    raise TransferReserved(
        paths.session_id,
        f"was handed to {fence.requester_host or 'another client'}, "
        f"which alone may take it until {describe_target_time(fence.expires_at)} (target clock)",
        holder_client=fence.requester_client,
        holder_host=fence.requester_host,
        state=released.state.value,
        expires_at=fence.expires_at,
        now=now,
    )


async def _claim(
    target: Target,
    paths: SessionPaths,
    identity: ClientIdentity,
    duration: int,
    obs: LeaseObservation,
    *,
    consumes_grant: bool = False,
    lead: Sequence[Operation] = (),
    trailing: Sequence[Operation] = (),
    lock: str | None = None,
    name_rival: bool = True,
    names_holder: bool = True,
) -> LeaseHandle:
    """Claim the lease above ``obs``. ``consumes_grant``: the head is a
    granted release, and this claim opens the next transfer generation so
    the grant's fence reserves that one release only -- a later plain
    release by the same owner would otherwise match it again. ``lead``:
    operations run first in the claim's program; when one of them stops
    it, nothing of the lease was written and :class:`LeadStopped` says
    which. ``trailing``: reads run last (see :func:`acquire_lease`'s
    ``riders``). ``name_rival``: a lost election reads who won, for its
    message."""
    n = obs.generation
    now = obs.now
    assert now is not None
    prior = obs.record
    transfer_generation = prior.transfer_generation if prior else 0
    if consumes_grant:
        transfer_generation += 1
    common = dict(
        client_id=identity.client_id,
        host=identity.host,
        renewed_at=now,
        expires_at=now + duration,
        publication_head=prior.publication_head if prior else None,
        unsettled_mutation=prior.unsettled_mutation if prior else False,
        transfer_generation=transfer_generation,
        holder=this_process() if names_holder else None,
    )
    candidate = LeaseRecord(generation=n + 1, state=LeaseState.CLAIMING, **common)
    candidate_raw = encode_record(candidate)
    ops: list[Operation] = list(lead)
    if n == 0:
        ops.append(MakeDirs(paths.lease_dir, optional=True))
    create_candidate = CreateExclusive(paths.generation(n + 1), candidate_raw)
    at_candidate = len(ops)
    ops.append(create_candidate)
    at_verify = len(ops)
    if n > 0:
        ops.append(Verify(paths.generation(n), obs.raw))
    activate = StampedCreate(
        paths.generation(n + 2), stamped_record(LeaseRecord(generation=n + 2, state=LeaseState.ACTIVE, **common), duration)
    )
    at_activate = len(ops)
    ops.append(activate)
    at_listing = len(ops)
    ops.append(ListDir(paths.lease_dir))
    sound: dict[int, bytes] = {n: obs.raw} if n > 0 and obs.raw is not None else {}
    prune = _prune_ops(paths, obs.generations, n + 2, sound, set())
    at_prune = len(ops)
    ops += prune.ops
    at_trailing = len(ops)
    ops += trailing
    result = await target.run(ControlProgram(ops, lock=lock))
    if result.stopped_at is not None and result.stopped_at < len(lead):
        raise LeadStopped(result)

    def raced(why: str) -> ClaimRaced:
        return ClaimRaced(paths.session_id, why)

    if result[at_candidate].status is Status.CONFLICT:
        raise raced(await _rival_claim(target, paths, n + 1, identity) if name_rival else "another claim won")
    raise_for_result(create_candidate, result[at_candidate])
    if n > 0 and result[at_verify].status is not Status.OK:
        await _abort_candidate(target, paths, candidate, candidate_raw)
        raise raced("the lease changed while it was being claimed")
    if result[at_activate].status is Status.CONFLICT:
        raise raced("the previous owner renewed before the claim activated")
    raise_for_result(activate, result[at_activate])
    active, active_raw, reading = _stamped_written(paths, n + 2, activate, result[at_activate])
    listed = result[at_listing]
    latest = generation_numbers(listed.value) if listed.ok else []
    if not latest or latest[-1] != n + 2:
        raise raced("a later lease generation superseded this claim")
    handle = LeaseHandle(target, paths, identity, duration, n + 2, active, active_raw, tuple(latest), reading, names_holder=names_holder)
    handle._sound.update(sound)
    handle._sound[n + 1] = candidate_raw
    prune.judge(paths, list(result.results[at_prune:at_trailing]), handle._sound, handle._damaged)
    handle.riders = tuple(result.results[at_trailing:])
    handle.led = tuple(result.results[: len(lead)])
    return handle


async def _rival_claim(target: Target, paths: SessionPaths, generation: int, identity: ClientIdentity) -> str:
    """Why a claim's candidate ``generation`` was taken: who wrote it, read
    only on this rare path, so the person is told another client claimed
    the session only when one did (a command of this same client, or a
    record that cannot be read, is said as such)."""
    read = Read(paths.generation(generation), optional=True)
    try:
        found = (await target.run(ControlProgram([read])))[0]
        rival = decode_lease_generation(paths, generation, found.value) if found.ok else None
    except (TargetError, RecordError):
        rival = None
    if rival is None:
        return "another claim of the lease was written at the same time"
    if rival.client_id == identity.client_id:
        return "another command of this client claimed the lease at the same time"
    return f"{rival.host or 'another client'} claimed the lease at the same time"


class LeadStopped(Exception):
    """A claim's lead operation stopped its program: nothing of the lease
    was written (``result``: the program's results)."""

    def __init__(self, result: ProgramResult) -> None:
        super().__init__(f"lead operation {result.stopped_at} stopped the claim")
        self.result = result


async def claim_new_session(
    target: Target,
    session_id: str,
    identity: ClientIdentity,
    *,
    duration_seconds: int,
    now: int,
    lead: Sequence[Operation],
    names_holder: bool = True,
) -> LeaseHandle:
    """Claim the lease of a session whose directory ``lead`` creates
    (exclusively: so no lease generation can exist yet, and none needs
    observing), in the program that creates it. ``now``: the caller's
    estimate of the target clock, for the claiming candidate alone (the
    active generation is stamped by the write's own clock reading). Raises
    :class:`LeadStopped` when a lead operation stopped the program."""
    paths = SessionPaths(check_session_id(session_id))
    fresh = LeaseObservation(paths.session_id, 0, None, None, now, ())
    return await _claim(target, paths, identity, duration_seconds, fresh, lead=lead, names_holder=names_holder)


async def _abort_candidate(target: Target, paths: SessionPaths, candidate: LeaseRecord, raw: bytes) -> None:
    """Withdraw a claiming candidate that did not activate, so it fences no
    one. Best effort: whoever already wrote above it has withdrawn it anyway."""
    aborted = msgspec.structs.replace(candidate, generation=candidate.generation + 1, state=LeaseState.ABORTED)
    try:
        await target.run(
            ControlProgram(
                [Verify(paths.generation(candidate.generation), raw), CreateExclusive(paths.generation(aborted.generation), encode_record(aborted))]
            )
        )
    except TargetError:
        pass


class Rider:
    """Operations a holder's head commits carry after the lease rotation,
    in the commit's own program: behind the rotation's proof (its
    ``Verify`` of the generation it replaces and the exclusive creation of
    the next), so a guarded write may ride too. ``every``: on every commit
    until withdrawn; else on the next commit only. ``delivered`` is called
    with the riders' results once a commit wrote its rotation; a commit
    that raised, or whose lead stopped it, delivers nothing (a one-shot
    rider stays for the next commit, or for its owner to withdraw and run
    on its own). Each rider is itself: equal to no other."""

    def __init__(
        self,
        ops: tuple[Operation, ...],
        every: bool = False,
        delivered: Callable[[tuple[OpResult, ...]], bool | None] | None = None,
        lock: str | None = None,
        compose: Callable[[Mapping[str, object]], Sequence[Operation]] | None = None,
        last: bool = False,
    ) -> None:
        self.ops = ops
        self.every = every
        self.delivered = delivered
        #: The lock directory the carrying program must hold (a guarded write
        #: of a file other writers change under that lock).
        self.lock = lock
        #: Called with each carrying commit's ``changes`` just before it runs,
        #: to set :attr:`ops` from what its owner knows by then (a head
        #: commit's ``publication_head`` names the publication it commits).
        self.compose = compose
        #: Carried after every other rider (composed after them too): its
        #: failure stops the rest of the program, and no other rider's.
        self.last = last
        #: The results of the last commit that carried the operations (and
        #: that ``delivered`` did not refuse), and the generation it wrote.
        self.results: tuple[OpResult, ...] | None = None
        self.generation: int | None = None

    def take(self, lease: LeaseHandle) -> tuple[OpResult, ...] | None:
        """The results, once, while they are ``lease``'s latest commit's:
        no generation written since (so no publication either), every
        operation run."""
        results, generation, self.results = self.results, self.generation, None
        if results is None or lease.lost or generation != lease.generation or lease.riding.count(self) == 0:
            return None
        if any(result.status is Status.SKIPPED for result in results):
            return None  # a rider before it stopped that program
        return results


class LeaseHandle:
    """A lease this client holds. Every method writes a new generation; a
    handle whose generation was superseded raises :class:`LeaseLost`."""

    def __init__(
        self,
        target: Target,
        paths: SessionPaths,
        identity: ClientIdentity,
        duration_seconds: int,
        generation: int,
        record: LeaseRecord,
        raw: bytes,
        known: tuple[int, ...],
        now: int,
        *,
        names_holder: bool = True,
    ) -> None:
        self.target = target
        #: The generations this handle writes name this process as their
        #: holder (so that its death can be proven); off while the lease is
        #: meant to outlive the process (a CLI command's, between its turns).
        self.names_holder = names_holder
        self.paths = paths
        self.identity = identity
        self.duration_seconds = duration_seconds
        self.generation = generation
        self.record = record
        self._raw = raw
        self._known = known
        #: The latest target clock reading this handle took.
        self.now = now
        self.lost = False
        self.released = False
        self._uncertain = False
        self._lock = asyncio.Lock()
        #: Old generations known to be sound records, with their exact bytes
        #: (what a prune may remove), and those found damaged (never removed).
        self._sound: dict[int, bytes] = {}
        self._damaged: set[int] = set()
        #: The results of the claim's riders and of its lead operations (see
        #: :func:`acquire_lease`; ``led`` None: not run in the claim's program).
        self.riders: tuple[OpResult, ...] = ()
        self.led: tuple[OpResult, ...] | None = None
        #: The lead results of the last rotation that ran its lead operations.
        self._led: tuple[OpResult, ...] | None = None
        #: What the next head commits carry (see :class:`Rider`).
        self.riding: list[Rider] = []

    def __repr__(self) -> str:
        return (
            f"LeaseHandle(session_id={self.session_id!r}, generation={self.generation}, "
            f"lost={self.lost}, released={self.released})"
        )

    @property
    def session_id(self) -> str:
        return self.paths.session_id

    @property
    def publication_head(self) -> str | None:
        return self.record.publication_head

    @property
    def needs_resync(self) -> bool:
        """A program failed mid-way, so the current generation is unknown."""
        return self._uncertain

    @property
    def raw(self) -> bytes:
        """The exact bytes of the current generation (what a verify proves)."""
        return self._raw

    async def renew(self) -> None:
        """Extend the lease to ``duration_seconds`` after a target clock
        reading taken by the write itself (one round trip)."""
        await self._rotate(stamped=True)

    async def release(self) -> None:
        """Write a ``released`` generation, freeing the session for anyone.

        Raises :class:`LeaseLost`, having written nothing, when this handle's
        generation was already superseded (taken over, or rotated by another
        handle). Otherwise returns once the released generation is written,
        even if another client claimed the session straight after it."""
        await self._rotate(state=LeaseState.RELEASED)
        self.released = True

    async def release_with(self, lead_ops: list[Operation], *, trailing: Sequence[Operation] = (), **changes) -> ProgramResult:
        """Run ``lead_ops`` and, only if they all succeed, write a
        ``released`` generation with ``changes`` in the same program (a
        granted transfer's fence rides ahead of its release). Returns the
        result with ``stopped_at`` inside ``lead_ops`` when they stopped it
        and nothing was released. ``trailing`` (optional operations) run
        last, only once the released generation is written."""
        result = await self._rotate(lead_ops, trailing=trailing, state=LeaseState.RELEASED, **changes)
        if result.stopped_at is None or result.stopped_at >= len(lead_ops):
            self.released = True
        return result

    async def release_after(self, lead_ops: Sequence[Operation], *, trailing: Sequence[Operation] = (), **changes) -> None:
        """:meth:`release_with`, raising :class:`LeadStopped` when
        ``lead_ops`` stopped the program (nothing released)."""
        result = await self.release_with(list(lead_ops), trailing=trailing, **changes)
        if result.stopped_at is not None and result.stopped_at < len(lead_ops):
            raise LeadStopped(result)

    async def begin_publishing(self) -> None:
        """Open a publishing window (the generation fences others as
        ``publishing`` until a head commit or :meth:`end_publishing`)."""
        await self._rotate(state=LeaseState.PUBLISHING)

    async def end_publishing(self) -> None:
        await self._rotate(state=LeaseState.ACTIVE)

    async def set_unsettled_mutation(self, unsettled: bool, *, then: Sequence[Operation] = ()) -> tuple[OpResult, ...]:
        """Set or clear the latch; ``then`` runs after the rotation in its
        own program, so what must follow the latch's change (a command's
        record goes only once the latch is cleared) costs no program of its
        own. Returns ``then``'s results. The :attr:`riding` operations wait
        for a head commit: this is none."""
        result = await self._rotate(unsettled_mutation=bool(unsettled), trailing=then)
        return tuple(result.results[len(result.results) - len(then):]) if then else ()

    async def open_next_transfer_generation(self) -> None:
        await self._rotate(transfer_generation=self.record.transfer_generation + 1)

    async def commit(self, lead_ops: list[Operation], **changes) -> ProgramResult:
        """Run ``lead_ops`` and, only if they all succeed, the rotation with
        ``changes`` in the same program, then the :attr:`riding` operations.
        Returns the program result when a lead operation stopped it
        (nothing about the lease was written); raises :class:`LeaseLost`
        when the rotation itself was refused."""
        riders = [r for r in self.riding if not r.last] + [r for r in self.riding if r.last]
        for rider in riders:
            if rider.compose is not None:
                rider.ops = tuple(rider.compose(changes))
        trailing = [op for rider in riders for op in rider.ops]
        locks = {rider.lock for rider in riders if rider.lock is not None}
        if len(locks) > 1:
            raise ValueError(f"riders want different locks: {sorted(locks)}")
        result = await self._rotate(lead_ops, trailing=trailing, lock=next(iter(locks), None), **changes)
        if result.stopped_at is not None and result.stopped_at < len(lead_ops):
            return result
        at = len(result.results) - len(trailing)
        for rider in riders:
            results = tuple(result.results[at : at + len(rider.ops)])
            at += len(rider.ops)
            if not rider.every and rider in self.riding:
                self.riding.remove(rider)
            kept = rider.delivered is None or rider.delivered(results) is not False
            rider.results, rider.generation = (results if kept else None), self.generation
        return result

    def ride(self, ops: Sequence[Operation], *, every: bool = False,
             delivered: Callable[[tuple[OpResult, ...]], bool | None] | None = None, lock: str | None = None,
             compose: Callable[[Mapping[str, object]], Sequence[Operation]] | None = None, last: bool = False) -> Rider:
        """Have the next head commit (``every``: each one) carry ``ops``;
        ``delivered`` is told their results (False: do not keep them for
        :meth:`Rider.take`); ``lock``, ``compose``, ``last``: see :class:`Rider`."""
        rider = Rider(tuple(ops), every, delivered, lock=lock, compose=compose, last=last)
        self.riding.append(rider)
        return rider

    def withdraw(self, rider: Rider) -> bool:
        """Stop carrying ``rider``; False when it was no longer riding."""
        if rider in self.riding:
            self.riding.remove(rider)
            return True
        return False

    async def resync(self) -> None:
        """Re-learn the current generation after an operation whose outcome
        is unknown (the target failed mid-program)."""
        async with self._lock:
            await self._resync_locked()

    async def _resync_locked(self) -> None:
        obs = await _observe(self.target, self.paths, with_clock=False)
        rec = obs.record
        if rec is None or rec.client_id != self.identity.client_id or obs.generation < self.generation:
            self.lost = True
            self._uncertain = False
            raise LeaseLost(self.session_id, f"generation {obs.generation} is not this client's")
        self.generation, self.record, self._raw, self._known = obs.generation, rec, obs.raw or b"", obs.generations
        self._uncertain = False
        if rec.state is LeaseState.RELEASED:
            self.released = True
        elif rec.state not in (LeaseState.ACTIVE, LeaseState.PUBLISHING):
            self.lost = True
            raise LeaseLost(self.session_id, f"generation {obs.generation} is {rec.state.value}")

    def _check_usable(self) -> None:
        if self.lost:
            raise LeaseLost(self.session_id, "this client no longer holds the lease")
        if self.released:
            raise LeaseLost(self.session_id, "the lease was released")

    async def _rotate(
        self, lead_ops: list[Operation] | tuple[Operation, ...] = (), *, stamped: bool = False,
        trailing: Sequence[Operation] = (), lock: str | None = None, **changes
    ) -> ProgramResult:
        """Write the next generation with ``changes`` (``stamped``: and with
        fresh times from the write's own clock reading) after ``lead_ops``,
        and before ``trailing`` (optional operations, last in the program)."""
        async with self._lock:
            if self._uncertain:
                await self._resync_locked()
            self._check_usable()
            base_generation, base_raw = self.generation, self._raw
            lead = list(lead_ops)
            self._led = None
            while True:
                next_generation = base_generation + 1
                path = self.paths.generation(next_generation)
                # Whoever writes a generation holds it: an adoption (or a
                # rotation after another process of this client rotated)
                # must not leave a record naming a process that may end first.
                holder = this_process() if self.names_holder else None
                template = msgspec.structs.replace(self.record, generation=next_generation, holder=holder, **changes)
                create: CreateExclusive | StampedCreate
                if stamped:
                    create = StampedCreate(path, stamped_record(template, self.duration_seconds))
                else:
                    create = CreateExclusive(path, encode_record(template))
                base = self.paths.generation(base_generation)
                at = len(lead)
                ops = [*lead, Verify(base, base_raw), create, Verify(base, base_raw, optional=True), ListDir(self.paths.lease_dir, optional=True)]
                self._sound.setdefault(self.generation, self._raw)
                prune = _prune_ops(self.paths, self._known, next_generation, self._sound, self._damaged)
                ops += prune.ops
                at_trailing = len(ops)
                ops += trailing
                try:
                    result = await self.target.run(ControlProgram(ops, lock=lock))
                except BaseException:
                    self._uncertain = True
                    raise
                if lead:
                    self._led = tuple(result.results[:at])
                if result.stopped_at is not None and result.stopped_at < at:
                    return result
                verified, created, rechecked, listed = result[at], result[at + 1], result[at + 2], result[at + 3]
                if verified.status is Status.MISMATCH:
                    self.lost = True
                    raise LeaseLost(self.session_id, f"generation {base_generation} was superseded")
                raise_for_result(ops[at], verified)
                if created.status is Status.CONFLICT:
                    stepped = await self._claim_above(base_generation)
                    if stepped is None:
                        self.lost = True
                        raise LeaseLost(self.session_id, f"generation {next_generation} was written by another client")
                    base_generation, base_raw = stepped
                    lead = []  # the lead operations already ran
                    continue
                raise_for_result(create, created)
                if isinstance(create, StampedCreate):
                    new, new_raw, reading = _stamped_written(self.paths, next_generation, create, created)
                    self.now = reading
                else:
                    new, new_raw = template, create.data
                latest = generation_numbers(listed.value) if listed.ok else None
                fresh = rechecked.ok or (latest is not None and latest[-1] == next_generation)
                if not fresh and rechecked.status is Status.MISMATCH and latest is not None:
                    # Generation N is gone and one above N+1 exists: this
                    # create re-made a pruned name below the head, or a
                    # successor followed it and pruned N already.
                    if new.state is not LeaseState.RELEASED:
                        self.lost = True
                        raise LeaseLost(
                            self.session_id,
                            f"generation {latest[-1]} is above generation {next_generation}, which cannot be proven current",
                        )
                elif not fresh:
                    # A proof could not be read: whether this write won is unknown.
                    self._uncertain = True
                    if rechecked.status is not Status.MISMATCH:
                        raise_for_result(ops[at + 2], rechecked)
                    raise_for_result(ops[at + 3], listed)
                pruned = prune.judge(self.paths, list(result.results[at + 4 : at_trailing]), self._sound, self._damaged)
                for gone in pruned:
                    self._sound.pop(gone, None)
                self.generation, self.record, self._raw = next_generation, new, new_raw
                known = latest if latest is not None else [*self._known, next_generation]
                self._known = tuple(g for g in known if g not in pruned)
                return result

    async def _claim_above(self, base_generation: int) -> tuple[int, bytes] | None:
        """When generation ``base+1`` is another client's claim that has not
        activated, return it as the new base to write above; else ``None``."""
        above = base_generation + 1
        read = Read(self.paths.generation(above), optional=True)
        result = await self.target.run(ControlProgram([read, ListDir(self.paths.lease_dir)]))
        if not result[0].ok or not result[1].ok:
            return None
        latest = generation_numbers(result[1].value)
        if latest[-1] != above:
            return None
        try:
            record = decode_lease_generation(self.paths, above, result[0].value)
        except RecordError:
            return None
        if record.state is not LeaseState.CLAIMING or record.client_id == self.identity.client_id:
            return None
        return above, result[0].value
