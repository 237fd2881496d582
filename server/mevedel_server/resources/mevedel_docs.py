"""mevedel:// — the Markdown documentation packaged with the server.

Only ``.md`` files are part of the view: listings, Glob and Grep never show
another file, whatever glob a caller passes, and an explicit non-Markdown
address is missing-target. Needs no session.
"""

from __future__ import annotations

from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .attempt import Prepared, Request
from .containment import contain
from .context import ResolverContext
from .file_operations import read_listing, run_located, search
from .tree import Located, SearchScope, Tree

BASE = "mevedel://"


def _is_markdown(parts: tuple[str, ...]) -> bool:
    return parts[-1].endswith(".md")


def docs_tree(context: ResolverContext) -> Tree:
    return Tree(context.docs_root, BASE, file_filter=_is_markdown, label="documentation")


def not_installed(authored: str) -> AddressError:
    return AddressError(ErrorKind.UNAVAILABLE, authored, "the packaged documentation is not installed")


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    tree = docs_tree(context)
    if address.scope == "listing":
        return Prepared("file", lambda: _run_listing(tree, request, authored, canonical))
    node = locate(address, context)
    return Prepared("file", lambda: _run_doc(node, request, authored, canonical))


def locate(address: Address, context: ResolverContext) -> Located:
    tree = docs_tree(context)
    return Located(tree, address.path, contain(tree.root, address.path, address.authored))


def _run_doc(node: Located, request: Request, authored: str, canonical: str) -> object:
    if not node.tree.exists():
        raise not_installed(authored)
    if node.path.is_file() and not _is_markdown(node.parts):
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "is not a packaged Markdown document")
    return run_located(request, node, authored, canonical)


def _run_listing(tree: Tree, request: Request, authored: str, canonical: str) -> object:
    if not tree.exists():
        raise not_installed(authored)
    if request.operation is Operation.READ:
        lines = [tree.address(parts) for parts, _entry in tree.walk_files(tree.root, ())]
        return read_listing(lines, request, authored, canonical)
    return search([SearchScope(tree, (), tree.root)], request, authored, canonical)
