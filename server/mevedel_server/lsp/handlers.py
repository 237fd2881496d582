"""What the session feature modules share: finding a request's folder,
session service and session, the wire form of a session's state, the
takeover question, a new session beside a held one, and the request and command handlers that decode
params and turn store refusals into ResponseErrors with their stable kind.

``sessions.py`` (``mevedel/session/*``, ``mevedel/turn/*``),
``lifecycle.py``, ``control.py``, ``follow.py`` and ``agents.py`` import
these public names from here, and none of them from another.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcException

from mevedel_protocol import converter
from mevedel_protocol.catalog import COMMANDS, REQUESTS

from .. import store
from ..addresses import parse_address
from ..loading import OnFirstUse
from .errors import failure, internal_failure, structure_params
from .questions import consents
from .virtual_documents import format_uri
from .workspaces import Folder, folder_for_document, folder_for_uri

if TYPE_CHECKING:
    from ..store import (
        IdentityNeedsConfirmation,
        SessionInfo,
        SessionService,
        TakeoverNeedsConfirmation,
    )
    from .server import MevedelLanguageServer
    from .session_registry import SessionRegistry

_log = logging.getLogger(__name__)

TAKE_OVER = "Take over"
BIND_HERE = "Bind here"
START_ANYWAY = "Start anyway"
CANCEL = "Cancel"
TRANSCRIPT = parse_address("history://root")

wire = OnFirstUse("mevedel_protocol.session")


def transcript_uri(folder: Folder, session_id: str) -> str:
    """The virtual document of the session's live transcript (``history://root``)."""
    return format_uri(TRANSCRIPT, folder.key, session_id)


def registry(ls: MevedelLanguageServer) -> SessionRegistry:
    assert ls.sessions is not None
    return ls.sessions


def folder(ls: MevedelLanguageServer, workspace_folder: str | None, method: str) -> Folder:
    """The request's workspace folder (``owner-missing`` when none is open)."""
    found = folder_for_uri(ls, workspace_folder) if workspace_folder is not None else folder_for_document(ls, None)
    if found is None:
        raise failure("owner-missing", method, "no workspace folder is open; sessions belong to a workspace")
    return found


def session_id(ls: MevedelLanguageServer, folder: Folder, given: str | None, method: str) -> str:
    """The session a request names, else the folder's current one."""
    if given is not None:
        return given
    current = ls.current_session(folder)
    if current is None:
        raise failure("owner-missing", method, "no session is current in this workspace folder; create or open one")
    return current


def state(ls: MevedelLanguageServer, folder: Folder, info: SessionInfo) -> wire.SessionState:
    """A session's state as the wire carries it."""
    return wire.SessionState(
        session_id=info.session_id,
        display_name=info.display_name,
        named=info.named,
        access=info.access.value,
        materialized=info.materialized,
        settled_turns=info.settled_turns,
        reconciliation_pending=info.reconciliation_pending,
        current=ls.current_session(folder) == info.session_id,
        transcript_uri=transcript_uri(folder, info.session_id),
        read_only_reason=info.read_only_reason,
        holder_host=info.holder_host,
        open_turn=info.open_turn,
        pending_publication=info.pending_publication,
        recovery_pending=info.recovery_pending,
    )


async def confirm_takeover(ls: MevedelLanguageServer, asked: TakeoverNeedsConfirmation) -> bool:
    """Ask the user whether to take over a session whose holder's lease
    expired or whose holder process ended; only an explicit Take over
    consents."""
    holder = asked.holder_host or "another client"
    question = (
        f"Session {asked.session_id} was held by {holder}, whose process on this machine has ended. Take it over?"
        if asked.holder_ended
        else f"Session {asked.session_id} was held by {holder}, whose lease expired. "
        "A write may still be in flight there: take it over only if that client has stopped."
    )
    return await consents(
        ls,
        question,
        TAKE_OVER,
        CANCEL,
        ls.settings.control_transfer.prompt_timeout_seconds,
        f"session {asked.session_id}: the takeover question",
    )


async def confirm_identity(ls: MevedelLanguageServer, asked: IdentityNeedsConfirmation) -> bool:
    """Ask the user whether to bind a session made in another workspace (a
    copied session directory) to this one; only an explicit Bind here
    consents."""
    return await consents(
        ls,
        f"Session {asked.session_id} was made in another workspace (it was copied here?). "
        "Bind it to this workspace? Its next save records this workspace, and its agent starts a new conversation.",
        BIND_HERE,
        CANCEL,
        ls.settings.control_transfer.prompt_timeout_seconds,
        f"session {asked.session_id}: the identity question",
    )


async def start_session(ls: MevedelLanguageServer, service: SessionService, method: str, name: str | None = None) -> SessionInfo:
    """A new session of ``service``'s folder. While another session of the
    workspace is held (open or joined here, or another client's live lease),
    the user is told that both share the project's files and pointed to a
    Worktree Fork, once per server process: only ``Start anyway`` starts it,
    and keeps this process from asking again; anything else (Cancel, a
    dismissal, an error answer, no answer within
    ``controlTransfer.promptTimeoutSeconds``) refuses the request with
    ``beside-held-declined``, nothing written, and leaves the advisory to be
    asked next time."""
    try:
        return await service.sessions.create(name, warn_beside_held=not ls.beside_held_accepted)
    except store.BesideHeld as asked:
        said = asked.said[0].upper() + asked.said[1:]
        if not await consents(
            ls,
            f"{said}. Start a new session anyway?",
            START_ANYWAY,
            CANCEL,
            ls.settings.control_transfer.prompt_timeout_seconds,
            "the question whether to start a session beside a held one",
        ):
            raise failure("beside-held-declined", method, f"{asked.said}; no new session was started") from None
    ls.beside_held_accepted = True
    return await service.sessions.create(name)


def answers_session_errors(method: str) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Store and target refusals as ResponseErrors with their stable kind,
    anything unexpected as ``internal`` (logged)."""

    def decorate(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(handler)
        async def answered(ls: Any, *args: Any) -> Any:
            try:
                return converter.unstructure(await handler(ls, *args))
            except JsonRpcException:
                raise
            except Exception as error:
                if store.is_refusal(error):
                    raise refusal(error, method) from None
                _log.exception("unexpected error in %s", method)
                raise internal_failure(method) from None

        return answered

    return decorate


def refusal(error: Exception, method: str) -> JsonRpcException:
    """A refusal names the session it is about with its words (a
    :class:`~..store.SessionRefusal`), else what the user authored (an input
    with ``authored`` and ``reason``), else the method."""
    kind = store.error_kind(error)
    if isinstance(error, store.SessionRefusal):
        return failure(kind, error.session_id, error.said)
    authored = getattr(error, "authored", None)
    if isinstance(authored, str) and isinstance(getattr(error, "reason", None), str):
        return failure(kind, authored, error.reason)
    return failure(kind, method, str(error))


def request_handler(method: str, handler: Callable[..., Awaitable[Any]]):
    """The pygls handler of a request: params decoded as the catalog's
    class for ``method`` (imported at the first call), refusals out as
    errors."""

    @answers_session_errors(method)
    async def request(ls, raw):  # type: ignore[no-untyped-def]
        return await handler(ls, structure_params(raw, REQUESTS[method].params, method))

    return request


def command_handler(command: str, handler: Callable[..., Awaitable[Any]]):
    """The pygls handler of a ``workspace/executeCommand`` command taking
    the params of the request it runs (``COMMANDS``) as its one argument."""

    # No annotations: pygls evaluates a command handler's type hints at call time.
    @answers_session_errors(command)
    async def run(ls, *arguments):  # type: ignore[no-untyped-def]
        if len(arguments) != 1:
            raise failure(
                "invalid-params", command, f"takes exactly one argument (the request's params), got {len(arguments)}"
            )
        return await handler(ls, structure_params(arguments[0], REQUESTS[COMMANDS[command]].params, command))

    return run


def register_handlers(ls: MevedelLanguageServer, table: dict[str, tuple[Callable[..., Awaitable[Any]], str | None]]) -> None:
    """Each request of ``table`` (request -> (handler, command or None)),
    and its command, registered with pygls."""
    for method, (handler, command) in table.items():
        ls.feature(method)(request_handler(method, handler))
        if command is not None:
            ls.command(command)(command_handler(command, handler))
