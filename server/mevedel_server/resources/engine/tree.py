"""Family roots on a target, presented under an address prefix, and the
walk of one -- one implementation for every target (this machine's and an
SSH workspace's). Running an operation on a node is ``explicit_node``;
Glob and Grep over walks are ``search``; what every runner shares is
``runners``.

What a tree holds is the same everywhere: directories and regular files.
A symbolic link is neither listed, searched nor followed (an explicit
address through one is refused as ``containment``), and a FIFO, socket or
device is neither listed nor opened, so no listing leads outside its root
and no read can block. The target enforces this (:class:`ListTree`,
:class:`ReadFiles`: descriptor chains with ``O_NOFOLLOW``, non-blocking
opens of regular files only), so a swap of a directory for a link between
two steps is refused too.

A walk lists the tree in chunks (:class:`Walk`): a Glob that reaches its
limit stops listing. The family's presenter (hidden, renamed, gzip-stored
names) and the sort by logical name are applied here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ...addresses import AddressError, ErrorKind, Operation, encode_component
from ...targets import (
    ControlProgram,
    FileRead,
    ListTree,
    OpResult,
    Status,
    TreeListing,
)
from .places import Place
from .runners import ROOT_CHANGED, root_refused, run_program

#: Entries the first program of a walk lists (whole directories, so a few
#: more); each later one lists four times more, up to ``MAX_CHUNK``. A
#: search that stops early (a Grep at its limit) lists little.
FIRST_CHUNK = 256


MAX_CHUNK = 32768


#: Files the first read of a Grep carries; each later one twice as many,
#: up to ``MAX_BATCH``, and at most ``READ_BUDGET`` bytes (a bigger file
#: travels alone).
FIRST_BATCH = 32


MAX_BATCH = 2048


READ_BUDGET = 8 * 1024 * 1024


#: Text larger than this (a Read, or a Grep batch) is decoded and searched
#: in a worker thread, so the event loop keeps serving other requests; less
#: costs less than the hop.
THREAD_TEXT = 256 * 1024


#: A walk whose listed entries pass this is matched in a worker thread.
THREAD_ENTRIES = 4096


#: Maps a physical entry to its logical name and whether it is gzip-stored,
#: or hides it (None). Receives the parent's logical parts, the physical
#: name, whether it is a directory, and the physical names of its siblings.
Presenter = Callable[[tuple[str, ...], str, bool, frozenset[str]], "tuple[str, bool] | None"]


def _present_as_is(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    return name, False


def _every_file(parts: tuple[str, ...]) -> bool:
    return True


def address_of(base: str, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
    """The address of ``parts`` below a family prefix ``base``."""
    if not parts:
        return base if base.endswith("://") else base.rstrip("/")
    text = base + "/".join(encode_component(part) for part in parts)
    return text + "/" if is_dir else text


@dataclass(frozen=True)
class Tree:
    """A family root. ``base`` is the address prefix of its descendants
    (``"work://shared/"``, ``"memory://local-mevedel/"``, ``"artifact://"``)."""

    place: Place
    base: str
    present: Presenter = _present_as_is
    #: Files a search or listing may show (mevedel:// keeps only Markdown).
    file_filter: Callable[[tuple[str, ...]], bool] = _every_file
    #: Why an explicit file the filter hides is not there.
    filtered: str = "does not exist"
    label: str | None = None

    def address(self, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
        return address_of(self.base, parts, is_dir=is_dir)

    def path(self, physical: tuple[str, ...]) -> str:
        return self.place.path(physical)


@dataclass(frozen=True, slots=True)
class Entry:
    """One logical directory entry: its name as addresses spell it, and its
    physical path relative to the walk's start (``/``-separated)."""

    name: str
    is_dir: bool
    physical: str
    compressed: bool = False


#: What :meth:`Walk.files` yields when the next directory is not listed yet.
NEED = object()


class Walk:
    """The tree below one directory of a target, listed lazily in chunks:
    ``start`` is its target-relative path, ``parts`` its logical parts in
    the tree."""

    def __init__(self, tree: Tree, start: str, parts: tuple[str, ...], listing: TreeListing, depth: int | None = None) -> None:
        self.tree = tree
        self.start = start
        self.parts = parts
        self.depth = depth
        self._records: dict[str, str] = {}
        self._pending: tuple[str, ...] = ()
        self._chunk = FIRST_CHUNK
        #: Bytes of names listed so far (what matching them costs).
        self.listed = 0
        #: Files read with the first listing (a Grep's first ones), by
        #: physical path below the start; each is used once.
        self.prefetched: dict[str, FileRead] = dict(listing.files)
        self._add(listing)

    def _add(self, listing: TreeListing) -> None:
        self._records.update(listing.records)
        self._pending = listing.pending
        self.listed += sum(len(names) for _directory, names in listing.records)

    async def more(self, authored: str) -> None:
        """List the next chunk of the tree."""
        target = self.tree.place.target
        assert target is not None and self._pending
        self._chunk = min(self._chunk * 4, MAX_CHUNK)
        program = ControlProgram([ListTree(self.start, limit=self._chunk, depth=self.depth, resume=self._pending)])
        result = (await run_program(target, program, authored))[0]
        if not result.ok:
            # The walked directory itself went away (or became a link).
            raise listing_failure(result, self.tree.address(self.parts), authored)
        self._add(result.value)

    def entries(self, physical: str, parts: tuple[str, ...]) -> list[Entry] | None:
        """The presented entries of a listed directory (``physical``
        relative to the start), sorted by logical name; None when it is not
        listed yet (an unlisted one with nothing pending is empty)."""
        names = self._records.get(physical)
        if names is None:
            return None if self._pending else []
        raw = names.split("\0") if names else []
        siblings = frozenset(name[:-1] if name.endswith("/") else name for name in raw)
        present, keep = self.tree.present, self.tree.file_filter
        prefix = physical + "/" if physical else ""
        found: list[Entry] = []
        for name in raw:
            is_dir = name.endswith("/")
            if is_dir:
                name = name[:-1]
            shown = present(parts, name, is_dir, siblings)
            if shown is None:
                continue
            logical, compressed = shown
            if not is_dir and not keep(parts + (logical,)):
                continue
            found.append(Entry(logical, is_dir, prefix + name, compressed))
        found.sort(key=_by_name)
        return found

    def files(self) -> Iterator[object]:
        """``(tree parts, entry)`` of every file in sorted depth-first
        order, with :data:`NEED` where the next directory is not listed yet
        (await :meth:`more`, then iterate on)."""
        while (top := self.entries("", self.parts)) is None:
            yield NEED
        stack: list[tuple[Iterator[Entry], tuple[str, ...]]] = [(iter(top), self.parts)]
        while stack:
            entries, parts = stack[-1]
            for entry in entries:
                here = parts + (entry.name,)
                if not entry.is_dir:
                    yield here, entry
                    continue
                while (children := self.entries(entry.physical, here)) is None:
                    yield NEED
                stack.append((iter(children), here))
                break
            else:
                stack.pop()


def _by_name(entry: Entry) -> str:
    return entry.name


def listing_failure(result: OpResult, address: str, authored: str) -> AddressError:
    if root_refused(result):
        return AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED)
    if result.unsafe:
        return AddressError(ErrorKind.CONTAINMENT, authored, f"{address} is reached through a symbolic link, which mevedel does not follow")
    return AddressError(ErrorKind.UNREADABLE, address, "its directory cannot be listed")


async def open_walks(trees: list[Tree], authored: str, operation: Operation = Operation.GLOB) -> list[Walk | None]:
    """The first chunk of each tree's walk, one program per target (a
    Grep's with its first files read); None for a root that does not exist
    (yet)."""
    out: list[Walk | None] = [None] * len(trees)
    by_target: dict[int, list[int]] = {}
    for index, tree in enumerate(trees):
        tree.place.require(tree.address(()))
        if tree.place.target is not None:
            by_target.setdefault(id(tree.place.target), []).append(index)
    for indices in by_target.values():
        target = trees[indices[0]].place.target
        assert target is not None
        program = ControlProgram([first_listing(trees[i].place.root, operation) for i in indices])
        results = await run_program(target, program, authored)
        for index, result in zip(indices, results):
            tree = trees[index]
            if result.ok:
                out[index] = Walk(tree, tree.place.root, (), result.value)
            elif result.status is not Status.ABSENT and not (result.reason or "").endswith("is not a directory"):
                raise listing_failure(result, tree.address(()), authored)
    return out


async def all_files(walk: Walk, authored: str) -> list[tuple[tuple[str, ...], Entry]]:
    """Every file of a walk (listing all of it)."""
    found: list[tuple[tuple[str, ...], Entry]] = []
    for item in walk.files():
        if item is NEED:
            await walk.more(authored)
        else:
            found.append(item)  # type: ignore[arg-type]
    return found


def top_lines(walk: Walk | None) -> list[str]:
    """One address per entry of a walked root; directories end with ``/``."""
    if walk is None:
        return []
    entries = walk.entries("", ())
    return [walk.tree.address((e.name,), is_dir=e.is_dir) for e in entries or []]


def has_entries(walk: Walk | None) -> bool:
    return walk is not None and bool(walk.entries("", ()))


@dataclass(frozen=True)
class Node:
    """An explicit address: its logical parts, physical path and, for a
    retired execution log, the gzip-stored path read when the raw file is
    absent."""

    tree: Tree
    parts: tuple[str, ...]
    path: str
    compressed_path: str | None = None


def node_of(tree: Tree, parts: tuple[str, ...], compressed_path: str | None = None) -> Node:
    return Node(tree, parts, tree.path(parts), compressed_path)


def first_listing(path: str, operation: Operation, depth: int | None = None) -> ListTree:
    """The first chunk of a walk; a Grep's has its first files read too."""
    if operation is Operation.GREP:
        return ListTree(path, limit=FIRST_CHUNK, depth=depth, read_first=FIRST_BATCH, read_budget=THREAD_TEXT, optional=True)
    return ListTree(path, limit=FIRST_CHUNK, depth=depth, optional=True)
