"""Pattern checks of record fields, made once and run in a record's
``__post_init__``.

The records a listing decodes for every session (lease generation,
manifest, sidecar) check their patterned text fields this way rather than
with msgspec's ``pattern`` constraint: the same regular expression, read
the same way (searched, so each pattern anchors itself), at about a third
of the cost a field; those checks were most of a manifest's decoding.

Each check remembers the last values it accepted: a listing decodes the
same records again every time it lists (the same digests, heads and
identities), and a look-up costs a fraction of a search. Only accepted
values are remembered, so a refused one is searched, and refused, again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Accepted values a check remembers at most; then it starts afresh.
REMEMBERED = 8192


def pattern_check(pattern: str) -> Callable[[str, str], None]:
    """``check(field, value)``, raising ValueError (which msgspec reports as
    an invalid value) unless ``value`` matches ``pattern``."""
    search = re.compile(pattern).search
    accepted: set[str] = set()

    def check(field: str, value: str) -> None:
        if value in accepted:
            return
        if search(value) is None:
            raise ValueError(f"Expected `str` matching regex {pattern!r} in `{field}`")
        if len(accepted) >= REMEMBERED:
            accepted.clear()
        accepted.add(value)

    return check
