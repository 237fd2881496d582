"""memory:// — configured persistent-memory roots.

Each root has a digest key (the lowercase SHA-256 of its resolved path) and,
when it is the only root of its location and kind, a readable key
(``local-mevedel``, ``local-agents``, ``global-mevedel``, ``global-agents``).
Both resolve to the same root. ``memory://root`` is the ordered union index;
topics are the Markdown files of a root. Precedence for shadowing is
local before global, ``.mevedel`` before ``.agents``, then configured order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import Counter
from dataclasses import dataclass

from ...addresses import Address, AddressError, ErrorKind, Operation, encode_component
from ..engine.attempt import Prepared, Request
from ..engine.containment import contain
from ..engine.context import MemoryRoot, ResolverContext
from ..engine.explicit_node import read_listing, run_node, run_root
from ..engine.places import Place, Places
from ..engine.runners import fail, later
from ..engine.search import Scope, search
from ..engine.tree import Node, Tree, Walk, all_files, node_of, open_walks

_RANK = {("local", "mevedel"): 0, ("local", "agents"): 1, ("global", "mevedel"): 2, ("global", "agents"): 3}


@dataclass(frozen=True, slots=True)
class KeyedRoot:
    root: MemoryRoot
    digest: str
    readable: str | None

    @property
    def key(self) -> str:
        """The key listings and search results use."""
        return self.readable or self.digest

    @property
    def label(self) -> str:
        return f"{self.root.location} .{self.root.kind}"

    def tree(self, places: Places, key: str | None = None) -> Tree:
        place = places.local(self.root.path)
        return Tree(place, f"memory://{encode_component(key or self.key)}/", label=self.label)


def root_digest(root: MemoryRoot) -> str:
    return hashlib.sha256(os.path.realpath(root.path).encode("utf-8")).hexdigest()


def keyed_roots(context: ResolverContext) -> list[KeyedRoot]:
    """Configured roots in precedence order, one per resolved directory."""
    ordered = sorted(
        enumerate(context.memory_roots), key=lambda pair: (_RANK[(pair[1].location, pair[1].kind)], pair[0])
    )
    seen: set[str] = set()
    unique: list[tuple[MemoryRoot, str]] = []
    for _index, root in ordered:
        digest = root_digest(root)
        if digest not in seen:
            seen.add(digest)
            unique.append((root, digest))
    claims = Counter(root.readable_key for root, _digest in unique)
    return [
        KeyedRoot(root, digest, root.readable_key if claims[root.readable_key] == 1 else None)
        for root, digest in unique
    ]


def find_root(context: ResolverContext, key: str) -> KeyedRoot | None:
    for keyed in keyed_roots(context):
        if key in (keyed.digest, keyed.readable):
            return keyed
    return None


def unknown_key(authored: str, context: ResolverContext) -> AddressError:
    if not context.memory_roots:
        return AddressError(ErrorKind.UNAVAILABLE, authored, "no memory roots are configured")
    return AddressError(
        ErrorKind.UNAVAILABLE, authored, "no configured memory root has this key; Read memory://root lists the roots"
    )


async def _files(tree: Tree, walk: Walk | None, authored: str) -> list[tuple[str, ...]]:
    if walk is None:
        return []
    return [parts for parts, _entry in await all_files(walk, authored)]


async def index_lines(roots: list[KeyedRoot], places: Places, authored: str) -> list[str]:
    """The ordered, labeled index of roots and their topics."""
    if not roots:
        return ["No memory roots are configured."]
    trees = [keyed.tree(places) for keyed in roots]
    walks = await open_walks(trees, authored)
    sections = []
    for keyed, tree, walk in zip(roots, trees, walks):
        topics = [tree.address(parts) for parts in await _files(tree, walk, authored) if parts[-1].endswith(".md")]
        sections.append((keyed, topics))
    lines: list[str] = []
    if not any(topics for _keyed, topics in sections):
        lines.append(f"{len(roots)} memory root(s) are configured; none holds a topic yet.")
    for keyed, topics in sections:
        head = f"{keyed.label} (memory://{encode_component(keyed.key)}/)"
        lines.append(head if topics else head + ": no topics yet")
        lines.extend("  " + topic for topic in topics)
    return lines


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    places = Places(context)
    if address.scope == "union":
        roots = keyed_roots(context)
        return Prepared("file", later(_run_union, request, roots, places, authored, canonical))
    try:
        node = locate(address, places)
    except AddressError as error:
        if error.kind is ErrorKind.UNAVAILABLE:
            return Prepared("file", fail(error))
        raise
    if not address.path:
        unused = f"{canonical} has no files yet; an authorised ApplyPatch can create one below it"
        return Prepared("file", later(run_root, node, request, authored, canonical, unused))
    return Prepared("file", later(run_node, node, request, authored, canonical))


def locate(address: Address, places: Places) -> Node:
    assert address.key is not None
    keyed = find_root(places.context, address.key)
    if keyed is None:
        raise unknown_key(address.authored, places.context)
    tree = keyed.tree(places, address.key)
    contain(tree.place, address.path, address.authored)
    return node_of(tree, address.path)


async def _run_union(request: Request, roots: list[KeyedRoot], places: Places, authored: str, canonical: str) -> object:
    if request.operation is Operation.READ:
        return read_listing(await index_lines(roots, places, authored), request, authored, canonical)
    if not roots:
        return await search([], request, authored, canonical, notice="no memory roots are configured")
    trees = [keyed.tree(places) for keyed in roots]
    walks = await open_walks(trees, authored, request.operation)
    # The shadowing notes need every root's files; the search then walks
    # what is already listed.
    listed = [await _files(tree, walk, authored) for tree, walk in zip(trees, walks)]
    scopes = [Scope(walk.tree, (), walk=walk) for walk in walks if walk is not None]
    result = await search(scopes, request, authored, canonical, notice="the configured memory roots hold no files yet")
    shadowed = _shadowing(trees, listed)
    if not shadowed:
        return result
    notice = "\n".join(filter(None, [result.notice, *shadowed]))
    return dataclasses.replace(result, notice=notice)


def _shadowing(trees: list[Tree], listed: list[list[tuple[str, ...]]]) -> list[str]:
    """Disclose files hidden behind a same-named file of a preferred root."""
    owner: dict[tuple[str, ...], Tree] = {}
    notes: list[str] = []
    for tree, files in zip(trees, listed):
        for parts in files:
            first = owner.setdefault(parts, tree)
            if first is not tree:
                notes.append(
                    f"{tree.address(parts)} ({tree.label}) is shadowed by {first.address(parts)} ({first.label})"
                )
    return notes


def writable(address: Address, places: Places) -> tuple[Place, tuple[str, ...]]:
    """Where an ApplyPatch may write ``address``: its root and the file's
    parts below it."""
    authored = address.authored
    if address.scope != "root" or not address.path:
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION, authored, "ApplyPatch needs an explicit file memory://ROOT-KEY/PATH"
        )
    assert address.key is not None
    keyed = find_root(places.context, address.key)
    if keyed is None:
        raise unknown_key(authored, places.context)
    tree = keyed.tree(places, address.key)
    contain(tree.place, address.path, authored)
    return tree.place, address.path
