"""artifact:// — a read-only view of the session's persisted tool output
(``SESSION/tool-results/``, on the workspace's target).

Retired execution logs may be stored as ``executions/NAME.log.gz``; they keep
their ``artifact://executions/NAME.log`` handle and read decompressed. The
physical ``.log.gz`` names are never handles. Names beginning with ``.`` or
ending with ``.tmp`` are private temporaries (compression in progress) and
never artifacts.
"""

from __future__ import annotations

from ...addresses import Address, AddressError, ErrorKind, Operation
from ..engine.attempt import Prepared, Request
from ..engine.containment import contain
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing, run_node
from ..engine.places import Places
from ..engine.runners import fail, later
from ..engine.search import Scope, search
from ..engine.tree import Node, Tree, all_files, node_of, open_walks
from .artifact_output import BASE, EXECUTIONS, TOOL_RESULTS

_GZ = ".log.gz"


def _is_private(name: str) -> bool:
    return name.startswith(".") or name.endswith(".tmp")


def _present(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    if _is_private(name):
        return None
    if not is_dir and name.endswith(_GZ):
        logical = name[: -len(".gz")]
        if parent == (EXECUTIONS,) and logical not in siblings:
            return logical, True
        return None
    return name, False


def artifact_tree(places: Places) -> Tree | None:
    session = places.session
    return None if session is None else Tree(session.below(TOOL_RESULTS), BASE, present=_present, label="artifacts")


def no_session(authored: str) -> AddressError:
    return AddressError(
        ErrorKind.OWNER_MISSING, authored, "no session is open; artifact:// output belongs to the open session"
    )


EMPTY = "artifact:// has no persisted output yet; oversized tool results and yielded executions appear here"


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    places = Places(context)
    tree = artifact_tree(places)
    if tree is None:
        return Prepared("file", fail(no_session(authored)))
    if address.scope == "listing":
        return Prepared("file", later(_run_listing, tree, request, authored, canonical))
    try:
        node = locate(address, places)
    except AddressError as error:
        if error.kind in (ErrorKind.UNAVAILABLE, ErrorKind.MISSING_TARGET):
            return Prepared("file", fail(error))
        raise
    return Prepared("file", later(run_node, node, request, authored, canonical))


def locate(address: Address, places: Places) -> Node:
    """The node of an explicit handle: the raw file, or a retired log's
    gzip-stored file when the raw one is absent (decided when it runs)."""
    authored = address.authored
    tree = artifact_tree(places)
    if tree is None:
        raise no_session(authored)
    parts = address.path
    name = parts[-1]
    if name.endswith(_GZ):
        raise AddressError(
            ErrorKind.UNAVAILABLE,
            authored,
            f"compressed storage names are not artifact handles; read artifact://{'/'.join(parts)[: -len('.gz')]}",
        )
    if any(_is_private(part) for part in parts):
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "is not a persisted artifact")
    path = contain(tree.place, parts, authored)
    retired = parts[:1] == (EXECUTIONS,) and len(parts) == 2 and name.endswith(".log")
    return node_of(tree, parts, path + ".gz" if retired else None)


async def _run_listing(tree: Tree, request: Request, authored: str, canonical: str) -> object:
    (walk,) = await open_walks([tree], authored, request.operation)
    if request.operation is Operation.READ:
        lines = [tree.address(parts) for parts, _entry in await all_files(walk, authored)] if walk is not None else []
        return read_listing(lines, request, authored, canonical, None if lines else EMPTY)
    scopes = [] if walk is None else [Scope(tree, (), walk=walk)]
    return await search(scopes, request, authored, canonical, notice=EMPTY)
