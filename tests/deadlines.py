"""Waiting for an event in a test: a generous deadline in seconds, never a
count of sleeps (which assumes how fast the machine is). CI runs the suite on
a loaded 2-core machine, where a poll or a server round trip can take many
times longer than on an idle one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

#: How long a test waits for an event that should come "soon".
GENEROUS_SECONDS = 90.0


def ticks(seconds: float = GENEROUS_SECONDS) -> Iterator[int]:
    """Yield until ``seconds`` have passed; use as ``for _ in ticks():``
    around one poll and a short sleep, with ``break`` when the event came
    (and ``else:`` to fail when it never did)."""
    deadline = time.monotonic() + seconds
    count = 0
    while True:
        yield count
        count += 1
        if time.monotonic() > deadline:
            return


async def wait_for(predicate: Callable[[], object], what: str) -> None:
    """Return once ``predicate()`` is true; fail naming ``what`` when it
    never was within the generous deadline."""
    for _ in ticks():
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never saw {what}")
