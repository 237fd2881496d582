"""Method, notification and command names of the mevedel LSP extension.

Requests are ``mevedel/<area>/<verb>``; server-to-client notifications are
``mevedel/<area>/did<Event>``. Every mutating request is also reachable as a
``workspace/executeCommand`` command named ``mevedel.<area>.<verb>``, so a
generic LSP client can call it.
"""

RESOURCE_READ = "mevedel/resource/read"
RESOURCE_GLOB = "mevedel/resource/glob"
RESOURCE_GREP = "mevedel/resource/grep"
RESOURCE_APPLY_PATCH = "mevedel/resource/applyPatch"
ADDRESS_DESCRIBE = "mevedel/address/describe"

#: ``workspace/executeCommand`` names; each takes exactly one argument, the
#: params object of the request it runs (see ``catalog.COMMANDS``).
COMMAND_APPLY_PATCH = "mevedel.resource.applyPatch"

#: The scheme of read-only virtual documents (see docs/protocol.md).
VIRTUAL_SCHEME = "mevedel-resource"

#: The configuration section clients use for mevedel settings.
CONFIGURATION_SECTION = "mevedel"

#: ``Diagnostic.source`` of every diagnostic this server publishes.
DIAGNOSTIC_SOURCE = "mevedel"
