"""The one place that maps decoded address components to backing paths.

Rule: join the components under the family root, resolve the real path, and
require it to stay inside the real root. A symbolic link inside the root is
fine while its target stays inside; one whose target escapes is refused. For
writes the root itself (and the directories between its owner and it) must
not be symbolic links, so a write can never land outside the owner's tree.
Errors name the authored address only; no backing path is ever put in a
message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..addresses.model import AddressError, ErrorKind


def is_inside(real_path: str, real_root: str) -> bool:
    """Whether an already-resolved path is the root or lies below it."""
    if real_path == real_root:
        return True
    prefix = real_root if real_root.endswith(os.sep) else real_root + os.sep
    return real_path.startswith(prefix)


@dataclass(frozen=True, slots=True)
class Contained:
    """A backing path that was inside its root when it was resolved."""

    root: Path
    real_root: str
    path: Path

    @property
    def real_path(self) -> Path:
        return Path(os.path.realpath(self.path))

    def verify(self, authored: str) -> None:
        """Recheck at execution: the root has not moved and the path is still inside."""
        if os.path.realpath(self.root) != self.real_root:
            raise AddressError(
                ErrorKind.CONFLICT,
                authored,
                "its owning root changed after the operation was prepared; prepare it again",
            )
        if not is_inside(os.path.realpath(self.path), self.real_root):
            raise AddressError(ErrorKind.CONTAINMENT, authored, _ESCAPE)


_ESCAPE = "resolves outside its root through a symbolic link"


def _check_parts(parts: tuple[str, ...], authored: str) -> None:
    # The grammar already refuses these; a second look keeps a grammar bug
    # from ever becoming a traversal.
    for part in parts:
        if part in ("", ".", "..") or "/" in part or os.sep in part or "\0" in part:
            raise AddressError(ErrorKind.INTERNAL, authored, "an address component reached the resolver undecoded")


def contain(root: Path, parts: tuple[str, ...], authored: str) -> Contained:
    """Resolve ``parts`` below ``root`` for reading."""
    _check_parts(parts, authored)
    real_root = os.path.realpath(root)
    candidate = root.joinpath(*parts)
    if not is_inside(os.path.realpath(candidate), real_root):
        raise AddressError(ErrorKind.CONTAINMENT, authored, _ESCAPE)
    return Contained(root=root, real_root=real_root, path=candidate)


def contain_for_write(owner: Path, root: Path, parts: tuple[str, ...], authored: str) -> Contained:
    """Resolve ``parts`` below ``root`` for writing.

    ``root`` must lie lexically below ``owner`` (or be it); every existing
    directory from just below ``owner`` down to ``root`` must be a real
    directory, not a symbolic link.
    """
    if not parts:
        raise AddressError(ErrorKind.UNSUPPORTED_OPERATION, authored, "only an explicit file below the root can be written")
    try:
        between = root.relative_to(owner).parts
        steps = [owner.joinpath(*between[: i + 1]) for i in range(len(between))]
    except ValueError:
        steps = [root]
    if any(step.is_symlink() for step in steps):
        raise AddressError(ErrorKind.CONTAINMENT, authored, "its root is a symbolic link; refusing to write through it")
    return contain(root, parts, authored)
