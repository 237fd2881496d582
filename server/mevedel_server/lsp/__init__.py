"""The pygls language server: one module per feature area, each thin (decode,
call the core, encode). ``build_server(FEATURES)`` gives a server with every
feature ``main.FEATURES`` names registered; ``main()`` is the ``mevedel-lsp`` command."""

from .main import FEATURES, main
from .server import MevedelLanguageServer, build_server

__all__ = ["FEATURES", "MevedelLanguageServer", "build_server", "main"]
