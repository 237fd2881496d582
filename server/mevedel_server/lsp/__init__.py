"""The pygls language server: one module per feature area, each thin (decode,
call the core, encode). ``build_server()`` gives a server with every feature
registered; ``main()`` is the ``mevedel-lsp`` command."""

from .main import main
from .server import MevedelLanguageServer, build_server

__all__ = ["MevedelLanguageServer", "build_server", "main"]
