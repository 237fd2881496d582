"""No cyclic collection while a command's modules load.

What an import makes -- modules, classes, functions, the ACP SDK's pydantic
models -- lives as long as the process, and next to none of it is garbage
(860 unreachable objects of 97,000 after ``mevedel prompt``'s imports). Yet
every collection the allocations set off walks all of it: a prompt spent
40-50 ms of CPU in the collector before the agent's first word, one full
pass alone about 20 ms. So the collector is off while modules load; then
what they made is frozen (:func:`gc.freeze`: never walked again) and the
collector is on again for what the command itself makes (a long turn's
garbage is collected as ever).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Import inside: no collection meanwhile, the result frozen after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
