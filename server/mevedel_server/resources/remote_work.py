"""work:// on a workspace reached over SSH: the session's files
(``SESSION/local/``) and the shared scope (``.mevedel/shared/``) through the
store's target, so the same pinned, symlink-refusing remote programs serve
Read, Glob, Grep and the bare ``work://`` union with the local answers,
notices and errors (see :mod:`.remote_tree`). ApplyPatch is
:mod:`.remote_patch`.
"""

from __future__ import annotations

from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .attempt import Prepared, Request
from .context import ResolverContext
from .file_operations import fail, read_listing
from .remote_tree import Node, RemoteTree, Scope, later, run_node, search, top_lines, walk_roots
from .work import SESSION_BASE, SESSION_UNUSED, SHARED_BASE, SHARED_UNUSED, _hide_shared, no_session

SHARED_ROOT = ".mevedel/shared"


def session_root(session_id: str) -> str:
    return f".mevedel/sessions/{session_id}/local"


def session_tree(context: ResolverContext) -> RemoteTree | None:
    sid = context.remote_session
    return None if sid is None else RemoteTree(session_root(sid), SESSION_BASE, present=_hide_shared)


def shared_tree() -> RemoteTree:
    return RemoteTree(SHARED_ROOT, SHARED_BASE)


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    target = context.store_target
    assert target is not None and context.remote_workspace
    if address.scope == "listing":
        session = session_tree(context)
        if session is None:
            return Prepared("file", fail(no_session(authored)))
        return Prepared("file", later(_run_union, target, session, request, authored, canonical))
    if address.scope == "shared":
        tree = shared_tree()
    else:
        tree = session_tree(context)
        if tree is None:
            return Prepared("file", fail(no_session(authored)))
    if address.scope == "shared" and not address.path:
        return Prepared("file", later(_run_shared_root, target, tree, request, authored, canonical))
    node = Node(tree, tuple(address.path), tree.path(tuple(address.path)))
    return Prepared("file", later(run_node, target, node, request, authored, canonical))


async def _run_shared_root(target, tree: RemoteTree, request: Request, authored: str, canonical: str) -> object:
    try:
        return await run_node(target, Node(tree, (), tree.root), request, authored, canonical)
    except AddressError as error:
        if error.kind is not ErrorKind.MISSING_TARGET:
            raise
    # Nobody has written a shared file yet: an unused scope, not a miss.
    if request.operation is Operation.READ:
        return read_listing([], request, authored, canonical, SHARED_UNUSED)
    return await search(target, [], request, authored, canonical, notice=SHARED_UNUSED)


async def _run_union(target, session: RemoteTree, request: Request, authored: str, canonical: str) -> object:
    shared = shared_tree()
    walks = await walk_roots(target, [session, shared], authored)
    notes = [
        text
        for walked, text in zip(walks, (SESSION_UNUSED, SHARED_UNUSED))
        if walked is None or not walked.entries("", ())
    ]
    notice = "\n".join(notes) or None
    if request.operation is Operation.READ:
        lines = top_lines(walks[0]) + top_lines(walks[1])
        return read_listing(lines, request, authored, canonical, notice)
    scopes = [Scope(walked.tree, (), walked=walked) for walked in walks if walked is not None]
    return await search(target, scopes, request, authored, canonical, notice=notice)

