"""Another mevedel server on the same workspace, holding a document: the
other side of test_vscode_workbench.py's read-only-until-handed-over test.

    python hold_artifact.py WORKSPACE TITLE

Starts the real server over stdio (a pygls client), creates the document
TITLE and writes it (its lease is this server's), prints its id on one
line, then serves until stdin closes; asked for the item,
the server hands it over once it has been idle for 10 seconds.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lsprotocol import types
from mevedel_protocol import methods
from pygls.lsp.client import LanguageClient

from mevedel_server.lsp.transport.wire_protocol import plain_json_converter


async def main(workspace: Path, title: str) -> None:
    client = LanguageClient("hold-artifact", "0", converter_factory=plain_json_converter)
    await client.start_io(sys.executable, "-m", "mevedel_server")
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=workspace.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name=workspace.name)],
            # Renewed every second: the hand-over follows the idle rule closely.
            initialization_options={"leaseSeconds": 3},
        )
    )
    client.initialized(types.InitializedParams())
    item = await client.protocol.send_request_async(methods.ARTIFACT_CREATE, {"kind": "document", "title": title, "content": "held\n"})
    await client.protocol.send_request_async(methods.ARTIFACT_WRITE, {"id": item["id"], "content": "held elsewhere\n"})
    print(item["id"], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
