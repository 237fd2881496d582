"""A ``mevedel prompt`` killed mid-turn, or before its turn began (its agent
still starting), leaves its lease for a minute (after its turn settled too:
``tests/e2e/test_prompt_killed_after_settlement.py``); another client on the same
machine is offered to take the session over at once, and taking it over
settles a killed turn as interrupted. While the prompt lives, the session
stays the other client's to join only; a prompt that ended keeps it for its
own client. Two CLI clients
are two state directories (each its own ``cli-client.json``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from test_cli_prompt import configure

from settled_prompt import frozen_after_settlement, settled_then_frozen
from streamed import read_until


def client_env(tmp_path: Path, client: str) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / f"state-{client}"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def mevedel(workspace: Path, tmp_path: Path, client: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=client_env(tmp_path, client),
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )


def prompt_mid_turn(workspace: Path, tmp_path: Path) -> subprocess.Popen:
    """Client A's ``mevedel prompt``, once its turn is running (its first
    words shown; the agent then waits)."""
    configure(tmp_path, [[{"say": "working on it"}, {"wait_cancel": 120}, {"say": "never"}]])
    process = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Work"], cwd=workspace, env=client_env(tmp_path, "a"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    read_until(process, "working on it")
    return process


def refusal(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 1, done.stdout + done.stderr
    return json.loads(done.stdout)["error"]


def the_session(workspace: Path, tmp_path: Path) -> dict:
    listed = mevedel(workspace, tmp_path, "b", "session", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["sessions"]
    return row


def test_a_killed_prompts_session_is_offered_and_taken_over_at_once(workspace, tmp_path):
    process = prompt_mid_turn(workspace, tmp_path)
    try:
        live = the_session(workspace, tmp_path)
        assert live["action"] == "Join" and not live["holder_ended"]
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    sid = live["session_id"]
    row = the_session(workspace, tmp_path)
    assert row["action"] == "Take over" and row["holder_ended"], row
    shown = mevedel(workspace, tmp_path, "b", "session", "list")
    assert "process ended" in shown.stdout, shown.stdout
    asked = refusal(mevedel(workspace, tmp_path, "b", "session", "open", sid, "--json"))
    assert asked["kind"] == "takeover-needs-confirmation", asked
    assert f"(pid {process.pid}) has ended" in asked["message"] and "if that client has stopped" not in asked["message"]
    taken = mevedel(workspace, tmp_path, "b", "session", "open", sid, "--confirm-takeover", "--json")
    assert taken.returncode == 0, taken.stderr
    opened = json.loads(taken.stdout)
    assert opened["action"] == "takeover" and opened["interrupted_turn"] == 1
    turns = json.loads(mevedel(workspace, tmp_path, "b", "session", "turns", "--session", sid, "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["interrupted"]


def test_a_live_prompts_session_is_refused_to_another_client(workspace, tmp_path):
    process = prompt_mid_turn(workspace, tmp_path)
    try:
        sid = the_session(workspace, tmp_path)["session_id"]
        refused = refusal(mevedel(workspace, tmp_path, "b", "session", "open", sid, "--mode", "resume", "--json"))
        assert refused["kind"] == "lease-held", refused
        forced = mevedel(workspace, tmp_path, "b", "session", "open", sid, "--confirm-takeover")
        assert forced.returncode == 0 and "join" in forced.stdout.lower(), forced.stdout + forced.stderr
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()


def test_a_prompt_that_ended_keeps_its_lease_for_its_client(workspace, tmp_path):
    """A CLI command's lease outlives it by design (its client's next
    command continues it): its ending is no death, and another client joins
    until the lease expires, as before."""
    configure(tmp_path, [[{"say": "done"}]])
    done = mevedel(workspace, tmp_path, "a", "prompt", "Quick")
    assert done.returncode == 0, done.stderr
    row = the_session(workspace, tmp_path)
    assert row["action"] == "Join" and not row["holder_ended"], row
    head = max((workspace / ".mevedel" / "sessions" / row["session_id"] / ".lease").glob("generation-*.json"))
    assert json.loads(head.read_bytes())["holder"] is None  # its exit handed it to the client
    again = mevedel(workspace, tmp_path, "a", "prompt", "Again", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["turn"] == 2, again.stdout + again.stderr


def script_starting(tmp_path: Path, on_initialize: list, turns: list) -> None:
    """The scripted agent's script (``configure`` made the config naming it)
    with steps its ``initialize`` runs, before any turn can begin."""
    (tmp_path / "script.json").write_text(json.dumps({"on_initialize": on_initialize, "turns": turns}))


def lease_head(workspace: Path, sid: str) -> dict:
    head = max((workspace / ".mevedel" / "sessions" / sid / ".lease").glob("generation-*.json"))
    return json.loads(head.read_bytes())


def test_a_prompt_killed_before_its_turn_begins_is_taken_over_at_once(workspace, tmp_path):
    """Client A's second prompt resumes the session (claims its lease), then
    its agent hangs in its start-up: no turn has begun. Killed there, the
    session is client B's to take over at once -- not after the lease's
    expiry -- with no turn to interrupt; while it lives, B is refused."""
    configure(tmp_path, [[{"say": "first answer"}]])
    first = mevedel(workspace, tmp_path, "a", "prompt", "First")
    assert first.returncode == 0, first.stderr
    sid = the_session(workspace, tmp_path)["session_id"]
    started = tmp_path / "never-started"
    script_starting(tmp_path, [{"wait_file": str(started)}], [[{"say": "never"}]])
    process = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Second"], cwd=workspace, env=client_env(tmp_path, "a"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        read_until(process, "[starting scripted]")  # the session is open; the agent's initialize waits
        live = the_session(workspace, tmp_path)
        assert live["action"] == "Join" and not live["holder_ended"], live
        refused = refusal(mevedel(workspace, tmp_path, "b", "session", "open", sid, "--mode", "resume", "--json"))
        assert refused["kind"] == "lease-held", refused
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
        started.touch()  # its orphaned agent, if the end of its stdin has not stopped it yet
    row = the_session(workspace, tmp_path)
    assert row["action"] == "Take over" and row["holder_ended"], row
    taken = mevedel(workspace, tmp_path, "b", "session", "open", sid, "--confirm-takeover", "--json")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    opened = json.loads(taken.stdout)
    assert opened["action"] == "takeover" and opened["interrupted_turn"] is None, opened
    turns = json.loads(mevedel(workspace, tmp_path, "b", "session", "turns", "--session", sid, "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["completed"]


def test_a_prompt_whose_agent_fails_to_start_keeps_its_lease_for_its_client(workspace, tmp_path):
    """A prompt that took the lease and ended before any turn began (its
    agent crashed in its start-up) is a finished command: its lease names no
    process, so another client joins until it expires, as after a turn, and
    its own client's next prompt continues the session."""
    configure(tmp_path, [[{"say": "first answer"}]])
    assert mevedel(workspace, tmp_path, "a", "prompt", "First").returncode == 0
    sid = the_session(workspace, tmp_path)["session_id"]
    generation = lease_head(workspace, sid)["generation"]
    script_starting(tmp_path, [{"crash": 3}], [[{"say": "never"}]])
    failed = mevedel(workspace, tmp_path, "a", "prompt", "Second")
    assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr
    head = lease_head(workspace, sid)
    assert head["generation"] > generation and head["client_id"] and head["holder"] is None, head
    row = the_session(workspace, tmp_path)
    assert row["action"] == "Join" and not row["holder_ended"], row
    configure(tmp_path, [[{"say": "second answer"}]])
    again = mevedel(workspace, tmp_path, "a", "prompt", "Again", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["turn"] == 2, again.stdout + again.stderr


def test_a_prompt_ending_after_its_clients_next_prompt_took_the_lease_leaves_it_alone(workspace, tmp_path):
    """Client A's prompt is stopped after its turn settled, before its exit
    hands the lease to its client; A's next prompt continues the session
    meanwhile (the lease is its client's). The first prompt then ends: the
    lease is the second's now, so it writes nothing over it and says
    nothing -- the second's own exit handed it to the client."""
    configure(tmp_path, [])
    (tmp_path / "script.json").write_text(json.dumps(settled_then_frozen([[{"say": "first answer"}]])))
    first = frozen_after_settlement([sys.executable, "-m", "mevedel_server.cli", "prompt", "First"], cwd=workspace,
                                    env=client_env(tmp_path, "a"))
    try:
        configure(tmp_path, [[{"say": "second answer"}]])
        second = mevedel(workspace, tmp_path, "a", "prompt", "Second", "--json")
        assert second.returncode == 0 and json.loads(second.stdout)["turn"] == 2, second.stdout + second.stderr
        sid = json.loads(second.stdout)["session_id"]
        handed = lease_head(workspace, sid)
        assert handed["holder"] is None, handed
    finally:
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate()
    assert first.returncode == 0 and "first answer" in out, out + err
    assert "lease" not in err, err
    assert lease_head(workspace, sid) == handed
