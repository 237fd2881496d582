"""Read, Glob or Grep of an explicit address: the node is probed in one
program (listed as a directory, read as a file, or stat'ed for a Glob), a
Read of a directory is listed by a second, and a file's text is paged
here (in a worker thread when large -- over :data:`~.tree.THREAD_TEXT`,
256 KiB -- or gzip-stored). A Read's probe is one ``ReadFiles``; a Glob's
or Grep's is a first ``ListTree`` chunk beside a ``Stat`` or
``ReadFiles``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ...addresses import AddressError, ErrorKind, Operation
from ...targets import (
    ControlProgram,
    FileRead,
    ListTree,
    OpResult,
    ReadFiles,
    Stat,
    Status,
)
from .attempt import Request
from .options import ReadOptions
from .projection import page_lines, split_lines
from .results import GlobResult, GrepResult, ReadResult
from .runners import bytes_of, refusal, run_program
from .search import Scope, search
from .text_source import MAX_FILE_BYTES, text_of_bytes
from .tree import THREAD_TEXT, Entry, Node, Walk, first_listing, listing_failure


def _split(path: str) -> tuple[str, str]:
    parent, _, leaf = path.rpartition("/")
    return parent, leaf


def _probe(path: str, operation: Operation, depth: int | None) -> list:
    """What a node is, in one program: listed as a directory, read as a
    file, or (a Glob, which wants no bytes) stat'ed. A Read only reads:
    most Reads name a file, and a directory is listed by a second program."""
    read = None
    if operation is not Operation.GLOB and path:
        parent, leaf = _split(path)
        read = ReadFiles(parent, names=(leaf,), max_bytes=MAX_FILE_BYTES, budget=0, optional=True)
    if operation is Operation.READ and read is not None:
        return [read]
    return [first_listing(path, operation, depth), read or Stat(path, optional=True)]


@dataclass(frozen=True)
class _Probed:
    """A node as its probe found it: its kind (``directory``, ``file``,
    ``other``, or ``unlisted``: not a regular file, not listed yet), else
    the result that says why it is none."""

    kind: str | None
    found: OpResult | FileRead
    listing: OpResult | None = None
    data: bytes | None = None


def _probed(results: list[OpResult]) -> _Probed:
    listing = results[0] if len(results) == 2 else None
    if listing is not None and listing.ok:
        return _Probed("directory", listing, listing)
    second = results[-1]
    if not second.ok or not isinstance(second.value, tuple):  # a failed read, or a Stat
        return _Probed(second.value.kind if second.ok else None, second, listing)
    read: FileRead = second.value[0]
    if read.ok:
        return _Probed("file", read, listing, read.data)
    if read.reason and read.reason.endswith("is not a regular file") and not read.unsafe:
        return _Probed("unlisted", read) if listing is None else _unlisted(listing)
    return _Probed(None, read, listing)


def _unlisted(listing: OpResult) -> _Probed:
    """A node that is not a regular file, by its listing: a directory (one
    that could not be listed too), a link, or something else (a FIFO...)."""
    if listing.ok:
        return _Probed("directory", listing, listing)
    if listing.unsafe:
        return _Probed(None, listing)
    if (listing.reason or "").endswith("is not a directory"):
        return _Probed("other", listing)
    return _Probed("directory", listing, listing)


async def run_node(node: Node, request: Request, authored: str, canonical: str) -> ReadResult | GlobResult | GrepResult:
    """Read, Glob or Grep an explicit node."""
    place = node.tree.place
    place.require(authored)
    target = place.target
    if target is None:
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
    operation = request.operation
    wants_bytes = operation is not Operation.GLOB
    depth = 1 if operation is Operation.READ else None
    candidates = [node.path] if node.compressed_path is None else [node.path, node.compressed_path]
    probes = []
    ops: list = []
    for path in candidates:
        probe = _probe(path, operation, depth)
        probes.append((len(ops), len(probe)))
        ops.extend(probe)
    found = list(await run_program(target, ControlProgram(ops), authored))
    probed = [_probed(found[start : start + size]) for start, size in probes]
    probe, compressed = probed[0], False
    if len(probed) > 1 and probe.kind is None and probe.found.status is Status.ABSENT and probed[1].kind == "file":
        probe, compressed = probed[1], True
    if probe.kind == "unlisted":  # a Read of a directory (or of a FIFO...)
        listing = (await run_program(target, ControlProgram([ListTree(node.path, depth=1, optional=True)]), authored))[0]
        probe = _unlisted(listing)
    if probe.kind is None:
        raise refusal(probe.found, authored)
    if probe.kind == "other":
        raise AddressError(ErrorKind.UNREADABLE, authored, "is not a regular file or directory")
    if probe.kind == "directory":
        if probe.listing is None or not probe.listing.ok:
            raise listing_failure(probe.listing or probe.found, node.tree.address(node.parts), authored)  # type: ignore[arg-type]
        walk = Walk(node.tree, node.path, node.parts, probe.listing.value, depth)
        if operation is Operation.READ:
            assert isinstance(request.options, ReadOptions)
            entries = walk.entries("", node.parts) or []
            lines = [node.tree.address(node.parts + (e.name,), is_dir=e.is_dir) for e in entries]
            notice = None if lines else f"{canonical} is an empty directory"
            return page_lines(lines, request.options, authored, canonical, "directory", notice)
        return await search([Scope(node.tree, node.parts, walk=walk)], request, authored, canonical)
    if not node.tree.file_filter(node.parts):
        raise AddressError(ErrorKind.MISSING_TARGET, authored, node.tree.filtered)
    path = node.compressed_path if compressed and node.compressed_path is not None else node.path
    directory, leaf = _split(path)
    data = bytes_of(probe.found, authored) if wants_bytes else None  # type: ignore[arg-type]
    if operation is Operation.READ:
        assert isinstance(request.options, ReadOptions) and data is not None
        return await _page_file(data, compressed, request.options, authored, canonical)
    entry = Entry(node.parts[-1], False, leaf, compressed)
    scope = Scope(node.tree, node.parts, entry=entry, directory=directory, data=data)
    return await search([scope], request, authored, canonical, explicit_file=True)


async def run_root(node: Node, request: Request, authored: str, canonical: str, unused: str) -> ReadResult | GlobResult | GrepResult:
    """:func:`run_node` of a family root that nothing has created yet: an
    unused root is an empty answer saying so (``unused``), not a miss."""
    try:
        return await run_node(node, request, authored, canonical)
    except AddressError as error:
        if error.kind is not ErrorKind.MISSING_TARGET:
            raise
    if request.operation is Operation.READ:
        return read_listing([], request, authored, canonical, unused)
    return await search([], request, authored, canonical, notice=unused)


def _page(data: bytes, compressed: bool, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    text = text_of_bytes(data, authored, compressed=compressed)
    notice = None if text else f"{canonical} is an empty file"
    return page_lines(split_lines(text), options, authored, canonical, "file", notice)


async def _page_file(data: bytes, compressed: bool, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    if len(data) > THREAD_TEXT or compressed:
        return await asyncio.to_thread(_page, data, compressed, options, authored, canonical)
    return _page(data, compressed, options, authored, canonical)


def read_listing(
    lines: list[str], request: Request, authored: str, canonical: str, notice: str | None = None
) -> ReadResult:
    """Read of a discovery listing (virtual text of addresses)."""
    assert isinstance(request.options, ReadOptions)
    return page_lines(lines, request.options, authored, canonical, "listing", notice)
