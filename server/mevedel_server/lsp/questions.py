"""Questions the server asks the user in the editor's own prompt
(``window/showMessageRequest``), with one rule for what counts as consent."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)


async def consents(ls: MevedelLanguageServer, message: str, yes: str, no: str, waiting: float, about: str) -> bool:
    """Ask the user a yes/no question in the editor's own prompt; only an
    explicit ``yes`` consents: a dismissal (null), an error answer, another
    title or no answer within ``waiting`` seconds is ``no`` (an open request
    must not wait forever on a question nobody sees). ``about`` names the
    question in the log."""
    question = types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=message,
        actions=[types.MessageActionItem(title=yes), types.MessageActionItem(title=no)],
    )
    try:
        answer = await asyncio.wait_for(ls.window_show_message_request_async(question), waiting)
    except asyncio.TimeoutError:
        _log.info("%s: no answer within %s s: %s", about, waiting, no)
        return False
    except Exception as error:  # an error answer is no consent
        _log.info("%s: answered with an error (%s): %s", about, error, no)
        return False
    title = answer.get("title") if isinstance(answer, dict) else getattr(answer, "title", None)
    return title == yes
