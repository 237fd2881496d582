"""Hover facts and "visit path" for an address: metadata only.

``describe`` stats the backing node at most (for ``history://``, it reads
the open session's state or a committed session's lease head and manifest);
it never reads content and its result never holds a backing path. ``backing_file`` is the one function that
returns a path, for go-to-definition on a file-backed address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..addresses import parse_address
from ..addresses.model import Address, AddressError, ErrorKind, Family, LocatorClass, Operation
from . import artifact, history, memory, mevedel_docs, skill, unavailable, work
from .attempt import Request
from .context import ResolverContext
from .options import ReadOptions
from .tree import Located

Status = Literal["exists", "missing", "unavailable", "discovery"]
NodeKind = Literal["file", "directory", "virtual", "listing"]


@dataclass(frozen=True, slots=True)
class Description:
    canonical: str
    family: Family
    locator_class: LocatorClass
    operations: tuple[Operation, ...]
    status: Status
    kind: NodeKind
    size: int | None = None
    reason: str | None = None
    #: What an existing virtual resource reads now (the session of history://).
    detail: str | None = None


_FILE_FAMILIES = {Family.WORK, Family.ARTIFACT, Family.MEVEDEL, Family.MEMORY, Family.SKILL}


def _locate(address: Address, context: ResolverContext) -> Located:
    """The backing node of an explicit file-backed address (raises AddressError)."""
    if address.family is Family.WORK:
        return work.locate(address, context)
    if address.family is Family.ARTIFACT:
        return artifact.locate(address, context)
    if address.family is Family.MEVEDEL:
        return mevedel_docs.locate(address, context)
    if address.family is Family.MEMORY:
        return memory.locate(address, context)
    _skill, located = skill.locate(address, context)
    return located


def _is_explicit(address: Address) -> bool:
    return address.family in _FILE_FAMILIES and not address.is_discovery and address.scope != "listing"


async def describe(address_text: str, context: ResolverContext) -> Description:
    """What an address names now. Raises AddressError only for validation
    failures (malformed text, unknown scheme, containment)."""
    address = parse_address(address_text)
    operations = tuple(op for op in Operation if address.allows(op))

    def made(status: Status, kind: NodeKind, size: int | None = None, reason: str | None = None) -> Description:
        return Description(address.canonical, address.family, address.locator_class, operations, status, kind, size, reason)

    if address.family is Family.HISTORY:
        facts = await history.describe(address, context)
        return Description(
            address.canonical,
            address.family,
            address.locator_class,
            operations,
            facts.status,  # type: ignore[arg-type]
            facts.kind,  # type: ignore[arg-type]
            reason=facts.reason,
            detail=facts.detail,
        )
    if address.family not in _FILE_FAMILIES:
        try:
            unavailable.prepare(address, Request(Operation.READ, ReadOptions()), context).run()
        except AddressError as error:
            return made("unavailable", "virtual", reason=error.reason)
        return made("exists", "virtual")
    if not _is_explicit(address):
        return made("discovery", "listing")
    try:
        node = _locate(address, context)
    except AddressError as error:
        if error.kind is ErrorKind.MISSING_TARGET:
            return made("missing", "file", reason=error.reason)
        if error.kind in (ErrorKind.UNAVAILABLE, ErrorKind.OWNER_MISSING):
            return made("unavailable", "virtual", reason=error.reason)
        raise
    if address.family is Family.MEVEDEL and not node.tree.exists():
        return made("unavailable", "virtual", reason=mevedel_docs.not_installed(address.authored).reason)
    try:
        info = os.stat(node.path)
    except OSError:
        if not address.path and address.family in (Family.WORK, Family.MEMORY):
            return made("discovery", "directory", reason=f"{address.canonical} has no files yet")
        return made("missing", "file", reason="does not exist")
    if os.path.isdir(node.path) and not node.compressed:
        return made("exists", "directory")
    if address.family is Family.MEVEDEL and not address.path[-1].endswith(".md"):
        return made("missing", "file", reason="is not a packaged Markdown document")
    return made("exists", "file", None if node.compressed else info.st_size)


def backing_file(address_text: str, context: ResolverContext) -> Path | None:
    """The contained, existing regular file behind a file-backed address."""
    try:
        address = parse_address(address_text)
        if not _is_explicit(address):
            return None
        node = _locate(address, context)
        node.contained.verify(address.authored)
    except AddressError:
        return None
    if node.compressed or not node.path.is_file():
        return None
    if address.family is Family.MEVEDEL and not address.path[-1].endswith(".md"):
        return None
    return node.contained.real_path
