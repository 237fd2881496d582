"""The MCP SDK's stdio client transport with a bound on every message a
server sends.

The SDK's ``stdio_client`` keeps a server's output line in memory however
long it grows, joining each new chunk onto it: a server that answers
``resources/read`` with 500 MB keeps a core busy until the call times out
and holds it all. Here a line longer than ``max_bytes`` is skipped as it
arrives (only its first and last 64 KiB are kept, to find its request id),
and the request it answered gets an error at once: ``larger than N bytes``.
Everything else -- starting the process, its environment, the shutdown
sequence -- is the SDK's own (its helpers are used as they are).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
from mcp import StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import (
    PROCESS_TERMINATION_TIMEOUT,
    _create_platform_compatible_process,
    _get_executable_command,
    _terminate_process_tree,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

#: The JSON-RPC error code of an answer that was too large to read.
TOO_LARGE = -32099
_KEEP = 64 * 1024
_ID = re.compile(rb'(?<!\\)"id"\s*:\s*("(?:[^"\\]|\\.){0,256}"|-?\d{1,20})')


def _request_id(head: bytes, tail: bytes) -> int | str | None:
    """The id of the response an over-long line held: servers put it before
    the result (Python SDK) or after it (TypeScript SDK)."""
    before = re.split(rb'"(?:result|error)"\s*:', head, maxsplit=1)[0]
    found = _ID.search(before)
    if found is None:
        matches = list(_ID.finditer(re.split(rb'"(?:result|error)"\s*:', tail)[-1]))
        found = matches[-1] if matches else None
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, errlog: TextIO, max_bytes: int, started: Callable[[Any], None] | None = None
):
    """The SDK's stdio client with a bound on each message's size.
    ``started``: told the server's process (the leader of a process group
    of its own) once it runs, so its owner can end it without this
    context's cooperation."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        process = await _create_platform_compatible_process(
            command=_get_executable_command(server.command),
            args=server.args,
            env=({**get_default_environment(), **server.env} if server.env is not None else get_default_environment()),
            errlog=errlog,
            cwd=server.cwd,
        )
    except OSError:
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        raise
    if started is not None:
        started(process)

    async def deliver(line: bytes) -> None:
        try:
            message = mcp_types.JSONRPCMessage.model_validate_json(line)
        except Exception as exc:
            await read_writer.send(exc)
            return
        await read_writer.send(SessionMessage(message))

    async def too_large(head: bytes, tail: bytes) -> None:
        request_id = _request_id(head, tail)
        reason = f"larger than {max_bytes} bytes (mcpMaxMessageBytes); it was not read"
        if request_id is None:
            await read_writer.send(ValueError(f"a message from the server was {reason}"))
            return
        error = mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=mcp_types.ErrorData(code=TOO_LARGE, message=reason))
        await read_writer.send(SessionMessage(mcp_types.JSONRPCMessage(error)))

    async def stdout_reader() -> None:
        assert process.stdout is not None
        line = bytearray()
        head: bytes | None = None  # set while skipping an over-long line
        tail = b""
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    start = 0
                    while start <= len(chunk):
                        end = chunk.find(b"\n", start)
                        piece = chunk[start : end if end >= 0 else len(chunk)]
                        if head is None and len(line) + len(piece) > max_bytes:
                            head, tail = bytes((line + piece)[:_KEEP]), b""
                            line.clear()
                        elif head is not None:
                            tail = (tail + piece)[-_KEEP:]
                        else:
                            line += piece
                        if end < 0:
                            break
                        start = end + 1
                        if head is not None:
                            await too_large(head, tail)
                            head = None
                        elif line.strip():
                            await deliver(bytes(line))
                        line.clear()
        except anyio.ClosedResourceError:
            await anyio.lowlevel.checkpoint()

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await process.stdin.send((text + "\n").encode("utf-8"))
        except anyio.ClosedResourceError:
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group, process:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # The SDK's shutdown: close stdin, wait, then terminate the tree.
            if process.stdin:
                try:
                    await process.stdin.aclose()
                except Exception:
                    pass
            try:
                with anyio.fail_after(PROCESS_TERMINATION_TIMEOUT):
                    await process.wait()
            except TimeoutError:
                await _terminate_process_tree(process)
            except ProcessLookupError:
                pass
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()
