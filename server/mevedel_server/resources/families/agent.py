"""agent:// -- the session's retained agents (the ``Agent`` tool's
sub-agents), read from its agent registry (the sidecar's ``agents``).

- ``agent://`` (Read): the retained agents' addresses in path order.
- ``agent://root/PATH[#POINTER]`` (Read): the latest settled turn's result
  -- its terminal outcome (completed, errored, interrupted), the reason and
  the whole final message (the partial one when it did not complete). An
  agent with a turn in flight answers successfully with an explicit
  ``NOT READY`` status and nothing of an earlier result; a POINTER selects
  from a result that is JSON (read-only). A path the registry does not hold,
  or an agent with no settled result yet, is unavailable.

The open session's registry is read live (unsaved changes included); a
session chosen but not open here is read from its committed publication.
Listing reads the registry alone, never a transcript.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ...addresses import Address, AddressError, ErrorKind
from ...store import (
    AgentActivity,
    RecordError,
    RetainedAgent,
    SessionIncompatible,
    SessionMissing,
    is_session_id,
    saved_session,
)
from ..engine.attempt import Prepared, Request
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing
from ..engine.options import ReadOptions
from ..engine.projection import page_lines, split_lines
from .history import store_target

LISTING = "agent://"


def _failing(error: AddressError) -> Callable[[], object]:
    async def run() -> object:
        raise error

    return run


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored = address.authored
    if context.live_history is None and context.session_id is None:
        return Prepared("virtual", _failing(AddressError(
            ErrorKind.OWNER_MISSING, authored, "no session is open; agent:// results belong to the open session")))

    async def run() -> object:
        registry = await _registry(context, authored)
        if address.scope == "listing":
            lines = [f"agent://root/{agent.path}" for agent in registry]
            notice = None if lines else "the session has no retained agents (an agent starts one with its Agent tool)"
            return read_listing(lines, request, authored, address.canonical, notice)
        return _result(address, request, registry)

    return Prepared("virtual", run)


def _result(address: Address, request: Request, registry: Sequence[RetainedAgent]) -> object:
    authored = address.authored
    path = "/".join(address.path or ())
    entry = next((agent for agent in registry if agent.path == path), None)
    if entry is None:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, f"the session has no retained agent {path}; Read agent:// lists them")
    assert isinstance(request.options, ReadOptions)
    canonical = address.canonical
    if entry.activity is AgentActivity.ACTIVE:
        lines = [
            f"NOT READY: {path} ({entry.agent}) is working on a task; its result is given once the task settles",
            "its conversation history is not yet available",
        ]
        return page_lines(lines, request.options, authored, canonical, "file")
    result = entry.result
    if result is None:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, f"retained agent {path} has no settled result yet")
    payload = result.text
    if address.pointer is not None:
        payload = _select(authored, payload, address.pointer)
    lines = [
        f"status: {result.outcome}" + (f" ({result.reason})" if result.reason else ""),
        f"agent: {entry.agent}",
        f"turn: {result.turn}",
        "",
        *split_lines(payload),
    ]
    return page_lines(lines, request.options, authored, canonical, "file")


def _select(authored: str, text: str, pointer: tuple[str, ...]) -> str:
    """The JSON value ``pointer`` names in a result that is JSON."""
    try:
        value: object = json.loads(text)
    except ValueError:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, "the result is not JSON, so a #POINTER selects nothing; Read it without one") from None
    for token in pointer:
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and (token == "0" or not token.startswith("0")) and int(token) < len(value):
            value = value[int(token)]
        else:
            raise AddressError(ErrorKind.MISSING_TARGET, authored, f"the result has no member {token!r} there")
    return json.dumps(value, ensure_ascii=False, indent=2)


async def _registry(context: ResolverContext, authored: str) -> list[RetainedAgent]:
    live = context.live_history
    agents = getattr(live, "agents", None)
    if callable(agents):
        return list(agents())
    session_id = context.session_id
    assert session_id is not None
    try:
        if not is_session_id(session_id):
            raise SessionMissing(session_id)
        saved = await saved_session(store_target(context), session_id)
    except SessionMissing:
        raise AddressError(ErrorKind.OWNER_MISSING, authored,
                           f"session {session_id} is not open in this server and is not a saved session of this workspace") from None
    except SessionIncompatible as incompatible:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, f"the saved session cannot be read: {incompatible.row.reason}") from None
    except RecordError as bad:
        raise AddressError(ErrorKind.UNREADABLE, authored, f"the saved session's records do not read: {bad}") from None
    return list(saved.sidecar.agents) if saved.sidecar is not None else []
