"""What to do after a resolver error: the one rule for which listing
finds the right name, which the model's tools (``Read X lists what
exists``) and the CLI (``mevedel read X``) each say in their own words."""

from __future__ import annotations

from ...addresses import AddressError, ErrorKind
from ..families.project import is_project_path


def listing_of(authored: str) -> str | None:
    """The listing that finds the right name for ``authored``; None for a
    workspace path, which a glob of the workspace finds."""
    if is_project_path(authored):
        return None
    scheme, _sep, rest = authored.partition("://")
    if scheme == "work" and (rest == "shared" or rest.startswith("shared/")):
        return "work://shared"
    if scheme == "memory":
        return "memory://root"
    if scheme == "history" and rest.startswith("saved"):
        return "history://saved"
    return f"{scheme}://"


def next_step(error: AddressError) -> tuple[str, str] | None:
    """What the error's reader does next, as ``(what, operand)``:
    ``("list", LISTING)`` for a missing name, ``("glob", "**/NAME*")`` for a
    missing workspace path, ``("docs", "mevedel://")`` for an unknown or
    malformed scheme; None when there is nothing to add (the listing is
    what was asked for)."""
    if error.kind is ErrorKind.MISSING_TARGET:
        listing = listing_of(error.authored)
        if listing is None:
            return ("glob", "**/NAME*")
        return None if listing == error.authored else ("list", listing)
    if error.kind is ErrorKind.UNKNOWN_SCHEME or (error.kind is ErrorKind.MALFORMED_ADDRESS and "://" in error.authored):
        return ("docs", "mevedel://")
    return None
