"""Pattern checks of record fields, made once and run in a record's
``__post_init__``.

The records a listing decodes for every session (lease generation,
manifest, sidecar) check their patterned text fields this way rather than
with msgspec's ``pattern`` constraint: the same regular expression, read
the same way (searched, so each pattern anchors itself), at about a third
of the cost a field; those checks were most of a manifest's decoding.

A field whose values repeat across records (a client ID, the workspace ID)
is checked with ``remember=True``: the check remembers the values it
accepted (:class:`.remembered.Remembered`), and a look-up costs a fraction
of a search. A field of its own value a record (a digest, a publication
head) is searched every time: remembering it cost more than the search
in a first listing, which meets every value once, and a listing that meets
the same bytes again finds the whole record remembered (see
:mod:`..workspace_wide.listing`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .remembered import Remembered

#: Accepted values a remembering check keeps at most; then it starts afresh.
REMEMBERED = 8192


def pattern_check(pattern: str, *, remember: bool = False) -> Callable[[str, str], None]:
    """``check(field, value)``, raising ValueError (which msgspec reports as
    an invalid value) unless ``value`` matches ``pattern``."""
    search = re.compile(pattern).search
    if not remember:

        def check(field: str, value: str) -> None:
            if search(value) is None:
                raise ValueError(f"Expected `str` matching regex {pattern!r} in `{field}`")

        return check
    accepted = Remembered(REMEMBERED)
    known = accepted.values

    def check_remembered(field: str, value: str) -> None:
        if value in known:
            return
        if search(value) is None:
            raise ValueError(f"Expected `str` matching regex {pattern!r} in `{field}`")
        accepted.keep(value, True)

    return check_remembered
