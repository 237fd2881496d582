"""A client that writes raw bytes to a real ``mevedel-lsp`` process and reads
every frame it answers with: the tool for feeding the server what no
well-behaved editor would send."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

#: How long one answer may take on a loaded 2-core machine.
ANSWER_SECONDS = 60.0


def frame(message: Any) -> bytes:
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class WireClient:
    def __init__(self, process: asyncio.subprocess.Process, log_file: Path) -> None:
        self.process = process
        self.log_file = log_file
        #: Every message the server sent, in order.
        self.received: list[dict[str, Any]] = []
        #: Raw bodies as sent (to look for tracebacks in the text itself).
        self.raw: list[bytes] = []
        self._arrived = asyncio.Event()
        self._reading = asyncio.create_task(self._read())
        self._ids = 0

    @classmethod
    async def start(cls, log_file: Path) -> WireClient:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mevedel_server", "--log-file", str(log_file),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, log_file)

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            length = None
            while (line := await stdout.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if not line or length is None:
                return
            body = await stdout.readexactly(length)
            self.raw.append(body)
            message = json.loads(body)
            if "method" in message and "id" in message:  # a request of the server: answer null
                self.write(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}))
            self.received.append(message)
            self._arrived.set()

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    def next_id(self) -> str:
        self._ids += 1
        return f"probe-{self._ids}"

    async def answer(self, msg_id: Any, seconds: float = ANSWER_SECONDS) -> dict[str, Any]:
        """The response to ``msg_id`` (waiting for it)."""
        async def wait() -> dict[str, Any]:
            while True:
                for message in self.received:
                    if "method" not in message and message.get("id") == msg_id:
                        return message
                if self._reading.done():
                    raise ConnectionError("the server closed its output")
                self._arrived.clear()
                await self._arrived.wait()

        return await asyncio.wait_for(wait(), seconds)

    async def request(self, method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
        msg_id = self.next_id()
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, **extra}
        if params is not None:
            message["params"] = params
        self.write(frame(message))
        return await self.answer(msg_id)

    async def initialize(self, workspace: Path, **options: Any) -> None:
        reply = await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": workspace.as_uri(),
                "capabilities": {},
                "workspaceFolders": [{"uri": workspace.as_uri(), "name": "project"}],
                "initializationOptions": options,
            },
        )
        assert "result" in reply, reply
        self.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))

    def errors_with_null_id(self) -> list[dict[str, Any]]:
        return [m for m in self.received if "error" in m and m.get("id") is None]

    async def stop(self) -> tuple[int, bytes]:
        """Shut down and exit; the status and stderr."""
        if self.process.returncode is None:
            try:
                await self.request("shutdown")
                self.write(frame({"jsonrpc": "2.0", "method": "exit"}))
            except (ConnectionError, asyncio.TimeoutError):
                pass
        status = await asyncio.wait_for(self.process.wait(), ANSWER_SECONDS)
        await self._reading
        assert self.process.stderr is not None
        return status, await self.process.stderr.read()

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8")
