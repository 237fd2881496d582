"""artifact:// on a workspace reached over SSH: the open session's
``tool-results/`` lives under the workspace root there
(``.mevedel/sessions/ID/tool-results``), so Read, Glob and Grep of it run
through the store's target with the local family's rules (private
temporaries hidden, retired ``.log.gz`` logs under their ``.log`` handle);
see :mod:`.remote_tree`.
"""

from __future__ import annotations

from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .artifact import _GZ, BASE, EMPTY, EXECUTIONS, _is_private, _present, no_session
from .attempt import Prepared, Request
from .context import ResolverContext
from .file_operations import fail, read_listing
from .remote_tree import Node, RemoteTree, Scope, later, run_node, search, walk_roots


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    target = context.store_target
    assert target is not None and context.remote_workspace
    if context.remote_session is None:
        return Prepared("file", fail(no_session(authored)))
    tree = RemoteTree(f".mevedel/sessions/{context.remote_session}/tool-results", BASE, present=_present)
    if address.scope == "listing":
        return Prepared("file", later(_run_listing, target, tree, request, authored, canonical))
    parts = tuple(address.path)
    name = parts[-1]
    if name.endswith(_GZ):
        handle = "/".join(parts)[: -len(".gz")]
        return Prepared("file", fail(AddressError(
            ErrorKind.UNAVAILABLE, authored, f"compressed storage names are not artifact handles; read artifact://{handle}"
        )))
    if any(_is_private(part) for part in parts):
        return Prepared("file", fail(AddressError(ErrorKind.MISSING_TARGET, authored, "is not a persisted artifact")))
    retired = parts[:1] == (EXECUTIONS,) and len(parts) == 2 and name.endswith(".log")
    path = tree.path(parts)
    node = Node(tree, parts, path, path + ".gz" if retired else None)
    return Prepared("file", later(run_node, target, node, request, authored, canonical))


async def _run_listing(target, tree: RemoteTree, request: Request, authored: str, canonical: str) -> object:
    (walked,) = await walk_roots(target, [tree], authored)
    if request.operation is Operation.READ:
        lines = [tree.address(parts) for parts, _entry in walked.files()] if walked is not None else []
        return read_listing(lines, request, authored, canonical, None if lines else EMPTY)
    scopes = [] if walked is None else [Scope(tree, (), walked=walked)]
    return await search(target, scopes, request, authored, canonical, notice=EMPTY)
