"""Glob patterns over logical relative paths (``/``-separated components).

``*`` and ``?`` match inside one component, ``[...]`` (``[!...]`` negated) is
a character class, ``{a,b}`` alternates inside one component, and a ``**``
component spans any number of components. Patterns are matched against the
whole relative path, except that a Grep glob without ``/`` matches the file
name at any depth (as ripgrep's ``--glob`` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .pattern_clock import PatternClock

if TYPE_CHECKING:
    import regex


@dataclass(frozen=True, slots=True)
class GlobPattern:
    """A compiled glob. One with two or more ``*`` in one component (or a
    ``{...}`` beside a ``*``) can backtrack for very long on a crafted name,
    so it is ``slow``: matched by the ``regex`` module under the operation's
    :class:`PatternClock`, which callers start with :meth:`clock` and run in
    a thread. Any other glob matches in linear time with ``re``."""

    text: str
    regex: re.Pattern[str]
    basename_only: bool
    slow: regex.Pattern[str] | None = None
    #: How errors name the pattern and the operation's address.
    label: str = "Glob pattern"
    authored: str = ""

    def clock(self) -> PatternClock:
        return PatternClock(self.label, self.text, self.authored)

    def matches(self, parts: tuple[str, ...], clock: PatternClock | None = None) -> bool:
        if not parts:
            return False
        subject = parts[-1] if self.basename_only else "/".join(parts)
        if self.slow is None:
            return self.regex.fullmatch(subject) is not None
        clock = clock or self.clock()
        clock.begin()
        try:
            return clock.timed(lambda left: self.slow.fullmatch(subject, concurrent=True, timeout=left)) is not None
        finally:
            clock.settle()


def compile_glob(pattern: str, *, anywhere: bool = False) -> GlobPattern:
    """Compile ``pattern``; ``ValueError`` says why a pattern is refused."""
    if not pattern:
        raise ValueError("it is empty")
    if pattern.startswith("/"):
        raise ValueError("it must be relative to the searched address")
    body = pattern[:-1] if pattern.endswith("/") else pattern
    components = body.split("/")
    for component in components:
        if component in ("", ".", ".."):
            raise ValueError("it must name components below the searched address (no empty, . or .. parts)")
    pieces: list[str] = []
    last = len(components) - 1
    for index, component in enumerate(components):
        if component == "**":
            pieces.append("[^/]+(?:/[^/]+)*" if index == last else "(?:[^/]+/)*")
        else:
            pieces.append(_component(component))
            if index != last:
                pieces.append("/")
    source = "".join(pieces)
    slow = any(c != "**" and (c.count("*") > 1 or ("*" in c and "{" in c)) for c in components)
    if slow:
        import regex  # only a pattern that needs its timeout-safe matching loads it

    return GlobPattern(
        text=pattern,
        regex=re.compile(source, re.DOTALL),
        basename_only=anywhere and len(components) == 1,
        slow=regex.compile(source, regex.DOTALL | regex.V0) if slow else None,
    )


def _component(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end, klass = _char_class(text, i)
            if klass is None:
                out.append(re.escape(char))
            else:
                out.append(klass)
                i = end
        elif char == "{":
            end = text.find("}", i + 1)
            inner = text[i + 1 : end] if end != -1 else ""
            if end == -1 or "{" in inner or "," not in inner:
                out.append(re.escape(char))
            else:
                out.append("(?:" + "|".join(_component(choice) for choice in inner.split(",")) + ")")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _char_class(text: str, start: int) -> tuple[int, str | None]:
    """Return (index of the closing ``]``, regex class) or (start, None)."""
    i = start + 1
    negate = i < len(text) and text[i] in "!^"
    if negate:
        i += 1
    body_start = i
    if i < len(text) and text[i] == "]":
        i += 1
    while i < len(text) and text[i] != "]":
        i += 1
    if i >= len(text):
        return start, None
    body = "".join(c if c == "-" else re.escape(c) for c in text[body_start:i])
    return i, ("[^/" + body + "]") if negate else ("[" + body + "]")
