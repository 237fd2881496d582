"""Applying an Update's hunks to the current lines: the conflict check.

Each hunk's expected lines (context and removals) are located in the current
content, searching forward from where the previous hunk ended. An exact match
wins; otherwise a match ignoring trailing whitespace, then one ignoring
surrounding whitespace. A hunk that matches nowhere is a conflict: the file
is not what the patch's author read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...addresses import AddressError, ErrorKind
from .format import Hunk
from .text_layout import SplitText

_LEVELS: tuple[Callable[[str], str], ...] = (lambda line: line, str.rstrip, str.strip)


def locate(lines: Sequence[str], pattern: Sequence[str], start: int, *, at_end: bool = False) -> int | None:
    """The first index >= ``start`` where ``pattern`` matches, at the loosest level needed."""
    last = len(lines) - len(pattern)
    if last < start:
        return None
    candidates = range(last, last + 1) if at_end else range(start, last + 1)
    for normalise in _LEVELS:
        wanted = [normalise(line) for line in pattern]
        for index in candidates:
            if all(normalise(lines[index + offset]) == expected for offset, expected in enumerate(wanted)):
                return index
    return None


def conflict(display: str, number: int, hunk: Hunk) -> AddressError:
    label = f"hunk {number}" if hunk.header is None else f"hunk {number} (@@ {hunk.header})"
    return AddressError(
        ErrorKind.CONFLICT, display, f"{label} does not match the current content; reread and retry"
    )


def apply_hunks(current: SplitText, hunks: Sequence[Hunk], display: str) -> tuple[list[str], list[str | None]]:
    """The new lines and endings (``None`` for added lines), or a CONFLICT naming the hunk."""
    lines = current.texts
    edits: list[tuple[int, int, Hunk]] = []
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        start = cursor
        anchor_at: int | None = None
        if hunk.anchor is not None:
            anchor_at = locate(lines, [hunk.anchor], cursor)
            if anchor_at is None:
                raise conflict(display, number, hunk)
            start = anchor_at + 1
        old = hunk.old_lines
        if not old:
            # Pure insertion: after the anchor line, or else at the end.
            position = start if anchor_at is not None and not hunk.end_of_file else len(lines)
        else:
            position = locate(lines, old, start, at_end=hunk.end_of_file)
            if position is None and anchor_at is not None:
                # The author repeated the anchor line as the hunk's first context line.
                position = locate(lines, old, anchor_at, at_end=hunk.end_of_file)
            if position is None:
                raise conflict(display, number, hunk)
        edits.append((position, len(old), hunk))
        cursor = position + len(old)

    texts: list[str] = []
    endings: list[str | None] = []
    previous = 0
    for position, length, hunk in edits:
        texts.extend(lines[previous:position])
        endings.extend(current.endings[previous:position])
        index = position
        for tag, text in hunk.lines:
            if tag == " ":
                # Keep the file's own spelling of a context line the match tolerated.
                texts.append(lines[index])
                endings.append(current.endings[index])
                index += 1
            elif tag == "-":
                index += 1
            else:
                texts.append(text)
                endings.append(None)
        previous = position + length
    texts.extend(lines[previous:])
    endings.extend(current.endings[previous:])
    return texts, endings
