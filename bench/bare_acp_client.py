"""The baseline of ``bench_cli_startup.py``'s prompt case: a bare ACP
client on the official SDK, nothing else. It starts the agent given on its
command line, sends one prompt in a new session and writes each message
chunk to stdout as it arrives, then exits -- what ``mevedel prompt`` does
with no session store, tool host or terminal front between.

    python bare_acp_client.py PROMPT -- AGENT_COMMAND...
"""

from __future__ import annotations

import asyncio
import os
import sys

import acp
from acp import schema


class Client:
    def on_connect(self, conn) -> None:
        pass

    async def session_update(self, session_id: str, update, **kwargs) -> None:
        text = getattr(getattr(update, "content", None), "text", None)
        if getattr(update, "session_update", "") == "agent_message_chunk" and text:
            sys.stdout.write(text)
            sys.stdout.flush()


async def main(prompt: str, agent: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        *agent, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=acp.core.DEFAULT_STDIO_BUFFER_LIMIT_BYTES
    )
    conn = acp.connect_to_agent(Client(), process.stdin, process.stdout)
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=schema.ClientCapabilities())
    session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
    await conn.prompt(session_id=session.session_id, prompt=[schema.TextContentBlock(type="text", text=prompt)])
    sys.stdout.write("\n")
    sys.stdout.flush()
    await conn.close()
    process.stdin.close()
    await process.wait()


if __name__ == "__main__":
    split = sys.argv.index("--")
    asyncio.run(main(sys.argv[1], sys.argv[split + 1 :]))
