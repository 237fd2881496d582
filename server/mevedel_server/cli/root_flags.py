"""The ``--memory-root`` and ``--skill-root`` flags of every command that
reads resources itself (``mevedel read``/``glob``/``grep``/``apply-patch``
and ``mevedel mcp``): one spelling, one help text, one refusal.

A root is a directory of this machine. A relative PATH is the local
workspace's; an SSH workspace has no local root, so there a relative one is
refused naming the flag (its files are not this machine's)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..resources import MemoryRoot, SkillRoot


def add_root_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-root",
        action="append",
        default=[],
        metavar="LOCATION:KIND:PATH",
        help="a memory root, e.g. local:mevedel:.mevedel/memory (repeatable; "
        "a relative PATH is the local workspace's, refused for an SSH one)",
    )
    parser.add_argument(
        "--skill-root",
        action="append",
        default=[],
        metavar="ORIGIN:PATH",
        help="a skill root (repeatable; a relative PATH as for --memory-root)",
    )


def roots_of(arguments: Any, workspace: Path | None) -> tuple[tuple[MemoryRoot, ...], tuple[SkillRoot, ...]]:
    """The roots the flags name; ``workspace`` is the local workspace root
    (None for an SSH workspace). Raises ValueError naming the flag and what
    was written."""
    memory = tuple(_memory_root(workspace, spec) for spec in arguments.memory_root)
    skills = tuple(_skill_root(workspace, spec) for spec in arguments.skill_root)
    return memory, skills


def _path(workspace: Path | None, text: str) -> Path:
    """A root as given: ``~`` expands; a relative one is relative to a local
    workspace (ValueError on an SSH one, whose files are not this machine's)."""
    path = Path(text).expanduser()
    if path.is_absolute():
        return path
    if workspace is None:
        raise ValueError("a relative root needs a local workspace; give this machine's absolute path")
    return workspace / path


def _memory_root(workspace: Path | None, spec: str) -> MemoryRoot:
    location, _, rest = spec.partition(":")
    kind, _, path = rest.partition(":")
    if not path:
        raise ValueError(f"--memory-root {spec!r}: expected LOCATION:KIND:PATH")
    try:
        return MemoryRoot(_path(workspace, path), location, kind)  # type: ignore[arg-type]
    except ValueError as error:
        raise ValueError(f"--memory-root {spec!r}: {error}") from None


def _skill_root(workspace: Path | None, spec: str) -> SkillRoot:
    # Origins may contain '/', never ':' ("plugin/NAME"), so split on the first ':'.
    origin, _, path = spec.partition(":")
    if not path:
        raise ValueError(f"--skill-root {spec!r}: expected ORIGIN:PATH")
    try:
        return SkillRoot(_path(workspace, path), origin)
    except ValueError as error:
        raise ValueError(f"--skill-root {spec!r}: {error}") from None


__all__ = ["add_root_flags", "roots_of"]
