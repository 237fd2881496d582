"""What this process judged, remembered by what the judgement depended on.

A listing judges every session's records each time it lists, and mostly
finds what it judged before: the same generation names, session IDs and
patterned field values, the same lease heads, manifests and sidecars. Each
of those memories is a :class:`Remembered`, the one kind the store keeps:
a plain dict a reader looks in directly (one look-up, no call), holding at
most ``budget`` (entries, or the bytes judged, as its owner counts them),
then starting afresh: no eviction order to keep up, and a listing that
outgrows a memory judges again what it no longer finds. What it keeps is
its owner's choice: the record memories and the pattern checks keep only
what they accepted, so refused input is judged again and refused with its
reason; a name check keeps its yes or no.
"""

from __future__ import annotations


class Remembered:
    """Accepted judgements by key, ``values`` for readers; see the module."""

    __slots__ = ("budget", "spent", "values")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.spent = 0
        self.values: dict = {}

    def keep(self, key: object, value: object, size: int = 1) -> None:
        if self.spent + size > self.budget:
            # In place: a reader may hold ``values`` itself.
            self.values.clear()
            self.spent = 0
        self.values[key] = value
        self.spent += size
