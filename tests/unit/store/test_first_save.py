"""A new session's first save makes its directory and claims its lease in
one program, the workspace identity proven unchanged in it; a connection
lost at any write of that program leaves a save that succeeds when tried
again, with this client's lease and nothing of another session; an
identity changed since the session was created is judged the longer way
(nothing of the session made first)."""

from __future__ import annotations

import asyncio

import pytest

from mevedel_server.store import ClientIdentity
from mevedel_server.store.errors import StoreError
from mevedel_server.store.layout import WORKSPACE_ID_PATH
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.pending_publication import PENDING_DIR
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
    TargetError,
)
from mevedel_server.targets.faults import FaultInjectingTarget

ME = ClientIdentity("first-save-client", "desk")


class Recording(ProgramTarget):
    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs: list[list[str]] = []
        self.paths: list[str] = []

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs.append([type(op).__name__ for op in program.operations])
        self.paths += [f"{type(op).__name__} {op.path}" for op in program.operations]
        return await self.inner.run(program)


async def _first_turn(service: SessionService) -> str:
    sid = (await service.sessions.create()).session_id
    await service.turns.begin_turn(sid, "hello")
    await service.turns.append(sid, EvidenceInput("response", text="hi"))
    return sid


async def test_the_first_save_makes_the_directory_and_claims_in_one_program(tmp_path):
    target = Recording(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = await _first_turn(service)
    before = len(target.programs)
    await service.turns.settle(sid)
    first = target.programs[before]
    # The identity proof, the directories, the claim's candidate and its activation.
    assert first[0] == "Verify" and "MakeDirs" in first and "CreateExclusive" in first and "StampedCreate" in first
    assert len(target.programs) - before == 2  # then the publication
    assert (await SessionService(LocalTarget(tmp_path), ME).sessions.list()).rows[0].turn_count == 1
    assert (await service.sessions.list()).rows[0].holder_is_self
    # The directory is the claim's own: the recovery gate has no journal to look for.
    await service.turns.begin_turn(sid, "again")
    await service.turns.settle(sid)
    assert not [p for p in target.paths if p.startswith("ListDir") and p.endswith("/.recovery")]
    await service.sessions.close(sid)


@pytest.mark.parametrize("point", range(1, 9))
async def test_a_connection_lost_in_the_first_save_leaves_a_save_that_succeeds(tmp_path, point):
    target = FaultInjectingTarget(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = await _first_turn(service)
    target.arm(point, "error")
    with pytest.raises((StoreError, TargetError)):
        await service.sessions.save(sid)
    assert target.fired
    target.arm(None)
    await service.sessions.retry_publication(sid)
    await service.turns.settle(sid)
    rows = (await service.sessions.list()).rows
    assert [r.session_id for r in rows] == [sid] and rows[0].holder_is_self
    assert (await SessionService(LocalTarget(tmp_path), ME).sessions.list()).rows[0].turn_count == 1
    await service.sessions.close(sid)
    # Another client sees it free (the claim left no candidate fencing it).
    other = SessionService(LocalTarget(tmp_path), ClientIdentity("another-client", "laptop"))
    assert (await other.sessions.open(sid, "resume")).info.access.value == "writable"
    await other.sessions.close(sid)


async def test_an_identity_changed_since_creation_is_judged_before_anything_is_made(tmp_path):
    service = SessionService(LocalTarget(tmp_path), ME, renew_every=3600)
    sid = await _first_turn(service)
    (tmp_path / WORKSPACE_ID_PATH).write_bytes(b"not a record")
    with pytest.raises(StoreError):
        await service.turns.settle(sid)
    assert not (tmp_path / ".mevedel" / "sessions" / sid).exists()


class AnswerLost(ProgramTarget):
    """Runs the first save's program, then loses its answer (the
    connection dropped after the remote side ran it)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.dropped = False

    async def run(self, program: ControlProgram) -> ProgramResult:
        result = await self.inner.run(program)
        if not self.dropped and any(type(op).__name__ == "StampedCreate" for op in program.operations):
            self.dropped = True
            raise TargetError(".mevedel/sessions", "Connection lost")
        return result


async def test_a_first_save_whose_answer_was_lost_succeeds_when_retried(tmp_path):
    target = AnswerLost(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = await _first_turn(service)
    with pytest.raises((StoreError, TargetError)):
        await service.sessions.save(sid)
    assert target.dropped
    await service.sessions.retry_publication(sid)
    await service.turns.settle(sid)
    rows = (await service.sessions.list()).rows
    assert [r.session_id for r in rows] == [sid] and rows[0].holder_is_self and rows[0].turn_count == 1
    await service.sessions.close(sid)


class HeldClaim(ProgramTarget):
    """Holds the first save's program (the claim) until released, so
    another save of the same process starts while it is in flight."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.claims = 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        if any(type(op).__name__ == "StampedCreate" for op in program.operations):
            self.claims += 1
            if self.claims == 1:
                self.held.set()
                await self.release.wait()
        return await self.inner.run(program)


async def test_two_saves_at_once_of_a_new_session_claim_its_lease_once(tmp_path):
    # A prompt's first publication (the walk riding it) and the checkpoint
    # timer's tick may both be the session's first save: the process must
    # not race itself for the lease, nor blame another client, nor leave a
    # publication pending.
    target = HeldClaim(LocalTarget(tmp_path))
    service = SessionService(target, ME, renew_every=3600)
    sid = await _first_turn(service)
    first = asyncio.ensure_future(service.turns.checkpoint(sid))
    await target.held.wait()
    await service.turns.append(sid, EvidenceInput("response", text="more"))
    second = asyncio.ensure_future(service.turns.checkpoint(sid))
    await asyncio.sleep(0)  # the second save runs up to its first wait
    target.release.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["SaveResult", "SaveResult"], results
    assert target.claims == 1
    assert service.session(sid).pending is None
    await service.turns.settle(sid)
    assert (await service.sessions.list()).rows[0].holder_is_self
    await service.sessions.close(sid)
    # Nothing is left pending for the next process either.
    assert not list((tmp_path / ".mevedel" / "sessions" / sid).glob(f"{PENDING_DIR}/*"))
    again = SessionService(LocalTarget(tmp_path), ME)
    assert (await again.sessions.open(sid, "resume")).info.pending_publication is None
    assert (await again.sessions.list()).rows[0].turn_count == 1
    await again.sessions.close(sid)


async def test_two_opens_at_once_of_a_saved_session_claim_its_lease_once(tmp_path):
    # An editor may open one session from two places at once (its session
    # list and its chat): one claim, both answered, the session writable.
    first_service = SessionService(LocalTarget(tmp_path), ME, renew_every=3600)
    sid = await _first_turn(first_service)
    await first_service.turns.settle(sid)
    await first_service.sessions.close(sid)
    target = HeldClaim(LocalTarget(tmp_path))  # holds the resume's claim
    service = SessionService(target, ME, renew_every=3600)
    first = asyncio.ensure_future(service.sessions.open(sid, "resume"))
    await target.held.wait()
    second = asyncio.ensure_future(service.sessions.open(sid, "resume"))
    await asyncio.sleep(0)
    target.release.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["OpenResult", "OpenResult"], results
    assert target.claims == 1
    await service.turns.begin_turn(sid, "turn 2")
    await service.turns.settle(sid)
    assert (await service.sessions.list()).rows[0].turn_count == 2
    await service.sessions.close(sid)
