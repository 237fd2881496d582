"""The opaque result of ``prepare`` and the authority facts it exposes.

The permission pipeline sees only ``AuthorityFacts``. Backing paths, roots
and loaders stay inside the attempt's private runner, which ``execute``
calls exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ...addresses import Family, LocatorClass, Operation
from .glob_pattern import GlobPattern
from .options import GlobOptions, GrepOptions, GrepPlan, ReadOptions

Backing = Literal["file", "virtual"]


@dataclass(frozen=True, slots=True)
class AuthorityFacts:
    """What one address (or plain project path) in an operation asks for,
    in logical terms only. A project path has no ``family`` (None) and
    carries its workspace-relative spelling in ``project_path``."""

    operation: Operation
    authored: str
    canonical: str
    family: Family | None
    locator_class: LocatorClass
    writes: bool
    backing: Backing
    project_path: str | None = None


class Attempt:
    """A prepared operation. ``facts`` has one entry per address it touches
    (one for Read/Glob/Grep, one per file change for ApplyPatch)."""

    __slots__ = ("operation", "facts", "_run", "_spent")

    def __init__(self, operation: Operation, facts: tuple[AuthorityFacts, ...], run: Callable[[], Any]) -> None:
        self.operation = operation
        self.facts = facts
        self._run = run
        self._spent = False

    @property
    def writes(self) -> bool:
        return any(fact.writes for fact in self.facts)

    def __repr__(self) -> str:
        return f"Attempt({self.operation.value}, {[fact.canonical for fact in self.facts]!r})"


@dataclass(frozen=True, slots=True)
class Request:
    """A validated Read/Glob/Grep request as the family modules receive it."""

    operation: Operation
    options: ReadOptions | GlobOptions | GrepOptions
    glob: GlobPattern | None = None
    grep: GrepPlan | None = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A family module's answer to ``prepare``: how it is backed and what to run."""

    backing: Backing
    run: Callable[[], Any]
