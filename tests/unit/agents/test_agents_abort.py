"""``AgentEngine.abort`` of a turn whose prompt has not gone to the agent
yet (the turn is published, its agent started): the agent is never handed
the prompt, and the turn settles as aborted at once. A real engine, a real
session service on this machine, the scripted ACP agent as a subprocess."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mevedel_server.agents import AgentEngine
from mevedel_server.agents.config import AgentConfig, specs_from
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"


class Front:
    def __init__(self) -> None:
        self.phases: list[str] = []

    def turn_update(self, update) -> None:
        self.phases.append(update.phase)

    async def ask_permission(self, question, timeout: float) -> str | None:
        return None


async def test_a_turn_aborted_before_its_prompt_went_is_never_sent_to_the_agent(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    log, script = tmp_path / "events.jsonl", tmp_path / "script.json"
    script.write_text(json.dumps({"log": str(log), "turns": [[
        {"write": {"path": "dispatched.txt", "content": "the prompt reached the agent\n"}},
        {"wait_file": str(tmp_path / "never")},
    ]]}))
    config = AgentConfig(agents=specs_from({"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}),
                         default_agent="scripted", cancel_timeout_seconds=1)
    service = SessionService(LocalTarget(root), ClientIdentity("client-me", "workstation"))
    sid = (await service.sessions.create()).session_id
    front = Front()
    engine = AgentEngine(service, root=str(root), config=lambda: config, front=front, log_dir=tmp_path / "logs")
    aborting: list[asyncio.Future] = []

    async def begun(turn: int) -> None:
        # The user aborts as the published turn is about to be sent.
        aborting.append(asyncio.ensure_future(engine.abort(sid, "stopped at once")))
        await asyncio.sleep(0)

    try:
        outcome = await engine.prompt(sid, "Write something", on_begun=begun)
        aborted = await aborting[0]
        assert aborted is not None and aborted.turn == 1 and aborted.saved is not None and aborted.saved.committed
        events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
        assert "prompt" not in events and not (root / "dispatched.txt").exists()
        assert outcome.outcome == "interrupted" and outcome.turn == 1
        assert "cancelling" in front.phases and front.phases[-1] == "settled"
        (summary,) = await service.turns.summaries(sid)
        assert summary.state == "interrupted" and summary.reason == "stopped at once"
    finally:
        await engine.stop_all()
        await service.sessions.close_all()
