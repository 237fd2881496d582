"""mevedel:// — the Markdown documentation packaged with the server.

Only ``.md`` files are part of the view: listings, Glob and Grep never show
another file, whatever glob a caller passes, and an explicit non-Markdown
address is missing-target. Needs no session.
"""

from __future__ import annotations

from ...addresses import Address, AddressError, ErrorKind, Operation
from ..engine.attempt import Prepared, Request
from ..engine.containment import contain
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing, run_node
from ..engine.places import Places
from ..engine.runners import later
from ..engine.search import Scope, search
from ..engine.tree import Node, Tree, all_files, node_of, open_walks

BASE = "mevedel://"
NOT_MARKDOWN = "is not a packaged Markdown document"


def _is_markdown(parts: tuple[str, ...]) -> bool:
    return parts[-1].endswith(".md")


def docs_tree(places: Places) -> Tree:
    place = places.local(places.context.docs_root)
    return Tree(place, BASE, file_filter=_is_markdown, filtered=NOT_MARKDOWN, label="documentation")


def not_installed(authored: str) -> AddressError:
    return AddressError(ErrorKind.UNAVAILABLE, authored, "the packaged documentation is not installed")


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    places = Places(context)
    tree = docs_tree(places)
    if address.scope == "listing":
        return Prepared("file", later(_run_listing, tree, request, authored, canonical))
    node = locate(address, places)
    return Prepared("file", later(_run_doc, node, request, authored, canonical))


def locate(address: Address, places: Places) -> Node:
    tree = docs_tree(places)
    contain(tree.place, address.path, address.authored)
    return node_of(tree, address.path)


async def _run_doc(node: Node, request: Request, authored: str, canonical: str) -> object:
    if node.tree.place.target is None and not node.tree.place.linked:
        raise not_installed(authored)
    return await run_node(node, request, authored, canonical)


async def _run_listing(tree: Tree, request: Request, authored: str, canonical: str) -> object:
    (walk,) = await open_walks([tree], authored, request.operation)
    if walk is None:
        raise not_installed(authored)
    if request.operation is Operation.READ:
        lines = [tree.address(parts) for parts, _entry in await all_files(walk, authored)]
        return read_listing(lines, request, authored, canonical)
    return await search([Scope(tree, (), walk=walk)], request, authored, canonical)
