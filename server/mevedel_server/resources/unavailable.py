"""The families whose owners mevedel-lsp does not run yet: agent://,
history://, mcp://, shared:// and memory://journal/.

Their addresses parse and validate like any other; execution answers with a
distinct unavailable (or owner-missing) error saying which owner is absent.
``history_root`` and ``history_saved`` are the entry points the session
store takes over.
"""

from __future__ import annotations

from collections.abc import Callable

from ..addresses.model import Address, AddressError, ErrorKind, Family
from .attempt import Prepared, Request
from .context import ResolverContext
from .file_operations import fail


def _unavailable(address: Address, reason: str) -> Callable[[], object]:
    return fail(AddressError(ErrorKind.UNAVAILABLE, address.authored, reason))


def _owner_missing(address: Address, reason: str) -> Callable[[], object]:
    return fail(AddressError(ErrorKind.OWNER_MISSING, address.authored, reason))


def agent(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if context.session_dir is None:
        return Prepared("virtual", _owner_missing(address, "no session is open; agent:// results belong to the open session"))
    return Prepared(
        "virtual", _unavailable(address, "no retained agents: the session has no agent runtime in mevedel-lsp yet")
    )


def history_root(address: Address, request: Request, context: ResolverContext) -> Prepared:
    """Bare history:// and history://root[/PATH]: the live conversations."""
    if context.session_dir is None:
        return Prepared(
            "virtual", _owner_missing(address, "no session is open; history://root belongs to the open session")
        )
    return Prepared(
        "virtual",
        _unavailable(address, "no live conversation: mevedel-lsp does not serve session history yet"),
    )


def history_saved(address: Address, request: Request, context: ResolverContext) -> Prepared:
    """history://saved[/SESSION[/SEGMENT]]: saved conversations of the workspace."""
    if context.workspace_root is None:
        return Prepared(
            "virtual", _owner_missing(address, "no workspace is open; history://saved lists the workspace's sessions")
        )
    return Prepared(
        "virtual",
        _unavailable(address, "saved conversations are not readable yet: mevedel-lsp has no session store"),
    )


def mcp(address: Address, request: Request, context: ResolverContext) -> Prepared:
    return Prepared("virtual", _unavailable(address, "no MCP server is configured"))


def shared(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if context.session_dir is None:
        return Prepared("virtual", _owner_missing(address, "no session is open; shared:// items belong to the open session"))
    return Prepared(
        "virtual",
        _unavailable(address, "no shared whiteboards or documents: mevedel-lsp has no shared-editing host yet"),
    )


def journal(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if context.workspace_root is None:
        return Prepared(
            "virtual", _owner_missing(address, "no workspace is open; memory://journal/ belongs to the workspace")
        )
    return Prepared(
        "virtual", _unavailable(address, "no published journal entries: mevedel-lsp does not publish a journal yet")
    )


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if address.family is Family.AGENT:
        return agent(address, request, context)
    if address.family is Family.HISTORY:
        if address.scope == "saved":
            return history_saved(address, request, context)
        return history_root(address, request, context)
    if address.family is Family.MCP:
        return mcp(address, request, context)
    if address.family is Family.SHARED:
        return shared(address, request, context)
    if address.family is Family.JOURNAL:
        return journal(address, request, context)
    raise AddressError(ErrorKind.INTERNAL, address.authored, f"{address.family.value} is not an unavailable family")
