"""``mevedel/queue/*``: queued prompts and steering of a folder's sessions
(the engine's :class:`~mevedel_server.agents.prompt_queue.PromptQueue`),
and ``mevedel/queue/didChange`` whenever a session's queue changes here.
Thin: params in, the queue's answer out, its refusals as errors."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mevedel_protocol import converter, methods

from ..agents import AgentError
from ..loading import OnFirstUse
from .errors import failure
from .handlers import folder as _folder
from .handlers import register_handlers
from .handlers import registry as _registry
from .input_history import tell_recorded
from .workspaces import Folder

if TYPE_CHECKING:
    from ..agents import PromptQueue, QueueEntry, QueueState
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.queue")


def entry(found: QueueEntry) -> wire.QueueEntry:
    return wire.QueueEntry(
        entry_id=found.entry_id, kind=found.kind, state=found.state, text=found.text, queued_at=found.queued_at,
        host=found.host, agent=found.agent, attachments=list(found.attachments), reason=found.reason,
    )


def state(found: QueueState) -> wire.QueueState:
    return wire.QueueState(found.session_id, [entry(e) for e in found.entries], found.paused, list(found.problems))


def notify(ls: MevedelLanguageServer, folder: Folder, found: QueueState) -> None:
    params = wire.QueueDidChangeParams(folder.uri, found.session_id, [entry(e) for e in found.entries], found.paused, list(found.problems))
    try:
        ls.protocol.notify(methods.QUEUE_DID_CHANGE, converter.unstructure(params))
    except Exception:  # a lost notification must not lose the entry
        _log.exception("could not send %s", methods.QUEUE_DID_CHANGE)


def _queue(ls: MevedelLanguageServer, params: Any, method: str) -> tuple[PromptQueue, str]:
    folder = _folder(ls, params.workspace_folder, method)
    registry = _registry(ls)
    session_id = params.session_id or registry.current(folder)
    if session_id is None:
        raise failure("owner-missing", "the folder", "has no current session; open or prompt one first")
    if not registry.service(folder).is_open(session_id):
        raise failure("owner-missing", session_id, "is not open here; open it (mevedel/session/open) first")
    return ls.agents.engine(folder).queue, session_id  # type: ignore[attr-defined]


async def _answer(call):
    try:
        return await call
    except AgentError as error:  # a refusal names the entry or the prompt, and what to do
        raise failure(error.kind, error.authored, error.reason + (f"; {error.action}" if error.action else "")) from None


async def list_queue(ls: MevedelLanguageServer, params: wire.QueueParams) -> wire.QueueState:
    queue, session_id = _queue(ls, params, methods.QUEUE_LIST)
    return state(await _answer(queue.state(session_id)))


async def add(ls: MevedelLanguageServer, params: wire.QueueAddParams) -> wire.QueueEntry:
    queue, session_id = _queue(ls, params, methods.QUEUE_ADD)
    added = entry(await _answer(queue.add(session_id, params.text, agent=params.agent, attachments=params.attachments)))
    await _remember(ls, params, session_id, params.text)
    return added


async def edit(ls: MevedelLanguageServer, params: wire.QueueEditParams) -> wire.QueueEntry:
    queue, session_id = _queue(ls, params, methods.QUEUE_EDIT)
    return entry(await _answer(queue.edit(session_id, params.entry_id, params.text)))


async def cancel(ls: MevedelLanguageServer, params: wire.QueueEntryParams) -> wire.QueueState:
    queue, session_id = _queue(ls, params, methods.QUEUE_CANCEL)
    return state(await _answer(queue.cancel(session_id, params.entry_id)))


async def steer(ls: MevedelLanguageServer, params: wire.QueueSteerParams) -> wire.QueueEntry:
    queue, session_id = _queue(ls, params, methods.QUEUE_STEER)
    steering = entry(await _answer(queue.steer(session_id, params.text, entry_id=params.entry_id, agent=params.agent,
                                               attachments=params.attachments)))
    if params.text is not None:
        await _remember(ls, params, session_id, params.text)
    return steering


async def _remember(ls: MevedelLanguageServer, params: Any, session_id: str, text: str) -> None:
    """A prompt the queue accepted joins the input history at once, as a
    sent one does (the spec's input ring), and the person is told of a
    history that could not be kept."""
    service = _registry(ls).service(_folder(ls, params.workspace_folder, methods.QUEUE_ADD))
    tell_recorded(ls, await service.sessions.record_input(session_id, text))


HANDLERS = {
    methods.QUEUE_LIST: (list_queue, None),
    methods.QUEUE_ADD: (add, None),
    methods.QUEUE_EDIT: (edit, None),
    methods.QUEUE_CANCEL: (cancel, None),
    methods.QUEUE_STEER: (steer, None),
}


def register(ls: MevedelLanguageServer) -> None:
    register_handlers(ls, HANDLERS)
