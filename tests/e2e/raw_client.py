"""A language server process spoken to over raw LSP framing, so that a test
controls its stdin, sends it signals and sees how it ends (the exit tests)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from pathlib import Path

import pytest

from mevedel_server.lsp import server as lsp_server

#: The exit may take its two time limits; the rest is process start and teardown.
EXIT_BOUND_SECONDS = lsp_server.EXIT_HOOK_SECONDS + lsp_server.EXIT_RELEASE_SECONDS + 6


class RawClient:
    """A minimal LSP client over a server process's stdin and stdout: it
    answers every request of the server with ``null``."""

    def __init__(self, process: asyncio.subprocess.Process, log_file: Path) -> None:
        self.process = process
        self.log_file = log_file
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, log_file: Path, *command: str) -> RawClient:
        process = await asyncio.create_subprocess_exec(
            *(command or (sys.executable, "-m", "mevedel_server")),
            "--log-file", str(log_file), "--log-level", "INFO",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, log_file)

    def _send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

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
                break
            message = json.loads(await stdout.readexactly(length))
            if "method" in message and "id" in message:  # a request of the server
                self._send({"id": message["id"], "result": None})
            elif "method" not in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed its output"))

    async def request(self, method: str, params) -> object:
        msg_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        self._send({"id": msg_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 60)
        assert "error" not in reply, reply["error"]
        return reply.get("result")

    def notify(self, method: str, params=None) -> None:
        self._send({"method": method, "params": params})

    async def initialize(self, workspace: Path) -> None:
        await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": workspace.as_uri(),
                "capabilities": {},
                "workspaceFolders": [{"uri": workspace.as_uri(), "name": "project"}],
            },
        )
        self.notify("initialized", {})

    async def exited(self) -> int:
        """The process's status once it exits (a hang fails the test: the
        wait is bounded by the exit's own time limits and a margin)."""
        try:
            status = await asyncio.wait_for(self.process.wait(), EXIT_BOUND_SECONDS)
        except TimeoutError:
            pytest.fail(f"the server had not exited {EXIT_BOUND_SECONDS} s later; its log:\n{self.log()}")
        await self._reading
        assert self.process.stderr is not None
        stderr = await self.process.stderr.read()
        assert b"Traceback" not in stderr, stderr.decode()
        return status

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8")
