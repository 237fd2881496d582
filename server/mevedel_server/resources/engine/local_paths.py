"""The local filesystem behind a place on this machine, for the two
editor features that need it synchronously: completion lists a directory
(names and entry types only), go-to-definition names a file. Both follow
the target's rule: every directory from the target's root down is opened
(or checked) without following a symbolic link, and a place that is not on
a :class:`LocalTarget` (an SSH workspace) has no local path at all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ...targets import LocalTarget
from .places import Place

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _components(place: Place, parts: tuple[str, ...]) -> tuple[LocalTarget, list[str]] | None:
    target = place.target
    if not isinstance(target, LocalTarget):
        return None
    path = place.path(parts)
    return target, path.split("/") if path else []


def open_directory(place: Place, parts: tuple[str, ...]) -> int | None:
    """A descriptor of the local directory ``parts`` below ``place``,
    opened component by component with ``O_NOFOLLOW``; None when it is not
    a local directory reached without a link. The caller closes it."""
    found = _components(place, parts)
    if found is None:
        return None
    target, components = found
    try:
        fd = os.open(target.root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for name in components:
            next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError:
        os.close(fd)
        return None
    return fd


def local_file(place: Place, parts: tuple[str, ...]) -> Path | None:
    """The local regular file ``parts`` below ``place`` when nothing from
    the target's root to it is a symbolic link."""
    if not parts:
        return None
    found = _components(place, parts)
    if found is None:
        return None
    target, components = found
    current = target.root
    try:
        for index, name in enumerate(components):
            current = os.path.join(current, name)
            mode = os.lstat(current).st_mode
            last = index == len(components) - 1
            if stat.S_ISLNK(mode) or (not last and not stat.S_ISDIR(mode)) or (last and not stat.S_ISREG(mode)):
                return None
    except OSError:
        return None
    return Path(os.path.realpath(current))
