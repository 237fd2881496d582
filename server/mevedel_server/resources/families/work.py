"""work:// — the session scope (``SESSION/local/``) and the workspace's
shared scope (``WORKSPACE/.mevedel/shared/``), both on the workspace's
target (this machine's or an SSH workspace's; see :mod:`.places`).

Discovery never creates either directory. An unused root is a successful
empty result that says how to start one; an explicit missing descendant is
missing-target.
"""

from __future__ import annotations

from ...addresses import Address, AddressError, ErrorKind, Operation
from ..engine.attempt import Prepared, Request
from ..engine.containment import contain
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing, run_node, run_root
from ..engine.places import Place, Places
from ..engine.runners import fail, later
from ..engine.search import Scope, search
from ..engine.tree import Node, Tree, has_entries, node_of, open_walks, top_lines

SHARED_BASE = "work://shared/"
SESSION_BASE = "work://"


def _hide_shared(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    # A top-level ``shared`` in the session scope has no address:
    # work://shared names the workspace scope.
    return None if not parent and name == "shared" else (name, False)


def session_tree(places: Places) -> Tree | None:
    session = places.session
    return None if session is None else Tree(session.below("local"), SESSION_BASE, present=_hide_shared, label="session")


def shared_tree(places: Places) -> Tree | None:
    shared = places.shared()
    return None if shared is None else Tree(shared, SHARED_BASE, label="shared")


def no_session(authored: str) -> AddressError:
    return AddressError(
        ErrorKind.OWNER_MISSING, authored, "no session is open; work:// session files belong to the open session"
    )


def no_workspace(authored: str) -> AddressError:
    return AddressError(
        ErrorKind.OWNER_MISSING, authored, "no workspace is open; work://shared/ belongs to the current workspace"
    )


SHARED_UNUSED = "work://shared has no files yet; an authorised ApplyPatch can create a file under work://shared/"
SESSION_UNUSED = "the session scope (work://) has no files yet; an authorised ApplyPatch can create one"


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    places = Places(context)
    if address.scope == "listing":
        return _prepare_union(request, places, authored, canonical)
    try:
        node = locate(address, places)
    except AddressError as error:
        if error.kind is ErrorKind.OWNER_MISSING:
            return Prepared("file", fail(error))
        raise
    if address.scope == "shared" and not address.path:
        return Prepared("file", later(run_root, node, request, authored, canonical, SHARED_UNUSED))
    return Prepared("file", later(run_node, node, request, authored, canonical))


def tree_of(address: Address, places: Places) -> Tree:
    """The scope an explicit work:// address names (not the bare listing)."""
    if address.scope == "shared":
        tree = shared_tree(places)
        if tree is None:
            raise no_workspace(address.authored)
        return tree
    tree = session_tree(places)
    if tree is None:
        raise no_session(address.authored)
    return tree


def locate(address: Address, places: Places) -> Node:
    """The node of an explicit work:// address (not the bare listing)."""
    tree = tree_of(address, places)
    contain(tree.place, address.path, address.authored)
    return node_of(tree, address.path)


def _prepare_union(request: Request, places: Places, authored: str, canonical: str) -> Prepared:
    session, shared = session_tree(places), shared_tree(places)
    if session is None:
        return Prepared("file", fail(no_session(authored)))
    if shared is None:
        return Prepared("file", fail(no_workspace(authored)))
    return Prepared("file", later(_run_union, request, session, shared, authored, canonical))


async def _run_union(request: Request, session: Tree, shared: Tree, authored: str, canonical: str) -> object:
    walks = await open_walks([session, shared], authored, request.operation)
    notes = [text for walk, text in zip(walks, (SESSION_UNUSED, SHARED_UNUSED)) if not has_entries(walk)]
    notice = "\n".join(notes) or None
    if request.operation is Operation.READ:
        return read_listing(top_lines(walks[0]) + top_lines(walks[1]), request, authored, canonical, notice)
    scopes = [Scope(walk.tree, (), walk=walk) for walk in walks if walk is not None]
    return await search(scopes, request, authored, canonical, notice=notice)


def writable(address: Address, places: Places) -> tuple[Place, tuple[str, ...]]:
    """Where an ApplyPatch may write ``address``: the scope's root and the
    file's parts below it."""
    authored = address.authored
    if address.scope == "shared":
        tree = shared_tree(places)
        if tree is None:
            raise no_workspace(authored)
    elif address.scope == "session":
        tree = session_tree(places)
        if tree is None:
            raise no_session(authored)
        if address.path[:1] == ("shared",):
            raise AddressError(ErrorKind.INTERNAL, authored, "a session path named shared reached the resolver")
    else:
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION, authored, "ApplyPatch needs an explicit file below work:// or work://shared/"
        )
    if not address.path:
        raise AddressError(ErrorKind.UNSUPPORTED_OPERATION, authored, "only an explicit file below the root can be written")
    contain(tree.place, address.path, authored)
    return tree.place, address.path
