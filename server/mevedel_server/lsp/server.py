"""The mevedel language server: pygls' LanguageServer plus this client's
state (settings, and the current session of each workspace folder)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from mevedel_protocol import Settings
from pygls.exceptions import FeatureRequestError
from pygls.lsp.server import LanguageServer

from .wire_protocol import MevedelProtocol, plain_json_converter
from .workspaces import Folder, same_folder

if TYPE_CHECKING:
    from .session_registry import SessionRegistry

NAME = "mevedel-lsp"

_log = logging.getLogger(__name__)


def server_version() -> str:
    try:
        return metadata.version("mevedel-lsp")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class MevedelLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            NAME,
            server_version(),
            protocol_cls=MevedelProtocol,
            converter_factory=plain_json_converter,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.settings = Settings()
        #: The workspaces' sessions (``sessions.register`` installs it).
        self.sessions: SessionRegistry | None = None
        #: Called after settings change (features re-publish what depends on them).
        self.on_settings_changed: list[Callable[[], None]] = []

    def current_session(self, folder: Folder) -> str | None:
        opened = self.sessions.current(folder) if self.sessions is not None else None
        if opened is not None:
            return opened
        chosen = self.settings.current_session
        if chosen is None or isinstance(chosen, str):
            return chosen
        for uri, session_id in chosen.items():
            if same_folder(uri, folder):
                return session_id
        return None

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Failures outside a request (a notification handler, a message that
        does not parse). pygls would show the exception text, which may hold
        a path; the user gets a fixed sentence and the log gets the rest."""
        _log.error("server error (%s): %r", getattr(source, "__name__", source), error, exc_info=error)
        if source is FeatureRequestError:
            return  # the request's own error response already said it
        self.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Error, message="mevedel-lsp hit an internal error; details are in its log"
            )
        )

    def settings_changed(self) -> None:
        for callback in self.on_settings_changed:
            callback()


def build_server() -> MevedelLanguageServer:
    """A server with every feature registered."""
    from . import completion, configuration, control, definition, diagnostics, follow, hover, lifecycle, resources, sessions

    ls = MevedelLanguageServer()
    for feature in (configuration, completion, hover, definition, diagnostics, resources, sessions, lifecycle, control, follow):
        feature.register(ls)
    return ls
