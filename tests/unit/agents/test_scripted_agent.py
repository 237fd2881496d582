"""The scripted ACP agent (tests/agents/scripted_agent.py), run as a real
subprocess and driven through the official SDK's client side: each test plays
one small script and checks what a client sees."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    KillTerminalResponse,
    McpServerStdio,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from deadlines import GENEROUS_SECONDS

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"


class _Terminal:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.output = bytearray()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.output.extend(chunk)

    def exit_status(self) -> TerminalExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            return TerminalExitStatus(signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code)


class FakeClient:
    """An ACP client: files under ``root``, terminals as local processes,
    permission by the first option offered."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.updates: list[Any] = []
        self.permissions: list[tuple[Any, list[Any]]] = []
        self.terminals: dict[str, _Terminal] = {}
        self._changed = asyncio.Event()

    # What the agent says.

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self._changed.set()

    def messages(self) -> list[str]:
        return [update.content.text for update in self.updates if isinstance(update, AgentMessageChunk)]

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        async def poll() -> None:
            while not condition():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(poll(), timeout=GENEROUS_SECONDS)

    # The file system.

    def _file(self, path: str) -> Path:
        file = Path(path)
        if not file.is_absolute() or not file.resolve().is_relative_to(self.root.resolve()):
            raise RequestError.invalid_params({"path": path, "reason": "outside the workspace"})
        return file

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        file = self._file(path)
        if not file.exists():
            raise RequestError.resource_not_found(path)
        lines = file.read_text().splitlines(keepends=True)
        start = (line or 1) - 1
        end = None if limit is None else start + limit
        return ReadTextFileResponse(content="".join(lines[start:end]))

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self._file(path).write_text(content)
        return WriteTextFileResponse()

    # Terminals.

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd or self.root,
            env={variable.name: variable.value for variable in env or []} or None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = _Terminal(process)
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        terminal = self.terminals[terminal_id]
        await terminal.process.wait()
        await terminal.reader
        status = terminal.exit_status()
        assert status is not None
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        terminal = self.terminals[terminal_id]
        return TerminalOutputResponse(
            output=terminal.output.decode(), truncated=False, exit_status=terminal.exit_status()
        )

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        with contextlib.suppress(ProcessLookupError):
            self.terminals[terminal_id].process.kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        terminal = self.terminals.pop(terminal_id)
        if terminal.process.returncode is None:
            terminal.process.kill()
            await terminal.process.wait()
        return ReleaseTerminalResponse()

    # Permission.

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions.append((tool_call, options))
        if not options:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))


CAPABILITIES = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True)


class Agent:
    """One scripted agent process and the SDK connection to it."""

    def __init__(self, conn: Any, process: asyncio.subprocess.Process, client: FakeClient, stderr: Path) -> None:
        self.conn = conn
        self.process = process
        self.client = client
        self.stderr = stderr

    async def start(self) -> Any:
        """Initialize and open a session in the client's root; its id."""
        await self.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES)
        session = await self.conn.new_session(cwd=str(self.client.root), mcp_servers=[])
        return session.session_id

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout=GENEROUS_SECONDS)


@contextlib.asynccontextmanager
async def scripted(tmp_path: Path, script: dict[str, Any]) -> AsyncIterator[Agent]:
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    stderr_file = tmp_path / "agent.stderr"
    with stderr_file.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(AGENT),
            str(script_file),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    client = FakeClient(workspace)
    assert process.stdin is not None and process.stdout is not None
    conn = acp.connect_to_agent(client, process.stdin, process.stdout)
    try:
        yield Agent(conn, process, client, stderr_file)
    finally:
        await conn.close()
        if process.returncode is None:
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), timeout=GENEROUS_SECONDS)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_updates_arrive_in_order_with_the_scripted_stop_reason(tmp_path: Path) -> None:
    script = {
        "name": "scripted-test",
        "load_session": True,
        "auth_methods": [{"id": "login", "name": "Log in", "description": "run `scripted login`"}],
        "turns": [
            [
                {"think": "hmm"},
                {"say": "hello "},
                {"say": "world"},
                {"tool_call": {"id": "c1", "title": "Edit a.txt", "kind": "edit", "status": "pending",
                               "raw_input": {"path": "a.txt"}, "locations": ["a.txt"]}},
                {"tool_update": {"id": "c1", "status": "completed", "text": "done",
                                 "diff": {"path": "a.txt", "old": "x", "new": "y"}}},
                {"plan": [{"content": "step one", "status": "in_progress", "priority": "high"}]},
                {"stop": "max_tokens"},
                {"say": "never said"},
            ]
        ],
    }
    async with scripted(tmp_path, script) as agent:
        init = await agent.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES)
        assert init.agent_info is not None and init.agent_info.name == "scripted-test"
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session is True
        assert init.agent_capabilities.prompt_capabilities is not None
        assert init.agent_capabilities.prompt_capabilities.embedded_context is True
        assert init.agent_capabilities.prompt_capabilities.image is False
        assert [(method.id, method.name) for method in init.auth_methods or []] == [("login", "Log in")]
        session = await agent.conn.new_session(cwd=str(agent.client.root), mcp_servers=[])
        response = await agent.conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")])

    assert response.stop_reason == "max_tokens"
    kinds = [type(update) for update in agent.client.updates]
    assert kinds == [AgentThoughtChunk, AgentMessageChunk, AgentMessageChunk, ToolCallStart, ToolCallProgress,
                     AgentPlanUpdate]
    assert agent.client.messages() == ["hello ", "world"]
    start, progress, plan = agent.client.updates[3:]
    a_txt = str(agent.client.root / "a.txt")
    assert (start.tool_call_id, start.title, start.kind, start.status) == ("c1", "Edit a.txt", "edit", "pending")
    assert start.raw_input == {"path": "a.txt"}
    assert [location.path for location in start.locations] == [a_txt]
    assert progress.status == "completed"
    text, diff = progress.content
    assert text.content.text == "done"
    assert (diff.path, diff.old_text, diff.new_text) == (a_txt, "x", "y")
    assert [(entry.content, entry.status, entry.priority) for entry in plan.entries] == [
        ("step one", "in_progress", "high")
    ]


async def test_a_write_and_a_read_reach_the_client(tmp_path: Path) -> None:
    script = {
        "turns": [
            [
                {"write": {"path": "a.txt", "content": "one\ntwo\n"}},
                {"read": {"path": "a.txt", "line": 2, "limit": 1}},
                {"read": {"path": "missing.txt"}},
                {"write": {"path": "/elsewhere/b.txt", "content": "no"}},
            ]
        ]
    }
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        response = await agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")])

    assert response.stop_reason == "end_turn"
    assert (agent.client.root / "a.txt").read_text() == "one\ntwo\n"
    assert agent.client.messages() == [
        "wrote a.txt",
        "read a.txt: two\n",
        "read missing.txt failed: Resource not found",
        "write /elsewhere/b.txt failed: Invalid params",
    ]


async def test_a_terminal_runs_on_the_client(tmp_path: Path) -> None:
    script = {
        "turns": [
            [
                {"terminal": {"command": "sh", "args": ["-c", "echo hi > b.txt; echo $GREETING; exit 3"],
                              "env": {"GREETING": "hello"}}},
                {"terminal_kill": {"command": "sleep", "args": ["30"], "after": 0.05}},
            ]
        ]
    }
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        response = await agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")])

    assert response.stop_reason == "end_turn"
    assert (agent.client.root / "b.txt").read_text() == "hi\n"
    assert agent.client.messages() == ["ran: exit 3\nhello\n", "killed: signal SIGKILL\n"]
    assert agent.client.terminals == {}  # both released


async def test_a_permission_is_asked(tmp_path: Path) -> None:
    options = [{"id": "allow", "name": "Allow once", "kind": "allow_once"},
               {"id": "reject", "name": "Reject", "kind": "reject_once"}]
    script = {"turns": [[{"permission": {"tool_call_id": "c1", "title": "Run rm", "options": options}}]]}
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        await agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")])

    ((tool_call, offered),) = agent.client.permissions
    assert (tool_call.tool_call_id, tool_call.title) == ("c1", "Run rm")
    assert [(option.option_id, option.kind) for option in offered] == [("allow", "allow_once"),
                                                                        ("reject", "reject_once")]
    assert agent.client.messages() == ["permission: selected allow"]


async def test_wait_cancel_returns_cancelled_after_a_cancel(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    turn = [{"say": "waiting"}, {"wait_cancel": GENEROUS_SECONDS}, {"say": "not cancelled"}]
    script = {"log": str(log), "turns": [turn]}
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        prompt = asyncio.create_task(agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")]))
        await agent.client.wait_for(lambda: agent.client.messages() == ["waiting"])
        await agent.conn.cancel(session_id=session_id)
        response = await asyncio.wait_for(prompt, timeout=GENEROUS_SECONDS)

    assert response.stop_reason == "cancelled"
    assert agent.client.messages() == ["waiting"]
    assert [event["params"] for event in read_log(log) if event["event"] == "cancel"] == [{"sessionId": session_id}]


async def test_a_crash_ends_the_process_with_its_code(tmp_path: Path) -> None:
    script = {"turns": [[{"say": "about to go"}, {"crash": 3}]]}
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        with pytest.raises(ConnectionError):
            await agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")])
        assert await agent.exit_code() == 3

    assert agent.client.messages() == ["about to go"]
    assert "scripted agent crashing" in agent.stderr.read_text()


async def test_auth_required_refuses_new_session_with_the_auth_error(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    script = {"log": str(log), "auth_required": True, "auth_methods": [{"id": "login", "name": "Log in"}]}
    server = McpServerStdio(name="tools", command="/bin/tools", args=["--serve"], env=[])
    async with scripted(tmp_path, script) as agent:
        await agent.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES)
        with pytest.raises(RequestError) as refused:
            await agent.conn.new_session(cwd=str(agent.client.root), mcp_servers=[server])
        assert refused.value.code == -32000
        await agent.conn.authenticate(method_id="login")
        session = await agent.conn.new_session(cwd=str(agent.client.root), mcp_servers=[])
        assert session.session_id.startswith("scripted-")

    events = read_log(log)
    assert [event["event"] for event in events] == ["start", "initialize", "new_session", "authenticate", "new_session"]
    assert events[1]["params"]["clientCapabilities"]["terminal"] is True
    assert events[2]["params"] == {
        "cwd": str(agent.client.root),
        "mcpServers": [{"name": "tools", "command": "/bin/tools", "args": ["--serve"], "env": []}],
    }


async def test_load_session_and_echo_prompt_and_turn_order(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    script = {"log": str(log), "load_session": True, "turns": [[{"echo_prompt": True}], [{"say": "last"}]]}
    prompt = [
        acp.text_block("look at"),
        acp.resource_block(acp.embedded_text_resource("file:///w/a.txt", "alpha")),
        acp.resource_link_block("b.txt", "file:///w/b.txt"),
        acp.image_block(base64.b64encode(b"12345").decode(), "image/png"),
    ]
    async with scripted(tmp_path, script) as agent:
        await agent.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES)
        await agent.conn.load_session(cwd=str(agent.client.root), session_id="from-before", mcp_servers=[])
        for _ in range(3):
            await agent.conn.prompt(session_id="from-before", prompt=prompt)

    assert agent.client.messages() == [
        "look at\n[resource file:///w/a.txt]\nalpha\n[link file:///w/b.txt]\n[image image/png 5 bytes]",
        "last",
        "last",
    ]
    events = read_log(log)
    assert [event["params"]["sessionId"] for event in events if event["event"] == "load_session"] == ["from-before"]
    prompts = [event for event in events if event["event"] == "prompt"]
    assert [event["turn"] for event in prompts] == [0, 1, 2]
    assert prompts[0]["params"]["prompt"][1] == {
        "type": "resource",
        "resource": {"uri": "file:///w/a.txt", "text": "alpha"},
    }


async def test_garbage_on_stdout_is_skipped_by_the_sdk_client(tmp_path: Path) -> None:
    script = {"turns": [[{"garbage": "not json{"}, {"say": "still here"}]]}
    async with scripted(tmp_path, script) as agent:
        session_id = await agent.start()
        response = await agent.conn.prompt(session_id=session_id, prompt=[acp.text_block("go")])
        assert response.stop_reason == "end_turn"
        assert agent.client.messages() == ["still here"]
    assert await agent.exit_code() == 0  # and it leaves when its stdin closes
