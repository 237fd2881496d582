"""The tool host and ``mevedel mcp`` in relay mode: a real unix socket, the
real relay as a subprocess, the real tool server, spoken to with the
official ``mcp`` client over stdio."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mevedel_server.resources import ResolverContext
from mevedel_server.tool_server.host import ToolHost

RELAY = [sys.executable, "-m", "mevedel_server.cli", "mcp"]


class Context:
    """A tool context over one workspace; counts what the host asked of it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls = 0
        self.written: list[list[str]] = []

    def resolver_context(self) -> ResolverContext:
        self.calls += 1
        # A session this context may write in (as the agent's binding says
        # for the session it holds open).
        return ResolverContext(
            workspace_root=self.root,
            session_dir=self.root / ".mevedel" / "sessions" / "s1",
            session_writable=lambda session_id: session_id == "s1",
        )

    async def before_project_write(self, paths: Sequence[str]) -> None:
        self.written.append(list(paths))


def relay(socket_path: str, token: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=RELAY[0], args=RELAY[1:], env={"MEVEDEL_TOOL_SOCKET": socket_path, "MEVEDEL_TOOL_TOKEN": token}
    )


async def run_relay(socket_path: str, token: str, stdin: bytes = b"") -> tuple[int, str]:
    env = {**os.environ, "MEVEDEL_TOOL_SOCKET": socket_path, "MEVEDEL_TOOL_TOKEN": token}
    process = await asyncio.create_subprocess_exec(
        *RELAY, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    _out, err = await process.communicate(stdin)
    return process.returncode, err.decode()


@pytest.fixture
async def host():
    made = ToolHost()
    yield made
    await made.close()


def workspace(tmp_path: Path, name: str, text: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / "notes.txt").write_text(text)
    return root


async def test_an_agent_reaches_the_tools_through_the_relay_with_its_own_context(host, tmp_path):
    first = Context(workspace(tmp_path, "a", "alpha\n"))
    second = Context(workspace(tmp_path, "b", "beta\n"))
    path, token_a = await host.register(first)
    _, token_b = await host.register(second)
    assert token_a != token_b and len(token_a) >= 40
    directory = Path(path).parent
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(path).st_mode)

    async with stdio_client(relay(path, token_a)) as (read, write), ClientSession(read, write) as session:
        initialized = await session.initialize()
        assert initialized.instructions  # the roster, computed from this context
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"Read", "Glob", "Grep", "ApplyPatch"} <= names
        result = await session.call_tool("Read", {"path": "notes.txt"})
        assert not result.isError and "alpha" in result.content[0].text
        assert host.connections(token_a) == 1
        patched = await session.call_tool(
            "ApplyPatch", {"patch": "*** Begin Patch\n*** Add File: new.txt\n+made\n*** End Patch\n"}
        )
        assert not patched.isError, patched.content[0].text
    assert (first.root / "new.txt").read_text() == "made\n"
    assert first.written == [["new.txt"]] and second.calls == 0

    # The other token is bound to the other workspace, not this one.
    async with stdio_client(relay(path, token_b)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("Read", {"path": "notes.txt"})
        assert "beta" in result.content[0].text and "alpha" not in result.content[0].text
    assert second.calls > 0 and not (second.root / "new.txt").exists()


async def test_an_unknown_token_is_refused_with_nothing_served(host, tmp_path, caplog):
    context = Context(workspace(tmp_path, "a", "alpha\n"))
    path, token = await host.register(context)
    initialize = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'
    code, err = await run_relay(path, "not-" + token, initialize)
    assert code == 1
    assert err.count("\n") == 1 and "refused the token in MEVEDEL_TOOL_TOKEN" in err
    assert context.calls == 0
    assert "unknown token" in caplog.text


async def test_a_stopped_agents_token_no_longer_works_and_its_connection_ends(host, tmp_path):
    context = Context(workspace(tmp_path, "a", "alpha\n"))
    path, token = await host.register(context)
    async with stdio_client(relay(path, token)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert host.connections(token) == 1
        host.unregister(token)
        assert host.connections(token) == 0
        with pytest.raises(Exception):  # the host ended the session: the relay exited
            await asyncio.wait_for(session.call_tool("Read", {"path": "notes.txt"}), 60)
    code, err = await run_relay(path, token)
    assert code == 1 and "refused the token" in err


async def test_garbage_and_silence_on_the_socket_are_closed_and_the_host_keeps_serving(host, tmp_path, caplog):
    context = Context(workspace(tmp_path, "a", "alpha\n"))
    path, token = await host.register(context)
    for junk in (b"\x00" * 1000, b"GET / HTTP/1.1\r\n\r\n", b""):
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(junk)
        if not junk:
            writer.write_eof()
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 60) in (b"", b"refused\n")
        writer.close()
    assert context.calls == 0
    async with stdio_client(relay(path, token)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert "alpha" in (await session.call_tool("Read", {"path": "notes.txt"})).content[0].text
    assert "closed a connection" in caplog.text or "unknown token" in caplog.text


async def test_a_missing_socket_is_one_line_and_status_1(tmp_path):
    # A short path whatever $TMPDIR is (one too long for a socket is another error).
    gone = f"/tmp/mevedel-gone-{os.getpid()}-{tmp_path.name[-20:]}/gone.sock"
    code, err = await run_relay(gone, "x" * 43)
    assert code == 1 and err.count("\n") == 1
    assert "no mevedel tool server at" in err and "gone.sock" in err


async def test_the_relay_exits_when_the_host_closes(host, tmp_path):
    context = Context(workspace(tmp_path, "a", "alpha\n"))
    path, token = await host.register(context)
    env = {**os.environ, "MEVEDEL_TOOL_SOCKET": path, "MEVEDEL_TOOL_TOKEN": token}
    process = await asyncio.create_subprocess_exec(
        *RELAY, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    for _ in range(600):  # the relay connected (no timing claim: it just has to happen)
        if host.connections(token):
            break
        await asyncio.sleep(0.1)
    assert host.connections(token) == 1
    await host.close()
    # Its stdin stays open: only the host's closing can end it.
    assert await asyncio.wait_for(process.wait(), 60) == 0
    assert not Path(path).parent.exists()
    process.stdin.close()


async def test_close_removes_the_socket_and_its_directory(tmp_path):
    made = ToolHost()
    path = await made.start()
    assert os.path.exists(path)
    await made.close()
    assert not os.path.exists(os.path.dirname(path))
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(OSError):
        probe.connect(path)
    probe.close()


async def test_agents_starting_at_once_share_one_socket(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    made = ToolHost(directory=str(runtime))
    try:
        context = Context(workspace(tmp_path, "a", "alpha\n"))
        registered = await asyncio.gather(*(made.register(context) for _ in range(5)))
        assert len({path for path, _token in registered}) == 1
        assert len({token for _path, token in registered}) == 5
        (path,) = {path for path, _token in registered}
        # One private directory holding the socket alone (under runtime/,
        # unless the test's temporary directory is too deep for a socket).
        assert os.listdir(os.path.dirname(path)) == ["tools.sock"]
        assert len(list(runtime.iterdir())) == (1 if Path(path).parent.parent == runtime else 0)
    finally:
        await made.close()
    assert list(runtime.iterdir()) == [] and not os.path.exists(os.path.dirname(path))


async def test_a_directory_too_deep_for_a_unix_socket_still_gets_one_that_binds(tmp_path):
    """A socket path longer than the unix limit cannot be bound: a deep
    ``$XDG_RUNTIME_DIR``, ``$TMPDIR`` or given directory is passed over for
    one whose path fits, and the agents' relay still reaches the host."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    made = ToolHost(directory=str(deep))
    try:
        path, token = await made.register(Context(workspace(tmp_path, "a", "alpha\n")))
        assert len(os.fsencode(path)) <= 104 and not path.startswith(str(deep))
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(token.encode() + b"\n")
        assert await asyncio.wait_for(reader.readline(), 60) == b"ok\n"
        writer.close()
    finally:
        await made.close()
    assert not os.path.exists(os.path.dirname(path)) and list(deep.iterdir()) == []
