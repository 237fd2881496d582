"""The pygls language server: one module per feature area, each thin (decode,
call the core, encode). ``build_server(FEATURES)`` gives a server with every
feature ``main.FEATURES`` names registered; ``main()`` is the ``mevedel-lsp`` command.

The names load lazily (``lazy_exports.py``): the command's entry point
imports ``main`` alone, which loads the server inside ``main()``."""

from ..lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    globals(), {".main": ("FEATURES", "main"), ".server": ("MevedelLanguageServer", "build_server")}
)
