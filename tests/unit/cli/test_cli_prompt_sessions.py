"""``mevedel prompt`` across CLI processes and clients: a session comes
back (the last one continues when free; one held elsewhere is refused
naming the holder, never silently replaced), sessions are named by the
agent's title (an explicit name wins) or their first prompt, a fork
becomes the client's session, and what the agent is told is true."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from test_cli_prompt import AGENT

from streamed import read_until


def configure(tmp_path: Path, turns: list, log: Path | None = None) -> None:
    """The agent's script; each ``mevedel prompt`` starts the agent anew,
    so its first turn is what the next prompt does."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns, **({"log": str(log)} if log else {})}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))


def run(workspace: Path, tmp_path: Path, *args: str, client: str = "me") -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / f"state-{client}"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def listed(workspace: Path, tmp_path: Path, client: str = "me") -> dict[str, str]:
    rows = json.loads(run(workspace, tmp_path, "session", "list", "--json", client=client).stdout)["sessions"]
    return {row["session_id"]: row["display_name"] for row in rows}


def prompts_sent(log: Path) -> list[str]:
    texts = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "prompt":
            texts.append("\n".join(block.get("text", "") for block in event["params"]["prompt"]))
    return texts


def test_the_last_session_continues_when_free_and_is_refused_naming_its_holder(workspace, tmp_path):
    configure(tmp_path, [[{"say": "ok"}]])
    first = json.loads(run(workspace, tmp_path, "prompt", "Plan the parser rewrite", "--json").stdout)
    sid = first["session_id"]
    assert run(workspace, tmp_path, "session", "close").returncode == 0  # released: free
    again = run(workspace, tmp_path, "prompt", "Go on")
    assert again.returncode == 0, again.stderr
    assert f"[continuing your last session {sid} (Plan the parser rewrite)" in again.stderr
    assert "`mevedel prompt --new` starts a new one" in again.stderr
    assert list(listed(workspace, tmp_path)) == [sid]
    # Another client (another machine) takes it: no silent new session.
    assert run(workspace, tmp_path, "session", "close").returncode == 0
    assert run(workspace, tmp_path, "session", "open", sid, client="other").returncode == 0
    refused = run(workspace, tmp_path, "prompt", "Mine?", "--json")
    error = json.loads(refused.stdout)["error"]
    assert refused.returncode == 1 and error["kind"] == "lease-held", refused.stdout
    assert f"your last session {sid} (Plan the parser rewrite) is held by " in error["message"]
    assert f"mevedel session take-control {sid}" in error["message"] and "mevedel prompt --new --beside-held" in error["message"]
    assert list(listed(workspace, tmp_path)) == [sid]
    # A new one beside it works on the same files: said, and accepted by the flag.
    beside = json.loads(run(workspace, tmp_path, "prompt", "Something else", "--new", "--json").stdout)["error"]
    assert beside["kind"] == "beside-held-needs-confirmation" and '"Plan the parser rewrite" is held by ' in beside["message"]
    fresh = json.loads(run(workspace, tmp_path, "prompt", "Something else", "--new", "--beside-held", "--json").stdout)
    assert fresh["session_id"] != sid and fresh["turn"] == 1


def test_sessions_are_named_by_the_agents_title_until_named_by_hand(workspace, tmp_path):
    configure(tmp_path, [[{"say": "ok"}]])
    sid = json.loads(run(workspace, tmp_path, "prompt", "Fix the login bug in auth.py, the one with the expired tokens", "--json").stdout)["session_id"]
    # Until a title arrives: its first prompt, within the title limits.
    assert listed(workspace, tmp_path)[sid] == "Fix the login bug…"
    configure(tmp_path, [[{"session_title": "Rewrite   the login flow with tokens and tests"}, {"say": "titled"}]])
    assert run(workspace, tmp_path, "prompt", "More").returncode == 0
    assert listed(workspace, tmp_path)[sid] == "Rewrite the login flow"  # at most four words
    assert "Rewrite the login flow" in run(workspace, tmp_path, "session", "list").stdout
    assert run(workspace, tmp_path, "session", "rename", "Auth work").returncode == 0
    assert run(workspace, tmp_path, "prompt", "Again").returncode == 0  # the agent titles it again
    assert listed(workspace, tmp_path)[sid] == "Auth work"


def test_a_fork_becomes_this_clients_session_and_its_agent_is_told_the_truth(workspace, tmp_path):
    log = tmp_path / "agent.log"
    configure(tmp_path, [[{"write": {"path": "a.txt", "content": "one\n"}}]], log)
    source = json.loads(run(workspace, tmp_path, "prompt", "Write one", "--json").stdout)["session_id"]
    configure(tmp_path, [[{"write": {"path": "a.txt", "content": "two\n"}}]], log)
    assert run(workspace, tmp_path, "prompt", "Write two").returncode == 0
    configure(tmp_path, [[{"say": "forked"}]], log)
    forked = run(workspace, tmp_path, "fork", "1", "--yes")
    assert forked.returncode == 0, forked.stderr
    child = next(sid for sid in listed(workspace, tmp_path) if sid != source)
    assert f"{child} is this client's session now; {source} was saved and released" in forked.stdout
    # Every command goes to the child now.
    turns = json.loads(run(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert turns["session_id"] == child and len(turns["turns"]) == 1
    prompted = json.loads(run(workspace, tmp_path, "prompt", "Carry on", "--json").stdout)
    assert prompted["session_id"] == child and prompted["turn"] == 2
    told = prompts_sent(log)[-1]
    assert (workspace / "a.txt").read_text() == "two\n"
    assert f"forked from session {source} after its turn 1" in told and "the workspace already reflects them" not in told


def test_a_rewind_past_an_interrupted_turn_drops_the_not_finished_cleanly_notice(workspace, tmp_path):
    log = tmp_path / "agent.log"
    configure(tmp_path, [[{"say": "one"}]], log)
    assert run(workspace, tmp_path, "prompt", "First").returncode == 0
    configure(tmp_path, [[{"say": "waiting"}, {"wait_cancel": 60}]], log)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state-me"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    second = subprocess.Popen([sys.executable, "-m", "mevedel_server.cli", "prompt", "Second"], cwd=workspace, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    read_until(second, "waiting")
    second.send_signal(signal.SIGINT)
    assert second.wait(timeout=60) == 130  # interrupted
    rewound = run(workspace, tmp_path, "rewind", "2", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    configure(tmp_path, [[{"say": "three"}]], log)
    assert run(workspace, tmp_path, "prompt", "Third").returncode == 0
    assert "did not finish cleanly" not in prompts_sent(log)[-1]


def test_a_turn_read_back_keeps_its_labels_and_shows_the_reasoning(workspace, tmp_path):
    configure(tmp_path, [[{"think": "First check the file."}, {"say": "Writing."},
                          {"tool_call": {"id": "t1", "title": "Write a.txt", "kind": "edit"}},
                          {"write": {"path": "a.txt", "content": "A\n"}},
                          {"tool_update": {"id": "t1", "status": "completed", "text": "done"}}, {"stop": "max_tokens"}]])
    live = run(workspace, tmp_path, "prompt", "Write a")
    assert "[reasoning] First check the file." in live.stderr  # not a terminal: marked, not dimmed
    # The update named only the status: the call keeps its title.
    assert "[tool Write a.txt: completed]" in live.stderr, live.stderr
    shown = run(workspace, tmp_path, "session", "turn", "1")
    assert shown.returncode == 0, shown.stderr
    for expected in ("── Turn 1 · scripted · completed (max_tokens) ──", "You: Write a", "Reasoning: First check the file.",
                     "[tool Write a.txt · edit]", "Writing."):
        assert expected in shown.stdout, shown.stdout
    turns = json.loads(run(workspace, tmp_path, "session", "turns", "--json").stdout)["turns"]
    assert (turns[0]["agent"], turns[0]["stop_reason"]) == ("scripted", "max_tokens")


def test_an_agent_failure_shows_what_the_agent_last_said_on_stderr(workspace, tmp_path):
    configure(tmp_path, [[{"stderr": "Not logged in · Please run /login"}, {"sleep": 0.2},
                          {"error": {"code": -32603, "message": "Internal error", "data": {"details": "Query closed before response received"}}}]])
    failed = run(workspace, tmp_path, "prompt", "Hi", "--json")
    message = json.loads(failed.stdout)["error"]["message"]
    assert failed.returncode == 2 and "failed the prompt: Internal error" in message, failed.stdout
    assert "it last said on stderr: Not logged in · Please run /login" in message, message


def test_a_turn_opened_by_hand_is_refused_naming_turn_abort(workspace, tmp_path):
    configure(tmp_path, [[{"say": "ok"}]])
    assert run(workspace, tmp_path, "session", "create", "--name", "spike", "--prompt", "Plan it").returncode == 0
    refused = run(workspace, tmp_path, "prompt", "Go")
    assert refused.returncode == 1 and "`mevedel turn abort`" in refused.stderr, refused.stderr
    # It names what began it here, not only `mevedel turn begin`.
    assert "begun by hand with no agent (`mevedel turn begin`, `mevedel session create --prompt`" in refused.stderr, refused.stderr
    assert run(workspace, tmp_path, "turn", "abort").returncode == 0
    assert run(workspace, tmp_path, "prompt", "Go").returncode == 0


def test_after_an_interrupted_turn_the_agent_is_told_what_it_left_unfinished(workspace, tmp_path):
    """The reconciliation notice names the turn and how it ended, the
    command it started with no recorded end and the file it changed, so the
    model checks those instead of guessing."""
    log = tmp_path / "agent.log"
    configure(tmp_path, [[{"write": {"path": "src/a.txt", "content": "half\n"}},
                          {"tool_call": {"id": "c1", "title": "Run make test", "kind": "execute"}},
                          {"say": "waiting"}, {"wait_cancel": 60}]], log)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state-me"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    first = subprocess.Popen([sys.executable, "-m", "mevedel_server.cli", "prompt", "Build it"], cwd=workspace, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    read_until(first, "waiting")
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=60) == 130
    configure(tmp_path, [[{"say": "checked"}]], log)
    assert run(workspace, tmp_path, "prompt", "Go on").returncode == 0
    told = prompts_sent(log)[-1]
    assert "Turn 1 did not finish cleanly: it was interrupted" in told
    assert "'Run make test'" in told and "may still run" in told
    assert "src/a.txt" in told and "Do not replay" in told
    # A clean turn after it leaves the notice behind.
    configure(tmp_path, [[{"say": "fine"}]], log)
    assert run(workspace, tmp_path, "prompt", "Again").returncode == 0
    assert "did not finish cleanly" not in prompts_sent(log)[-1]


def test_a_prompt_turn_whose_settlement_was_refused_is_told_as_that_by_the_next_prompt(workspace, tmp_path):
    """A prompt's turn (its record names the agent) whose settlement the
    store refused stays in flight once the pending save is abandoned: the
    next prompt records it interrupted saying its settlement could not be
    recorded -- not that a prompt was killed, nor that it was begun by hand."""
    import asyncio

    import pytest

    from mevedel_server.store import ClientIdentity, PublicationFailed
    from mevedel_server.store.service import EvidenceInput, SessionService
    from mevedel_server.targets import FaultInjectingTarget, LocalTarget

    configure(tmp_path, [[{"say": "ok"}]])
    assert run(workspace, tmp_path, "prompt", "First").returncode == 0
    sid = json.loads(run(workspace, tmp_path, "session", "list", "--json").stdout)["sessions"][0]["session_id"]
    identity = json.loads((tmp_path / "state-me" / "mevedel" / "cli-client.json").read_text())

    async def a_prompt_whose_settlement_is_refused() -> None:
        target = FaultInjectingTarget(LocalTarget(workspace))
        svc = SessionService(target, ClientIdentity(identity["client_id"], identity["host"]))
        await svc.sessions.open(sid)
        await svc.turns.begin_turn(sid, "Second", agent="scripted")
        await svc.turns.checkpoint(sid)  # a prompt's turn is saved as it starts
        await svc.turns.append(sid, EvidenceInput("response", text="done"))
        target.arm(3, "error")
        with pytest.raises(PublicationFailed):
            await svc.turns.settle(sid)
        await svc.sessions.detach()

    asyncio.run(a_prompt_whose_settlement_is_refused())
    assert run(workspace, tmp_path, "session", "abandon-publication").returncode == 0
    went_on = run(workspace, tmp_path, "prompt", "Third")
    assert went_on.returncode == 0, went_on.stderr
    assert ("[turn 2 was left in flight: the `mevedel prompt` that ran it with scripted could not record its settlement "
            "(the error was shown when it ended); recorded as interrupted]") in went_on.stderr, went_on.stderr
    turns = json.loads(run(workspace, tmp_path, "session", "turns", "--json").stdout)["turns"]
    assert [(t["prompt"], t["state"]) for t in turns] == [("First", "completed"), ("Second", "interrupted"), ("Third", "completed")]
