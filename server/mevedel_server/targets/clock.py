"""The target clock: whole seconds of the target filesystem's own time.

Lease expiry and every other authority deadline are judged against this clock,
read inside the same control program as the records it judges, so clients
whose wall clocks disagree cannot change one another's authority. The reading
is the modification time the target's kernel stamps on a freshly created probe
file in a named directory (the probe is removed at once); a client's
``time.time()`` never enters it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .executor import CLOCK_PROBE_PREFIX as PROBE_PREFIX
from .executor import probe_filesystem_clock
from .program import ControlProgram, Operation

if TYPE_CHECKING:
    from .target import Target

# The probe and its name prefix are the executor's, shared with the remote side.
__all__ = ["PROBE_PREFIX", "Clock", "probe_filesystem_clock", "read_target_clock"]


class Clock(Operation):
    """Read the target clock by creating a probe file in directory ``path``;
    ``value`` is the reading in whole seconds."""

    # The probe is a transient create + unlink, but it still changes the
    # directory, so fault injection counts it.
    writes: ClassVar[bool] = True
    accepts_root: ClassVar[bool] = True


async def read_target_clock(target: Target, directory: str = ".") -> int:
    """One program that only reads the clock (for callers with nothing else
    to judge in the same round trip)."""
    from .target import raise_for_result

    op = Clock(directory)
    result = (await target.run(ControlProgram([op])))[0]
    raise_for_result(op, result)
    return int(result.value)
