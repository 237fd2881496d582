"""Project paths: ordinary workspace paths beside the resource addresses.

The model-facing tools accept, besides addresses, the paths a model already
writes for the project's own files: relative to the workspace root
(``src/app.py``, ``./README.md``, ``.`` for the root) or absolute inside it.
They are not an address family: nothing is percent-encoded, results name
files by their workspace-relative path, and a path outside the workspace is
refused naming it, before any I/O.

A project path is read and written through the workspace's target with the
same containment as ``work://`` (:mod:`.places`): every directory from the
workspace root down is opened without following a symbolic link, only
regular files are opened (non-blocking, so a FIFO never blocks), and a
link met on the way is refused, never followed. A walk of the workspace
root leaves out ``.git`` and ``.mevedel`` (version-control and mevedel's
own state; an explicit path into them still reads), and an ApplyPatch may
not write below either of them, with one exception: the authored files of
the workspace artifact store, ``.mevedel/artifacts/ID/RELATIVE``
(:func:`~mevedel_server.artifacts.layout.artifact_item`; ``spec/adr-workspace-artifact-store.md``). The
store's bookkeeping (``.mevedel/artifacts/.state/``, the element library
``.mevedel/artifacts/.library/``, ``.mevedel/leases/``) and everything
else below ``.mevedel/`` stay refused. The front end tells the store about
an authored write once the patch has committed (a new id directory
creates an artifact).

For an agent's session, a relative path is relative to the session's
working directory and an absolute one must lie inside it
(``ResolverContext.working_directory``, ``Places.project``: a Worktree
Fork's checkout); ``.mevedel/...`` stays the workspace's. A project write,
like a session's ``work://`` write, needs the session held writable
(:mod:`..engine.authority`), and one patch may mix both.

Whether a string is a project path: anything without ``://`` is. A string
that has ``SCHEME://`` is an address (an unknown scheme is an error, never
a path), as the spec says for every tool input.
"""

from __future__ import annotations

import os
import posixpath
import re

from ...addresses import AddressError, ErrorKind, Operation
from ...artifacts import artifact_item
from ..engine.attempt import Prepared, Request
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing, run_node
from ..engine.places import Place, Places
from ..engine.runners import fail, later
from ..engine.search import Scope, search
from ..engine.tree import Tree, node_of, open_walks, top_lines

#: Top-level directories a project write may never touch.
PROTECTED = (".git", ".mevedel")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_project_path(text: str) -> bool:
    """Whether a tool operand is a plain workspace path (not an address)."""
    return isinstance(text, str) and _SCHEME.match(text) is None


def _hide_state(parent: tuple[str, ...], name: str, is_dir: bool, siblings: frozenset[str]) -> tuple[str, bool] | None:
    return None if not parent and is_dir and name in PROTECTED else (name, False)


class ProjectTree(Tree):
    """The workspace root, its descendants named by plain relative paths."""

    def address(self, parts: tuple[str, ...], *, is_dir: bool = False) -> str:
        if not parts:
            return "."
        text = "/".join(parts)
        return text + "/" if is_dir else text


def project_tree(places: Places, parts: tuple[str, ...] = ()) -> ProjectTree | None:
    """The tree plain ``parts`` are in: the session's working directory, or
    for ``.mevedel/...`` (mevedel's state, one per workspace) the workspace."""
    where = places.workspace if parts[:1] == (".mevedel",) else places.project
    return None if where is None else ProjectTree(where, "", present=_hide_state, label="project")


def no_workspace(authored: str) -> AddressError:
    return AddressError(ErrorKind.OWNER_MISSING, authored, "no workspace is open; a plain path is relative to the workspace root")


def _outside(authored: str, working_directory: str = "") -> AddressError:
    if working_directory:
        return AddressError(
            ErrorKind.CONTAINMENT,
            authored,
            f"is outside the session's working directory {working_directory} (its Worktree Fork's checkout); a plain path "
            "names a file there (relative to it, or absolute inside it)",
        )
    return AddressError(
        ErrorKind.CONTAINMENT,
        authored,
        "is outside the workspace; a plain path names a file of the workspace (relative to its root, or absolute inside it)",
    )


def parts_of(text: str, context: ResolverContext) -> tuple[str, ...]:
    """The components of a plain path relative to the session's working
    directory (the workspace root, or a Worktree Fork's checkout below it;
    lexically: a link is never resolved here, and the target refuses one
    later)."""
    if not isinstance(text, str):
        raise AddressError(ErrorKind.MALFORMED_ADDRESS, repr(text), "a path must be text")
    if not text.strip():
        raise AddressError(ErrorKind.MALFORMED_ADDRESS, text, "the path is empty")
    if "\0" in text or any(ord(ch) < 32 for ch in text):
        raise AddressError(ErrorKind.MALFORMED_ADDRESS, text, "a path may not contain control characters")
    if text.startswith("~"):
        raise _outside(text)
    if os.path.isabs(text) or text.startswith("/"):
        relative = next((r for root in _root_spellings(context) if (r := _below(text, root)) is not None), None)
        if relative is None:
            raise _outside(text, context.working_directory)
    else:
        relative = posixpath.normpath(text)
        if relative == ".." or relative.startswith("../"):
            raise _outside(text, context.working_directory)
    if relative in ("", "."):
        return ()
    parts = tuple(relative.split("/"))
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > 255:
            raise AddressError(ErrorKind.MALFORMED_ADDRESS, text, f"the name {part[:40]!r}... is longer than 255 bytes")
    return parts


def _root_spellings(context: ResolverContext) -> tuple[str, ...]:
    """The absolute names of the session's working directory (the workspace
    root, or a Worktree Fork's checkout below it) that an absolute plain
    path may start with, the root named as its target names it: a local
    root and its real path; an SSH workspace's root as its ``ssh://``
    address writes it on the host, a ``~/`` root as the host spelled it out
    when the target pinned it (none before: then only a relative path
    names a file). Lexical, as every check here: a link on the way is the
    target's to refuse."""
    directory = context.working_directory
    if not context.remote_workspace:
        if context.workspace_root is None:
            return ()
        root = context.workspace_root / directory if directory else context.workspace_root
        real = os.path.realpath(root)
        return (str(root),) if real == str(root) else (str(root), real)
    target = context.store_target
    for _ in range(8):  # through a fault-injecting wrapper, as git_runner_for does
        if target is None:
            return ()
        location = getattr(target, "location", None)
        if location is not None:
            written = getattr(location, "root", None)
            if not isinstance(written, str) or not written.startswith("/"):
                written = getattr(target, "absolute_root", None)
                if not isinstance(written, str) or not written.startswith("/"):
                    return ()
            return (posixpath.normpath(posixpath.join(written, directory)),)
        target = getattr(target, "inner", None)
    return ()


def _below(path: str, root: str) -> str | None:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    if path == root:
        return "."
    if root == "/":
        return path.lstrip("/")
    if not path.startswith(root + "/"):
        return None
    return path[len(root) + 1 :]


def display(parts: tuple[str, ...]) -> str:
    """The workspace-relative spelling results use."""
    return "/".join(parts) if parts else "."


def prepare(text: str, request: Request, context: ResolverContext) -> tuple[Prepared, str]:
    """A Read/Glob/Grep of a plain path, and its canonical spelling."""
    parts = parts_of(text, context)
    canonical = display(parts)
    tree = project_tree(Places(context), parts)
    if tree is None:
        return Prepared("file", fail(no_workspace(text))), canonical
    if tree.place.target is None and not tree.place.linked:
        return Prepared("file", fail(AddressError(ErrorKind.UNAVAILABLE, text, "the workspace root does not exist"))), canonical
    tree.place.require(text)
    if not parts:
        return Prepared("file", later(_run_root, tree, request, text, canonical)), canonical
    return Prepared("file", later(run_node, node_of(tree, parts), request, text, canonical)), canonical


async def _run_root(tree: ProjectTree, request: Request, authored: str, canonical: str) -> object:
    (walk,) = await open_walks([tree], authored, request.operation)
    if walk is None:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, "the workspace root does not exist")
    if request.operation is Operation.READ:
        return read_listing(top_lines(walk), request, authored, canonical)
    return await search([Scope(tree, (), walk=walk)], request, authored, canonical)


def _bookkeeping(text: str) -> AddressError:
    return AddressError(
        ErrorKind.UNSUPPORTED_OPERATION,
        text,
        "files below .mevedel/ are not project files and cannot be patched: the artifact store's bookkeeping "
        "(.mevedel/artifacts/.state/, .mevedel/artifacts/.library/, .mevedel/leases/) and mevedel's other state are "
        "read-only to the model's tools; an artifact's own files are .mevedel/artifacts/ID/FILE, and "
        "work://shared/... holds shared working notes",
    )


def writable(text: str, places: Places) -> tuple[Place, tuple[str, ...], str]:
    """Where an ApplyPatch may write a plain path: the workspace, the
    file's parts below it, and its workspace-relative path."""
    parts = parts_of(text, places.context)
    if not parts:
        raise AddressError(ErrorKind.UNSUPPORTED_OPERATION, text, "ApplyPatch needs a file path, not the workspace root")
    if parts[0] == ".mevedel" and artifact_item(parts) is None:
        raise _bookkeeping(text)
    if parts[0] == ".git":
        raise AddressError(
            ErrorKind.UNSUPPORTED_OPERATION,
            text,
            "files below .git/ are not project files and cannot be patched",
        )
    # An artifact's authored files are the workspace's, wherever the session works.
    workspace = places.workspace if parts[0] == ".mevedel" else places.project
    if workspace is None:
        raise no_workspace(text)
    workspace.require(text)
    return workspace, parts, display(parts)


__all__ = ["PROTECTED", "display", "is_project_path", "parts_of", "prepare", "project_tree", "writable"]
