"""``python -m mevedel_server`` starts the language server (same as ``mevedel-lsp``)."""

from .lsp.main import main

main()
