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

from ..addresses.encoding import encode_component
from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .attempt import Prepared, Request
from .containment import Contained, contain, contain_for_write
from .context import MemoryRoot, ResolverContext
from .file_operations import fail, read_listing, run_located, search
from .tree import Located, SearchScope, Tree

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

    def tree(self, key: str | None = None) -> Tree:
        return Tree(self.root.path, f"memory://{encode_component(key or self.key)}/", label=self.label)


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


def _topics(keyed: KeyedRoot) -> list[str]:
    tree = keyed.tree()
    if not tree.exists():
        return []
    return [tree.address(parts) for parts, _e in tree.walk_files(tree.root, ()) if parts[-1].endswith(".md")]


def index_lines(context: ResolverContext) -> list[str]:
    """The ordered, labeled index of roots and their topics."""
    roots = keyed_roots(context)
    if not roots:
        return ["No memory roots are configured."]
    sections = [(keyed, _topics(keyed)) for keyed in roots]
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
    if address.scope == "union":
        return Prepared("file", lambda: _run_union(request, context, authored, canonical))
    try:
        node = locate(address, context)
    except AddressError as error:
        if error.kind is ErrorKind.UNAVAILABLE:
            return Prepared("file", fail(error))
        raise
    if not address.path:
        return Prepared("file", lambda: _run_root(request, node, authored, canonical))
    return Prepared("file", lambda: run_located(request, node, authored, canonical))


def locate(address: Address, context: ResolverContext) -> Located:
    assert address.key is not None
    keyed = find_root(context, address.key)
    if keyed is None:
        raise unknown_key(address.authored, context)
    tree = keyed.tree(address.key)
    return Located(tree, address.path, contain(tree.root, address.path, address.authored))


def _run_root(request: Request, node: Located, authored: str, canonical: str) -> object:
    if not node.tree.exists():
        notice = f"{canonical} has no files yet; an authorised ApplyPatch can create one below it"
        if request.operation is Operation.READ:
            return read_listing([], request, authored, canonical, notice)
        return search([], request, authored, canonical, notice=notice)
    return run_located(request, node, authored, canonical)


def _run_union(request: Request, context: ResolverContext, authored: str, canonical: str) -> object:
    if request.operation is Operation.READ:
        return read_listing(index_lines(context), request, authored, canonical)
    roots = keyed_roots(context)
    if not roots:
        return search([], request, authored, canonical, notice="no memory roots are configured")
    trees = [keyed.tree() for keyed in roots]
    scopes = [SearchScope(tree, (), tree.root) for tree in trees if tree.exists()]
    result = search(scopes, request, authored, canonical, notice="the configured memory roots hold no files yet")
    shadowed = _shadowing(trees)
    if not shadowed:
        return result
    notice = "\n".join(filter(None, [result.notice, *shadowed]))
    return dataclasses.replace(result, notice=notice)


def _shadowing(trees: list[Tree]) -> list[str]:
    """Disclose files hidden behind a same-named file of a preferred root."""
    owner: dict[tuple[str, ...], Tree] = {}
    notes: list[str] = []
    for tree in trees:
        if not tree.exists():
            continue
        for parts, _entry in tree.walk_files(tree.root, ()):
            first = owner.setdefault(parts, tree)
            if first is not tree:
                notes.append(
                    f"{tree.address(parts)} ({tree.label}) is shadowed by {first.address(parts)} ({first.label})"
                )
    return notes


def writable(address: Address, context: ResolverContext) -> Contained:
    """The contained backing file an ApplyPatch may write for ``address``."""
    authored = address.authored
    if address.scope != "root" or not address.path:
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION, authored, "ApplyPatch needs an explicit file memory://ROOT-KEY/PATH"
        )
    assert address.key is not None
    keyed = find_root(context, address.key)
    if keyed is None:
        raise unknown_key(authored, context)
    return contain_for_write(keyed.root.path.parent, keyed.root.path, address.path, authored)
