"""The MCP tool server: resource addresses (and plain workspace paths) for
any MCP-capable agent, through the tools ``Read``, ``Glob``, ``Grep`` and
``ApplyPatch``.

- :mod:`.context` -- ``ToolContext``, what a served session is bound to
  (its resolver context, and the hook an ApplyPatch of project files calls
  first), and ``ToolRefused``.
- :mod:`.server` -- ``build_server`` / ``serve``: one MCP session on the
  official ``mcp`` SDK's low-level server.
- :mod:`.tools` -- the tools' schemas, argument checks, and the text the
  model reads (results and errors).
- :mod:`.roster` -- the request-time availability roster (the server's
  ``instructions``).
- :mod:`.persisted_output` -- oversized output saved as ``artifact://``.
- :mod:`.standalone` -- the context ``mevedel mcp`` binds itself when no
  LSP server started it.
- ``host`` / ``relay`` -- the bridge from the LSP server (its agents reach
  the server through a unix socket).

Knows nothing of LSP; the resolver does every read and write.
"""

from ..lazy_exports import lazy_exports

#: Each public name's module, imported on first use: ``mevedel mcp``'s relay
#: loads neither the MCP SDK's server nor the resolver.
_EXPORTS = {
    '.context': ('ToolRefused',),
    '.host': ('ToolHost',),
    '.relay': ('relay_stdio',),
    '.server': ('serve',),
    '.standalone': ('StandaloneContext',),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
