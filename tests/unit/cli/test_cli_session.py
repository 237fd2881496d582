"""``mevedel session ...`` and ``mevedel turn ...`` as subprocesses: one CLI
client per user, a turn carried across commands, refusals with kinds and no
tracebacks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, PublicationFailed, read_committed
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import FaultInjectingTarget, LocalTarget


def cli(workspace: Path, state: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args],
        cwd=workspace,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def refused(result: subprocess.CompletedProcess, kind: str) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == kind, error
    return error["message"]


def committed(workspace: Path, sid: str) -> Conversation:
    async def read() -> Conversation:
        snapshot = await read_committed(LocalTarget(workspace), sid)
        return Conversation.restore(await snapshot.read_all())

    return asyncio.run(read())


def test_a_turn_carried_across_commands(workspace, tmp_path):
    me = tmp_path / "me"
    (workspace / "src.py").write_text("old\n")
    begun = ok(cli(workspace, me, "turn", "begin", "--new", "--name", "Scripted", "-", "--json", stdin="fix src.py\n"))
    sid = begun["session_id"]
    assert begun["turn"] == 1 and not begun["reminder"]
    assert ok(cli(workspace, me, "turn", "capture", "src.py", "--json"))["captures"][0]["state"] == "present"
    (workspace / "src.py").write_text("new\n")
    ok(cli(workspace, me, "turn", "append", "tool_call", "--call-id", "c1", "--tool", "edit", "--arguments", "{}", "--json"))
    ok(cli(workspace, me, "turn", "append", "tool_result", "--call-id", "c1", "--output", "edited", "--json"))
    ok(cli(workspace, me, "turn", "append", "response", "--text", "Fixed it.", "--json"))
    settled = ok(cli(workspace, me, "turn", "settle", "--json"))
    assert settled == {"session_id": sid, "committed": True, "materialized": False, "turn": 1, "outcome": "completed"}
    turns = ok(cli(workspace, me, "session", "turns", "--json"))["turns"]
    assert [(t["turn"], t["state"], t["prompt"]) for t in turns] == [(1, "completed", "fix src.py")]
    shown = ok(cli(workspace, me, "session", "turn", "1", "--json"))
    assert [item["kind"] for item in shown["items"]] == ["tool_call", "tool_result", "response"]
    assert "Fixed it." in shown["markdown"]
    fresh = committed(workspace, sid)
    assert fresh.sidecar.display_name == "Scripted" and fresh.sidecar.total_turn_count == 1
    snapshot = fresh.file_snapshots()[0].files["src.py"]
    assert fresh.file_content(snapshot.pre.sha256) == b"old\n" and fresh.file_content(snapshot.post.sha256) == b"new\n"
    assert ok(cli(workspace, me, "session", "rename", "Renamed", "--json"))["display_name"] == "Renamed"
    assert ok(cli(workspace, me, "session", "save", "--json"))["committed"] is True
    assert ok(cli(workspace, me, "session", "close", "--json"))["closed"] is True
    refused(cli(workspace, me, "turn", "begin", "more", "--json"), "owner-missing")  # nothing held any more


def test_create_without_a_prompt_writes_nothing(workspace, tmp_path):
    created = ok(cli(workspace, tmp_path / "me", "session", "create", "--name", "Later", "--json"))
    assert created["materialized"] is False and created["turn"] is None
    assert not (workspace / ".mevedel" / "sessions").exists()
    with_prompt = ok(cli(workspace, tmp_path / "me", "session", "create", "--prompt", "start", "--json"))
    assert with_prompt["materialized"] is True and with_prompt["open_turn"] == 1


def test_create_without_a_prompt_points_at_a_command_that_starts_the_session(workspace, tmp_path):
    """The reserved ID lives only as long as the command: the advice it
    prints is one that works from the next command, name included."""
    me = tmp_path / "me"
    created = cli(workspace, me, "session", "create", "--name", "Later on")
    assert created.returncode == 0, created.stderr
    advice = created.stdout.splitlines()[-1]
    assert advice.endswith("start one with: mevedel turn begin --new --name 'Later on' PROMPT"), advice
    sid = created.stdout.split()[0]
    refused(cli(workspace, me, "turn", "begin", "--session", sid, "first", "--json"), "missing-target")

    begun = ok(cli(workspace, me, "turn", "begin", "--new", "--name", "Later on", "first", "--json"))
    rows = ok(cli(workspace, me, "session", "list", "--json"))["sessions"]
    assert [(r["session_id"], r["display_name"]) for r in rows] == [(begun["session_id"], "Later on")]

def test_another_client_joins_read_only_and_resumes_after_close(workspace, tmp_path):
    me, other = tmp_path / "me", tmp_path / "other"
    sid = ok(cli(workspace, me, "turn", "begin", "--new", "first", "--json"))["session_id"]
    ok(cli(workspace, me, "turn", "settle", "--json"))
    ok(cli(workspace, me, "turn", "begin", "second, left in flight", "--json"))
    rows = ok(cli(workspace, other, "session", "list", "--json"))["sessions"]
    assert [(r["session_id"], r["action"]) for r in rows] == [(sid, "Join")]
    message = refused(cli(workspace, other, "turn", "begin", "--session", sid, "mine now", "--json"), "lease-held")
    assert "held by" in message
    joined = ok(cli(workspace, other, "session", "open", sid, "--json"))
    assert joined["action"] == "join" and joined["access"] == "read-only"
    assert [t["state"] for t in ok(cli(workspace, other, "session", "turns", "--session", sid, "--json"))["turns"]] == [
        "completed",
        "in-flight",
    ]
    ok(cli(workspace, me, "session", "close", "--json"))  # saves the turn in flight and releases
    resumed = ok(cli(workspace, other, "session", "open", sid, "--json"))
    assert resumed["action"] == "resume" and resumed["interrupted_turn"] == 2
    begun = ok(cli(workspace, other, "turn", "begin", "third", "--json"))
    assert begun["turn"] == 3 and begun["reminder"] is True
    aborted = ok(cli(workspace, other, "turn", "abort", "--reason", "user pressed stop", "--json"))
    assert aborted["outcome"] == "interrupted"
    states = [t["state"] for t in ok(cli(workspace, other, "session", "turns", "--json"))["turns"]]
    assert states == ["completed", "interrupted", "interrupted"]


def test_a_session_held_elsewhere_is_refused_naming_how_to_ask_for_it(workspace, tmp_path):
    """The spec's joined view offers Request control; the refusal a command
    gets for a held session names that command, and the read-only join."""
    me, other = tmp_path / "me", tmp_path / "other"
    sid = ok(cli(workspace, me, "turn", "begin", "--new", "first", "--json"))["session_id"]
    message = refused(cli(workspace, other, "turn", "begin", "--session", sid, "mine now", "--json"), "lease-held")
    assert message.endswith(
        f"; ask its holder for control with: mevedel session take-control {sid} (or join it read-only: mevedel session open {sid})"
    ), message

def test_refusals_are_one_line_with_a_kind(workspace, tmp_path):
    me = tmp_path / "me"
    refused(cli(workspace, me, "session", "open", "not-a-session", "--json"), "missing-target")  # read as a name
    refused(cli(workspace, me, "session", "open", "2026-07-19T09-47-bf87b5dd793a", "--json"), "missing-target")
    refused(cli(workspace, me, "session", "list", "--workspace", str(tmp_path / "nowhere"), "--json"), "missing-target")
    ok(cli(workspace, me, "turn", "begin", "--new", "x", "--json"))
    refused(cli(workspace, me, "turn", "append", "tool_result", "--call-id", "nope", "--output", "x", "--json"), "conflict")
    refused(cli(workspace, me, "turn", "capture", "../outside.txt", "--json"), "invalid-params")
    plain = cli(workspace, me, "turn", "append", "response", "--json", "--text")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr  # usage error
    human = cli(workspace, me, "session", "open", "bogus")
    assert human.returncode == 1 and human.stderr.startswith("mevedel: ") and human.stderr.count("\n") == 1


def test_compact_and_clear_rotate_the_committed_segments(workspace, tmp_path):
    me = tmp_path / "me"
    sid = ok(cli(workspace, me, "turn", "begin", "--new", "--name", "Rotated", "first", "--json"))["session_id"]
    message = refused(cli(workspace, me, "session", "compact", "--summary", "too early", "--json"), "conflict")
    assert message.startswith(f"session {sid} has turn 1 in flight")
    ok(cli(workspace, me, "turn", "append", "response", "--text", "first answer", "--json"))
    ok(cli(workspace, me, "turn", "settle", "--json"))
    blank = refused(cli(workspace, me, "session", "compact", "--summary", " ", "--json"), "invalid-params")
    assert blank.startswith('summary " ": is blank')
    compacted = ok(cli(workspace, me, "session", "compact", "--summary", "-", "--json", stdin="The first answer.\n"))
    assert compacted == {"session_id": sid, "segment": 2, "previous_segment": 1, "chapter": None, "committed": True}
    fresh = committed(workspace, sid)
    assert fresh.current_segment == 2 and fresh.records(2)[1].text == "The first answer.\n"
    ok(cli(workspace, me, "turn", "begin", "second", "--json"))
    ok(cli(workspace, me, "turn", "settle", "--json"))
    cleared = cli(workspace, me, "session", "clear")
    assert cleared.returncode == 0 and cleared.stdout.startswith(f"{sid}: chapter 1 closed (segment 2)")
    fresh = committed(workspace, sid)
    assert fresh.current_segment == 3 and [c.last_segment for c in fresh.sidecar.chapters] == [2]
    assert fresh.sidecar.display_name == "Rotated"
    again = refused(cli(workspace, me, "session", "clear", "--json"), "conflict")  # the new chat has no turns
    assert again.startswith(f"session {sid} cannot be cleared")



def test_a_failed_settle_survives_its_process_and_the_next_command_retries_it(workspace, tmp_path):
    me = tmp_path / "me"
    sid = ok(cli(workspace, me, "turn", "begin", "--new", "first", "--json"))["session_id"]
    ok(cli(workspace, me, "turn", "settle", "--json"))
    identity = json.loads((me / "mevedel" / "cli-client.json").read_text())

    async def a_process_whose_settle_fails() -> None:
        target = FaultInjectingTarget(LocalTarget(workspace))
        svc = SessionService(target, ClientIdentity(identity["client_id"], identity["host"]))
        await svc.sessions.open(sid)
        await svc.turns.begin_turn(sid, "the pending turn")
        await svc.turns.append(sid, EvidenceInput("response", text="kept across processes"))
        target.arm(3, "error")  # the publication fails
        with pytest.raises(PublicationFailed):
            await svc.turns.settle(sid)
        await svc.sessions.detach()  # and the process ends

    asyncio.run(a_process_whose_settle_fails())
    session = workspace / ".mevedel" / "sessions" / sid
    assert (session / ".pending-publication").is_dir()
    opened = ok(cli(workspace, me, "session", "open", sid, "--json"))
    assert "did not publish" in opened["pending_publication"]
    shown = cli(workspace, me, "session", "open", sid)
    assert "mevedel session retry-publication" in shown.stdout
    refused(cli(workspace, me, "turn", "begin", "blocked", "--json"), "publication-pending")
    assert ok(cli(workspace, me, "session", "retry-publication", "--json"))["committed"] is True
    assert committed(workspace, sid).sidecar.total_turn_count == 2
    turns = ok(cli(workspace, me, "session", "turns", "--json"))["turns"]
    assert [(t["turn"], t["state"], t["prompt"]) for t in turns] == [(1, "completed", "first"), (2, "completed", "the pending turn")]
    assert ok(cli(workspace, me, "session", "abandon-publication", "--json"))["abandoned"] is False
    assert not (session / ".pending-publication").exists()


def unprovable_latch_left(workspace: Path, me: Path) -> str:
    """A session of this CLI client (state ``me``) whose owner process
    armed the unsettled-mutation latch and died before recording the
    command's group; its id."""
    sid = ok(cli(workspace, me, "turn", "begin", "--new", "first", "--json"))["session_id"]
    ok(cli(workspace, me, "turn", "settle", "--json"))
    identity = json.loads((me / "mevedel" / "cli-client.json").read_text())

    async def owner_dies_between_the_latch_and_its_record() -> None:
        svc = SessionService(LocalTarget(workspace), ClientIdentity(identity["client_id"], identity["host"]))
        await svc.sessions.open(sid)
        session = svc.session(sid)
        await session.latch.arm(session.lease)
        await svc.sessions.detach()

    asyncio.run(owner_dies_between_the_latch_and_its_record())
    return sid


def test_an_unprovable_unsettled_mutation_is_acknowledged_from_the_cli(workspace, tmp_path):
    me = tmp_path / "me"
    sid = unprovable_latch_left(workspace, me)
    assert ok(cli(workspace, me, "session", "acknowledge-mutation", "--json")) == {"session_id": sid, "cleared": True}
    assert ok(cli(workspace, me, "session", "acknowledge-mutation", "--json"))["cleared"] is False


async def turn_written_elsewhere(workspace, prompt: str, record) -> str:
    """A session of another client (another process) whose one turn,
    ``prompt``, ``record(service, session_id)`` filled before it settled,
    saved and closed; its id."""
    svc = SessionService(LocalTarget(workspace), ClientIdentity("client-writer", "workstation"))
    try:
        sid = (await svc.sessions.create()).session_id
        await svc.turns.begin_turn(sid, prompt)
        await record(svc, sid)
        await svc.turns.settle(sid, "completed")
        await svc.sessions.save(sid)
        await svc.sessions.close(sid)
        return sid
    finally:
        await svc.sessions.detach()


def test_a_turn_read_back_names_the_agent_call_that_started_each_task(workspace, tmp_path):
    """Two Agent calls in parallel, the second's task settling first: each
    task read back names its own call (what a chat nests it under), saved
    and read by another process; a task recorded without one (as before
    tasks named their call) names none, and its line still reads."""

    async def delegate(svc, sid) -> None:
        for call in ("call-first", "call-second"):
            await svc.turns.append(sid, EvidenceInput("tool_call", call_id=call, name="mcp Agent", arguments="{}"))
        said = [EvidenceInput("response", text="Done.")]
        svc.agents.append_agent_task(sid, "second", "codex", "Second task", said, "completed", call_id="call-second")
        await svc.turns.append(sid, EvidenceInput("tool_result", call_id="call-second", output="Done."))
        svc.agents.append_agent_task(sid, "first", "codex", "First task", said, "completed", call_id="call-first")
        await svc.turns.append(sid, EvidenceInput("tool_result", call_id="call-first", output="Done."))
        svc.agents.append_agent_task(sid, "old", "codex", "Anything", said, "completed")

    sid = asyncio.run(turn_written_elsewhere(workspace, "Delegate two at once", delegate))
    items = ok(cli(workspace, tmp_path / "me", "session", "turn", "1", "--session", sid, "--json"))["items"]
    assert [(i["name"], i.get("parent_call_id")) for i in items if i["kind"] == "agent_task"] == [
        ("second", "call-second"), ("first", "call-first"), ("old", None),
    ], items
    # Read as text, each task is under its own call, the one without a
    # call where it settled.
    text = cli(workspace, tmp_path / "me", "session", "turn", "1", "--session", sid).stdout
    said = [line.strip() for line in text.splitlines() if line.startswith(("[tool", "  [agent", "[agent"))]
    assert said == ["[tool mcp Agent]", "[agent first (codex): completed]", "[tool mcp Agent]",
                    "[agent second (codex): completed]", "[agent old (codex): completed]"], text
    # The agent's own transcript keeps it too (its task read whole).
    own = committed(workspace, sid).agent_tasks("first")
    assert [task.call_id for task in own] == ["call-first"]


def test_a_turn_read_back_says_how_each_sub_agents_task_ended_and_why(workspace, tmp_path):
    """Tasks another client recorded: one that failed, with its reason; one
    interrupted; one recorded without a reason (as before tasks kept one):
    its outcome, and nothing made up for why."""

    async def delegate(svc, sid) -> None:
        said = [EvidenceInput("response", text="Trying.")]
        svc.agents.append_agent_task(sid, "broken", "codex", "Try this", said, "errored", "could not start: codex is not installed")
        svc.agents.append_agent_task(sid, "slow", "codex", "Take your time", said, "interrupted", "cancelled with its caller's turn")
        svc.agents.append_agent_task(sid, "old", "codex", "Anything", said, "errored")

    sid = asyncio.run(turn_written_elsewhere(workspace, "Delegate three times", delegate))
    shown = cli(workspace, tmp_path / "me", "session", "turn", "1", "--session", sid)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    lines = shown.stdout.splitlines()
    assert "[agent broken (codex): errored: could not start: codex is not installed]" in lines, shown.stdout
    assert "[agent slow (codex): interrupted: cancelled with its caller's turn]" in lines, shown.stdout
    assert "[agent old (codex): errored]" in lines, shown.stdout
    items = ok(cli(workspace, tmp_path / "me", "session", "turn", "1", "--session", sid, "--json"))["items"]
    assert [(i["name"], i["outcome"], i.get("reason")) for i in items if i["kind"] == "agent_task"] == [
        ("broken", "errored", "could not start: codex is not installed"),
        ("slow", "interrupted", "cancelled with its caller's turn"),
        ("old", "errored", None),
    ], items
