"""Cooperative control transfer: the request, decision and fence records.

On disk
-------
``<session>/.lease/requests/`` holds three immutable record families, each
keyed by a *transfer generation* ``T`` (the ``transfer_generation`` every
lease generation carries, copied by every rotation):

- ``request-<T>.json`` (:class:`~.records.TransferRequest`): a client asks
  the lease holder for control. Exclusive creation elects one requester per
  transfer generation, so every contender uses the same path even when an
  ordinary rotation lands between its lookup and its create. The request
  names the holder it is addressed to; a request naming anybody but the
  current holder is void (left over from an earlier ownership).
- ``decision-<T>.json`` (:class:`~.records.TransferDecision`): the holder's
  answer, ``grant`` or ``keep``, and whether a person chose it or the prompt
  timed out. The first decision written stands.
- ``fence-<T>.json`` (:class:`~.records.TransferFence`): written in the same
  program as the release a grant ends with, ahead of it, so the released
  head is never visible without it. Until it expires (target clock) only the
  requester may claim the released lease (:func:`.lease.acquire_lease`).
  That release is the commit of the owner's final publication too
  (:func:`release_granted`): what it frees is the state the owner left.

A keep rotates the lease to ``T+1`` in the program that writes the decision;
a grant's release writes ``T+1`` too. Both therefore open the next transfer
generation, and the decision alone never does. The claim that takes a
granted release opens ``T+2``: the fence matches a release of its owner at
``T+1``, so without that step a later plain release by the same owner (after
the session came back to it) would be reserved for the old requester again. The directory is created
only by a protocol write (a request); every read here is a pure read, so a
poller of a session nobody asked for changes nothing.

Times (``requested_at``, ``decided_at``, a fence's window) are target clock
readings taken by the writing operation itself
(:class:`~mevedel_server.targets.program.StampedCreate`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from ...targets import (
    Clock,
    ClockStamp,
    ControlProgram,
    MakeDirs,
    Operation,
    Read,
    StampedCreate,
    Status,
    Target,
    raise_for_result,
)
from ..errors import SessionRefusal
from ..layout import SessionPaths
from .lease import (
    ClientIdentity,
    LeadStopped,
    LeaseHandle,
    LeaseObservation,
    LeaseStanding,
    fence_applies,
    observe_lease,
)
from .records import (
    LeaseRecord,
    LeaseState,
    RecordError,
    RecordErrorKind,
    TransferDecision,
    TransferFence,
    TransferRequest,
    TransferVerdict,
    decode_record,
    encode_record,
)

REQUEST = "request"
DECISION = "decision"
FENCE = "fence"

#: Seconds a granted release stays reserved for its requester by default.
DEFAULT_FENCE_SECONDS = 15


class TransferBusy(SessionRefusal):
    """Another client's request holds this transfer generation."""

    def __init__(self, session_id: str, request: TransferRequest) -> None:
        super().__init__(
            session_id,
            f"{request.requester_host or 'another client'} already asked for control; wait for the owner's answer to that request",
        )
        self.request = request


class NotRequestable(SessionRefusal):
    """The lease is not held by another live client, so there is nobody to ask."""

    def __init__(self, session_id: str, why: str) -> None:
        super().__init__(session_id, f"control cannot be requested: {why}")
        self.why = why


def _stamped(record: msgspec.Struct, offsets: dict[str, int]) -> tuple[bytes | ClockStamp, ...]:
    """The encoding of ``record`` (whose ``offsets`` fields hold 0) with each
    of those fields left to the target clock reading plus its offset. A
    quoted key followed by a colon occurs in the encoding only as that key."""
    rest = encode_record(record)
    parts: list[bytes | ClockStamp] = []
    for key, offset in offsets.items():
        marker = f'"{key}":0'.encode()
        before, found, rest = rest.partition(marker)
        if not found or rest[:1] not in (b",", b"}"):
            raise AssertionError(f"no {key} in an encoded {type(record).__name__}")
        parts += [before + marker[:-1], ClockStamp(offset)]
    parts.append(rest)
    return tuple(parts)


def _decode(paths: SessionPaths, kind: str, record_type, transfer_generation: int, raw: bytes):
    label = paths.transfer_label(kind, transfer_generation)
    record = decode_record(record_type, raw, label)
    if record.transfer_generation != transfer_generation:
        raise RecordError(
            RecordErrorKind.INVALID_VALUE,
            label,
            f"records transfer generation {record.transfer_generation} under the name of {transfer_generation}",
        )
    return record


class Mailbox(msgspec.Struct, frozen=True):
    """The request and decision of one transfer generation, as read together."""

    transfer_generation: int
    request: TransferRequest | None
    decision: TransferDecision | None
    #: Target clock read in the same program (None when not asked for).
    now: int | None = None


async def read_mailbox(
    target: Target, paths: SessionPaths, transfer_generation: int, *, with_clock: bool = False,
    clock_if_requested: bool = False,
) -> Mailbox:
    """Pure reads (plus the clock probe in ``.lease/`` when ``with_clock``):
    an absent mailbox directory holds no request. ``clock_if_requested``:
    the clock only when a request is there -- an owner's look at an empty
    mailbox writes no probe, and the one that finds a request has the
    reading its answer's deadline starts from without another program."""
    decision_op = Read(paths.transfer_record(DECISION, transfer_generation), optional=True)
    # Not optional when the clock waits on it: an absent request stops the
    # program before the probe.
    request_op = Read(paths.transfer_record(REQUEST, transfer_generation), optional=not clock_if_requested)
    ops: list[Operation] = [decision_op, request_op]
    if with_clock or clock_if_requested:
        ops.append(Clock(paths.lease_dir))
    result = await target.run(ControlProgram(ops))
    found = []
    for op, kind, record_type, op_result in zip(ops, (DECISION, REQUEST), (TransferDecision, TransferRequest), result):
        if op_result.status is Status.ABSENT:
            found.append(None)
            continue
        raise_for_result(op, op_result)
        found.append(_decode(paths, kind, record_type, transfer_generation, op_result.value))
    now = None
    if with_clock or (clock_if_requested and found[1] is not None):
        raise_for_result(ops[2], result[2])
        now = int(result[2].value)
    return Mailbox(transfer_generation, found[1], found[0], now)


async def request_control(target: Target, observation: LeaseObservation, identity: ClientIdentity) -> TransferRequest:
    """Ask the holder of ``observation``'s lease for control. Idempotent: a
    request this client already made for the same holder and transfer
    generation is returned as it is."""
    paths = SessionPaths(observation.session_id)
    rec = observation.record
    if rec is None or observation.standing is not LeaseStanding.HELD:
        raise NotRequestable(paths.session_id, "nobody holds its lease")
    if rec.client_id == identity.client_id:
        raise NotRequestable(paths.session_id, "this client already holds its lease")
    t = rec.transfer_generation
    template = TransferRequest(
        transfer_generation=t,
        requester_client=identity.client_id,
        requester_host=identity.host,
        owner_client=rec.client_id,
        requested_at=0,
    )
    create = StampedCreate(paths.transfer_record(REQUEST, t), _stamped(template, {"requested_at": 0}))
    ops = [MakeDirs(paths.requests_dir, optional=True), create]
    result = await target.run(ControlProgram(ops))
    if result[1].status is Status.CONFLICT:
        existing = (await read_mailbox(target, paths, t)).request
        if existing is None:  # written and gone: only a deleted session loses records
            raise NotRequestable(paths.session_id, "its transfer records changed while the request was written")
        if existing.requester_client == identity.client_id and existing.owner_client == rec.client_id:
            return existing
        raise TransferBusy(paths.session_id, existing)
    raise_for_result(create, result[1])
    return decode_record(TransferRequest, create.content(int(result[1].value)), paths.transfer_label(REQUEST, t))


def _decision_create(paths: SessionPaths, request: TransferRequest, verdict: TransferVerdict, reason: str) -> StampedCreate:
    template = TransferDecision(
        transfer_generation=request.transfer_generation,
        requester_client=request.requester_client,
        owner_client=request.owner_client,
        verdict=verdict,
        reason=reason,
        decided_at=0,
    )
    return StampedCreate(paths.transfer_record(DECISION, request.transfer_generation), _stamped(template, {"decided_at": 0}))


async def decide_grant(lease: LeaseHandle, request: TransferRequest, reason: str) -> TransferDecision:
    """Record a grant. Authority does not move yet: the owner still drains,
    publishes and then calls :func:`release_granted`. Returns the decision
    that stands (an earlier one, if this generation was already decided)."""
    paths = lease.paths
    create = _decision_create(paths, request, TransferVerdict.GRANT, reason)
    result = (await lease.target.run(ControlProgram([create])))[0]
    if result.status is Status.CONFLICT:
        return await _standing_decision(lease, request)
    raise_for_result(create, result)
    return decode_record(TransferDecision, create.content(int(result.value)), paths.transfer_label(DECISION, request.transfer_generation))


async def decide_keep(lease: LeaseHandle, request: TransferRequest, reason: str = "answered") -> TransferDecision:
    """Record a rejection and, in the same program, rotate the lease to the
    next transfer generation so a fresh request can be made."""
    paths = lease.paths
    t = request.transfer_generation
    create = _decision_create(paths, request, TransferVerdict.KEEP, reason)
    result = await lease.commit([create], transfer_generation=t + 1)
    if result[0].status is Status.CONFLICT:
        decision = await _standing_decision(lease, request)
        if decision.verdict is TransferVerdict.KEEP and lease.record.transfer_generation == t:
            await lease.open_next_transfer_generation()
        return decision
    raise_for_result(create, result[0])
    return decode_record(TransferDecision, create.content(int(result[0].value)), paths.transfer_label(DECISION, t))


async def _standing_decision(lease: LeaseHandle, request: TransferRequest) -> TransferDecision:
    decision = (await read_mailbox(lease.target, lease.paths, request.transfer_generation)).decision
    if decision is None:
        raise SessionRefusal(lease.session_id, "the transfer decision vanished after it was written")
    return decision


#: ``release(lead, changes)``: write the released generation with
#: ``changes`` after ``lead`` in one program, raising
#: :class:`~.lease.LeadStopped` when ``lead`` stopped it (nothing written).
Release = Callable[[list[Operation], dict[str, object]], Awaitable[object]]


async def release_granted(
    lease: LeaseHandle, request: TransferRequest, fence_seconds: int = DEFAULT_FENCE_SECONDS, *, release: Release | None = None,
    fenced: bool = False,
) -> None:
    """End a granted transfer: the fence for the requester, then the release
    opening the next transfer generation, in one program. ``release``: the
    commit that releases (the owner's final publication, which the released
    generation then names: ``OpenSession.save``); by default the lease's
    release alone. ``fenced``: the fence is known to be on disk already
    (:func:`write_fence`), and the release runs without it."""
    fence = _fence(lease, request, fence_seconds)
    changes: dict[str, object] = {"transfer_generation": request.transfer_generation + 1}
    release = release or _releasing(lease)
    if fenced:
        await release([], changes)
        return
    try:
        await release([fence], changes)
    except LeadStopped as stopped:
        if stopped.result[0].status is not Status.CONFLICT:
            raise_for_result(fence, stopped.result[0])
        # A retry after a release that failed once its fence was written.
        await release([], changes)


async def write_fence(lease: LeaseHandle, request: TransferRequest, fence_seconds: int = DEFAULT_FENCE_SECONDS) -> None:
    """Write a granted transfer's fence ahead of its release (one already
    there stands): after a release whose publication failed and was
    journalled, so that a later process knows that record for the
    release's own (:func:`fence_written`)."""
    fence = _fence(lease, request, fence_seconds)
    result = (await lease.target.run(ControlProgram([fence])))[0]
    if result.status is not Status.CONFLICT:
        raise_for_result(fence, result)


async def fence_written(target: Target, paths: SessionPaths, transfer_generation: int) -> bool:
    """The fence of ``transfer_generation`` is on disk: its grant's release
    was attempted (it wrote the fence, or its failure did: :func:`write_fence`)."""
    read = Read(paths.transfer_record(FENCE, transfer_generation), optional=True)
    return (await target.run(ControlProgram([read])))[0].ok


def _fence(lease: LeaseHandle, request: TransferRequest, fence_seconds: int) -> StampedCreate:
    if isinstance(fence_seconds, bool) or not isinstance(fence_seconds, int) or fence_seconds < 1:
        raise ValueError("a fence lasts a positive whole number of seconds")
    paths = lease.paths
    t = request.transfer_generation
    template = TransferFence(
        transfer_generation=t,
        requester_client=request.requester_client,
        requester_host=request.requester_host,
        owner_client=request.owner_client,
        released_generation=lease.generation + 1,
        fenced_at=0,
        expires_at=0,
    )
    return StampedCreate(paths.transfer_record(FENCE, t), _stamped(template, {"fenced_at": 0, "expires_at": fence_seconds}))


def _releasing(lease: LeaseHandle) -> Release:
    async def release(lead: list[Operation], changes: dict[str, object]) -> None:
        await lease.release_after(lead, **changes)

    return release


class RequesterView(msgspec.Struct, frozen=True):
    """What a requester polls: the lease head, its decision and its fence."""

    head: LeaseRecord | None
    decision: TransferDecision | None
    fence: TransferFence | None
    #: Target clock read with the head.
    now: int | None = None

    def released_to(self, request: TransferRequest) -> bool:
        """The owner released the lease to this request's requester."""
        return (
            self.head is not None
            and self.fence is not None
            and self.fence.requester_client == request.requester_client
            and fence_applies(self.fence, self.head)
        )

    def owner_still(self, request: TransferRequest) -> bool:
        """The request's owner still holds the lease at its transfer generation."""
        head = self.head
        return (
            head is not None
            and head.client_id == request.owner_client
            and head.state in (LeaseState.CLAIMING, LeaseState.ACTIVE, LeaseState.PUBLISHING)
            and head.transfer_generation == request.transfer_generation
        )


async def read_requester_view(target: Target, request: TransferRequest, session_id: str) -> RequesterView:
    paths = SessionPaths(session_id)
    head = await observe_lease(target, session_id)
    t = request.transfer_generation
    ops = [Read(paths.transfer_record(DECISION, t), optional=True), Read(paths.transfer_record(FENCE, t), optional=True)]
    result = await target.run(ControlProgram(ops))
    decision = fence = None
    if result[0].status is not Status.ABSENT:
        raise_for_result(ops[0], result[0])
        decision = _decode(paths, DECISION, TransferDecision, t, result[0].value)
    if result[1].status is not Status.ABSENT:
        raise_for_result(ops[1], result[1])
        fence = _decode(paths, FENCE, TransferFence, t, result[1].value)
    return RequesterView(head.record, decision, fence, head.now)
