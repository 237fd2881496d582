"""Parsing the ``apply_patch`` envelope into file operations.

The grammar is the one models already write::

    *** Begin Patch
    *** Add File: PATH        followed by "+" lines
    *** Update File: PATH     optionally "*** Move to: PATH", then hunks
    *** Delete File: PATH
    *** End Patch

A hunk starts with ``@@`` (optionally followed by a context header such as a
``def`` line) and holds lines tagged ``' '``, ``'-'`` or ``'+'``; it may end
with ``*** End of File``. The ``@@`` of an update's first hunk may be omitted.

Parsing is pure: targets stay exactly as authored (only surrounding
whitespace is dropped), because resolving them is the resolver's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ...addresses import AddressError, ErrorKind

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
UPDATE = "*** Update File: "
DELETE = "*** Delete File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"

OperationKind = Literal["add", "update", "delete"]
LineTag = Literal[" ", "-", "+"]

_FILE_HEADERS = "'*** Add File: ', '*** Update File: ', '*** Delete File: ' or '*** End Patch'"
#: ``@@ -12,3 +12,4 @@ rest``: a unified-diff range carries no line to seek; ``rest`` may.
_UNIFIED_RANGE = re.compile(r"^-\d+(?:,\d+)? \+\d+(?:,\d+)? @@\s?(.*)$")


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` section of an Update."""

    header: str | None
    lines: tuple[tuple[LineTag, str], ...]
    end_of_file: bool = False

    @property
    def old_lines(self) -> tuple[str, ...]:
        """The lines the hunk expects in the current content, in order."""
        return tuple(text for tag, text in self.lines if tag != "+")

    @property
    def new_lines(self) -> tuple[str, ...]:
        return tuple(text for tag, text in self.lines if tag != "-")

    @property
    def anchor(self) -> str | None:
        """The header line to seek before the hunk, if the header names one.

        A unified-diff range header (``-1,3 +1,4 @@``) names no line, only
        positions we do not trust; the function context git appends to it does.
        """
        if self.header is None:
            return None
        unified = _UNIFIED_RANGE.match(self.header)
        if unified is None:
            return self.header
        return unified.group(1).strip() or None

    @property
    def added(self) -> int:
        return sum(1 for tag, _ in self.lines if tag == "+")

    @property
    def removed(self) -> int:
        return sum(1 for tag, _ in self.lines if tag == "-")


@dataclass(frozen=True, slots=True)
class FileOperation:
    """One file section of a patch; ``line`` is its header's 1-based patch line."""

    kind: OperationKind
    target: str
    move_to: str | None = None
    added_lines: tuple[str, ...] = ()
    hunks: tuple[Hunk, ...] = ()
    line: int = 0

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every authored path this operation touches (target, then move destination)."""
        return (self.target,) if self.move_to is None else (self.target, self.move_to)


@dataclass(frozen=True, slots=True)
class Patch:
    operations: tuple[FileOperation, ...]

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(address for operation in self.operations for address in operation.addresses)


def parse_patch(text: str) -> Patch:
    """Parse an ``apply_patch`` envelope, or raise ``INVALID_PATCH`` naming the line."""
    return _Parser(text).parse()


def _invalid(authored: str, line: int, reason: str) -> AddressError:
    return AddressError(ErrorKind.INVALID_PATCH, authored, f"line {line}: {reason}")


def _shown(line: str) -> str:
    return repr(line if len(line) <= 60 else line[:57] + "...")


class _Parser:
    def __init__(self, text: str) -> None:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        # CRLF input: the "\r" is the line ending, never content.
        self.lines = [line.removesuffix("\r") for line in lines]
        self.index = 0

    @property
    def number(self) -> int:
        return self.index + 1

    def peek(self) -> str | None:
        return self.lines[self.index] if self.index < len(self.lines) else None

    def parse(self) -> Patch:
        for number, line in enumerate(self.lines, 1):
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate (JSON "\udcff") names no file and is no
                # text a file can hold: refused at the door, as every path
                # an agent sends is.
                shown = line.encode("utf-8", "backslashreplace").decode("utf-8")
                raise _invalid("patch", number, f"{_shown(shown)} is not valid Unicode text (it holds a lone surrogate)") from None
        first = next((i for i, line in enumerate(self.lines) if line.strip()), None)
        if first is None:
            raise AddressError(ErrorKind.INVALID_PATCH, "patch", f"the patch is empty; expected {BEGIN!r}")
        last = max(i for i, line in enumerate(self.lines) if line.strip())
        if self.lines[first].strip() != BEGIN:
            raise _invalid("patch", first + 1, f"expected {BEGIN!r}, got {_shown(self.lines[first])}")
        if self.lines[last].rstrip() != END or last == first:
            raise _invalid("patch", last + 1, f"expected {END!r} as the last line, got {_shown(self.lines[last])}")
        self.lines = self.lines[: last + 1]
        self.index = first + 1
        operations: list[FileOperation] = []
        seen: dict[str, int] = {}
        while self.index < last:
            if not self.lines[self.index].strip():
                self.index += 1  # blank lines between file sections separate, they say nothing
                continue
            operation = self.file_operation()
            for address in operation.addresses:
                if address in seen:
                    raise _invalid(
                        address,
                        operation.line,
                        f"{address} is already changed at line {seen[address]}; one patch may touch each file once",
                    )
                seen[address] = operation.line
            operations.append(operation)
        if not operations:
            raise _invalid("patch", last + 1, f"the patch changes no file; expected {_FILE_HEADERS}")
        return Patch(tuple(operations))

    def header_path(self, line: str, prefix: str) -> str:
        path = line[len(prefix) :].strip()
        if not path:
            raise _invalid("patch", self.number, f"{prefix.strip()!r} needs a path")
        return path

    def file_operation(self) -> FileOperation:
        line = self.lines[self.index]
        start = self.number
        if line.startswith(ADD):
            target = self.header_path(line, ADD)
            self.index += 1
            return FileOperation("add", target, added_lines=self.added_lines(target), line=start)
        if line.startswith(DELETE):
            target = self.header_path(line, DELETE)
            self.index += 1
            return FileOperation("delete", target, line=start)
        if line.startswith(UPDATE):
            target = self.header_path(line, UPDATE)
            self.index += 1
            move_to = None
            following = self.peek()
            if following is not None and following.startswith(MOVE):
                move_to = self.header_path(following, MOVE)
                self.index += 1
            hunks = self.hunks(target)
            if not hunks and move_to is None:
                got = self.peek()
                raise _invalid(
                    target,
                    self.number,
                    f"{target} has no hunks; expected a line starting with '@@', got {_shown(got or '')}",
                )
            return FileOperation("update", target, move_to=move_to, hunks=hunks, line=start)
        if line.rstrip() == END:
            raise _invalid("patch", start, f"{END!r} must be the last line; one envelope per patch")
        if line.startswith(MOVE.rstrip()):
            raise _invalid("patch", start, f"{MOVE.strip()!r} must directly follow an '*** Update File:' header")
        raise _invalid("patch", start, f"expected a file header ({_FILE_HEADERS}), got {_shown(line)}")

    def at_section_end(self, line: str) -> bool:
        return line.startswith("*** ") and not line.startswith(END_OF_FILE)

    def blank_separator(self, *, hunk: bool) -> bool:
        """Whether the blank lines from here run into the next section (or hunk)."""
        index = self.index
        while index < len(self.lines) and self.lines[index] == "":
            index += 1
        if index == len(self.lines):
            return True
        following = self.lines[index]
        return self.at_section_end(following) or (hunk and following.startswith("@@"))

    def added_lines(self, target: str) -> tuple[str, ...]:
        added: list[str] = []
        while (line := self.peek()) is not None and not self.at_section_end(line):
            if line == "" and self.blank_separator(hunk=False):
                break
            if not line.startswith("+"):
                raise _invalid(
                    target,
                    self.number,
                    f"expected an added line starting with '+' or the next file header, got {_shown(line)}",
                )
            added.append(line[1:])
            self.index += 1
        return tuple(added)

    def hunks(self, target: str) -> tuple[Hunk, ...]:
        hunks: list[Hunk] = []
        while (line := self.peek()) is not None and not self.at_section_end(line):
            if line == "" and self.blank_separator(hunk=True):
                self.index += 1
                continue
            start = self.number
            header: str | None = None
            if line.startswith("@@"):
                header = line[2:].strip() or None
                self.index += 1
            elif not hunks and line[:1] in (" ", "-", "+"):
                pass  # the first hunk may start without "@@"
            else:
                raise _invalid(target, start, f"expected a hunk starting with '@@', got {_shown(line)}")
            hunks.append(self.hunk(target, header, len(hunks) + 1, start))
        return tuple(hunks)

    def hunk(self, target: str, header: str | None, number: int, start: int) -> Hunk:
        lines: list[tuple[LineTag, str]] = []
        end_of_file = False
        while (line := self.peek()) is not None:
            if line.startswith("@@") or self.at_section_end(line):
                break
            if line.startswith(END_OF_FILE):
                if line.rstrip() != END_OF_FILE:
                    raise _invalid(target, self.number, f"expected {END_OF_FILE!r}, got {_shown(line)}")
                end_of_file = True
                self.index += 1
                break
            tag = line[:1]
            if tag in (" ", "-", "+"):
                lines.append((tag, line[1:]))  # type: ignore[arg-type]
            elif line == "":
                if self.blank_separator(hunk=True):
                    break  # separates this hunk from what follows
                # Models often drop the single space of an empty context line.
                lines.append((" ", ""))
            else:
                raise _invalid(
                    target, self.number, f"expected a hunk line starting with ' ', '-' or '+', got {_shown(line)}"
                )
            self.index += 1
        if not lines:
            raise _invalid(target, start, f"hunk {number} of {target} has no lines")
        return Hunk(header, tuple(lines), end_of_file)
