"""A file's ``Stat`` facts that can stand for its bytes.

A reader that keeps a file's facts (size, whole and nanosecond mtime,
inode) with the bytes it read right after them can later skip the bytes
when a ``Stat`` finds the same facts -- but only if no write can leave the
facts as they were. That holds when the file was last modified before a
time of the target's own clock taken before the facts (git's "racily
clean" rule, to the filesystem's timestamp tick): any later write stamps
an mtime at or after that time, so a same-size rewrite within the same
second still differs, and a file modified in the very tick of the read is
not trusted (read again next time).

The clock's probe file is made and removed in ``LEASES_ROOT``, which
stamps that directory's mtime with the target's time, to the nanosecond
in its timestamp tick; read back before the file's facts, it is a time
they were taken at or after. :func:`facts_ops` go ahead of the ``Read`` of
the bytes in the same program (no round trip of their own), and
:func:`trusted_facts` judges their answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..targets import Clock, FileStat, MakeDirs, Operation, OpResult, Stat
from .layout import LEASES_ROOT

#: What is compared: size, whole-second mtime, inode, nanosecond mtime.
Facts = tuple[int, int, int, int]

#: How many operations :func:`facts_ops` returns.
FACTS_OPS = 4


def facts_ops(path: str) -> list[Operation]:
    """The operations that take ``path``'s facts after a clock probe, to
    come just before the ``Read`` of its bytes; all optional, so a
    workspace where the probe cannot be made still reads (untrusted)."""
    # The directory made as a lease observation makes it (an item never leased yet).
    return [
        MakeDirs(LEASES_ROOT, optional=True),
        Clock(LEASES_ROOT, optional=True),
        Stat(LEASES_ROOT, optional=True),
        Stat(path, optional=True),
    ]


def facts_of(stat: FileStat) -> Facts:
    return (stat.size, stat.mtime, stat.ino, stat.mtime_ns)


def trusted_facts(results: Sequence[OpResult]) -> Facts | None:
    """The facts the answers of :func:`facts_ops` (``results``, in order)
    read, when a later write cannot leave them as they are; else None."""
    _made, clock, now, stat = results
    if not (clock.ok and now.ok and stat.ok):
        return None
    facts: FileStat = stat.value
    if facts.kind != "file" or not facts.ino or not facts.mtime_ns:
        return None  # an answer without the inode or nanoseconds proves nothing
    return facts_of(facts) if facts.mtime_ns < now.value.mtime_ns else None
