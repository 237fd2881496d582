"""Grep's regular expression, searched line by line in bounded time.

A Grep pattern is a Python regular expression matched against each line on
its own. Searching every line with its own timed call costs a few
microseconds a line, so a pattern that can never match a line break is
searched once over the whole text (joined with ``\\n``, ``^``/``$`` made
line anchors), which finds exactly the lines -- and the first column in
each -- that line-by-line searching finds: no match can span two lines, and
nothing that looks past a line's ends (lookaround, ``\\A``, ``\\Z``,
backreferences) is allowed on that path. Any other pattern is searched line
by line. Both run under the operation's :class:`~.pattern_clock.PatternClock`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

try:  # Python 3.11+
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from .pattern_clock import PatternClock

if TYPE_CHECKING:
    import regex

_NEWLINE = ord("\n")
# Character-class categories that contain a line feed.
_CATEGORIES_WITH_NEWLINE = {
    sre_constants.CATEGORY_SPACE,
    sre_constants.CATEGORY_NOT_DIGIT,
    sre_constants.CATEGORY_NOT_WORD,
    sre_constants.CATEGORY_LINEBREAK,
    sre_constants.CATEGORY_UNI_SPACE,
    sre_constants.CATEGORY_UNI_NOT_DIGIT,
    sre_constants.CATEGORY_UNI_NOT_WORD,
    sre_constants.CATEGORY_UNI_LINEBREAK,
}
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)}
_LINE_ANCHORS = {sre_constants.AT_BEGINNING, sre_constants.AT_END, sre_constants.AT_BOUNDARY, sre_constants.AT_NON_BOUNDARY,
                 sre_constants.AT_UNI_BOUNDARY, sre_constants.AT_UNI_NON_BOUNDARY, sre_constants.AT_LOC_BOUNDARY,
                 sre_constants.AT_LOC_NON_BOUNDARY}


@dataclass(frozen=True, slots=True)
class LinePattern:
    """A compiled Grep pattern. ``per_line`` matches one line; ``whole`` (when
    the pattern is line-local) matches a whole text in one call."""

    per_line: regex.Pattern[str]
    whole: regex.Pattern[str] | None

    def first_matches(self, files: list[list[str]], clock: PatternClock) -> Iterator[tuple[int, int, int]]:
        """``(file index, line index, column from 0)`` of the first match of
        every line that has one, files and lines in order. A line-local
        pattern searches all the files in one timed call (one text, a line
        feed between files too), so the timeout's cost is paid once a batch.
        The clock's stretch is the whole search, charged when it ends or is
        abandoned (the caller stops at its limit)."""
        if self.whole is not None:
            yield from self._whole_text(files, clock)
            return
        search = self.per_line.search
        clock.begin()
        try:
            for number, lines in enumerate(files):
                for index, line in enumerate(lines):
                    while True:  # clock.timed, spelled out: a call a line costs
                        try:
                            hit = search(line, concurrent=True, timeout=clock.remaining())
                            break
                        except TimeoutError:
                            clock.timed_out()
                    if hit is not None:
                        yield number, index, hit.start()
        finally:
            clock.settle()

    def _whole_text(self, files: list[list[str]], clock: PatternClock) -> Iterator[tuple[int, int, int]]:
        if not files:
            return
        texts = ["\n".join(lines) for lines in files]
        file_starts, offset = [], 0
        for text in texts:
            file_starts.append(offset)
            offset += len(text) + 1
        whole = "\n".join(texts)
        # A match's line is counted on from the previous match in its file
        # (or from the file's start): a file without matches costs nothing.
        # ``finditer``'s timeout bounds the whole iteration by the wall
        # clock, waits for the GIL between matches included: when it runs
        # out before the CPU budget does, the search resumes at the line
        # after the last one reported.
        current, counted_to, line, reported, start = -1, 0, 0, -1, 0
        clock.begin()
        try:
            while True:
                matches = self.whole.finditer(whole, start, concurrent=True, timeout=clock.remaining())  # type: ignore[union-attr]
                try:
                    for hit in matches:
                        position = hit.start()
                        number = bisect.bisect_right(file_starts, position) - 1
                        if number != current:
                            current, counted_to, line, reported = number, file_starts[number], 0, -1
                        line += whole.count("\n", counted_to, position)
                        counted_to = position
                        if line == reported or line >= len(files[number]):
                            continue  # a later match in a reported line, or an empty file
                        reported = line
                        end_of_line = whole.find("\n", position)
                        start = len(whole) if end_of_line < 0 else end_of_line + 1
                        yield number, line, position - (whole.rfind("\n", 0, position) + 1)
                    return
                except TimeoutError:
                    clock.timed_out()
        finally:
            clock.settle()


def compile_line_pattern(pattern: str, ignore_case: bool) -> LinePattern:
    """Compile a Grep pattern; ``re.error`` or ``regex.error`` says why it is
    not a regular expression."""
    import regex  # loaded by the first Grep, not by every resolver start

    flags = re.IGNORECASE if ignore_case else 0
    parsed = sre_parse.parse(pattern, flags)  # the syntax Python users know; raises re.error
    base = regex.V0 | (regex.IGNORECASE if ignore_case else 0)
    per_line = regex.compile(pattern, base)
    local = _line_local(parsed, bool(parsed.state.flags & re.DOTALL))
    return LinePattern(per_line, regex.compile(pattern, base | regex.MULTILINE) if local else None)


def _line_local(items, dotall: bool) -> bool:
    """Whether no part of the pattern can match a line feed or look past a
    line's ends. Anything not understood counts as not line-local."""
    for op, av in items:
        if op is sre_constants.LITERAL:
            if av == _NEWLINE:
                return False
        elif op is sre_constants.NOT_LITERAL:
            if av != _NEWLINE:
                return False
        elif op is sre_constants.ANY:
            if dotall:
                return False
        elif op is sre_constants.IN:
            if _class_has_newline(av):
                return False
        elif op in _REPEATS:
            if not _line_local(av[2], dotall):
                return False
        elif op is sre_constants.SUBPATTERN:
            _group, add, delete, inner = av
            if delete & re.MULTILINE:
                return False
            inner_dotall = (dotall or bool(add & re.DOTALL)) and not delete & re.DOTALL
            if not _line_local(inner, inner_dotall):
                return False
        elif op is sre_constants.BRANCH:
            if not all(_line_local(branch, dotall) for branch in av[1]):
                return False
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            if not _line_local(av, dotall):
                return False
        elif op is sre_constants.AT:
            if av not in _LINE_ANCHORS:
                return False
        else:  # lookaround, backreferences, conditionals, anything new
            return False
    return True


def _class_has_newline(items) -> bool:
    negate, has = False, False
    for op, av in items:
        if op is sre_constants.NEGATE:
            negate = True
        elif op is sre_constants.LITERAL:
            has = has or av == _NEWLINE
        elif op is sre_constants.RANGE:
            has = has or av[0] <= _NEWLINE <= av[1]
        elif op is sre_constants.CATEGORY:
            has = has or av in _CATEGORIES_WITH_NEWLINE
        else:
            return True  # not understood: assume it may
    return has != negate
