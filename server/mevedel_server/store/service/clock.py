"""Target time between clock readings.

Turn, settle and sidecar times are whole seconds of the *target* clock, but
reading that clock is a round trip (a probe file created on the target). An
open session therefore keeps the last reading it took (when it claimed or
renewed its lease) and advances it by this process's monotonic clock. The
estimate is only ever a record time; lease expiry and every other authority
decision still read the target clock in the program that judges them, and the
wall clock of this machine never enters either.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TargetTime:
    def __init__(self, reading: int, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._reading = reading
        self._taken = monotonic()

    def now(self) -> int:
        """Whole target seconds: the last reading plus the time elapsed since."""
        return self._reading + int(self._monotonic() - self._taken)

    def anchor(self, reading: int) -> None:
        """Adopt a fresh target clock reading (never moving backwards)."""
        self._reading = max(reading, self.now())
        self._taken = self._monotonic()
