"""work:// — the session scope (``SESSION/local/``) and the workspace's
shared scope (``WORKSPACE/.mevedel/shared/``).

Discovery never creates either directory. An unused root is a successful
empty result that says how to start one; an explicit missing descendant is
missing-target.
"""

from __future__ import annotations

from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .attempt import Prepared, Request
from .containment import Contained, contain, contain_for_write
from .context import ResolverContext
from .file_operations import fail, read_listing, run_located, search
from .tree import Located, SearchScope, Tree, listing_lines

SHARED_BASE = "work://shared/"
SESSION_BASE = "work://"


def _hide_shared(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    # A top-level ``shared`` in the session scope has no address:
    # work://shared names the workspace scope.
    return None if not parent and name == "shared" else (name, False)


def session_tree(context: ResolverContext) -> Tree | None:
    local = context.session_local
    return None if local is None else Tree(local, SESSION_BASE, present=_hide_shared, label="session")


def shared_tree(context: ResolverContext) -> Tree | None:
    root = context.shared_root
    return None if root is None else Tree(root, SHARED_BASE, label="shared")


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
    if context.remote_workspace:
        from . import remote_work

        return remote_work.prepare(address, request, context)
    authored, canonical = address.authored, address.canonical
    if address.scope == "listing":
        return _prepare_union(request, context, authored, canonical)
    try:
        node = locate(address, context)
    except AddressError as error:
        if error.kind is ErrorKind.OWNER_MISSING:
            return Prepared("file", fail(error))
        raise
    if address.scope == "shared" and not address.path:
        return Prepared("file", lambda: _run_shared_root(request, node, authored, canonical))
    return Prepared("file", lambda: run_located(request, node, authored, canonical))


def locate(address: Address, context: ResolverContext) -> Located:
    """The contained node of an explicit work:// address (not the bare listing)."""
    if address.scope == "shared":
        tree = shared_tree(context)
        if tree is None:
            raise no_workspace(address.authored)
    else:
        tree = session_tree(context)
        if tree is None:
            raise no_session(address.authored)
    return Located(tree, address.path, contain(tree.root, address.path, address.authored))


def _run_shared_root(request: Request, node: Located, authored: str, canonical: str) -> object:
    if not node.tree.exists():
        if request.operation is Operation.READ:
            return read_listing([], request, authored, canonical, SHARED_UNUSED)
        return search([], request, authored, canonical, notice=SHARED_UNUSED)
    return run_located(request, node, authored, canonical)


def _prepare_union(request: Request, context: ResolverContext, authored: str, canonical: str) -> Prepared:
    session, shared = session_tree(context), shared_tree(context)
    if session is None:
        return Prepared("file", fail(no_session(authored)))
    if shared is None:
        return Prepared("file", fail(no_workspace(authored)))

    def run() -> object:
        notes = [text for tree, text in ((session, SESSION_UNUSED), (shared, SHARED_UNUSED)) if not _has_entries(tree)]
        if request.operation is Operation.READ:
            lines = listing_lines(session, session.root, ()) + listing_lines(shared, shared.root, ())
            return read_listing(lines, request, authored, canonical, "\n".join(notes) or None)
        scopes = [SearchScope(tree, (), tree.root) for tree in (session, shared)]
        return search(scopes, request, authored, canonical, notice="\n".join(notes) or None)

    return Prepared("file", run)


def _has_entries(tree: Tree) -> bool:
    return bool(tree.entries(tree.root, ())) if tree.exists() else False


def writable(address: Address, context: ResolverContext) -> Contained:
    """The contained backing file an ApplyPatch may write for ``address``."""
    authored = address.authored
    if address.scope == "shared":
        if context.workspace_root is None or context.shared_root is None:
            raise no_workspace(authored)
        owner, root = context.workspace_root, context.shared_root
    elif address.scope == "session":
        if context.session_dir is None or context.session_local is None:
            raise no_session(authored)
        owner, root = context.session_dir, context.session_local
        if address.path[:1] == ("shared",):
            raise AddressError(ErrorKind.INTERNAL, authored, "a session path named shared reached the resolver")
    else:
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION, authored, "ApplyPatch needs an explicit file below work:// or work://shared/"
        )
    return contain_for_write(owner, root, address.path, authored)
