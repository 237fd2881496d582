"""A real ``mevedel-lsp`` over stdio (``python -m mevedel_server``) against a
temporary workspace with a current session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from mevedel_protocol import methods
from mevedel_server.lsp.transport.wire_protocol import plain_json_converter

from . import raw_client

SESSION = "2026-07-19T09-47-bf87b5dd793a"
BIG_ENTRIES = 40


def write_file(path: Path, text: str) -> None:
    """``text`` as the whole of the file at ``path``, its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shared = root / ".mevedel" / "shared"
    write_file(shared / "notes.md", "# Notes\nalpha line\nbeta line\nalpha again\n")
    write_file(shared / "a-b.md", "dash file\n")
    write_file(shared / "drafts" / "first.md", "draft one\n")
    write_file(shared / "drafts" / "second.txt", "draft two\n")
    for index in range(BIG_ENTRIES):
        write_file(shared / "big" / f"file-{index:03d}.md", f"entry {index}\n")
    local = root / ".mevedel" / "sessions" / SESSION / "local"
    write_file(local / "plans" / "plan.md", "step one\nstep two\n")
    write_file(root / "memory" / "topic.md", "remembered\n")
    return root


CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(configuration=True, workspace_folders=True),
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown, types.MarkupKind.PlainText]),
        completion=types.CompletionClientCapabilities(
            completion_item=types.ClientCompletionItemOptions(snippet_support=False)
        ),
        document_link=types.DocumentLinkClientCapabilities(tooltip_support=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(),
    ),
)


def initialize_params(root: Path, **options) -> types.InitializeParams:
    return types.InitializeParams(
        capabilities=CAPABILITIES,
        root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="project")],
        initialization_options={"currentSession": SESSION, **options},
    )


def make_client() -> LanguageClient:
    """pytest-lsp's test client, seeing custom results as the JSON an editor
    gets (pygls would turn them into namedtuples)."""
    client = LanguageClient(converter_factory=plain_json_converter)
    register_lsp_features(client)
    return client


SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "mevedel_server"], client_factory=make_client)


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, workspace: Path):
    await lsp_client.initialize_session(initialize_params(workspace))
    yield
    await lsp_client.shutdown_session()


async def open_document(client: LanguageClient, workspace: Path, text: str, name: str = "doc.md") -> str:
    uri = (workspace / name).as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=text)
        )
    )
    return uri


@contextlib.asynccontextmanager
async def one_holding_a_document(workspace: Path, **options) -> AsyncIterator[tuple[LanguageClient, LanguageClient, dict]]:
    """Two servers on ``workspace`` (two editors of one machine, started
    with ``options``), the first holding a document it made and wrote
    ("one"): both clients and the item; each server still running is shut
    down after."""
    one = await SERVER.start()
    two = await SERVER.start()
    try:
        for client in (one, two):
            await client.initialize_session(initialize_params(workspace, **options))
        item = await request(one, methods.ARTIFACT_CREATE, {"kind": "document", "title": "Shared", "content": "v0\n"})
        await request(one, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "one\n"})
        yield one, two, item
    finally:
        for client in (one, two):
            if client._server.returncode is None:
                await client.shutdown_session()
                await client.stop()


def answering(client: LanguageClient, *answers: str | None) -> list[types.ShowMessageRequestParams]:
    """Every question the server asks ``client`` (``window/showMessageRequest``),
    as they come; each is answered with the next of ``answers`` (a title,
    or None: dismissed), the last answering every question after it."""
    questions: list[types.ShowMessageRequestParams] = []

    def asked(params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
        answer = answers[min(len(questions), len(answers) - 1)]
        questions.append(params)
        return None if answer is None else types.MessageActionItem(title=answer)

    client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(asked)
    return questions


def never_answering(client: LanguageClient) -> tuple[list[types.ShowMessageRequestParams], Callable[[], None]]:
    """Every question the server asks ``client``, taken and never answered
    (the user looked away): the server's own limit must end each. With
    what lets the unanswered handlers go (before the client stops)."""
    questions: list[types.ShowMessageRequestParams] = []
    never = asyncio.Event()

    async def silent(params: types.ShowMessageRequestParams) -> None:
        questions.append(params)
        await never.wait()

    client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)(silent)
    return questions, never.set


def collect(client: LanguageClient, method: str) -> list[dict]:
    """Every ``method`` notification the server sends ``client`` from now
    on, as they arrive."""
    received: list[dict] = []

    def notified(params: dict) -> None:
        received.append(params)

    client.feature(method)(notified)
    return received


async def request(client: LanguageClient, method: str, params):
    """A custom request; returns its result or raises the JsonRpcException."""
    return await client.protocol.send_request_async(method, params)


async def raw_request(client: LanguageClient, method: str, params):
    """Send ``params`` exactly as given, even for a standard method whose
    typed request the client would otherwise build (and refuse to build)."""
    import uuid
    from concurrent.futures import Future

    from pygls.protocol import JsonRPCRequestMessage

    protocol = client.protocol
    msg_id = str(uuid.uuid4())
    future: Future = Future()
    protocol._request_futures[msg_id] = future
    protocol._send_data(JsonRPCRequestMessage(id=msg_id, method=method, jsonrpc="2.0", params=params))
    return await asyncio.wrap_future(future)


@pytest.fixture
async def machines(workspace):
    """Start servers standing for machines on one workspace (the control
    transfer tests, in the server and in the CLI); each is shut down after."""
    from .test_control_transfer import start

    started: list = []

    async def make(name: str, **settings):
        return await start(workspace, name, started, **settings)

    yield make
    for client in started:
        if client._server.returncode is None:
            try:
                await asyncio.wait_for(client.shutdown_session(), 60)
            except Exception:
                client._server.kill()


@pytest.fixture
async def raw_servers(tmp_path):
    """Starts servers (``RawClient.start``); kills any a failed test left running."""
    clients: list[raw_client.RawClient] = []

    async def starting(*command: str) -> raw_client.RawClient:
        client = await raw_client.RawClient.start(tmp_path / f"server-{len(clients)}.log", *command)
        clients.append(client)
        return client

    yield starting
    for client in clients:
        if client.process.returncode is None:
            client.process.kill()
            await client.process.wait()


async def ssh_home_server(tmp_path: Path, sshd, limits: str = ""):
    """The language server of a machine whose ``~/.ssh/config`` reaches
    ``sshd`` (with ``limits``), with a workspace folder there: the client,
    the folder's address, the server's log and state directory."""
    from silent_host import ssh_home

    home = ssh_home(tmp_path, sshd, limits)
    project = tmp_path / "remote"
    project.mkdir()
    url, log, state = sshd.url(project), tmp_path / "server.log", tmp_path / "state"
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "mevedel_server", "--log-file", str(log)],
        client_factory=make_client,
        server_env={**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(state)},
    )
    client = await config.start()
    await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), initialization_options={"remoteWorkspaces": [url]},
    ))
    return client, url, log, state


async def stop_server(client) -> None:
    """Ends a server a test started with ``ssh_home_server``, however it stands."""
    if client._server.returncode is None:
        client._server.kill()
        await client._server.wait()
    await client.stop()


async def settled_turn_and_one_open(client, ws: dict) -> str:
    """A new session in ``ws`` with one settled turn and a second begun and
    answered, its settlement left to the test: its ID."""
    sid = (await request(client, methods.SESSION_CREATE, ws))["sessionId"]
    for turn, answer in enumerate(["first answer", "second answer"], 1):
        await request(client, methods.TURN_BEGIN, {**ws, "prompt": f"turn {turn}"})
        await request(client, methods.TURN_APPEND, {**ws, "kind": "response", "text": answer})
        if turn == 1:
            assert (await request(client, methods.TURN_SETTLE, ws))["committed"] is True
    return sid
