"""The transfer records under ``.lease/requests/`` against a real local
target: one request per transfer generation, decisions that stand, a keep
that opens the next generation, a grant's release fenced for its requester
only, and reads that never create the mailbox."""

from __future__ import annotations

import asyncio
import os

import pytest

from deadlines import ticks
from mevedel_server.store import (
    ClientIdentity,
    acquire_lease,
    materialize_session,
    observe_lease,
)
from mevedel_server.store.authority.records import (
    LeaseState,
    RecordError,
    TransferVerdict,
)
from mevedel_server.store.authority.transfer import (
    NotRequestable,
    TransferBusy,
    decide_grant,
    decide_keep,
    read_mailbox,
    read_requester_view,
    release_granted,
    request_control,
)
from mevedel_server.store.errors import LeaseHeld, TransferReserved
from mevedel_server.store.layout import SessionPaths
from mevedel_server.targets import LocalTarget

SID = "2026-07-19T09-47-bf87b5dd793a"
OWNER = ClientIdentity("owner-client", "desk")
ASKER = ClientIdentity("asking-client", "laptop")
THIRD = ClientIdentity("third-client", "tablet")


@pytest.fixture
async def owned(tmp_path):
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    lease = await acquire_lease(target, SID, OWNER, duration_seconds=60)
    return target, lease, tmp_path


def requests_dir(root) -> str:
    return os.path.join(root, ".mevedel", "sessions", SID, ".lease", "requests")


async def test_reading_an_unasked_mailbox_creates_nothing(owned):
    target, lease, root = owned
    box = await read_mailbox(target, SessionPaths(SID), 0, with_clock=True)
    assert (box.request, box.decision) == (None, None) and box.now is not None
    assert not os.path.exists(requests_dir(root))


async def test_one_request_per_transfer_generation_naming_the_holder(owned):
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    assert (request.transfer_generation, request.owner_client, request.requester_host) == (0, OWNER.client_id, "laptop")
    again = await request_control(target, await observe_lease(target, SID), ASKER)
    assert again == request  # idempotent for the same requester
    with pytest.raises(TransferBusy, match="laptop already asked"):
        await request_control(target, await observe_lease(target, SID), THIRD)
    # a renewal keeps the transfer generation, so the same path is used
    await lease.renew()
    assert lease.record.transfer_generation == 0
    assert (await read_mailbox(target, SessionPaths(SID), 0)).request == request
    with pytest.raises(NotRequestable, match="already holds"):
        await request_control(target, await observe_lease(target, SID), OWNER)


async def test_an_owners_look_reads_the_clock_only_when_a_request_waits(owned):
    # An idle owner looks at its mailbox often: an empty one costs no clock
    # probe (a file made and removed in .lease/); the look that finds a
    # request has the clock its answer's deadline starts from.
    target, lease, root = owned
    lease_dir = os.path.join(root, ".mevedel", "sessions", SID, ".lease")
    before = os.stat(lease_dir).st_mtime_ns
    empty = await read_mailbox(target, SessionPaths(SID), 0, clock_if_requested=True)
    assert (empty.request, empty.now) == (None, None)
    assert os.stat(lease_dir).st_mtime_ns == before
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    asked = await read_mailbox(target, SessionPaths(SID), 0, clock_if_requested=True)
    assert asked.request == request and asked.decision is None and asked.now >= request.requested_at


async def test_keep_stands_and_opens_the_next_generation(owned):
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    kept = await decide_keep(lease, request)
    assert kept.verdict is TransferVerdict.KEEP and lease.record.transfer_generation == 1
    # a later grant of the same generation cannot replace the keep
    assert (await decide_grant(lease, request, "timeout")).verdict is TransferVerdict.KEEP
    view = await read_requester_view(target, request, SID)
    assert view.decision == kept and not view.owner_still(request)
    fresh = await request_control(target, await observe_lease(target, SID), THIRD)
    assert fresh.transfer_generation == 1


async def test_a_granted_release_is_fenced_for_the_requester_only(owned):
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    granted = await decide_grant(lease, request, "answered")
    assert granted.verdict is TransferVerdict.GRANT and granted.reason == "answered"
    assert lease.record.transfer_generation == 0  # a decision alone opens nothing
    await release_granted(lease, request, fence_seconds=60)
    view = await read_requester_view(target, request, SID)
    assert view.released_to(request) and view.head.state is LeaseState.RELEASED
    assert view.head.transfer_generation == 1
    with pytest.raises(TransferReserved, match="handed to laptop"):
        await acquire_lease(target, SID, THIRD)
    with pytest.raises(TransferReserved):
        await acquire_lease(target, SID, OWNER)  # the old owner is no exception
    taken = await acquire_lease(target, SID, ASKER)
    # taking the granted release consumes it: the next transfer generation
    assert taken.record.client_id == ASKER.client_id and taken.record.transfer_generation == 2
    with pytest.raises(LeaseHeld):
        await acquire_lease(target, SID, THIRD)


async def test_a_fence_reserves_only_the_release_its_grant_wrote(owned):
    """The session comes back to its old owner inside the fence's window and
    is released again plainly: that release is nobody's reservation."""
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    await decide_grant(lease, request, "answered")
    await release_granted(lease, request, fence_seconds=600)
    asker = await acquire_lease(target, SID, ASKER)
    await asker.release()
    back = await acquire_lease(target, SID, OWNER)
    await back.release()
    again = await acquire_lease(target, SID, OWNER)
    assert again.record.client_id == OWNER.client_id
    await again.release()
    assert (await acquire_lease(target, SID, THIRD)).record.client_id == THIRD.client_id


async def test_an_expired_fence_frees_the_release(owned):
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    await decide_grant(lease, request, "timeout")
    await release_granted(lease, request, fence_seconds=1)
    for _ in ticks():
        try:
            taken = await acquire_lease(target, SID, THIRD)
            break
        except TransferReserved:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("the fence never expired")
    assert taken.record.client_id == THIRD.client_id
    view = await read_requester_view(target, request, SID)
    assert not view.released_to(request) and not view.owner_still(request)


async def test_a_request_is_void_once_its_owner_is_gone(owned):
    target, lease, root = owned
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    await lease.release()
    taken = await acquire_lease(target, SID, THIRD)
    view = await read_requester_view(target, request, SID)
    assert not view.owner_still(request) and not view.released_to(request)
    assert taken.record.transfer_generation == 0  # a plain release opens nothing


async def test_a_damaged_request_is_refused_naming_its_file(owned):
    target, lease, root = owned
    os.makedirs(requests_dir(root))
    with open(os.path.join(requests_dir(root), f"request-{0:020d}.json"), "wb") as f:
        f.write(b'{"format_version": 1, "transfer_generation": 0')
    with pytest.raises(RecordError, match=r"\.lease/requests/request-0+\.json: the record is truncated"):
        await read_mailbox(target, SessionPaths(SID), 0)


async def test_the_listing_shows_the_holder_a_request_until_it_is_answered(owned):
    from mevedel_server.store.workspace_wide.listing import list_sessions

    target, lease, root = owned

    async def asked(client: ClientIdentity):
        rows = (await list_sessions(target, client)).rows
        return rows[0].control_request

    assert await asked(OWNER) is None
    request = await request_control(target, await observe_lease(target, SID), ASKER)
    shown = await asked(OWNER)
    assert (shown.requester_host, shown.requested_at) == ("laptop", request.requested_at)
    await decide_keep(lease, request)
    assert await asked(OWNER) is None  # answered: the lease moved to the next transfer generation
    # A new request of the next generation shows again; a grant's decision hides it.
    again = await request_control(target, await observe_lease(target, SID), THIRD)
    assert (await asked(OWNER)).requester_host == "tablet"
    from mevedel_server.store.authority.transfer import decide_grant

    await decide_grant(lease, again, "answered")
    assert await asked(OWNER) is None
