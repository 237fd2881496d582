"""Composer completion for resource addresses.

Scheme prefixes come first; once a scheme is typed only that scheme's
metadata is consulted. Directory descendants come from one ``os.scandir`` of
the directory being typed into (names and entry types only, never file
content), filtered by the typed name prefix, sorted, and cut at the limit.
The directory is opened component by component from its target's root
without following a symbolic link, and links are never offered, as no walk
lists one (:mod:`.local_paths`); a directory on an SSH workspace offers
nothing. Completion never creates storage, reads content, binds, or
connects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ...addresses import SCHEMES, AddressError, encode_component, parse_address
from ..engine.context import ResolverContext
from ..engine.local_paths import open_directory
from ..engine.places import Places
from ..engine.tree import Node, Tree
from ..families import artifact, mcp, memory, mevedel_docs, shared, skill, work
from .directory_index import DirectoryIndex

CandidateKind = Literal["scheme", "discovery", "directory", "file", "skill", "memory-root"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """``label`` is the plain canonical text to insert."""

    label: str
    kind: CandidateKind
    detail: str
    available: bool = True


_BRANCHES: tuple[tuple[str, str], ...] = (
    ("memory://root", "union index of the configured memory roots"),
    ("memory://journal/", "published workspace journal entries"),
    ("work://shared/", "workspace shared working files"),
    ("history://root", "the session's root conversation"),
    ("history://saved", "saved conversations of this workspace"),
    ("shared://library", "shared element libraries"),
)

_SCHEME_DETAIL = {
    "work": "working files (session and workspace shared)",
    "artifact": "persisted tool output of the session",
    "skill": "skill packages",
    "agent": "retained agent results",
    "history": "conversation history",
    "memory": "persistent memory",
    "mcp": "MCP server resources",
    "shared": "shared whiteboards and documents",
    "mevedel": "packaged documentation",
}


def _has_workspace(context: ResolverContext) -> bool:
    return context.workspace_root is not None or (context.remote_workspace and context.store_target is not None)


def address_available(label: str, context: ResolverContext) -> bool:
    """Whether a scheme (``"work"``) or branch (``"history://root"``) has a
    usable surface now. Cheap, configuration-only knowledge: no directory
    is listed and nothing is read, except for ``shared``: one listing of
    the local artifact store and an item's small metadata file (cached),
    to find a whiteboard or document. The tool server's roster uses the
    same rules (:mod:`mevedel_server.tool_server.roster`; it asks the store
    itself about ``shared://``, on any target)."""
    if label == "history://root":
        return context.live_history is not None
    if label == "history://saved":
        return _has_workspace(context)
    if label == "work://shared/":
        return _has_workspace(context)
    if label == "memory://journal/":
        return False  # not served yet
    if label == "shared://library":
        return _has_workspace(context)
    if label == "memory://root":
        return bool(context.memory_roots)
    scheme = label.partition(":")[0]
    if scheme in ("work", "artifact"):
        return context.session_id is not None
    if scheme == "skill":
        return bool(context.skill_roots)
    if scheme == "memory":
        return bool(context.memory_roots)
    if scheme == "history":
        return address_available("history://root", context) or address_available("history://saved", context)
    if scheme == "mevedel":
        return True
    if scheme == "mcp":
        return context.mcp is not None and bool(context.mcp.known_servers())
    if scheme == "shared":
        return bool(shared.local_items(Places(context).workspace, limit=1))
    if scheme == "agent":
        return bool(_retained(context))
    return False


def _retained(context: ResolverContext) -> list:
    """The open session's retained agents, as its live source holds them
    (no I/O)."""
    agents = getattr(context.live_history, "agents", None)
    return list(agents()) if callable(agents) else []


def _scheme_available(scheme: str, context: ResolverContext) -> bool:
    return address_available(scheme, context)


def complete(prefix_text: str, context: ResolverContext) -> list[Candidate]:
    """Completion candidates for the address text typed so far."""
    limit = max(0, context.completion_limit)
    scheme, sep, tail = prefix_text.partition("://")
    if not sep:
        return _schemes(prefix_text.lower(), context)[:limit]
    by_scheme = {
        "work": _work,
        "artifact": _artifact,
        "mevedel": _mevedel,
        "memory": _memory,
        "skill": _skill,
        "mcp": _mcp,
        "history": _history,
        "shared": _shared,
        "agent": _agent,
    }
    handler = by_scheme.get(scheme)
    if handler is None:
        return []
    try:
        return handler(prefix_text, tail, context, limit)[:limit]
    except AddressError:
        return []


def _schemes(typed: str, context: ResolverContext) -> list[Candidate]:
    found = [
        Candidate(f"{scheme}://", "scheme", _SCHEME_DETAIL[scheme], _scheme_available(scheme, context))
        for scheme in SCHEMES
        if f"{scheme}://".startswith(typed)
    ]
    found += [
        Candidate(label, "scheme", detail, address_available(label, context))
        for label, detail in _BRANCHES
        if label.startswith(typed)
    ]
    return found


def _branches(prefix_text: str, scheme: str, context: ResolverContext) -> list[Candidate]:
    return [
        Candidate(label, "directory" if label == "work://shared/" else "discovery", detail, address_available(label, context))
        for label, detail in _BRANCHES
        if label.startswith(scheme + "://") and label.startswith(prefix_text) and label != prefix_text
    ]


def _shared(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    """``shared://library`` and the ids of the workspace's whiteboards and
    documents (their titles as detail), from the local store."""
    found = _branches(prefix_text, "shared", context)
    if "/" in tail:
        return []
    items = shared.local_items(Places(context).workspace, tail, limit - len(found))
    found += [Candidate(f"shared://{item_id}", "file", f"{title} ({kind})") for item_id, kind, title in items]
    return found


def _history(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    """``history://root``, ``history://saved`` and each retained agent's
    ``history://root/PATH`` (the open session's registry; no I/O)."""
    found = _branches(prefix_text, "history", context)
    for agent in _retained(context):
        label = f"history://root/{agent.path}"
        if label.startswith(prefix_text):
            found.append(Candidate(label, "file", f"retained agent {agent.path}'s conversation ({agent.agent})"))
    return found


def _agent(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    """``agent://root/PATH`` of each retained agent of the open session,
    in path order, with its agent and latest outcome as detail."""
    found = []
    for agent in _retained(context):
        label = f"agent://root/{agent.path}"
        if label.startswith(prefix_text):
            state = "working" if agent.activity.value == "active" else (agent.result.outcome if agent.result else "no result yet")
            found.append(Candidate(label, "file", f"{agent.agent}: {state}"))
    return found


def _split(tail: str) -> tuple[str, str]:
    head, _slash, partial = tail.rpartition("/")
    return head, partial


_INDEX = DirectoryIndex()


def _directory(
    tree: Tree,
    node_parts: tuple[str, ...],
    partial: str,
    limit: int,
    skip: frozenset[str] = frozenset(),
) -> list[Candidate]:
    """Entries of one directory whose canonical name starts with ``partial``."""
    fd = open_directory(tree.place, node_parts)
    if fd is None:
        return []
    try:
        listing = _INDEX.listing(fd)
    finally:
        os.close(fd)
    # The answer depends only on the listing and on the tree's (module-level)
    # presentation rules, so the same question on an unchanged directory is
    # answered from memory: the listing itself is replaced when it changes.
    key = (tree.base, tree.present, tree.file_filter, node_parts, partial, limit, skip)
    remembered = listing.remembered(key)
    if remembered is not None:
        return list(remembered)  # type: ignore[call-overload]
    # Children share one encoded head, and an entry's label is already its
    # canonical spelling: building each address is one concatenation.
    head = tree.base + "".join(encode_component(part) + "/" for part in node_parts)
    found: list[Candidate] = []
    for entry in listing.starting_with(partial):
        if len(found) >= limit:
            break
        if entry.name in skip:
            continue
        is_dir = entry.is_dir
        shown = tree.present(node_parts, entry.name, is_dir, listing.names)
        if shown is None:
            continue
        name = shown[0]
        if name != entry.name and not encode_component(name).startswith(partial):
            continue  # a presented (logical) name must match the typed text too
        if not is_dir and not tree.file_filter(node_parts + (name,)):
            continue
        address = head + (entry.label if name == entry.name else encode_component(name)) + ("/" if is_dir else "")
        found.append(Candidate(address, "directory" if is_dir else "file", "directory" if is_dir else "file"))
    found.sort(key=lambda candidate: candidate.label)
    listing.remember(key, tuple(found))
    return found


def _descend(node: Node, partial: str, limit: int, skip: frozenset[str] = frozenset()) -> list[Candidate]:
    return _directory(node.tree, node.parts, partial, limit, skip)


def _work(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    head, partial = _split(tail)
    places = Places(context)
    if not head:
        found = _branches(prefix_text, "work", context)
        tree = work.session_tree(places)
        if tree is not None:
            found += _directory(tree, (), partial, limit - len(found), frozenset({"shared"}))
        return found
    address = parse_address(f"work://{head}")
    return _descend(work.locate(address, places), partial, limit)


def _artifact(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    head, partial = _split(tail)
    places = Places(context)
    tree = artifact.artifact_tree(places)
    if tree is None:
        return []
    if not head:
        return _directory(tree, (), partial, limit)
    return _descend(artifact.locate(parse_address(f"artifact://{head}"), places), partial, limit)


def _mevedel(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    head, partial = _split(tail)
    places = Places(context)
    tree = mevedel_docs.docs_tree(places)
    if not head:
        return _directory(tree, (), partial, limit)
    return _descend(mevedel_docs.locate(parse_address(f"mevedel://{head}"), places), partial, limit)


def _memory(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    if tail.startswith("journal/"):
        return []  # journal entries need an observed listing, which completion never makes
    if "/" not in tail:
        found = _branches(prefix_text, "memory", context)
        for keyed in memory.keyed_roots(context):
            label = f"memory://{encode_component(keyed.key)}/"
            if label.startswith(prefix_text):
                found.append(Candidate(label, "memory-root", f"{keyed.label} memory root"))
        return found
    key, _slash, rest = tail.partition("/")
    head, partial = _split(rest)
    address = parse_address(f"memory://{key}/{head}" if head else f"memory://{key}")
    return _descend(memory.locate(address, Places(context)), partial, limit)


def _skill(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    skills = skill.discover_skills(context)
    groups = skill.alias_groups(skills)
    for found in skills:
        unique = len(groups[(found.origin, found.name)]) == 1
        for base in ((found.alias,) if unique else ()) + (found.exact,):
            if prefix_text.startswith(base + "/"):
                rest = prefix_text[len(base) + 1 :]
                head, partial = _split(rest)
                address = parse_address(base + ("/" + head if head else ""))
                _skill_found, located = skill.locate(address, Places(context))
                return _descend(located, partial, limit)
    wants_exact = "@" in tail
    candidates: list[Candidate] = []
    for found in skills:
        unique = len(groups[(found.origin, found.name)]) == 1
        label = found.exact if wants_exact or not unique else found.alias
        if label.startswith(prefix_text):
            candidates.append(Candidate(label, "skill", f"{found.origin} skill {found.name}"))
    return candidates


def _mcp(prefix_text: str, tail: str, context: ResolverContext, limit: int) -> list[Candidate]:
    """Servers and resources the connections already know; never connects."""
    return [Candidate(s.label, s.kind, s.detail, s.available) for s in mcp.complete(tail, context.mcp, limit)]  # type: ignore[arg-type]
