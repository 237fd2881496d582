"""A minimal JSON-RPC client over a server's stdio, for benchmarks.

Editors parse LSP JSON natively; a Python client that structures every
response into lsprotocol classes would add its own cost to every sample. This
one only frames, sends and parses JSON, so a sample is the server's work plus
the transport.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


class WireClient:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._next_id = 0
        self._pending: dict[int, asyncio.Future] = {}
        self._reader = asyncio.create_task(self._read_loop())

    @classmethod
    async def start(cls, *argv: str, env: dict[str, str] | None = None) -> "WireClient":
        process = await asyncio.create_subprocess_exec(
            *(argv or (sys.executable, "-m", "mevedel_server")),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        return cls(process)

    async def request(self, method: str, params: object) -> object:
        self._next_id += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        message = await future
        if "error" in message:
            raise RuntimeError(f"{method}: {message['error']}")
        return message.get("result")

    def notify(self, method: str, params: object) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(self, root: Path, capabilities: dict | None = None, options: dict | None = None) -> None:
        await self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": root.as_uri(),
                "capabilities": capabilities or {},
                "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
                "initializationOptions": options or {},
            },
        )
        self.notify("initialized", {})

    async def close(self) -> None:
        await self.request("shutdown", None)
        self.notify("exit", None)
        await self._process.wait()
        self._reader.cancel()

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        assert self._process.stdin is not None
        self._process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def _read_message(self) -> dict | None:
        """One framed message, or None once the server closed its output."""
        stdout = self._process.stdout
        assert stdout is not None
        length = 0
        while True:
            line = await stdout.readline()
            if not line:
                return None
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return json.loads(await stdout.readexactly(length))

    async def _read_loop(self) -> None:
        while (message := await self._read_message()) is not None:
            if "id" in message and "method" not in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
            elif "id" in message:
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": self.answer(message)})
            else:
                self.notified(message)

    def answer(self, request: dict) -> object:
        """The result for a request from the server; the plain client answers null."""
        return None

    def notified(self, notification: dict) -> None:
        """A notification from the server; the plain client ignores them."""
