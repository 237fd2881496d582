"""Params and results of the ``mevedel/resource/*`` requests.

Every request names its resource by ``address`` (any spelling the address
grammar accepts) and may say which workspace folder and which session it runs
in; without them the server uses the only (or first) workspace folder and
that folder's current session. Results name resources by address text only:
``address`` is what the client sent, ``canonical`` its normalised form.
"""

from typing import Literal, Optional, Union

import attrs

#: A ``$/progress`` token, as in LSP's WorkDoneProgressParams.
ProgressToken = Union[int, str]

ReadView = Literal["numbered", "plain"]
ReadKind = Literal["file", "directory", "listing", "empty"]


@attrs.define
class ReadParams:
    """Read one page of a resource.

    Give exactly one of ``address`` and ``uri`` (a ``mevedel-resource:``
    virtual-document URI, which carries its own workspace and session).
    ``offset`` is the 1-based first line, ``limit`` the page height in lines;
    a positive ``char_offset`` selects the single line ``offset`` and starts
    at that decoded character. ``view`` ``"numbered"`` returns the Read
    projection a model sees (each line prefixed by its number and a tab);
    ``"plain"`` returns the same lines without the prefix, for showing a
    read-only document. Omitted numbers take the resolver's defaults.
    """

    address: Optional[str] = None
    uri: Optional[str] = None
    workspace_folder: Optional[str] = None
    session_id: Optional[str] = None
    offset: Optional[int] = None
    limit: Optional[int] = None
    char_offset: Optional[int] = None
    max_line_chars: Optional[int] = None
    view: ReadView = "numbered"
    work_done_token: Optional[ProgressToken] = None


@attrs.define
class TruncatedLine:
    """A shown line that continues: Read it again from ``char_offset``."""

    line: int
    char_offset: int


@attrs.define
class ReadResult:
    """One page of the Read projection.

    ``start_line``..``end_line`` are the shown lines of ``total_lines``
    (all three 0 for an empty resource, ``kind`` ``"empty"``);
    ``next_offset`` is the offset of the next page, absent on the last one.
    ``notice`` is plain-text guidance (how to continue, an unused root).
    """

    address: str
    canonical: str
    text: str
    start_line: int
    end_line: int
    total_lines: int
    kind: ReadKind
    truncated_lines: list[TruncatedLine] = attrs.Factory(list)
    next_offset: Optional[int] = None
    notice: Optional[str] = None


@attrs.define
class GlobParams:
    """List files under ``address`` whose path relative to it matches
    ``pattern`` (``*``/``?`` within one component, ``**`` across any number,
    ``[...]`` a character class)."""

    address: str
    pattern: Optional[str] = None
    limit: Optional[int] = None
    workspace_folder: Optional[str] = None
    session_id: Optional[str] = None
    work_done_token: Optional[ProgressToken] = None


@attrs.define
class GlobResult:
    """``matches`` are canonical file addresses; ``truncated`` when the limit
    cut the list."""

    address: str
    canonical: str
    matches: list[str]
    truncated: bool
    notice: Optional[str] = None


@attrs.define
class GrepParams:
    """Search the Read projection of ``address`` line by line for the Python
    regular expression ``pattern``. ``glob`` filters the files searched (no
    ``/``: file name at any depth; with ``/``: path relative to ``address``)."""

    address: str
    pattern: str
    glob: Optional[str] = None
    ignore_case: bool = False
    limit: Optional[int] = None
    context_lines: Optional[int] = None
    workspace_folder: Optional[str] = None
    session_id: Optional[str] = None
    work_done_token: Optional[ProgressToken] = None


@attrs.define
class ContextLine:
    line: int
    text: str


@attrs.define
class GrepMatch:
    """One matching line: Read ``address`` at ``offset=line`` (and
    ``char_offset``) shows ``preview``; ``column`` is the 1-based character
    column of the first match."""

    address: str
    line: int
    column: int
    preview: str
    char_offset: int = 0
    before: list[ContextLine] = attrs.Factory(list)
    after: list[ContextLine] = attrs.Factory(list)


@attrs.define
class GrepResult:
    address: str
    canonical: str
    matches: list[GrepMatch]
    files_searched: int
    truncated: bool
    notice: Optional[str] = None


@attrs.define
class ApplyPatchParams:
    """Apply an ``apply_patch`` envelope whose file targets are addresses
    (writable: explicit ``work://`` files of either scope and
    ``memory://ROOT-KEY/PATH`` files). All file changes apply, or none."""

    patch: str
    workspace_folder: Optional[str] = None
    session_id: Optional[str] = None


ChangeKind = Literal["add", "update", "delete"]


@attrs.define
class PatchFileChange:
    """One applied file change; ``address`` (and ``move_to``) as authored in
    the patch."""

    address: str
    kind: ChangeKind
    added: int
    removed: int
    move_to: Optional[str] = None


@attrs.define
class ApplyPatchResult:
    """``summary`` has one line per file: ``A``/``M``/``D`` and the address,
    or ``R FROM -> TO`` for a move."""

    changes: list[PatchFileChange]
    summary: str
