"""A count said with its noun in agreement (``1 file``, ``2 files``): the
one rule every result text that counts uses, the tools' summaries and the
resolver's notices alike."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural (``plural``, else ``noun``
    with an ``s``) unless the count is one."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
