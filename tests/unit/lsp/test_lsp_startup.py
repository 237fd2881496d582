"""An editor's idle language server carries neither the ACP nor the MCP
SDK: they load with the first agent or MCP server (their memory is most of
an idle server's; bench/bench_lsp_memory.py measures it)."""

from __future__ import annotations

import subprocess
import sys


def test_a_built_server_has_loaded_no_agent_or_mcp_sdk():
    probe = (
        "import sys\n"
        "from mevedel_server.lsp import FEATURES, build_server\n"
        "build_server(FEATURES)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'acp', 'mcp', 'pydantic'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
