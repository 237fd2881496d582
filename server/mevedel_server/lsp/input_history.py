"""``mevedel/input/history``: the workspace's chat input history, which
every editor's chat input steps through (the prompts themselves are
recorded by ``mevedel/turn/prompt``, :func:`tell_recorded`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from mevedel_protocol import methods

from ..loading import OnFirstUse
from .errors import failure
from .handlers import folder as _folder
from .handlers import registry as _registry
from .handlers import request_handler as _request_handler

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.input_history")


async def history(ls: MevedelLanguageServer, params: wire.InputHistoryParams) -> wire.InputHistoryResult:
    folder = _folder(ls, params.workspace_folder, methods.INPUT_HISTORY)
    try:
        found = await _registry(ls).service(folder).sessions.input_history()
    except Exception as error:  # unreadable (not a file, the host gone): named, never a traceback
        raise failure("unavailable", ".mevedel/input-history", getattr(error, "reason", None) or str(error)) from None
    return wire.InputHistoryResult(list(found.entries), found.warning)


def tell_recorded(ls: MevedelLanguageServer, warning: str | None) -> None:
    """What recording a prompt found (a corrupt history renamed aside, a
    write that failed), shown once as a warning; the prompt goes on."""
    if warning is None:
        return
    try:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=warning))
    except Exception:
        _log.exception("could not show: %s", warning)


def register(ls: MevedelLanguageServer) -> None:
    ls.feature(methods.INPUT_HISTORY)(_request_handler(methods.INPUT_HISTORY, history))
