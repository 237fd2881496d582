"""Background renewal of an open session's lease.

A renewal runs every ``interval`` seconds (a third of the lease by default,
so two renewals can fail before the lease lapses). Renewal and publication
share the lease handle's lock, so a renewal never interleaves with a commit.
A refused renewal (another client superseded or took over the lease) ends the
loop at once and reports the loss; a renewal that fails for another reason
(the target did not answer) is retried quickly, and reported as a loss once
the lease has gone unrenewed for its whole duration.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ...targets import TargetError
from ..authority.lease import LeaseHandle
from ..errors import LeaseLost, StoreError

_log = logging.getLogger(__name__)

#: Seconds between attempts after a renewal failed for a transient reason.
RETRY_SECONDS = 1.0


def renewal_interval(lease_seconds: int) -> float:
    return max(0.5, lease_seconds / 3)


class LeaseRenewal:
    def __init__(
        self,
        lease: LeaseHandle,
        *,
        interval: float,
        on_renewed: Callable[[int], None],
        on_lost: Callable[[str], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.interval = interval
        self._on_renewed = on_renewed
        self._on_lost = on_lost
        self._sleep = sleep
        self._monotonic = monotonic
        self._task: asyncio.Task | None = None
        self.renewals = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"renew {self.lease.session_id}")

    def cancel(self) -> None:
        """Stop without waiting (safe from inside the renewal task)."""
        task, self._task = self._task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        renewed_at = self._monotonic()
        delay = self.interval
        while True:
            await self._sleep(delay)
            try:
                await self.lease.renew()
            except LeaseLost as lost:
                self._on_lost(lost.reason)
                return
            except (TargetError, StoreError) as error:
                _log.warning("session %s: lease renewal failed: %s", self.lease.session_id, error)
                if self._monotonic() - renewed_at >= self.lease.duration_seconds:
                    self._on_lost(f"the lease could not be renewed before it expired ({error})")
                    return
                delay = min(RETRY_SECONDS, self.interval)
                continue
            renewed_at = self._monotonic()
            delay = self.interval
            self.renewals += 1
            self._on_renewed(self.lease.now)
