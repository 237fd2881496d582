"""Pattern checks of record fields, made once and run in a record's
``__post_init__``.

The records a listing decodes for every session (lease generation,
manifest, sidecar) check their patterned text fields this way rather than
with msgspec's ``pattern`` constraint: the same regular expression, read
the same way (searched, so each pattern anchors itself), at about a third
of the cost a field; those checks were most of a manifest's decoding.

Each check remembers the values it accepted (:class:`.remembered.Remembered`):
a listing decodes the same records again every time it lists (the same
digests, heads and identities), and a look-up costs a fraction of a search.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .remembered import Remembered

#: Accepted values a check remembers at most; then it starts afresh.
REMEMBERED = 8192


def pattern_check(pattern: str) -> Callable[[str, str], None]:
    """``check(field, value)``, raising ValueError (which msgspec reports as
    an invalid value) unless ``value`` matches ``pattern``."""
    search = re.compile(pattern).search
    accepted = Remembered(REMEMBERED)
    known = accepted.values

    def check(field: str, value: str) -> None:
        if value in known:
            return
        if search(value) is None:
            raise ValueError(f"Expected `str` matching regex {pattern!r} in `{field}`")
        accepted.keep(value, True)

    return check
