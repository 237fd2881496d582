"""Params and result of ``mevedel/address/describe``."""

from typing import Literal, Optional

import attrs

Family = Literal["work", "artifact", "skill", "agent", "history", "memory", "journal", "mcp", "shared", "mevedel"]
LocatorClass = Literal["exact", "session-relative", "discovery"]
Operation = Literal["Read", "Glob", "Grep", "ApplyPatch"]
Status = Literal["exists", "missing", "unavailable", "discovery"]
NodeKind = Literal["file", "directory", "virtual", "listing"]


@attrs.define
class DescribeParams:
    address: str
    workspace_folder: Optional[str] = None
    session_id: Optional[str] = None


@attrs.define
class DescribeResult:
    """What ``address`` names now, from metadata only (no content is read).

    ``status``: ``exists``; ``missing`` (an explicit file that is not there);
    ``unavailable`` (its owner or family cannot serve it now, ``reason`` says
    why); ``discovery`` (a listing query). ``size`` is in bytes, for files.
    ``uri`` is where go-to-definition leads: the backing ``file://`` URI of a
    file-backed address, otherwise a ``mevedel-resource:`` virtual URI.
    ``detail`` says what an existing virtual resource reads now (for
    ``history://root``: which session, live or committed).
    """

    address: str
    canonical: str
    family: Family
    locator_class: LocatorClass
    operations: list[Operation]
    status: Status
    kind: NodeKind
    size: Optional[int] = None
    reason: Optional[str] = None
    uri: Optional[str] = None
    detail: Optional[str] = None
