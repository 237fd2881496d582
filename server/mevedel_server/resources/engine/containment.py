"""The one place that maps decoded address components to backing paths.

A backing path is a target-relative path: the components joined below a
family root's place (:mod:`.places`). Containment is lexical and complete:
the grammar refuses empty, ``.`` and ``..`` components (checked again
here, so a grammar bug can never become a traversal), and the target opens
every directory from its root with ``O_NOFOLLOW``, so a path built here
cannot leave its root -- a symbolic link met on the way is refused when
the operation runs (:data:`THROUGH_LINK`), never followed.

Errors name the authored address only; no backing path is ever put in a
message.
"""

from __future__ import annotations

import os

from ...addresses import AddressError, ErrorKind
from .places import Place

#: The reason of an address reached through a symbolic link.
THROUGH_LINK = "is reached through a symbolic link, which mevedel does not follow"


def check_parts(parts: tuple[str, ...], authored: str) -> None:
    # The grammar already refuses these; a second look keeps a grammar bug
    # from ever becoming a traversal.
    for part in parts:
        if part in ("", ".", "..") or "/" in part or os.sep in part or "\0" in part:
            raise AddressError(ErrorKind.INTERNAL, authored, "an address component reached the resolver undecoded")


def contain(place: Place, parts: tuple[str, ...], authored: str) -> str:
    """The target-relative path of ``parts`` below ``place``."""
    check_parts(parts, authored)
    place.require(authored)
    return place.path(parts)


def through_link(authored: str) -> AddressError:
    return AddressError(ErrorKind.CONTAINMENT, authored, THROUGH_LINK)
