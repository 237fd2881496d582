"""``mevedel prompt`` as a subprocess against the scripted ACP agent: the
answer streams to stdout, the turn is recorded in the session the CLI
holds, and failures exit non-zero with what to do, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from killed_turn import tree_state
from streamed import read_until

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"


def configure(tmp_path: Path, turns: list, **extra) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, **extra}))
    return config


def env(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def mevedel(workspace: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env(tmp_path),
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )


def test_prompt_streams_the_answer_and_records_the_turn(workspace, tmp_path):
    configure(tmp_path, [[{"say": "Hello "}, {"tool_call": {"id": "t", "title": "Write a", "kind": "edit"}},
                          {"write": {"path": "a.txt", "content": "A\n"}},
                          {"tool_update": {"id": "t", "status": "completed"}}, {"say": "there."}]])
    done = mevedel(workspace, tmp_path, "prompt", "Greet me")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello") and "there." in done.stdout
    assert "[tool Write a" in done.stderr and "Traceback" not in done.stderr
    assert (workspace / "a.txt").read_text() == "A\n"
    again = mevedel(workspace, tmp_path, "prompt", "Again", "--json")
    data = json.loads(again.stdout)
    assert again.returncode == 0 and data["turn"] == 2 and data["outcome"] == "completed"
    turns = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["completed", "completed"]


def test_a_failed_turn_exits_2_and_a_refused_prompt_exits_1_naming_what_to_do(workspace, tmp_path):
    refused = mevedel(workspace, tmp_path, "prompt", "Hi")
    assert refused.returncode == 1 and "no agent is configured" in refused.stderr and "agents" in refused.stderr
    configure(tmp_path, [[{"say": "partial"}, {"crash": 5}]])
    failed = mevedel(workspace, tmp_path, "prompt", "Crash", "--json")
    data = json.loads(failed.stdout)
    assert failed.returncode == 2 and data["outcome"] == "errored" and "status 5" in data["error"]["message"]
    assert "Traceback" not in failed.stderr


def test_ctrl_c_cancels_the_turn_and_exits_130(workspace, tmp_path):
    configure(tmp_path, [[{"say": "waiting for you"}, {"wait_cancel": 30}, {"say": "never"}]])
    process = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Wait"], cwd=workspace, env=env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    seen = read_until(process, "waiting for you")  # the answer streams before the turn ends
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "never" not in seen + out and "interrupted" in err
    turns = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    assert [t["state"] for t in turns["turns"]] == ["interrupted"]


def test_rewind_gives_back_the_exact_tree_a_shell_command_and_an_fs_write_changed(workspace, tmp_path):
    """The issue's own scenario: an executable edited through
    fs/write_text_file keeps its mode; one shell command does chmod,
    mkdir -p, rmdir, mv, ln -s, truncation, a 3 MB file and rm -r; then
    ``mevedel rewind 1 --before --yes`` gives the tree back exactly."""
    (workspace / "app.py").write_text("print('v1')\n")
    os.chmod(workspace / "app.py", 0o755)
    (workspace / "run.sh").write_text("echo run\n")
    (workspace / "secret.txt").write_text("s\n")
    (workspace / "emptydir").mkdir()
    os.chmod(workspace / "emptydir", 0o750)
    (workspace / "old.txt").write_text("old\n")
    (workspace / "empty.txt").write_text("not empty yet\n")
    (workspace / "olddir" / "sub").mkdir(parents=True)
    (workspace / "olddir" / "sub" / "f.txt").write_text("f\n")
    (workspace / "target.txt").write_text("target\n")
    before = tree_state(workspace)
    command = (
        "chmod +x run.sh; chmod 600 secret.txt; mkdir -p new/deep/deeper && echo n > new/deep/deeper/n.txt; "
        "rmdir emptydir; mv old.txt renamed.txt; ln -s target.txt link.txt; : > empty.txt; "
        "head -c 3000000 /dev/urandom > big.bin; rm -r olddir"
    )
    configure(tmp_path, [[
        {"write": {"path": "app.py", "content": "print('v2')\n"}},
        {"terminal": {"command": "sh", "args": ["-c", command]}},
        {"say": "done"},
    ]])
    done = mevedel(workspace, tmp_path, "prompt", "Change the tree")
    assert done.returncode == 0, done.stderr
    assert os.stat(workspace / "app.py").st_mode & 0o7777 == 0o755  # the write kept the executable bit
    assert (workspace / "app.py").read_text() == "print('v2')\n"
    after = tree_state(workspace)

    shown = mevedel(workspace, tmp_path, "rewind", "1", "--before")
    assert shown.returncode == 0, shown.stderr
    for row in ("delete big.bin", "delete link.txt", "delete renamed.txt", "restore old.txt", "chmod 644 run.sh",
                "chmod 644 secret.txt", "create directory emptydir", "create directory olddir", "remove directory new",
                "restore olddir/sub/f.txt", "restore app.py", "restore empty.txt"):
        assert row in shown.stdout, (row, shown.stdout)
    assert "not restored" not in shown.stdout

    rewound = mevedel(workspace, tmp_path, "rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert "delete big.bin" in rewound.stdout and "wrote big.bin" not in rewound.stdout
    assert tree_state(workspace) == before

    states = json.loads(mevedel(workspace, tmp_path, "redo", "--json").stdout)
    turn_one = next(s for s in states["states"] if s["turn_count"] == 1)
    shown = mevedel(workspace, tmp_path, "redo", turn_one["publication_id"])
    # The 3 MB file the turn left is over the snapshot limit: its bytes were
    # never kept, so Redo says it cannot give it back (before changing anything).
    assert "not restored big.bin" in shown.stdout, shown.stdout
    redone = mevedel(workspace, tmp_path, "redo", turn_one["publication_id"], "--yes")
    assert redone.returncode == 0, redone.stderr
    del after["big.bin"]
    assert tree_state(workspace) == after


def test_a_commands_output_is_kept_as_an_execution_log_to_read_and_grep_later(workspace, tmp_path):
    log = tmp_path / "agent-log.jsonl"
    printing = "for i in $(seq 1 20000); do echo \"build line $i of the long log\"; done; echo BUILD-FAILED-AT-THE-END"
    configure(tmp_path, [], executionLogMaxBytes=65536)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"log": str(log), "turns": [[{"terminal": {"command": printing}}, {"say": "built"}]]}))
    done = mevedel(workspace, tmp_path, "prompt", "Build it", "--json")
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in log.read_text().splitlines()]
    created = next(a for a in answers if a.get("method") == "terminal/create")
    address = created["result"]["_meta"]["mevedel"]["outputArtifact"]
    assert address.startswith("artifact://executions/turn-1-for-") and address.endswith(".log")
    waited = next(a for a in answers if a.get("method") == "terminal/wait_for_exit")
    assert waited["result"]["_meta"]["mevedel"]["outputArtifact"] == address
    # After the turn, by a person: the listing names it, Read and Grep reach it.
    listing = mevedel(workspace, tmp_path, "read", "artifact://executions/")
    assert address in listing.stdout, listing.stdout + listing.stderr
    first = mevedel(workspace, tmp_path, "read", address)
    assert first.returncode == 0 and "build line 1 of the long log" in first.stdout
    found = mevedel(workspace, tmp_path, "grep", "BUILD-FAILED", address)
    assert found.returncode == 0 and "BUILD-FAILED-AT-THE-END" in found.stdout
    cut = mevedel(workspace, tmp_path, "grep", "bytes of output cut here", address)
    assert "executionLogMaxBytes 65536" in cut.stdout
    stored = list((workspace / ".mevedel" / "sessions").glob("*/tool-results/executions/*.log"))
    assert len(stored) == 1 and 65536 <= stored[0].stat().st_size <= 65536 + 200  # the cap holds, plus its marker line
    # The command was armed under the unsettled-mutation latch and settled with its turn.
    session = stored[0].parents[2]
    assert not list(session.glob(".mutations/armed-*"))
    assert b'"unsettled_mutation":false' in max(session.glob(".lease/generation-*.json")).read_bytes().replace(b" ", b"")


def test_a_command_a_crashed_owner_left_running_is_told_before_the_next_prompt_and_clears_once_gone(workspace, tmp_path):
    import asyncio

    from mevedel_server.store import ClientIdentity, observe_lease
    from mevedel_server.store.service import SessionService
    from mevedel_server.targets import LocalTarget

    configure(tmp_path, [[{"say": "the agent ran"}]])  # each CLI prompt starts the agent afresh
    assert mevedel(workspace, tmp_path, "prompt", "First").returncode == 0
    sid = json.loads(mevedel(workspace, tmp_path, "session", "list", "--json").stdout)["sessions"][0]["session_id"]
    identity = json.loads((tmp_path / "state" / "mevedel" / "cli-client.json").read_text())
    # An owner process arms the latch and launches a command in its own
    # group, then dies without settling it (the command goes on).
    left = subprocess.Popen(["sleep", "300"], start_new_session=True)

    async def crashed_owner() -> None:
        svc = SessionService(LocalTarget(workspace), ClientIdentity(identity["client_id"], identity["host"]))
        await svc.sessions.open(sid)
        session = svc.session(sid)
        await session.latch.arm(session.lease)
        await session.latch.launched(session.lease, left.pid, "sleep 300", 2, session.time.now())
        await svc.sessions.detach()

    try:
        asyncio.run(crashed_owner())
        assert asyncio.run(observe_lease(LocalTarget(workspace), sid)).record.unsettled_mutation
        told = mevedel(workspace, tmp_path, "prompt", "Carry on")
        assert told.returncode == 1, told.stdout + told.stderr
        assert f"process group {left.pid}" in told.stderr and "sleep 300" in told.stderr and "Traceback" not in told.stderr
        assert asyncio.run(observe_lease(LocalTarget(workspace), sid)).record.unsettled_mutation  # still running: kept
    finally:
        os.killpg(left.pid, signal.SIGKILL)
        left.wait()
    done = mevedel(workspace, tmp_path, "prompt", "Carry on")
    assert done.returncode == 0, done.stderr
    assert "the agent ran" in done.stdout
    assert not asyncio.run(observe_lease(LocalTarget(workspace), sid)).record.unsettled_mutation
    assert not list((workspace / ".mevedel" / "sessions" / sid).glob(".mutations/armed-*"))
