"""The control transfer requests (``mevedel/control/*``), their commands,
and what each side's user is told.

Thin over :class:`~..store.service.control.SessionControl` (one per
workspace folder, started with its session service). The owner's user is
asked through ``window/showMessageRequest`` (Grant / Keep); an unanswered
question is granted by the core once the prompt timeout has passed since
this server first saw the request. Every step is sent as
``mevedel/control/didChange`` and, for a person, as ``window/showMessage``:
the owner's names what it is waiting for, the requester's says it waits.
An expired foreign lease is taken over only after the same confirmation
``mevedel/session/open`` asks for.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from mevedel_protocol import converter, methods

from .. import store
from ..loading import OnFirstUse
from .errors import failure
from .handlers import (
    confirm_takeover as _confirm_takeover,
)
from .handlers import (
    folder as _folder,
)
from .handlers import (
    register_handlers,
)
from .handlers import (
    registry as _registry,
)
from .handlers import (
    session_id as _session_id,
)
from .handlers import (
    state as _state,
)
from .workspaces import Folder

if TYPE_CHECKING:
    from mevedel_protocol.session import SessionParams

    from ..store import ControlEvent, ControlStatus, SessionService
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.control")

GRANT = "Grant"
KEEP = "Keep"


def _control(ls: MevedelLanguageServer, folder: Folder) -> tuple[SessionService, store.SessionControl]:
    service = _registry(ls).service(folder)
    return service, _registry(ls).controls[folder.key]


def _target(ls: MevedelLanguageServer, params: Any, method: str) -> tuple[Folder, SessionService, store.SessionControl, str]:
    folder = _folder(ls, params.workspace_folder, method)
    service, control = _control(ls, folder)
    return folder, service, control, _session_id(ls, folder, params.session_id, method)


def _status(status: ControlStatus) -> wire.ControlStatus:
    return wire.ControlStatus(
        status.session_id, status.role, status.phase, status.owner_host, status.requester_host, status.waiting_for, status.deadline
    )


async def take(ls: MevedelLanguageServer, params: wire.ControlTakeParams) -> wire.ControlTakeResult:
    folder, service, control, sid = _target(ls, params, methods.CONTROL_TAKE)
    try:
        taken = await control.take(sid, confirm_takeover=params.confirm_takeover)
    except store.TakeoverNeedsConfirmation as asked:
        if not await _confirm_takeover(ls, asked):
            raise failure("takeover-declined", sid, f"{asked.said}; the takeover was not confirmed") from None
        taken = await control.take(sid, confirm_takeover=True)
    _registry(ls).make_current(folder, sid)
    return wire.ControlTakeResult(sid, taken.outcome, _state(ls, folder, taken.info), taken.owner_host)


async def release(ls: MevedelLanguageServer, params: SessionParams) -> wire.ControlReleaseResult:
    folder, service, control, sid = _target(ls, params, methods.CONTROL_RELEASE)
    result, info = await control.release(sid)
    return wire.ControlReleaseResult(sid, bool(result and result.committed), _state(ls, folder, info))


async def grant(ls: MevedelLanguageServer, params: SessionParams) -> wire.ControlStatus:
    _, service, control, sid = _target(ls, params, methods.CONTROL_GRANT)
    return _status(await control.grant(sid))


async def keep(ls: MevedelLanguageServer, params: SessionParams) -> wire.ControlStatus:
    _, service, control, sid = _target(ls, params, methods.CONTROL_KEEP)
    return _status(await control.keep(sid))


async def status(ls: MevedelLanguageServer, params: SessionParams) -> wire.ControlStatus:
    _, service, control, sid = _target(ls, params, methods.CONTROL_STATUS)
    return _status(control.status(sid))


HANDLERS = {
    methods.CONTROL_TAKE: (take, methods.COMMAND_CONTROL_TAKE),
    methods.CONTROL_RELEASE: (release, methods.COMMAND_CONTROL_RELEASE),
    methods.CONTROL_GRANT: (grant, methods.COMMAND_CONTROL_GRANT),
    methods.CONTROL_KEEP: (keep, methods.COMMAND_CONTROL_KEEP),
    methods.CONTROL_STATUS: (status, None),
}

# What a person is told, per phase (didChange carries every phase).
_WARNINGS = {"void", "failed"}
_SHOWN = {"draining", "released", "kept", "requested", "granted", "acquired", "rejected", "void", "failed"}


def _configure(ls: MevedelLanguageServer, control: store.SessionControl) -> None:
    settings = ls.settings
    control.configure(
        prompt_timeout=settings.control_transfer.prompt_timeout_seconds,
        fence_seconds=settings.control_transfer.fence_seconds,
        watch=store.WatchCadence.from_settings(settings.session_watch),
    )


def _event(ls: MevedelLanguageServer, folder: Folder, control: store.SessionControl, event: ControlEvent) -> None:
    params = wire.ControlDidChangeParams(
        workspace_folder=folder.uri,
        session_id=event.session_id,
        role=event.role,
        phase=event.phase,
        message=event.message,
        owner_host=event.owner_host,
        requester_host=event.requester_host,
        waiting_for=event.waiting_for,
        deadline=event.deadline,
    )
    try:
        ls.protocol.notify(methods.CONTROL_DID_CHANGE, converter.unstructure(params))
        if event.phase in _SHOWN:
            kind = types.MessageType.Warning if event.phase in _WARNINGS else types.MessageType.Info
            ls.window_show_message(types.ShowMessageParams(type=kind, message=_sentence(event.message)))
    except Exception:  # a notification that cannot be sent must not stop the transfer
        _log.exception("could not send %s", methods.CONTROL_DID_CHANGE)
    if event.role == "owner" and event.phase == "asking":
        asyncio.get_running_loop().create_task(_ask(ls, control, event), name=f"ask grant {event.session_id}")
    elif event.role == "owner":
        _withdraw(ls, control, event.session_id)


#: (control, session) -> the id of the Grant / Keep question still open.
_QUESTIONS: dict[tuple[int, str], str] = {}


def _withdraw(ls: MevedelLanguageServer, control: store.SessionControl, session_id: str) -> None:
    """The request was decided without the question (the timeout, or
    mevedel/control/grant|keep): ask the client to take its prompt down."""
    msg_id = _QUESTIONS.pop((id(control), session_id), None)
    if msg_id is not None:
        try:
            ls.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
        except Exception:
            _log.exception("could not withdraw the grant question")


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


async def _ask(ls: MevedelLanguageServer, control: store.SessionControl, event: ControlEvent) -> None:
    timeout = control.cadence.prompt_timeout
    question = types.ShowMessageRequestParams(
        type=types.MessageType.Info,
        message=(
            f"{event.requester_host or 'Another client'} asks for control of session {event.session_id}. "
            f"Grant hands it over once the work in flight is saved; without an answer it is granted in {timeout} s."
        ),
        actions=[types.MessageActionItem(title=GRANT), types.MessageActionItem(title=KEEP)],
    )
    msg_id = f"mevedel-grant-{uuid.uuid4().hex}"
    _QUESTIONS[(id(control), event.session_id)] = msg_id
    try:
        answer = await ls.protocol.send_request_async(types.WINDOW_SHOW_MESSAGE_REQUEST, question, msg_id=msg_id)
    except Exception as error:  # the client cannot ask (or it was withdrawn): the timeout decides
        _log.info("session %s: the grant question was not answered: %s", event.session_id, error)
        return
    finally:
        if _QUESTIONS.get((id(control), event.session_id)) == msg_id:
            del _QUESTIONS[(id(control), event.session_id)]
    title = answer.get("title") if isinstance(answer, dict) else getattr(answer, "title", None)
    if control.status(event.session_id).phase != "asking":
        return  # decided meanwhile (the timeout, or mevedel/control/grant|keep)
    try:
        if title == GRANT:
            await control.grant(event.session_id)
        elif title == KEEP or answer is None:
            # A dismissed question (Esc, C-g, an empty answer: null) was
            # seen by a person at this machine: Keep. Only a question
            # nobody answers is granted, at the timeout.
            await control.keep(event.session_id)
    except store.ConversationError:
        pass  # decided meanwhile
    except Exception:
        _log.exception("session %s: answering the transfer request failed", event.session_id)


def register(ls: MevedelLanguageServer) -> None:
    registry = _registry(ls)

    def attach(folder: Folder, service: SessionService) -> None:
        # The session watchers are shared with following (one per session).
        control = store.SessionControl(service, watch=lambda sid, wake: registry.follow.watch(folder, service, sid, wake))
        _configure(ls, control)
        control.on_event.append(lambda event: _event(ls, folder, control, event))
        registry.controls[folder.key] = control
        control.start()

    registry.on_service.append(attach)
    ls.on_settings_changed.append(lambda: [_configure(ls, c) for c in registry.controls.values()])
    register_handlers(ls, HANDLERS)
