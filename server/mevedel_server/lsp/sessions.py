"""The session and turn requests (``mevedel/session/*``, ``mevedel/turn/*``)
and their ``workspace/executeCommand`` commands. Each is thin: decode params,
find the folder's session service, call it, encode the result. Store
refusals become ResponseErrors whose ``data.kind`` is the service's stable
kind; a takeover of an expired foreign lease is asked through
``window/showMessageRequest``."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from mevedel_protocol import converter, methods
from mevedel_protocol import session as wire
from pygls.exceptions import JsonRpcException

from ..addresses import parse_address
from ..store import TakeoverNeedsConfirmation
from ..store.service import (
    EvidenceInput,
    SaveResult,
    SegmentRotation,
    SessionInfo,
    SessionService,
    TurnDetail,
    TurnSummary,
    error_kind,
    is_refusal,
)
from .errors import failure, internal_failure, structure_params
from .session_registry import SessionRegistry
from .virtual_documents import format_uri
from .workspaces import Folder, folder_for_document, folder_for_uri

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

TAKE_OVER = "Take over"
CANCEL = "Cancel"
TRANSCRIPT = parse_address("history://root")


def transcript_uri(folder: Folder, session_id: str) -> str:
    """The virtual document of the session's live transcript (``history://root``)."""
    return format_uri(TRANSCRIPT, folder.key, session_id)


def _registry(ls: MevedelLanguageServer) -> SessionRegistry:
    assert ls.sessions is not None
    return ls.sessions


def _folder(ls: MevedelLanguageServer, workspace_folder: str | None, method: str) -> Folder:
    folder = folder_for_uri(ls, workspace_folder) if workspace_folder is not None else folder_for_document(ls, None)
    if folder is None:
        raise failure("owner-missing", method, "no workspace folder is open; sessions belong to a workspace")
    return folder


def _session_id(ls: MevedelLanguageServer, folder: Folder, given: str | None, method: str) -> str:
    if given is not None:
        return given
    current = ls.current_session(folder)
    if current is None:
        raise failure("owner-missing", method, "no session is current in this workspace folder; create or open one")
    return current


def _state(ls: MevedelLanguageServer, folder: Folder, info: SessionInfo) -> wire.SessionState:
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


def _saved(result: SaveResult, turn: int | None = None) -> wire.SaveResult:
    return wire.SaveResult(result.session_id, result.committed, result.materialized, turn, result.note)


def _summary(summary: TurnSummary) -> wire.TurnSummary:
    return wire.TurnSummary(
        turn=summary.turn,
        turn_id=summary.turn_id,
        segment=summary.segment,
        prompt=summary.preview,
        state=summary.state,
        began_at=summary.began_at,
        tool_calls=summary.tool_calls,
        reminder=summary.reminder,
        settled_at=summary.settled_at,
        reason=summary.reason,
    )


def _detail(session_id: str, detail: TurnDetail) -> wire.TurnShowResult:
    items = [
        wire.TurnItem(
            kind=item.kind,
            text=item.text,
            call_id=item.call_id,
            name=item.name,
            arguments=item.arguments,
            output=item.output,
            is_error=item.is_error,
            mail_id=item.mail_id,
            sender=item.sender,
        )
        for item in detail.items
    ]
    return wire.TurnShowResult(session_id, _summary(detail.summary), detail.prompt, items, detail.markdown)


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
                if is_refusal(error):
                    raise _refusal(error, method) from None
                _log.exception("unexpected error in %s", method)
                raise internal_failure(method) from None

        return answered

    return decorate


def _refusal(error: Exception, method: str) -> JsonRpcException:
    """A refusal names what the user authored (an input with ``authored``
    and ``reason``), else the session it is about, else the method."""
    authored = getattr(error, "authored", None)
    if isinstance(authored, str) and isinstance(getattr(error, "reason", None), str):
        return failure(error_kind(error), authored, error.reason)
    return failure(error_kind(error), getattr(error, "session_id", None) or method, str(error))


# Handlers (params already decoded) -------------------------------------------------


async def list_sessions(ls: MevedelLanguageServer, params: wire.SessionListParams) -> wire.SessionListResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_LIST)
    listing = await _registry(ls).service(folder).list()
    current = ls.current_session(folder)
    sessions = [
        wire.SessionListEntry(
            session_id=row.session_id,
            display_name=row.display_name,
            action=row.action.value,
            turns=row.turn_count,
            updated_at=row.updated_at,
            lease=row.standing.value,
            published=row.published,
            current=row.session_id == current,
            latest_prompt=row.latest_preview,
            holder_host=row.holder_host,
        )
        for row in listing.rows
    ]
    inspect = [
        wire.InspectEntry(row.name, row.subject.value, row.reason, row.kind.value if row.kind else None)
        for row in listing.inspect_rows
    ]
    return wire.SessionListResult(sessions, inspect)


async def create_session(ls: MevedelLanguageServer, params: wire.SessionCreateParams) -> wire.SessionState:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CREATE)
    info = await _registry(ls).service(folder).create(params.name)
    _registry(ls).make_current(folder, info.session_id)
    return _state(ls, folder, info)


async def open_session(ls: MevedelLanguageServer, params: wire.SessionOpenParams) -> wire.SessionOpenResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_OPEN)
    service = _registry(ls).service(folder)
    try:
        opened = await service.open(params.session_id, params.mode, confirm_takeover=params.confirm_takeover)
    except TakeoverNeedsConfirmation as asked:
        if not await _confirm_takeover(ls, asked):
            raise failure("takeover-declined", params.session_id, f"{asked}; the takeover was not confirmed") from None
        opened = await service.open(params.session_id, "takeover", confirm_takeover=True)
    _registry(ls).make_current(folder, opened.info.session_id)
    return wire.SessionOpenResult(_state(ls, folder, opened.info), opened.action, opened.interrupted_turn)


async def _confirm_takeover(ls: MevedelLanguageServer, asked: TakeoverNeedsConfirmation) -> bool:
    holder = asked.holder_host or "another client"
    question = types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=(
            f"Session {asked.session_id} was held by {holder}, whose lease expired. "
            "A write may still be in flight there: take it over only if that client has stopped."
        ),
        actions=[types.MessageActionItem(title=TAKE_OVER), types.MessageActionItem(title=CANCEL)],
    )
    # An open request must not wait forever on a question nobody sees.
    waiting = ls.settings.control_transfer.prompt_timeout_seconds
    try:
        answer = await asyncio.wait_for(ls.window_show_message_request_async(question), waiting)
    except asyncio.TimeoutError:
        _log.info("session %s: the takeover question had no answer within %s s: Cancel", asked.session_id, waiting)
        return False
    except Exception as error:  # an error answer is no consent
        _log.info("session %s: the takeover question was answered with an error (%s): Cancel", asked.session_id, error)
        return False
    # Only an explicit Take over consents; null (dismissed) or anything else is Cancel.
    title = answer.get("title") if isinstance(answer, dict) else getattr(answer, "title", None)
    return title == TAKE_OVER


async def close_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SessionCloseResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CLOSE)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_CLOSE)
    result = await _registry(ls).service(folder).close(sid)
    _registry(ls).forget(folder, sid)
    return wire.SessionCloseResult(sid, bool(result and result.committed))


async def rename_session(ls: MevedelLanguageServer, params: wire.SessionRenameParams) -> wire.SessionState:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_RENAME)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_RENAME)
    return _state(ls, folder, await _registry(ls).service(folder).rename(sid, params.name))


async def save_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_SAVE)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_SAVE)
    return _saved(await _registry(ls).service(folder).save(sid))


async def retry_publication(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_RETRY_PUBLICATION)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_RETRY_PUBLICATION)
    return _saved(await _registry(ls).service(folder).retry_publication(sid))


async def abandon_publication(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.AbandonResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_ABANDON_PUBLICATION)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_ABANDON_PUBLICATION)
    return wire.AbandonResult(sid, _registry(ls).service(folder).abandon_publication(sid))


def _rotation(rotation: SegmentRotation) -> wire.SegmentRotationResult:
    return wire.SegmentRotationResult(
        rotation.session_id, rotation.segment, rotation.previous_segment, rotation.save.committed, rotation.chapter
    )


async def compact_session(ls: MevedelLanguageServer, params: wire.SessionCompactParams) -> wire.SegmentRotationResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_COMPACT)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_COMPACT)
    return _rotation(await _registry(ls).service(folder).compact(sid, params.summary))


async def clear_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SegmentRotationResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CLEAR)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_CLEAR)
    return _rotation(await _registry(ls).service(folder).clear(sid))


def _turn_target(ls: MevedelLanguageServer, params: Any, method: str) -> tuple[SessionService, str]:
    folder = _folder(ls, params.workspace_folder, method)
    return _registry(ls).service(folder), _session_id(ls, folder, params.session_id, method)


async def begin_turn(ls: MevedelLanguageServer, params: wire.TurnBeginParams) -> wire.TurnBeginResult:
    service, sid = _turn_target(ls, params, methods.TURN_BEGIN)
    started = await service.begin_turn(sid, params.prompt)
    return wire.TurnBeginResult(sid, started.turn, started.turn_id, started.reminder)


async def capture_file(ls: MevedelLanguageServer, params: wire.TurnCaptureParams) -> wire.TurnCaptureResult:
    service, sid = _turn_target(ls, params, methods.TURN_CAPTURE)
    captured = await service.capture_file(sid, params.path, gap=params.gap)
    return wire.TurnCaptureResult(captured.path, captured.state, captured.size, captured.gap_reason)


async def append_record(ls: MevedelLanguageServer, params: wire.TurnAppendParams) -> wire.TurnAppendResult:
    service, sid = _turn_target(ls, params, methods.TURN_APPEND)
    item = EvidenceInput(
        kind=params.kind,
        text=params.text,
        call_id=params.call_id,
        name=params.name,
        arguments=params.arguments,
        output=params.output,
        is_error=params.is_error,
        mail_id=params.mail_id,
        sender=params.sender,
    )
    await service.append(sid, item)
    turn = service.info(sid).open_turn
    assert turn is not None
    return wire.TurnAppendResult(sid, turn, params.kind)


async def settle_turn(ls: MevedelLanguageServer, params: wire.TurnSettleParams) -> wire.SaveResult:
    service, sid = _turn_target(ls, params, methods.TURN_SETTLE)
    turn = service.info(sid).open_turn
    return _saved(await service.settle(sid, params.outcome, reason=params.reason), turn)


async def abort_turn(ls: MevedelLanguageServer, params: wire.TurnAbortParams) -> wire.SaveResult:
    service, sid = _turn_target(ls, params, methods.TURN_ABORT)
    turn = service.info(sid).open_turn
    return _saved(await service.abort(sid, params.reason), turn)


async def list_turns(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.TurnListResult:
    service, sid = _turn_target(ls, params, methods.TURN_LIST)
    return wire.TurnListResult(sid, [_summary(t) for t in await service.turns(sid)])


async def show_turn(ls: MevedelLanguageServer, params: wire.TurnShowParams) -> wire.TurnShowResult:
    service, sid = _turn_target(ls, params, methods.TURN_SHOW)
    return _detail(sid, await service.turn(sid, params.turn))


#: request -> (params class, handler, command name or None).
HANDLERS: dict[str, tuple[type, Callable[..., Awaitable[Any]], str | None]] = {
    methods.SESSION_LIST: (wire.SessionListParams, list_sessions, None),
    methods.SESSION_CREATE: (wire.SessionCreateParams, create_session, methods.COMMAND_SESSION_CREATE),
    methods.SESSION_OPEN: (wire.SessionOpenParams, open_session, methods.COMMAND_SESSION_OPEN),
    methods.SESSION_CLOSE: (wire.SessionParams, close_session, methods.COMMAND_SESSION_CLOSE),
    methods.SESSION_RENAME: (wire.SessionRenameParams, rename_session, methods.COMMAND_SESSION_RENAME),
    methods.SESSION_SAVE: (wire.SessionParams, save_session, methods.COMMAND_SESSION_SAVE),
    methods.SESSION_RETRY_PUBLICATION: (
        wire.SessionParams,
        retry_publication,
        methods.COMMAND_SESSION_RETRY_PUBLICATION,
    ),
    methods.SESSION_ABANDON_PUBLICATION: (
        wire.SessionParams,
        abandon_publication,
        methods.COMMAND_SESSION_ABANDON_PUBLICATION,
    ),
    methods.SESSION_COMPACT: (wire.SessionCompactParams, compact_session, methods.COMMAND_SESSION_COMPACT),
    methods.SESSION_CLEAR: (wire.SessionParams, clear_session, methods.COMMAND_SESSION_CLEAR),
    methods.TURN_BEGIN: (wire.TurnBeginParams, begin_turn, methods.COMMAND_TURN_BEGIN),
    methods.TURN_CAPTURE: (wire.TurnCaptureParams, capture_file, methods.COMMAND_TURN_CAPTURE),
    methods.TURN_APPEND: (wire.TurnAppendParams, append_record, methods.COMMAND_TURN_APPEND),
    methods.TURN_SETTLE: (wire.TurnSettleParams, settle_turn, methods.COMMAND_TURN_SETTLE),
    methods.TURN_ABORT: (wire.TurnAbortParams, abort_turn, methods.COMMAND_TURN_ABORT),
    methods.TURN_LIST: (wire.SessionParams, list_turns, None),
    methods.TURN_SHOW: (wire.TurnShowParams, show_turn, None),
}


def _request_handler(method: str, params_type: type, handler: Callable[..., Awaitable[Any]]):
    @answers_session_errors(method)
    async def request(ls, raw):  # type: ignore[no-untyped-def]
        return await handler(ls, structure_params(raw, params_type, method))

    return request


def _command_handler(command: str, params_type: type, handler: Callable[..., Awaitable[Any]]):
    # No annotations: pygls evaluates a command handler's type hints at call time.
    @answers_session_errors(command)
    async def run(ls, *arguments):  # type: ignore[no-untyped-def]
        if len(arguments) != 1:
            raise failure(
                "invalid-params", command, f"takes exactly one argument (the request's params), got {len(arguments)}"
            )
        return await handler(ls, structure_params(arguments[0], params_type, command))

    return run


def register(ls: MevedelLanguageServer) -> None:
    ls.sessions = SessionRegistry(ls)
    for method, (params_type, handler, command) in HANDLERS.items():
        ls.feature(method)(_request_handler(method, params_type, handler))
        if command is not None:
            ls.command(command)(_command_handler(command, params_type, handler))

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: MevedelLanguageServer, *_args: Any) -> None:
        try:
            await _registry(ls).close_all()
        except Exception:  # shutting down must not fail on one session
            _log.exception("closing sessions at shutdown")
