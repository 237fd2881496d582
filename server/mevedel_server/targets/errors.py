"""Errors a target raises. Every message names the target-relative path the
caller asked for, never the backing location of the target root."""

from __future__ import annotations


class TargetError(Exception):
    """An operation on a target did not do what was asked."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path or '.'}: {reason}")
        self.path = path
        self.reason = reason


class InvalidTargetPath(TargetError, ValueError):
    """A target-relative path is not a plain relative path (absolute, empty
    component, ``.``/``..``, NUL byte, overlong component)."""


class UnsafePathError(TargetError):
    """A root, parent or leaf is a symbolic link or otherwise not the physical
    entry requested, so the operation failed closed."""


class RootReplacedError(UnsafePathError):
    """The target's root directory is no longer the one it pinned: it was
    deleted and made again, or another directory was moved to its place,
    since the target was opened. Nothing was done; a target opened anew on
    the location would serve the new directory. (It fails closed like a
    symbolic link would, but it is no link, and says so.)"""


#: The start of every refusal reason of a replaced root.
ROOT_REPLACED = "the target root was replaced"


class PathAbsentError(TargetError):
    """The path, or one of its parents, does not exist."""


class PathConflictError(TargetError):
    """An exclusive creation found the path already present."""


class TargetOperationError(TargetError):
    """The operation failed for another reason (I/O error, wrong file type,
    non-empty directory...)."""
