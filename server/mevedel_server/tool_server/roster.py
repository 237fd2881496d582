"""The request-time availability roster (the spec's "Prompt availability"),
given to the agent as the MCP server's ``instructions``.

It says which address families are usable now, by the same rules as
completion (:func:`mevedel_server.resources.navigation.completion.available`):
``mevedel://`` always; ``work://`` and ``artifact://`` with a session;
``history://root`` with the session's live conversation, ``history://saved``
with a workspace; ``agent://`` when the session has retained agents;
``skill://`` and ``memory://`` when roots are configured,
``mcp://`` when an MCP server is configured; ``shared://`` when the
workspace holds at least one whiteboard or document (the caller asks the
store: :func:`mevedel_server.resources.families.shared.has_items`). Families not
served yet (``memory://journal/``) are never advertised. The
roster authorises nothing: every call is still validated by the resolver.
"""

from __future__ import annotations

from ..resources import ResolverContext, address_available

HEADER = (
    "mevedel tools: Read, Glob, Grep and ApplyPatch take ordinary workspace paths (relative to the workspace root, "
    "or absolute inside it) and mevedel resource addresses. One ApplyPatch may change both."
)

#: (label, what it is, operations), in the order the roster lists them.
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("mevedel://", "mevedel's packaged documentation", "Read, Glob, Grep"),
    ("work://", "this session's working files (work://PATH)", "Read, Glob, Grep, ApplyPatch"),
    (
        "work://shared/",
        "the workspace's shared working notes, drafts and handoffs: search before creating, update what exists",
        "Read, Glob, Grep, ApplyPatch",
    ),
    ("artifact://", "this session's persisted tool output (oversized results are saved here)", "Read, Glob, Grep"),
    ("history://root", "this session's conversation so far, as Markdown", "Read, Grep"),
    ("history://saved", "saved conversations of this workspace", "Read, Glob, Grep"),
    ("agent://", "this session's retained agents (agent://root/NAME: the latest result of one)", "Read"),
    ("skill://", "skill packages", "Read, Glob, Grep"),
    ("memory://root", "persistent memory (topics under memory://ROOT-KEY/PATH)", "Read, Glob, Grep; ApplyPatch of explicit files"),
    ("mcp://", "resources of the configured MCP servers (mcp://SERVER lists one server's resources)", "Read"),
    (
        "shared://",
        "the workspace's whiteboards and documents by title (shared://ID is an item's hashed overview; its parts "
        "discussions, history, elements/ELEMENT); write an item through its own files with ApplyPatch",
        "Read; Grep of an item's text views",
    ),
)

_SESSION_OWNED = ("work://", "artifact://", "history://root")


def usable(context: ResolverContext, *, shared_items: bool = False) -> list[str]:
    """The labels of the families usable now, in roster order;
    ``shared_items``: the workspace holds a whiteboard or document."""
    found = []
    for label, _what, _operations in _FAMILIES:
        if label == "shared://":
            ok = shared_items
        elif label in ("skill://", "mcp://", "agent://"):
            ok = address_available(label.partition(":")[0], context)
        else:
            ok = address_available(label, context)
        if ok:
            found.append(label)
    return found


def roster(context: ResolverContext, *, shared_items: bool = False) -> str:
    """The roster text for ``context``."""
    labels = usable(context, shared_items=shared_items)
    lines = [HEADER, "", "Resource addresses available now:"]
    if context.working_directory:
        lines[1:1] = [
            f"This session works in its own Git worktree, {context.working_directory}: plain paths are relative to it and "
            "must lie inside it (never the main checkout)."
        ]
    for label, what, operations in _FAMILIES:
        if label in labels:
            lines.append(f"- {label} -- {what} ({operations})")
    session = context.session_id
    if session is None:
        lines += [
            "",
            "No session is bound, so the session-owned families (" + ", ".join(_SESSION_OWNED) + ") are not available, "
            "and ApplyPatch of project files is refused.",
        ]
    lines += [
        "",
        "A bare address (mevedel://, work://, artifact://) is a listing. Read pages long text: follow the "
        "'next page' and 'char_offset' hints it gives. Grep line numbers are Read line numbers.",
    ]
    return "\n".join(lines)
