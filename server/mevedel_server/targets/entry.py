"""A path's whole state as a value: the one type the targets and the
store's pure content modules share (a checkpoint records it, a restore
writes it back). Imports nothing, opens nothing; the remote executor, which
cannot import it, spells the same three kinds itself."""

from __future__ import annotations

from typing import ClassVar

import msgspec

ENTRY_FILE = "file"
ENTRY_DIRECTORY = "directory"
ENTRY_SYMLINK = "symlink"


class Entry(msgspec.Struct, frozen=True):
    """The whole state of a path that exists: its kind (``file``,
    ``directory`` or ``symlink``), permission bits (the 0o7777 of
    ``st_mode``; None for a link, or when unknown: then a write keeps the
    mode the file has, or gives a new one the default), and its data -- a
    file's bytes (None when a read left them out for their size), a link's
    target, nothing for a directory. ``size``: the data's length."""

    kind: str
    mode: int | None = None
    data: bytes | None = b""
    size: int = 0

    FILE: ClassVar[str] = ENTRY_FILE
    DIRECTORY: ClassVar[str] = ENTRY_DIRECTORY
    SYMLINK: ClassVar[str] = ENTRY_SYMLINK

    @classmethod
    def file(cls, data: bytes, mode: int | None = None) -> Entry:
        return cls(ENTRY_FILE, mode, bytes(data), len(data))

    @classmethod
    def directory(cls, mode: int | None) -> Entry:
        return cls(ENTRY_DIRECTORY, mode, b"", 0)

    @classmethod
    def symlink(cls, target: bytes) -> Entry:
        return cls(ENTRY_SYMLINK, None, bytes(target), len(target))

    def plain(self) -> list:
        return [self.kind, self.mode, self.data]

    def same_state(self, other: Entry | None) -> bool:
        """Whether ``other`` is this state (a None mode on either side
        accepts any mode; a link has none)."""
        if other is None or other.kind != self.kind:
            return False
        if self.kind != ENTRY_SYMLINK and None not in (self.mode, other.mode) and self.mode != other.mode:
            return False
        return self.kind == ENTRY_DIRECTORY or self.data == other.data


def same_state(a: Entry | None, b: Entry | None) -> bool:
    """Whether two path states (None: absent) are the same."""
    return b is None if a is None else a.same_state(b)


