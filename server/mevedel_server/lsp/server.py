"""The mevedel language server: pygls' LanguageServer plus this client's
state (settings, and the current session of each workspace folder)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

from lsprotocol import types
from mevedel_protocol import Settings
from pygls.lsp.server import LanguageServer

from .wire_protocol import MevedelProtocol, plain_json_converter
from .workspaces import Folder, local_folder

NAME = "mevedel-lsp"


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
        #: Called after settings change (features re-publish what depends on them).
        self.on_settings_changed: list[Callable[[], None]] = []

    def current_session(self, folder: Folder) -> str | None:
        chosen = self.settings.current_session
        if chosen is None or isinstance(chosen, str):
            return chosen
        for uri, session_id in chosen.items():
            named = local_folder(uri)
            if named is not None and named.root == folder.root:
                return session_id
        return None

    def settings_changed(self) -> None:
        for callback in self.on_settings_changed:
            callback()


def build_server() -> MevedelLanguageServer:
    """A server with every feature registered."""
    from . import completion, configuration, definition, diagnostics, hover, resources

    ls = MevedelLanguageServer()
    for feature in (configuration, completion, hover, definition, diagnostics, resources):
        feature.register(ls)
    return ls
