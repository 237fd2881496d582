"""The logical results of Read, Glob and Grep.

Every address in a result is address text (authored or canonical), never a
backing path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ReadKind = Literal["file", "directory", "listing", "empty"]


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One page of a resource's Read projection.

    ``text`` renders each shown line as its 1-based number right-aligned in
    six columns, a tab, and the line's characters (at most
    ``max_line_chars`` of them, from ``char_offset``), lines joined by
    ``\\n``. Lines are split on ``\\n`` only; a trailing ``\\r`` is dropped and
    a final newline does not start another line. ``kind`` is ``"empty"``
    exactly when the projection has no lines; ``notice`` carries guidance
    (truncated lines, an unused root, how to continue) as plain text.
    """

    address: str
    canonical: str
    text: str
    start_line: int
    end_line: int
    total_lines: int
    truncated_lines: tuple[tuple[int, int], ...]
    next_offset: int | None
    kind: ReadKind
    notice: str | None = None

    @property
    def plain_text(self) -> str:
        """``text`` without the line-number prefixes (for a read-only view)."""
        if not self.text:
            return ""
        return "\n".join(line.partition("\t")[2] for line in self.text.split("\n"))


@dataclass(frozen=True, slots=True)
class GlobResult:
    """File addresses (canonical) under the operand whose relative path matched."""

    address: str
    canonical: str
    matches: tuple[str, ...]
    truncated: bool
    notice: str | None = None


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line.

    ``line`` is the Read projection's line number and ``column`` the 1-based
    character column of the first match. ``preview`` is the slice of the line
    a Read with ``offset=line`` and ``char_offset`` shows (``char_offset`` is
    0 unless the line is longer than one page width). ``before``/``after``
    hold ``(line, text)`` context lines when ``context_lines`` asked for them.
    """

    address: str
    line: int
    column: int
    preview: str
    char_offset: int = 0
    before: tuple[tuple[int, str], ...] = ()
    after: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GrepResult:
    address: str
    canonical: str
    matches: tuple[GrepMatch, ...]
    files_searched: int
    truncated: bool
    notice: str | None = None
