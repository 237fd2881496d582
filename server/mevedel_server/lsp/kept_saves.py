"""What the user is told of a save whose SSH host could not record it:
that this machine keeps it (``window/showMessage``, Warning), and, once a
server or a ``mevedel`` command on this machine resumed the session with
the host back, that the host has it (Info). The store keeps and moves the
save (:func:`~mevedel_server.store.workspace_spool`); this module only
words it, since nothing else in the editor says the save outlives this
process."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..store import SpoolNotice
    from .server import MevedelLanguageServer
    from .workspaces import Folder

_log = logging.getLogger(__name__)


def kept_save_message(folder: Folder, notice: SpoolNotice) -> tuple[types.MessageType, str]:
    from ..state_directory import state_directory
    from ..store import describe_target_time

    host = folder.remote.display_host if folder.remote is not None else folder.uri
    sid = notice.session_id
    if notice.event == "kept":
        return types.MessageType.Warning, (
            f"Session {sid}: {host} could not be reached to record the save, so this machine keeps it "
            f"(in {state_directory()}). Once {host} answers, retrying the failed save "
            f"(mevedel/session/retryPublication) publishes it; should this editor close first, it is recorded on "
            f"{host} when the session is next opened on this machine (by an editor or the mevedel command)."
        )
    since = f"the save this machine kept since {describe_target_time(notice.failed_at)}"
    if notice.event == "recorded":
        return types.MessageType.Info, (
            f"Session {sid}: {since} is recorded on {host} now, pending: retrying the failed save "
            "(mevedel/session/retryPublication) publishes it, abandoning it (mevedel/session/abandonPublication) drops it."
        )
    return types.MessageType.Info, f"Session {sid}: {since} is published on {host}; this machine keeps it no more."


def tell_kept_save(ls: MevedelLanguageServer, folder: Folder, notice: SpoolNotice) -> None:
    kind, message = kept_save_message(folder, notice)
    try:
        ls.window_show_message(types.ShowMessageParams(type=kind, message=message))
    except Exception:  # a message that cannot be sent must not fail the save
        _log.exception("could not show: %s", message)
