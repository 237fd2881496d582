"""A real ``mevedel-lsp`` process spoken to over raw LSP framing: the test
may write any bytes to its stdin (broken frames, malformed envelopes: the
wire tests), close its stdin or send it signals and see how it ends (the
exit tests, which share the ways an editor goes away: ``ENDINGS``). Every
message the server sends is kept, and every request of the server answered
with ``null``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from mevedel_server.lsp import server as lsp_server

#: How long one answer may take on a loaded 2-core machine.
ANSWER_SECONDS = 60.0
#: The exit may take its two time limits; the rest is process start and teardown.
EXIT_BOUND_SECONDS = lsp_server.EXIT_HOOK_SECONDS + lsp_server.EXIT_RELEASE_SECONDS + 6


def frame(message: Any) -> bytes:
    """``message`` (bytes as they are, anything else as JSON) in one frame."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _envelope(**fields: Any) -> dict[str, Any]:
    """A JSON-RPC message; params left out when there are none."""
    if fields.get("params") is None:
        fields.pop("params", None)
    return {"jsonrpc": "2.0", **fields}


class RawClient:
    def __init__(self, process: asyncio.subprocess.Process, log_file: Path) -> None:
        self.process = process
        self.log_file = log_file
        #: Every message the server sent, in order.
        self.received: list[dict[str, Any]] = []
        #: Every body as sent (to look for tracebacks in the text itself).
        self.raw: list[bytes] = []
        #: How many of those bodies mention a traceback.
        self.tracebacks = 0
        self._answers: dict[Any, dict[str, Any]] = {}
        self._arrived = asyncio.Event()
        self._ids = 0
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, log_file: Path, *command: str) -> RawClient:
        """The server, or ``command`` (a wrapper script that runs it)."""
        process = await asyncio.create_subprocess_exec(
            *(command or (sys.executable, "-m", "mevedel_server")),
            "--log-file", str(log_file), "--log-level", "INFO",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, log_file)

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                length = None
                while (line := await stdout.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                if not line or length is None:
                    return
                body = await stdout.readexactly(length)
                self.raw.append(body)
                self.tracebacks += b"traceback" in body.lower()
                message = json.loads(body)
                if "method" in message and "id" in message:  # a request of the server
                    self.write(frame(_envelope(id=message["id"], result=None)))
                elif "method" not in message and isinstance(message.get("id"), (str, int)):
                    self._answers.setdefault(message["id"], message)
                self.received.append(message)
                self._arrived.set()
        finally:
            self._arrived.set()  # a waiting answer() learns the output closed

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    def next_id(self) -> str:
        self._ids += 1
        return f"probe-{self._ids}"

    async def answer(self, msg_id: Any, seconds: float = ANSWER_SECONDS) -> dict[str, Any]:
        """The response to ``msg_id`` (waiting for it)."""
        async def wait() -> dict[str, Any]:
            while (reply := self._answers.get(msg_id)) is None:
                if self._reading.done():
                    raise ConnectionError("the server closed its output")
                self._arrived.clear()
                await self._arrived.wait()
            return reply

        return await asyncio.wait_for(wait(), seconds)

    async def request(self, method: Any, params: Any = None, **extra: Any) -> dict[str, Any]:
        """The response, error or not (``extra`` overrides envelope fields)."""
        msg_id = self.next_id()
        self.write(frame({**_envelope(id=msg_id, method=method, params=params), **extra}))
        return await self.answer(msg_id)

    async def result(self, method: str, params: Any = None) -> Any:
        """The result of a request that must succeed."""
        reply = await self.request(method, params)
        assert "error" not in reply, reply["error"]
        return reply.get("result")

    def notify(self, method: str, params: Any = None) -> None:
        self.write(frame(_envelope(method=method, params=params)))

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
        self.notify("initialized", {})

    def errors_with_null_id(self) -> list[dict[str, Any]]:
        return [m for m in self.received if "error" in m and m.get("id") is None]

    async def stop(self) -> tuple[int, bytes]:
        """Shut down and exit, if still running; the status and stderr."""
        if self.process.returncode is None:
            try:
                await self.request("shutdown")
                self.notify("exit")
            except (ConnectionError, TimeoutError):
                pass
        status = await asyncio.wait_for(self.process.wait(), ANSWER_SECONDS)
        await self._reading
        assert self.process.stderr is not None
        return status, await self.process.stderr.read()

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


# How the editor goes away ---------------------------------------------------------


async def shutdown_then_exit(client: RawClient) -> None:
    assert await client.result("shutdown") is None
    client.notify("exit")  # stdin stays open, as some editors keep it until the process ends


async def exit_alone(client: RawClient) -> None:
    client.notify("exit")


async def end_of_input(client: RawClient) -> None:
    assert client.process.stdin is not None
    client.process.stdin.close()


async def sigterm(client: RawClient) -> None:
    client.process.send_signal(signal.SIGTERM)  # stdin stays open: the editor still holds it


async def sighup(client: RawClient) -> None:
    client.process.send_signal(signal.SIGHUP)


#: How the editor goes away, the reason the server logs and the status it
#: exits with: 0 for every orderly end (a handled signal included; editors
#: read a non-zero status as a crash), 1 for an exit without shutdown (the
#: LSP rule).
ENDINGS = {
    "shutdown-and-exit": (shutdown_then_exit, "shutdown requested", 0),
    "exit-without-shutdown": (exit_alone, "exit without shutdown", 1),
    "end-of-input": (end_of_input, "end of input", 0),
    "sigterm": (sigterm, "received SIGTERM", 0),
    "sighup": (sighup, "received SIGHUP", 0),
}
