"""Caller options for Read, Glob, Grep and ApplyPatch, and their validation.

Validation runs in ``prepare``: a bad option is refused before any I/O, with
an error that names the authored address and the offending value.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ...addresses import AddressError, ErrorKind
from .glob_pattern import GlobPattern, compile_glob
from .line_search import LinePattern, compile_line_pattern
from .pattern_clock import PatternClock


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """``offset`` is the 1-based first line; ``limit`` the page height in lines.

    A positive ``char_offset`` selects exactly one line (``offset``) and shows
    its decoded characters from that offset on; ``max_line_chars`` is the
    widest slice of any line a page shows.
    """

    offset: int = 1
    limit: int = 2000
    char_offset: int = 0
    max_line_chars: int = 2000


@dataclass(frozen=True, slots=True)
class GlobOptions:
    """``pattern`` is matched against each file's path relative to the operand.

    ``*`` and ``?`` stay inside one component, ``**`` spans any number of
    components (including none), ``[...]`` is a character class.
    """

    pattern: str = "**/*"
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class GrepOptions:
    """``pattern`` is a Python regular expression searched line by line.

    ``glob`` filters the files searched: a pattern without ``/`` matches the
    file name at any depth, one with ``/`` the path relative to the operand.
    ``limit`` caps the number of matching lines reported.
    """

    pattern: str
    glob: str | None = None
    ignore_case: bool = False
    limit: int = 500
    context_lines: int = 0


@dataclass(frozen=True, slots=True)
class PatchOptions:
    """ApplyPatch takes no options yet; the type keeps ``prepare`` uniform."""


def _bad(authored: str, reason: str) -> AddressError:
    return AddressError(ErrorKind.INVALID_OPTION, authored, reason)


def validate_read(options: ReadOptions, authored: str) -> None:
    if options.offset < 1:
        raise _bad(authored, f"offset {options.offset} is invalid: lines are numbered from 1")
    if options.limit < 1:
        raise _bad(authored, f"limit {options.limit} is invalid: a page holds at least one line")
    if options.char_offset < 0:
        raise _bad(authored, f"char_offset {options.char_offset} is invalid: it counts characters from 0")
    if options.max_line_chars < 1:
        raise _bad(authored, f"max_line_chars {options.max_line_chars} is invalid: it must be at least 1")


def validate_glob(options: GlobOptions, authored: str) -> GlobPattern:
    if options.limit < 1:
        raise _bad(authored, f"limit {options.limit} is invalid: it must be at least 1")
    return _glob(options.pattern, authored, "Glob pattern", anywhere=False)


def _glob(pattern: str, authored: str, what: str, *, anywhere: bool) -> GlobPattern:
    try:
        compiled = compile_glob(pattern, anywhere=anywhere)
    except ValueError as error:
        raise _bad(authored, f"{what} {pattern!r} is invalid: {error}") from None
    return dataclasses.replace(compiled, label=what, authored=authored)


@dataclass(frozen=True, slots=True)
class GrepPlan:
    pattern: LinePattern
    glob: GlobPattern | None
    #: The authored pattern and address, for the error when matching runs
    #: out of time (:class:`~.pattern_clock.PatternClock`).
    text: str
    authored: str

    def clock(self) -> PatternClock:
        """A fresh matching budget for one execution."""
        return PatternClock("Grep pattern", self.text, self.authored)


def validate_grep(options: GrepOptions, authored: str) -> GrepPlan:
    if options.limit < 1:
        raise _bad(authored, f"limit {options.limit} is invalid: it must be at least 1")
    if options.context_lines < 0:
        raise _bad(authored, f"context_lines {options.context_lines} is invalid: it must be 0 or more")
    if not options.pattern:
        raise _bad(authored, "Grep pattern is empty")
    import regex  # a Grep compiles with it: a Read of an address never loads it (about 7 ms of a start)

    try:
        pattern = compile_line_pattern(options.pattern, options.ignore_case)
    except (re.error, regex.error) as error:
        raise _bad(authored, f"Grep pattern {options.pattern!r} is not a valid regular expression: {error}") from None
    glob = None if options.glob is None else _glob(options.glob, authored, "Grep glob", anywhere=True)
    return GrepPlan(pattern=pattern, glob=glob, text=options.pattern, authored=authored)
