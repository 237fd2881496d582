"""The Read projection shared by files and virtual text.

Line numbers here are the ones Grep reports, so a Grep hit always leads back
to the same Read line. See ``ReadResult`` for the rendering.
"""

from __future__ import annotations

from ...addresses import AddressError, ErrorKind
from .options import ReadOptions
from .results import ReadKind, ReadResult


def split_lines(text: str) -> list[str]:
    """Split on ``\\n``; drop one trailing ``\\r`` per line and the empty tail."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def render_line(number: int, content: str) -> str:
    return f"{number:>6}\t{content}"


def page_lines(
    lines: list[str],
    options: ReadOptions,
    authored: str,
    canonical: str,
    kind: ReadKind,
    notice: str | None = None,
) -> ReadResult:
    """One page of ``lines``; raises OUT_OF_RANGE with an exact retry."""
    total = len(lines)
    if total == 0:
        return ReadResult(authored, canonical, "", 0, 0, 0, (), None, "empty", notice)
    offset = options.offset
    if offset > total:
        width = min(options.limit, total)
        first = total - width + 1
        raise AddressError(
            ErrorKind.OUT_OF_RANGE,
            authored,
            f"offset {offset} is past the last line (1-{total}); "
            f"retry Read {authored} offset={first} limit={width}",
        )
    width = options.max_line_chars
    if options.char_offset > 0:
        return _one_line_slice(lines, options, authored, canonical, kind, notice)
    stop = min(total, offset + options.limit - 1)
    rendered: list[str] = []
    truncated: list[tuple[int, int]] = []
    for number in range(offset, stop + 1):
        content = lines[number - 1]
        if len(content) > width:
            truncated.append((number, width))
            content = content[:width]
        rendered.append(render_line(number, content))
    next_offset = stop + 1 if stop < total else None
    return ReadResult(
        authored,
        canonical,
        "\n".join(rendered),
        offset,
        stop,
        total,
        tuple(truncated),
        next_offset,
        kind,
        _notice(notice, authored, truncated, next_offset, offset, stop, total),
    )


def _one_line_slice(
    lines: list[str],
    options: ReadOptions,
    authored: str,
    canonical: str,
    kind: ReadKind,
    notice: str | None,
) -> ReadResult:
    number, start, width = options.offset, options.char_offset, options.max_line_chars
    line = lines[number - 1]
    if start >= len(line):
        last = max(0, len(line) - width)
        retry = f"Read {authored} offset={number}" + (f" char_offset={last}" if last else "")
        raise AddressError(
            ErrorKind.OUT_OF_RANGE,
            authored,
            f"char_offset {start} is past the end of line {number} ({len(line)} characters); retry {retry}",
        )
    chunk = line[start : start + width]
    end = start + len(chunk)
    truncated = [(number, end)] if end < len(line) else []
    total = len(lines)
    next_offset = number + 1 if number < total else None
    return ReadResult(
        authored,
        canonical,
        render_line(number, chunk),
        number,
        number,
        total,
        tuple(truncated),
        next_offset,
        kind,
        _notice(notice, authored, truncated, next_offset, number, number, total),
    )


def _notice(
    base: str | None,
    authored: str,
    truncated: list[tuple[int, int]],
    next_offset: int | None,
    first: int,
    last: int,
    total: int,
) -> str | None:
    parts = [base] if base else []
    for number, resume in truncated:
        parts.append(f"line {number} continues: Read {authored} offset={number} char_offset={resume}")
    if next_offset is not None:
        parts.append(f"showing lines {first}-{last} of {total}; next page: Read {authored} offset={next_offset}")
    return "\n".join(parts) or None
