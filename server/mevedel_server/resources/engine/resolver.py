"""The two-stage resolver: ``prepare`` validates and resolves without reading
content; ``execute`` runs the prepared attempt after authorisation.

``prepare`` raises AddressError for what the caller wrote wrong (malformed
address, unknown scheme, unsupported operation, bad option, traversal,
containment). Everything that depends on the current state of the world
(missing target, absent owner, unavailable family, unreadable bytes) is
raised by ``execute``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...addresses import (
    Address,
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
    parse_address,
)
from ..families import project
from .attempt import Attempt, AuthorityFacts, Prepared, Request
from .context import ResolverContext
from .options import (
    GlobOptions,
    GrepOptions,
    PatchOptions,
    ReadOptions,
    validate_glob,
    validate_grep,
    validate_read,
)
from .results import GlobResult, GrepResult, ReadResult

if TYPE_CHECKING:
    from ..patch import PatchResult


_log = logging.getLogger(__name__)

Options = ReadOptions | GlobOptions | GrepOptions | PatchOptions

#: The module of ``..families`` that prepares each family's operations,
#: imported the first time one of its addresses is prepared: a command that
#: reads ``mevedel://`` loads neither the session store's history nor the
#: artifact store nor the MCP client.
_FAMILIES: dict[Family, str] = {
    Family.WORK: "work",
    Family.ARTIFACT: "artifact",
    Family.MEVEDEL: "mevedel_docs",
    Family.MEMORY: "memory",
    Family.SKILL: "skill",
    Family.AGENT: "agent",
    Family.HISTORY: "history",
    Family.MCP: "mcp",
    Family.SHARED: "shared",
    Family.JOURNAL: "unavailable",
}


#: The families whose operations read the open session: its directory
#: (``Places.session``), its id or its live history; ``shared://`` marks the
#: items attached to it. A front end that must look its default session up
#: (the CLI lists the store for the one it holds) does so for these alone,
#: so reading ``mevedel://``, ``memory://`` or a plain path never loads the
#: session store. ApplyPatch may write a session's ``work://`` files.
SESSION_FAMILIES = frozenset({Family.WORK, Family.ARTIFACT, Family.HISTORY, Family.AGENT, Family.SHARED})


def _family(operand: str) -> Family | None:
    """The family ``operand`` addresses; None for a plain path, and for
    what does not parse (``prepare`` reports that)."""
    if project.is_project_path(operand):
        return None
    try:
        return parse_address(operand).family
    except AddressError:
        return None


def reads_session(operation: Operation, operand: str) -> bool:
    """Whether ``operation`` on ``operand`` may read the open session
    (see :data:`SESSION_FAMILIES`)."""
    return operation is Operation.APPLY_PATCH or _family(operand) in SESSION_FAMILIES


def reaches_mcp(operation: Operation, operand: str) -> bool:
    """Whether ``operation`` on ``operand`` may reach an MCP server (only
    ``mcp://`` does: the context's ``mcp`` is needed for nothing else)."""
    return operation is not Operation.APPLY_PATCH and _family(operand) is Family.MCP


def _preparer(family: Family) -> Callable[[Address, Request, ResolverContext], Prepared]:
    return importlib.import_module(f"{__package__.rpartition('.')[0]}.families.{_FAMILIES[family]}").prepare


_OPTION_TYPES = {Operation.READ: ReadOptions, Operation.GLOB: GlobOptions, Operation.GREP: GrepOptions}


def _request(operation: Operation, options: Options | None, authored: str) -> Request:
    expected = _OPTION_TYPES[operation]
    if options is None and operation is not Operation.GREP:
        options = expected()
    if not isinstance(options, expected):
        raise AddressError(
            ErrorKind.INTERNAL, authored, f"{operation.value} was called with {type(options).__name__}, not {expected.__name__}"
        )
    if isinstance(options, ReadOptions):
        validate_read(options, authored)
        return Request(operation, options)
    if isinstance(options, GlobOptions):
        return Request(operation, options, glob=validate_glob(options, authored))
    assert isinstance(options, GrepOptions)
    return Request(operation, options, grep=validate_grep(options, authored))


def prepare(operation: Operation, operand: str, options: Options | None, context: ResolverContext) -> Attempt:
    """Validate and resolve one operation; reads no resource content.

    ``operand`` is an address, or a plain workspace path (anything without
    ``SCHEME://``; :mod:`.project`)."""
    if operation is Operation.APPLY_PATCH:
        from .patch_attempt import (
            prepare_patch,  # the patch engine, for the one operation that writes
        )

        return prepare_patch(operand, options, context)
    if project.is_project_path(operand):
        return _prepare_project(operation, operand, options, context)
    address = parse_address(operand)
    address.require(operation)
    request = _request(operation, options, address.authored)
    prepared = _preparer(address.family)(address, request, context)
    facts = AuthorityFacts(
        operation=operation,
        authored=address.authored,
        canonical=address.canonical,
        family=address.family,
        locator_class=address.locator_class,
        writes=False,
        backing=prepared.backing,
    )
    return Attempt(operation, (facts,), prepared.run)


def _prepare_project(operation: Operation, operand: str, options: Options | None, context: ResolverContext) -> Attempt:
    """A Read/Glob/Grep of a plain workspace path (:mod:`.project`)."""
    request = _request(operation, options, operand)
    prepared, canonical = project.prepare(operand, request, context)
    facts = AuthorityFacts(
        operation=operation,
        authored=operand,
        canonical=canonical,
        family=None,
        locator_class=LocatorClass.EXACT,
        writes=False,
        backing=prepared.backing,
        project_path=canonical,
    )
    return Attempt(operation, (facts,), prepared.run)


async def execute(attempt: Attempt) -> ReadResult | GlobResult | GrepResult | PatchResult:
    """Run a prepared attempt once. Every family's runner is a coroutine
    function run on the event loop: its I/O is its target's programs (a
    thread hop each on this machine) and it moves large CPU work (decoding
    and searching big text) to a thread itself."""
    authored = attempt.facts[0].authored if attempt.facts else attempt.operation.value
    if attempt._spent:
        raise AddressError(ErrorKind.INTERNAL, authored, "this prepared operation was already executed")
    attempt._spent = True
    try:
        outcome = attempt._run()
        return await outcome if inspect.isawaitable(outcome) else outcome
    except AddressError:
        raise
    except Exception as error:
        _log.exception("internal error executing %r", attempt)
        raise AddressError(
            ErrorKind.INTERNAL, authored, f"internal error during {attempt.operation.value} ({type(error).__name__})"
        ) from None
