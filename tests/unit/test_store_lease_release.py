"""A release is complete once its generation is written: a claim that lands
above it before the releasing program lists ``.lease/`` does not turn the
release into a lost lease."""

from __future__ import annotations

from mevedel_server.store import ClientIdentity, LeaseState, acquire_lease, materialize_session, observe_lease
from mevedel_server.store.records import decode_record
from mevedel_server.store.records import LeaseRecord
from mevedel_server.targets import ControlProgram, CreateExclusive, ListDir, LocalTarget, ProgramResult, ProgramTarget

SID = "2026-07-19T09-47-bf87b5dd793a"
ME = ClientIdentity("releasing", "desk")
NEXT = ClientIdentity("claiming", "laptop")


class ClaimAfterRelease(ProgramTarget):
    """Runs another client's claim between a released generation's creation
    and the listing that follows it in the same program."""

    def __init__(self, inner: LocalTarget) -> None:
        self.inner = inner
        self.claimed = None

    async def run(self, program: ControlProgram) -> ProgramResult:
        ops = program.operations
        for index, op in enumerate(ops):
            if (
                isinstance(op, CreateExclusive)
                and op.path.endswith(".json")
                and "/.lease/" in op.path
                and index + 1 < len(ops)
                and isinstance(ops[index + 1], ListDir)
                and decode_record(LeaseRecord, op.data, "test").state is LeaseState.RELEASED
                and self.claimed is None
            ):
                head = await self.inner.run(ControlProgram(ops[: index + 1], lock=program.lock))
                if not head.completed:
                    return head
                self.claimed = await acquire_lease(self.inner, SID, NEXT)
                tail = await self.inner.run(ControlProgram(ops[index + 1 :], lock=program.lock))
                return ProgramResult(head.results + tail.results, None if tail.stopped_at is None else tail.stopped_at + index + 1)
        return await self.inner.run(program)


async def test_a_claim_right_after_a_release_does_not_make_the_release_fail(tmp_path):
    inner = LocalTarget(tmp_path)
    await materialize_session(inner, SID)
    racing = ClaimAfterRelease(inner)
    lease = await acquire_lease(racing, SID, ME)
    await lease.release()
    assert lease.released and not lease.lost
    assert racing.claimed is not None and racing.claimed.generation > lease.generation
    observed = await observe_lease(inner, SID)
    assert observed.record.client_id == NEXT.client_id and observed.record.state is LeaseState.ACTIVE


async def test_a_rotation_that_is_not_a_release_is_still_lost_when_superseded(tmp_path):
    from mevedel_server.store import LeaseLost

    inner = LocalTarget(tmp_path)
    await materialize_session(inner, SID)
    lease = await acquire_lease(inner, SID, ME)
    again = await acquire_lease(inner, SID, ME)  # the same client rotates behind the first handle
    assert again.generation > lease.generation
    try:
        await lease.renew()
    except LeaseLost:
        pass
    else:
        raise AssertionError("a superseded handle renewed")
