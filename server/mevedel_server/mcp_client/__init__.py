"""Reading configured MCP servers (the client side of ``mcp://``).

- :mod:`.config` -- server entries in the ``.mcp.json`` shape
  (``{name: {command, args, env}}``) from the settings (trusted) and the
  workspace's own ``.mcp.json`` (untrusted), and their fingerprints.
- :mod:`.approvals` -- the user's approvals of workspace servers, kept
  outside the workspace and keyed by workspace, name and fingerprint.
- :mod:`.connections` -- :class:`McpConnections`: one stdio connection per
  server, made on first use with the official ``mcp`` SDK client, made again
  after the server died, a time limit on every call, all stopped at exit.
- :mod:`.access` -- :class:`McpAccess`: what one request may reach (its
  workspace's servers, approval state, how the front end asks).

Knows nothing of LSP, the CLI or resource addresses: failures are
:class:`McpClientError` with a kind the resolver maps to its own.
"""

from ..lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: reading a server
#: entry's configuration (``.config``) does not load the SDK client, the
#: connections or the approvals.
_EXPORTS = {
    '.access': ('APPROVE_IN_A_TERMINAL', 'McpAccess', 'ServerEntry', 'configured_access'),
    '.approvals': ('Approvals', 'default_approvals_path'),
    '.config': ('MAX_MESSAGE_BYTES_BOUNDS', 'McpServerSpec', 'NotJson', 'WORKSPACE_FILE', 'load_json', 'servers_from_setting', 'servers_problem'),
    '.connections': ('DEFAULT_CALL_TIMEOUT_SECONDS', 'DEFAULT_START_TIMEOUT_SECONDS', 'Known', 'McpConnections', 'ResourceListing'),
    '.errors': ('McpClientError',),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
