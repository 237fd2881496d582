"""The file-state record's programs riding the turn's publications
(``LeaseHandle.ride``): over SSH every program is a round trip, and a turn
publishes at its start and at its settlement anyway.

- :class:`WalkCarrier`: the walk before the turn (``FileStateRecord.
  refresh``) runs in the program of the turn's first publication, after
  its lease rotation (a new session's: right after the claim its first
  save makes); the agent is dispatched only once both answered. The
  files the record knows to read again (racy) are snapshotted in the same
  program, after the scan; a file found changed is snapshotted in a
  program of its own once it answered.
- :func:`keep_on_settlement`: the record as the settlement's walk left it
  is kept for the next process (``FileStateRecord.keep_ops``) by the
  settlement's own program, not left for the next process to read again.

A publication that did not carry them (it raised, a rider before them
stopped its program) delivers nothing, and the
record runs its operations itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from ..targets import Operation, OpResult, Status
from .file_state import FileStateRecord


class WalkCarrier:
    """One walk's operations riding the session's next head commit
    (``OpenSession.ride_next_commit``: a new session's first save's too): the
    refresh awaits the carrier (``__call__``) with its operations, the turn
    publishes once :attr:`ready` is set, then :meth:`release` hands the
    walk what the commit answered."""

    def __init__(self, session: Any) -> None:
        self._session = session
        #: Set once the walk's operations ride (or the refresh ended without).
        self.ready = asyncio.Event()
        self._released = asyncio.Event()
        self._results: tuple[OpResult, ...] | None = None

    async def __call__(self, ops: list[Operation]) -> tuple[OpResult, ...] | None:
        def delivered(results: tuple[OpResult, ...]) -> None:
            self._results = results

        rider = self._session.ride_next_commit(ops, delivered=delivered)
        self.ready.set()
        try:
            await self._released.wait()
        finally:
            self._session.withdraw(rider)
        results, self._results = self._results, None
        if results is None or any(result.status is Status.SKIPPED for result in results):
            return None
        return results

    def release(self) -> None:
        """The publication is over (committed or not)."""
        self._released.set()


async def walk_riding(record: FileStateRecord, session: Any, publish: Callable[[], Awaitable[object]]) -> None:
    """``publish()`` (the turn's first publication) and ``record.refresh()``,
    the refresh's walk riding the publication's program (``session``: the
    open session publishing; None: one after the other). The caller holds
    the record next (``record.hold``), which keeps what the walk read."""
    if session is None:
        await publish()
        await record.refresh(keep=False)
        return
    carrier = WalkCarrier(session)
    walk = asyncio.ensure_future(record.refresh(carrier=carrier, keep=False))
    ready = asyncio.ensure_future(carrier.ready.wait())
    try:
        # A watched record may run no program (or its own, locally): it
        # ends without ever riding.
        await asyncio.wait([walk, ready], return_when=asyncio.FIRST_COMPLETED)
        try:
            await publish()
        except BaseException:
            carrier.release()  # the walk runs on its own; the turn is not dispatched
            with contextlib.suppress(Exception):
                await walk
            raise
        carrier.release()
        await walk
    finally:
        ready.cancel()


async def keep_on_settlement(record: FileStateRecord, lease: Any, *, release: str | None = None) -> Callable[[], None]:
    """Have ``lease``'s next head commit (the settlement) keep ``record`` for
    the next process, and let the turn's baseline ``release`` go (riding
    after the commit point, it goes only once the settlement committed);
    the callable withdraws it (call it once the settlement is over: a
    later commit must not keep an older state)."""
    if lease is None:
        return not_riding
    ops, done = await record.keep_ops(release=release)
    if not ops:
        return not_riding
    rider = lease.ride(ops, delivered=done)
    return lambda: lease.withdraw(rider)


def not_riding() -> None:
    """What :func:`keep_on_settlement` answers when nothing rides."""
