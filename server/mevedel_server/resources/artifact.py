"""artifact:// — a read-only view of the session's persisted tool output
(``SESSION/tool-results/``).

Retired execution logs may be stored as ``executions/NAME.log.gz``; they keep
their ``artifact://executions/NAME.log`` handle and read decompressed. The
physical ``.log.gz`` names are never handles. Names beginning with ``.`` or
ending with ``.tmp`` are private temporaries (compression in progress) and
never artifacts.
"""

from __future__ import annotations

from ..addresses.model import Address, AddressError, ErrorKind, Operation
from .attempt import Prepared, Request
from .containment import contain
from .context import ResolverContext
from .file_operations import fail, read_listing, run_located, search
from .tree import Located, SearchScope, Tree

BASE = "artifact://"
EXECUTIONS = "executions"
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


def artifact_tree(context: ResolverContext) -> Tree | None:
    root = context.tool_results
    return None if root is None else Tree(root, BASE, present=_present, label="artifacts")


def no_session(authored: str) -> AddressError:
    return AddressError(
        ErrorKind.OWNER_MISSING, authored, "no session is open; artifact:// output belongs to the open session"
    )


EMPTY = "artifact:// has no persisted output yet; oversized tool results and yielded executions appear here"


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if context.remote_workspace:
        from . import remote_artifact

        return remote_artifact.prepare(address, request, context)
    authored, canonical = address.authored, address.canonical
    tree = artifact_tree(context)
    if tree is None:
        return Prepared("file", fail(no_session(authored)))
    if address.scope == "listing":
        return Prepared("file", lambda: _run_listing(tree, request, authored, canonical))
    try:
        node = locate(address, context)
    except AddressError as error:
        if error.kind in (ErrorKind.UNAVAILABLE, ErrorKind.MISSING_TARGET):
            return Prepared("file", fail(error))
        raise
    return Prepared("file", lambda: run_located(request, _current(node, authored), authored, canonical))


def locate(address: Address, context: ResolverContext) -> Located:
    """The contained node of an explicit handle (raw file preferred to gzip)."""
    authored = address.authored
    tree = artifact_tree(context)
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
    raw = contain(tree.root, parts, authored)
    node = Located(tree, parts, raw)
    if parts[:1] == (EXECUTIONS,) and len(parts) == 2 and name.endswith(".log") and not raw.path.exists():
        gz = contain(tree.root, parts[:-1] + (name + ".gz",), authored)
        if gz.path.is_file():
            return Located(tree, parts, gz, compressed=True)
    return node


def _current(node: Located, authored: str) -> Located:
    """Recheck raw-vs-gzip at execution: a log may be retired meanwhile."""
    if node.compressed or node.path.exists() or node.parts[:1] != (EXECUTIONS,) or len(node.parts) != 2:
        return node
    gz = contain(node.tree.root, node.parts[:-1] + (node.parts[-1] + ".gz",), authored)
    return Located(node.tree, node.parts, gz, compressed=True) if gz.path.is_file() else node


def _run_listing(tree: Tree, request: Request, authored: str, canonical: str) -> object:
    if request.operation is Operation.READ:
        lines = [tree.address(parts) for parts, _entry in tree.walk_files(tree.root, ())] if tree.exists() else []
        return read_listing(lines, request, authored, canonical, None if lines else EMPTY)
    scopes = [SearchScope(tree, (), tree.root)] if tree.exists() else []
    return search(scopes, request, authored, canonical, notice=EMPTY)
