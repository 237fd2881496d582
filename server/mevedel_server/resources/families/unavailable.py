"""The family whose owner mevedel-lsp does not run yet: memory://journal/
(agent:// is served by ``agent.py``, history:// by ``history.py``, mcp:// by
``mcp.py``, shared:// by ``shared.py``).

Their addresses parse and validate like any other; execution answers with a
distinct unavailable (or owner-missing) error saying which owner is absent.
"""

from __future__ import annotations

from collections.abc import Callable

from ...addresses import Address, AddressError, ErrorKind, Family
from ..engine.attempt import Prepared, Request
from ..engine.context import ResolverContext
from ..engine.runners import fail


def _unavailable(address: Address, reason: str) -> Callable[[], object]:
    return fail(AddressError(ErrorKind.UNAVAILABLE, address.authored, reason))


def _owner_missing(address: Address, reason: str) -> Callable[[], object]:
    return fail(AddressError(ErrorKind.OWNER_MISSING, address.authored, reason))


def journal(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if context.workspace_root is None:
        return Prepared(
            "virtual", _owner_missing(address, "no workspace is open; memory://journal/ belongs to the workspace")
        )
    return Prepared(
        "virtual", _unavailable(address, "no published journal entries: mevedel-lsp does not publish a journal yet")
    )


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if address.family is Family.JOURNAL:
        return journal(address, request, context)
    raise AddressError(ErrorKind.INTERNAL, address.authored, f"{address.family.value} is not an unavailable family")
