"""An editor's idle language server carries neither the ACP nor the MCP
SDK: they load with the first agent or MCP server (their memory is most of
an idle server's; bench/bench_lsp_memory.py measures it). Nor does a server
that has just been built carry the store's, the resolver's or the artifact
store's machinery: it answers ``initialize`` without them, and they load with
the folders' services (``initialized``) or the first request that needs them
(bench/bench_lsp_startup.py measures the start)."""

from __future__ import annotations

import subprocess
import sys


def modules_of_a_built_server() -> set[str]:
    """The modules a fresh process holds once it built the server."""
    probe = (
        "import sys\n"
        "from mevedel_server.lsp import FEATURES, build_server\n"
        "build_server(FEATURES)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_a_built_server_has_loaded_no_agent_or_mcp_sdk():
    assert sorted({name.split(".")[0] for name in modules_of_a_built_server()} & {"acp", "mcp", "pydantic"}) == []


#: What a built server may hold of those packages: the refusals its
#: handlers catch, and the agent package's SDK import hook.
LIGHT = {
    "mevedel_server.store.errors",
    "mevedel_server.artifacts.errors",
    "mevedel_server.agents",
    "mevedel_server.agents.errors",
    "mevedel_server.agents.sdk_import",
}


def test_a_built_server_has_loaded_no_store_resolver_or_artifact_machinery():
    machinery = tuple(f"mevedel_server.{m}" for m in ("store.", "resources.", "artifacts.", "tool_server.", "mcp_client.", "agents"))
    loaded = {name for name in modules_of_a_built_server() if name.startswith(machinery)}
    assert sorted(loaded - LIGHT) == []


#: The message modules a built server needs: its settings (and the converter
#: they decode with), the error data it answers with, and the method names
#: and catalog its handlers are registered from.
PROTOCOL_AT_START = {
    "mevedel_protocol",
    "mevedel_protocol.catalog",
    "mevedel_protocol.converter",
    "mevedel_protocol.errors",
    "mevedel_protocol.methods",
    "mevedel_protocol.settings",
}


def test_a_built_server_has_made_no_message_class_of_a_request():
    # Creating every params and result class (attrs compiles their methods)
    # was about 60 ms of a 500 ms start; a request's classes come with its first call.
    loaded = {name for name in modules_of_a_built_server() if name.split(".")[0] == "mevedel_protocol"}
    assert sorted(loaded - PROTOCOL_AT_START) == []
