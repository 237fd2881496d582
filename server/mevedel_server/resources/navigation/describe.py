"""Hover facts and "visit path" for an address: metadata only.

``describe`` stats the backing node at most (for ``history://``, it reads
the open session's state or a committed session's lease head and manifest);
it never reads content and its result never holds a backing path. ``backing_file`` is the one function that
returns a path, for go-to-definition on a file-backed address.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...addresses import (
    Address,
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
    parse_address,
)
from ...targets import ControlProgram, Stat, Status
from ..engine.attempt import Request
from ..engine.containment import through_link
from ..engine.context import ResolverContext
from ..engine.local_paths import local_file
from ..engine.options import ReadOptions
from ..engine.places import Places
from ..engine.runners import root_refused, run_program
from ..engine.tree import Node
from ..families import (
    agent,
    artifact,
    history,
    mcp,
    memory,
    mevedel_docs,
    shared,
    skill,
    unavailable,
    work,
)

Standing = Literal["exists", "missing", "unavailable", "discovery"]
NodeKind = Literal["file", "directory", "virtual", "listing"]


@dataclass(frozen=True, slots=True)
class Description:
    canonical: str
    family: Family
    locator_class: LocatorClass
    operations: tuple[Operation, ...]
    status: Standing
    kind: NodeKind
    size: int | None = None
    reason: str | None = None
    #: What an existing virtual resource reads now (the session of history://).
    detail: str | None = None


_FILE_FAMILIES = {Family.WORK, Family.ARTIFACT, Family.MEVEDEL, Family.MEMORY, Family.SKILL}


def _locate(address: Address, places: Places) -> Node:
    """The node of an explicit file-backed address (raises AddressError)."""
    if address.family is Family.WORK:
        return work.locate(address, places)
    if address.family is Family.ARTIFACT:
        return artifact.locate(address, places)
    if address.family is Family.MEVEDEL:
        return mevedel_docs.locate(address, places)
    if address.family is Family.MEMORY:
        return memory.locate(address, places)
    _skill, located = skill.locate(address, places)
    return located


def _is_explicit(address: Address) -> bool:
    return address.family in _FILE_FAMILIES and not address.is_discovery and address.scope != "listing"


async def describe(address_text: str, context: ResolverContext) -> Description:
    """What an address names now. Raises AddressError only for validation
    failures (malformed text, unknown scheme, containment)."""
    address = parse_address(address_text)
    operations = tuple(op for op in Operation if address.allows(op))

    def made(status: Standing, kind: NodeKind, size: int | None = None, reason: str | None = None) -> Description:
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
    if address.family is Family.MCP:
        facts = mcp.describe(address, context)
        return Description(
            address.canonical, address.family, address.locator_class, operations,
            facts.status, facts.kind, reason=facts.reason, detail=facts.detail,  # type: ignore[arg-type]
        )
    if address.family is Family.SHARED:
        status, kind, reason, detail = await shared.describe(address, context)
        return Description(
            address.canonical, address.family, address.locator_class, operations,
            status, kind, reason=reason, detail=detail,  # type: ignore[arg-type]
        )
    if address.family is Family.AGENT:
        try:
            await agent.prepare(address, Request(Operation.READ, ReadOptions()), context).run()
        except AddressError as error:
            return made("missing" if error.kind is ErrorKind.MISSING_TARGET else "unavailable", "virtual", reason=error.reason)
        return made("discovery", "listing") if address.scope == "listing" else made("exists", "virtual")
    if address.family not in _FILE_FAMILIES:
        try:
            outcome = unavailable.prepare(address, Request(Operation.READ, ReadOptions()), context).run()
            if inspect.isawaitable(outcome):
                await outcome
        except AddressError as error:
            return made("unavailable", "virtual", reason=error.reason)
        return made("exists", "virtual")
    if not _is_explicit(address):
        return made("discovery", "listing")
    try:
        node = _locate(address, Places(context))
    except AddressError as error:
        if error.kind is ErrorKind.MISSING_TARGET:
            return made("missing", "file", reason=error.reason)
        if error.kind in (ErrorKind.UNAVAILABLE, ErrorKind.OWNER_MISSING):
            return made("unavailable", "virtual", reason=error.reason)
        raise
    target = node.tree.place.target
    if target is None and address.family is Family.MEVEDEL:
        return made("unavailable", "virtual", reason=mevedel_docs.not_installed(address.authored).reason)
    unused = not address.path and address.family in (Family.WORK, Family.MEMORY)
    if target is None:
        return made("discovery", "directory", reason=f"{address.canonical} has no files yet") if unused else made("missing", "file", reason="does not exist")
    paths = [node.path] + ([node.compressed_path] if node.compressed_path is not None else [])
    try:
        found = await run_program(target, ControlProgram([Stat(path, optional=True) for path in paths]), address.authored)
    except AddressError as error:
        return made("unavailable", "virtual", reason=error.reason)
    stat, compressed = found[0], False
    if stat.status is Status.ABSENT and len(found) > 1 and found[1].ok and found[1].value.kind == "file":
        stat, compressed = found[1], True
    if not stat.ok:
        if stat.unsafe and not root_refused(stat):
            raise through_link(address.authored)
        if unused:
            return made("discovery", "directory", reason=f"{address.canonical} has no files yet")
        return made("missing", "file", reason="does not exist")
    if stat.value.kind == "directory":
        return made("exists", "directory")
    if stat.value.kind != "file":
        return made("missing", "file", reason="is not a regular file")
    if not node.tree.file_filter(node.parts):
        return made("missing", "file", reason=node.tree.filtered)
    return made("exists", "file", None if compressed else stat.value.size)


def backing_file(address_text: str, context: ResolverContext) -> Path | None:
    """The existing regular file behind a file-backed address on this
    machine, reached without a symbolic link (go-to-definition)."""
    try:
        address = parse_address(address_text)
        if not _is_explicit(address):
            return None
        node = _locate(address, Places(context))
    except AddressError:
        return None
    if not node.tree.file_filter(node.parts):
        return None
    return local_file(node.tree.place, node.parts)
