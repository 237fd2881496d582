"""Splitting file text into lines and joining it back in the file's own style.

A patch speaks in lines; a file also has a newline convention, a final
newline or not, and possibly a UTF-8 byte-order mark. Untouched lines keep
their exact endings (so a mixed file stays mixed), new lines take the
dominant convention, and the file's final-newline presence survives edits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class TextLayout:
    newline: str
    final_newline: bool
    bom: bool = False


#: How a file created by a patch is written.
NEW_FILE_LAYOUT = TextLayout(newline="\n", final_newline=True)


@dataclass(frozen=True, slots=True)
class SplitText:
    texts: list[str]
    #: One per line: "\n", "\r\n", or "" for a last line without a newline.
    endings: list[str]
    layout: TextLayout


def split_text(text: str) -> SplitText:
    bom = text.startswith(_BOM)
    text = text.removeprefix(_BOM)
    if not text:
        # An empty file has no convention of its own; content added to it
        # is written like a new file.
        return SplitText([], [], TextLayout("\n", True, bom))
    parts = text.split("\n")
    final_newline = parts[-1] == ""
    if final_newline:
        parts.pop()
    texts: list[str] = []
    endings: list[str] = []
    for index, part in enumerate(parts):
        if not final_newline and index == len(parts) - 1:
            texts.append(part)
            endings.append("")
        elif part.endswith("\r"):
            texts.append(part[:-1])
            endings.append("\r\n")
        else:
            texts.append(part)
            endings.append("\n")
    crlf = endings.count("\r\n")
    newline = "\r\n" if crlf > endings.count("\n") else "\n"
    return SplitText(texts, endings, TextLayout(newline, final_newline, bom))


def join_text(texts: Sequence[str], endings: Sequence[str | None], layout: TextLayout) -> str:
    """Join lines; an ending of ``None`` (a new line) or ``""`` (a former last line) takes the layout's."""
    pieces = [_BOM] if layout.bom else []
    last = len(texts) - 1
    for index, (text, ending) in enumerate(zip(texts, endings, strict=True)):
        pieces.append(text)
        if index < last or layout.final_newline:
            pieces.append(ending or layout.newline)
    return "".join(pieces)
