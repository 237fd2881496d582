"""The baseline of ``bench_lsp_memory.py``: a bare pygls language server
over stdio with one feature, nothing of mevedel imported."""

from lsprotocol import types
from pygls.lsp.server import LanguageServer

server = LanguageServer("bare", "0.1")


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: LanguageServer, params: types.HoverParams) -> types.Hover | None:
    return None


if __name__ == "__main__":
    server.start_io()
