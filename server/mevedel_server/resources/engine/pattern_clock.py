"""How long one Glob or Grep may spend matching its patterns.

A regular expression (or a glob with several ``*`` in one name) can
backtrack for longer than the universe lasts on a line an agent wrote for
the purpose; Python's ``re`` cannot be interrupted and holds the GIL while
it runs, so such a search would freeze the whole server. Patterns are
therefore matched by the ``regex`` module, which takes a timeout and
releases the GIL (``concurrent=True``), under one clock per operation: the
operation fails with ``invalid-option`` naming the pattern once
:data:`PATTERN_SECONDS` are spent, and matching done on the event loop is
capped at :data:`ON_LOOP_SECONDS`, after which the caller moves the work to
a thread (:class:`OnLoopCapReached`).

The budget counts the matching thread's CPU time, not the wall clock: on a
loaded machine a thread waits for a core, and a thread that released the
GIL for its match waits to take it back, and neither wait is the pattern's
doing (3000 matches of ``needle``, each waiting a few milliseconds for the
GIL, once spent ten wall-clock seconds and were called a runaway pattern).
The CPU time is charged once per stretch of matching (one search, the
caller's handling of its matches included: a few microseconds each, no
more than reading the CPU clock around each would cost). Each match's own
``timeout`` is wall-clock (the ``regex`` module has no other): the budget
left less the stretch's wall-clock time so far, so no stretch overruns the
budget; a stretch whose wall time reaches half the budget left is charged
and begun again, and a match that times out is only the pattern's fault
once the CPU time charged says so (:meth:`PatternClock.timed`; otherwise
it runs again with the time left).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ...addresses import AddressError, ErrorKind

T = TypeVar("T")

#: The most one operation spends matching patterns.
PATTERN_SECONDS = 10.0
#: The most matching may hold the event loop before it moves to a thread.
ON_LOOP_SECONDS = 0.05


class OnLoopCapReached(Exception):
    """Matching on the event loop took longer than :data:`ON_LOOP_SECONDS`:
    undo what this batch added and run it again in a thread."""


@dataclass(slots=True)
class PatternClock:
    """One operation's matching budget: only the CPU time spent in matching
    counts (:meth:`begin` to :meth:`settle`), not the reads between batches
    nor waits for a core or the GIL, so a long walk over a slow workspace or
    a busy machine is never taken for a slow pattern. ``what`` and
    ``pattern`` name the authored pattern in the error (``Grep pattern
    '(a+)+$'``)."""

    what: str
    pattern: str
    authored: str
    budget: float = field(default_factory=lambda: PATTERN_SECONDS)
    #: Seconds of CPU time already spent matching.
    spent: float = 0.0
    #: Set while matching runs on the event loop: the monotonic time it stops.
    cap: float | None = None
    #: The open stretch of matching (:meth:`begin`): the thread's CPU time
    #: and the monotonic time at its start.
    stretch: tuple[float, float] | None = None

    def begin(self) -> None:
        """Matching starts on this thread. Reading the thread's CPU clock
        costs a system call (about 0.8 us, as much as a short line's
        search), so a stretch of many matches is charged once, at
        :meth:`settle`; meanwhile its wall-clock time, never less than its
        CPU time, bounds each match."""
        self.stretch = (time.thread_time(), time.monotonic())

    def settle(self) -> None:
        """Matching stops: charge the open stretch's CPU time."""
        if self.stretch is not None:
            self.spent += time.thread_time() - self.stretch[0]
            self.stretch = None

    def remaining(self) -> float:
        """Seconds the next match may take; raises once none are left."""
        left = self.budget - self.spent
        if self.stretch is not None:
            wall = time.monotonic() - self.stretch[1]
            if 2 * wall < left:
                left -= wall
            else:  # count what was matching, so a match never gets a sliver
                self.settle()
                self.begin()
                left = self.budget - self.spent
        if self.cap is not None:
            to_cap = self.cap - time.monotonic()
            if to_cap < left:
                if to_cap <= 0:
                    raise OnLoopCapReached
                return to_cap
        if left <= 0:
            raise self.too_slow()
        return left

    def timed(self, match: Callable[[float], T]) -> T:
        """``match(timeout)`` inside a stretch. A timeout is the wall clock
        running out; only once the CPU time charged bears it out is the
        pattern too slow, else the match runs again with the time left."""
        while True:
            try:
                return match(self.remaining())
            except TimeoutError:
                self.timed_out()

    def timed_out(self) -> None:
        """A match ran out of time: raises when the on-loop cap or the CPU
        budget is spent, else returns and the match runs again."""
        if self.cap is not None and time.monotonic() >= self.cap:
            raise OnLoopCapReached from None
        self.settle()
        self.begin()
        if self.spent >= self.budget:
            raise self.too_slow() from None

    def too_slow(self) -> AddressError:
        return AddressError(
            ErrorKind.INVALID_OPTION,
            self.authored,
            f"{self.what} {self.pattern!r} took more than {self.budget:g} s to match and was stopped: "
            "nested or adjacent repetition (such as (a+)+ or .*a.*a.*b) can backtrack without end; "
            "simplify the pattern or narrow the search",
        )
