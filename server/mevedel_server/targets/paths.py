"""Target-relative paths: ``/``-separated, relative to the target root, with
no empty, ``.`` or ``..`` component. ``""`` and ``"."`` name the root itself."""

from __future__ import annotations

from functools import lru_cache

from .errors import InvalidTargetPath

_NAME_MAX = 255


def split_target_path(path: str) -> tuple[str, ...]:
    """Return the components of ``path``; ``()`` for the root."""
    if not isinstance(path, str):
        raise InvalidTargetPath(repr(path), "a target path must be a string")
    if path in ("", "."):
        return ()
    # A listing names the same few paths per session in every program it
    # runs, and each operation checks its paths when it is made: a path is
    # checked once (a refused one is not remembered, so it raises again).
    return _checked(path)


@lru_cache(maxsize=8192)
def _checked(path: str) -> tuple[str, ...]:
    if "\x00" in path:
        raise InvalidTargetPath(path.replace("\x00", "\\0"), "contains a NUL byte")
    if path.startswith("/"):
        raise InvalidTargetPath(path, "must be relative to the target root")
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidTargetPath(path, "has an empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogateescape")) > _NAME_MAX:
            raise InvalidTargetPath(path, f"has a component longer than {_NAME_MAX} bytes")
    return parts


def join_target_path(*parts: str) -> str:
    """Join already valid path pieces (each may itself contain ``/``)."""
    joined = "/".join(p for p in parts if p not in ("", "."))
    split_target_path(joined)
    return joined


def parent_and_name(path: str) -> tuple[str, str]:
    """Split a non-root path into its parent path and final component."""
    parts = split_target_path(path)
    if not parts:
        raise InvalidTargetPath(path, "names the target root, not an entry in it")
    return "/".join(parts[:-1]), parts[-1]
