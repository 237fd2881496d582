"""Waiting for a session's lease, left by a client that stopped without
releasing it, to expire by the target's clock (after which another client
may take the session over)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from deadlines import ticks
from mevedel_server.store import LeaseStanding, observe_lease
from mevedel_server.targets import LocalTarget


async def lease_expired(root: Path, sid: str, whose: str = "the") -> None:
    """Return once session ``sid`` of the workspace ``root`` has an
    expired lease; fail saying ``whose`` lease never expired."""
    target = LocalTarget(root)
    for _ in ticks():
        if (await observe_lease(target, sid)).standing is LeaseStanding.EXPIRED:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{whose} lease never expired")
