"""An ACP agent for benchmarks, on the official SDK: a prompt whose text is
``chunks=N rate=R`` is answered with N message chunks, R a second (0: as
fast as it can), each chunk's text the ``time.monotonic_ns()`` at which it
was sent followed by a space (CLOCK_MONOTONIC is one clock for every
process on the machine, so a receiver can measure each chunk's latency)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import acp
from acp import schema


class ChunkAgent:
    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=protocol_version, agent_capabilities=schema.AgentCapabilities())

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="bench-1")

    async def prompt(self, prompt: list, session_id: str, **kwargs: Any) -> schema.PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt)
        words = dict(part.split("=", 1) for part in text.split() if "=" in part)
        count, rate = int(words.get("chunks", "10")), float(words.get("rate", "0"))
        start = time.monotonic()
        for index in range(count):
            if rate:
                delay = start + index / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            update = acp.update_agent_message_text(f"{time.monotonic_ns()} ")
            await self.conn.session_update(session_id=session_id, update=update)
        return schema.PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(acp.run_agent(ChunkAgent()))
