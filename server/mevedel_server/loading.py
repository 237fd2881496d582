"""No cyclic collection while a process's modules load.

What an import makes -- modules, classes, functions, the ACP SDK's pydantic
models -- lives as long as the process, and next to none of it is garbage
(860 unreachable objects of 97,000 after ``mevedel prompt``'s imports). Yet
every collection the allocations set off walks all of it: a prompt spent
40-50 ms of CPU in the collector before the agent's first word, one full
pass alone about 20 ms. So the collector is off while modules load; then
what they made is frozen (:func:`gc.freeze`: never walked again) and the
collector is on again for what the command itself makes (a long turn's
garbage is collected as ever).

A process that lives on (the language server) keeps what the collector
did not free: the classes attrs replaces with slotted ones, and the other
cycles imports leave, were 10 MiB of its idle resident set with no
collection at all. It loads with ``young=True``: the youngest generation
is still collected, every ``YOUNG_THRESHOLD`` allocations (a pass over
those objects alone, which is where that garbage dies), and only the older
generations' passes over everything loaded so far are held off. About 0.7
MiB above the collector's default, and two thirds of the CPU saved of
holding it off entirely (the language server's start, 2026-12-06).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Iterator
from typing import Any

#: Allocations between two collections of the youngest generation while a
#: long-lived process loads (the collector's default is 700).
YOUNG_THRESHOLD = 2_000


@contextlib.contextmanager
def loading(*, young: bool = False) -> Iterator[None]:
    """Import inside: no collection meanwhile (``young``: none but the
    youngest generation's), the result frozen after."""
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    if young:
        # Objects surviving a young pass are never passed over again
        # before they are frozen.
        gc.set_threshold(YOUNG_THRESHOLD, 2**31 - 1, 2**31 - 1)
    else:
        gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()


class OnFirstUse:
    """A module imported when one of its names is first read.

    The language server registers a handler for every custom method at its
    start, but creating the message classes of ``mevedel_protocol`` (attrs
    compiles each class's methods) was about 60 ms of its 500 ms CPU; a feature
    module names its message module with this instead, and the classes are
    made by the first message that uses them. The import lock makes a
    first read from two threads at once load the module once."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module(self._module), name)
        setattr(self, name, value)  # later reads find it without the import machinery
        return value

    def __repr__(self) -> str:
        return f"<{self._module}, imported on first use>"
