"""What delegating to a sub-agent (the ``Agent`` tool) costs, against a
baseline measured in the same run.

1. Start: a sub-agent task of a new name (``SubAgents.run``: its process
   started, its native session opened, the prompt answered, the task
   recorded) against a root turn of the same agent started the same way
   (``AgentEngine.prompt`` after its process was stopped: started, session
   opened, turn begun, published, answered, settled). Both run the
   scripted agent of ``tests/agents`` as a real subprocess, answering
   ``ok`` at once. Target: the sub-agent adds at most 50 ms (the median
   difference; it is usually cheaper: no turn to begin and settle).
2. The parent's record stays linear: a sub-agent task streaming N message
   chunks adds one short ``agent_task`` line to the parent's turn, whatever
   N (its size does not depend on what the sub-agent said), and one task
   to the sub-agent's own transcript, whose size follows the text, not the
   chunk count (no copy per chunk).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import report, summarize
from mevedel_server.agents.config import AgentConfig, AgentSpec
from mevedel_server.agents.engine import AgentEngine
from mevedel_server.store import ClientIdentity
from mevedel_server.store.content.transcript import AgentTask, encode_line
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

HERE = Path(__file__).resolve().parent
AGENT = HERE.parent / "tests" / "agents" / "scripted_agent.py"
RUNS = int(os.environ.get("MEVEDEL_BENCH_SUBAGENT_RUNS", "12"))


class QuietFront:
    def turn_update(self, update) -> None:
        pass

    async def ask_permission(self, question, timeout: float) -> None:
        return None


def spec(directory: Path, name: str, turns: list) -> AgentSpec:
    script = directory / f"{name}.json"
    script.write_text(json.dumps({"turns": turns}))
    return AgentSpec(name, (sys.executable, str(AGENT), str(script)))


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mevedel-bench-subagents-") as tmp:
        base = Path(tmp)
        root = base / "project"
        root.mkdir()
        helper = spec(base, "helper", [[{"say": "ok"}]])
        parent = spec(base, "parent", [[{"wait_cancel": 600}]])
        chunky = {n: spec(base, f"chunky{n}", [[{"say_many": {"count": n, "text": "x"}}]]) for n in (1000, 10000)}
        config = AgentConfig(agents={s.name: s for s in (helper, parent, *chunky.values())}, default_agent="parent",
                             subagent_max_concurrent=32)
        service = SessionService(LocalTarget(str(root)), ClientIdentity("bench-client", "bench-host"))
        engine = AgentEngine(service, root=str(root), config=lambda: config, front=QuietFront(), log_dir=base / "logs",
                             local_cwd=str(root))
        sid = (await service.sessions.create()).session_id

        # Baseline: a root turn of the helper, its process started anew each time.
        roots: list[float] = []
        for _ in range(RUNS):
            await engine.stop(sid)
            started = time.perf_counter()
            outcome = await engine.prompt(sid, "go", agent="helper")
            roots.append(time.perf_counter() - started)
            assert outcome.outcome == "completed", outcome
        await engine.stop(sid)

        # Sub-agent tasks of new names, inside a parent turn that waits.
        parent_turn = asyncio.ensure_future(engine.prompt(sid, "delegate", agent="parent"))
        # (The session is busy before its agent runs: wait for the turn itself.)
        while (caller := engine.running_agent(sid)) is None or caller.turn is None:
            await asyncio.sleep(0.01)
        subs: list[float] = []
        for index in range(RUNS):
            started = time.perf_counter()
            answer = await engine.delegation.run(caller, "helper", f"helper-{index}", "go")
            subs.append(time.perf_counter() - started)
            assert answer == "ok", answer
        sizes, parent_sizes = {}, {}
        for count, chunk_spec in chunky.items():
            before = len(service.turns.transcript_records(sid))
            await engine.delegation.run(caller, chunk_spec.name, f"chunky-{count}", "stream")
            added = service.turns.transcript_records(sid)[before:]
            tasks = [r for r in added if isinstance(r, AgentTask)]
            assert len(added) == 1 and len(tasks) == 1 and not tasks[0].steps, added
            parent_sizes[count] = len(encode_line(tasks[0]))
            ((_turn, own),) = service.agents.agent_tasks(sid, f"chunky-{count}")
            sizes[count] = len(json.dumps([step.text for step in own.steps]))
        await engine.cancel(sid)
        await parent_turn
        await engine.stop_all()

    root_stats, sub_stats = summarize(roots), summarize(subs)
    added = round(sub_stats["median_ms"] - root_stats["median_ms"], 2)
    rows = [
        {"what": "root turn start (baseline)", **root_stats},
        {"what": "sub-agent task start", **sub_stats},
    ]
    notes = {
        "added_median_ms": added,
        "target": "sub-agent adds at most 50 ms",
        "met": added <= 50,
        "parent_records_added_per_task": 1,
        "parent_record_bytes_1000_chunks": parent_sizes[1000],
        "parent_record_bytes_10000_chunks": parent_sizes[10000],
        "agent_transcript_text_chars_1000_chunks": sizes[1000],
        "agent_transcript_text_chars_10000_chunks": sizes[10000],
        "agent_transcript_growth_ratio_for_10x_chunks": round(sizes[10000] / sizes[1000], 2),
    }
    report("subagents", rows, notes)


if __name__ == "__main__":
    asyncio.run(main())
