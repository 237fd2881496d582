"""One MCP session of the tool server, on the official ``mcp`` SDK's
low-level server (it gives exact control of the tool schemas, the error
results and the instructions).

``build_server(context)`` lists the tools of :mod:`.tools` and answers
``tools/call`` with a text result, or a result with ``isError`` whose text
names the authored path or address and the reason -- never a protocol
error, whatever the arguments. Its ``instructions`` are the availability
roster (:mod:`.roster`), computed from the live context when the session
is served. No MCP resources are published: resource addresses are not MCP
resource URIs.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server

from ..resources import has_items
from ..version import VERSION
from .context import ToolContext
from .roster import roster
from .tools import ToolError, call, tools_for

SERVER_NAME = "mevedel"


def build_server(context: ToolContext, *, shared_items: bool = False) -> Server:
    """The tool server bound to ``context`` (instructions: the roster now;
    ``shared_items``: the workspace holds a whiteboard or document)."""
    server: Server = Server(
        SERVER_NAME, version=VERSION, instructions=roster(context.resolver_context(), shared_items=shared_items)
    )

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(name=tool.name, description=tool.description, inputSchema=tool.schema)
            for tool in tools_for(context)
        ]

    # Arguments are checked by the tools themselves, so that every mistake is
    # answered with the same kind of text naming the argument.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            text = await call(name, arguments, context)
        except ToolError as error:
            return types.CallToolResult(content=[types.TextContent(type="text", text=error.text)], isError=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=False)

    return server


async def serve(context: ToolContext, read_stream: Any, write_stream: Any) -> None:
    """Serve one MCP session over the SDK's anyio memory-object streams,
    until the client goes away. The roster is computed now, from the live
    context (the artifact store asked whether shared:// has items), and
    given at ``initialize``."""
    resolver = context.resolver_context()
    server = build_server(context, shared_items=await has_items(resolver))
    options = server.create_initialization_options(NotificationOptions())
    await server.run(read_stream, write_stream, options, raise_exceptions=False)
