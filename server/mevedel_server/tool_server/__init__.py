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
