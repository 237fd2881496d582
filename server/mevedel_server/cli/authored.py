"""How a message names what the person typed."""

from __future__ import annotations


def shown(authored: str) -> str:
    """``authored`` as a message's subject: quoted when it would not be
    seen as typed (empty, blank at an end, or holding a control
    character), so "'': the path is empty" never reads ": the path is empty"."""
    if authored and authored == authored.strip() and authored.isprintable():
        return authored
    return repr(authored)
