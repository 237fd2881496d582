"""``mevedel prompt`` while this client's turn runs in another ``mevedel
prompt``: refused with what to do (the running turn's lease left alone),
``--queue`` sends the prompt when that turn settles, ``--steer`` cancels
that turn and sends the prompt at once -- both shown by the process that
runs the turns. Real processes, the scripted ACP agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_cli_prompt import configure, env, mevedel

from killed_turn import kill_once_said
from streamed import read_until


def start(workspace: Path, tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )


def turns(workspace: Path, tmp_path: Path) -> list[tuple[str, str]]:
    listed = json.loads(mevedel(workspace, tmp_path, "session", "turns", "--json").stdout)
    return [(t["prompt"], t["state"]) for t in listed["turns"]]


def history(workspace: Path) -> list[str]:
    """The workspace's input history, oldest first."""
    return json.loads((workspace / ".mevedel" / "input-history").read_text())["entries"]


def test_a_prompt_while_your_turn_runs_elsewhere_is_refused_or_queued_behind_it(workspace, tmp_path):
    release = tmp_path / "release"
    configure(tmp_path, [[{"say": "working"}, {"wait_file": str(release)}, {"say": " done"}], [{"echo_prompt": True}]])
    first = start(workspace, tmp_path, "prompt", "first")
    seen = read_until(first, "working")

    refused = mevedel(workspace, tmp_path, "prompt", "second")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"running in another `mevedel prompt` of yours (pid {first.pid})" in refused.stderr
    assert "--queue" in refused.stderr and "--steer" in refused.stderr

    queued = mevedel(workspace, tmp_path, "prompt", "--queue", "second, queued", "--json")
    assert queued.returncode == 0, queued.stderr
    assert json.loads(queued.stdout)["kind"] == "follow-up" and json.loads(queued.stdout)["runner_pid"] == first.pid
    assert history(workspace) == ["first", "second, queued"]  # accepted: recalled with the up arrow at once
    release.touch()
    out, err = first.communicate(timeout=90)
    assert first.returncode == 0, err
    # The running process sent it, as its own turn, and showed it.
    assert "[sending the queued prompt" in err and "second, queued" in err
    assert "working done" in seen + out and "second, queued" in out
    assert turns(workspace, tmp_path) == [("first", "completed"), ("second, queued", "completed")]


def test_steering_from_another_terminal_cancels_the_running_turn_and_goes_next(workspace, tmp_path):
    configure(tmp_path, [[{"say": "the wrong way"}, {"wait_cancel": 60}, {"say": "never"}], [{"echo_prompt": True}]])
    first = start(workspace, tmp_path, "prompt", "first")
    read_until(first, "the wrong way")
    steered = mevedel(workspace, tmp_path, "prompt", "--steer", "go the other way")
    assert steered.returncode == 0, steered.stderr and "its turn is being cancelled" in steered.stdout
    assert history(workspace)[-1] == "go the other way"
    out, err = first.communicate(timeout=90)
    assert "[steering arrived" in err and "go the other way" in out and "never" not in out
    assert first.returncode == 130  # its own turn was interrupted
    assert turns(workspace, tmp_path) == [("first", "interrupted"), ("go the other way", "completed")]


def test_queue_with_no_other_turn_running_just_sends_it(workspace, tmp_path):
    configure(tmp_path, [[{"echo_prompt": True}]])
    done = mevedel(workspace, tmp_path, "prompt", "--queue", "right away")
    assert done.returncode == 0, done.stderr
    assert "sending it now" in done.stderr and "right away" in done.stdout


def test_the_runner_record_goes_with_the_last_settlement_and_is_back_for_a_queued_turn(workspace, tmp_path):
    release, hold = tmp_path / "release", tmp_path / "hold"
    configure(tmp_path, [
        [{"say": "working"}, {"wait_file": str(release)}, {"say": " done"}],
        [{"say": "queued one running"}, {"wait_file": str(hold)}, {"say": " over"}],
    ])
    first = start(workspace, tmp_path, "prompt", "first")
    read_until(first, "working")
    assert mevedel(workspace, tmp_path, "prompt", "--queue", "second").returncode == 0
    release.touch()
    # The first turn's settlement removed the record; the queued turn's
    # first publication wrote it again: a third prompt queues behind it.
    read_until(first, "queued one running")
    refused = mevedel(workspace, tmp_path, "prompt", "third")
    assert refused.returncode == 1 and f"(pid {first.pid})" in refused.stderr, refused.stderr
    hold.touch()
    _out, err = first.communicate(timeout=90)
    assert first.returncode == 0, err
    assert not list((workspace / ".mevedel").rglob("runner.json"))  # gone with the last settlement
    assert turns(workspace, tmp_path) == [("first", "completed"), ("second", "completed")]


def test_a_killed_prompt_whose_pid_another_prompt_took_counts_as_ended(workspace, tmp_path):
    """The runner record outlives a killed ``mevedel prompt``; its PID,
    reused since by another ``mevedel prompt`` process (of another session,
    say), still names an ended runner: the next prompt goes ahead and records
    the killed one's turn interrupted instead of queueing behind a stranger."""
    configure(tmp_path, [[{"say": "working"}, {"wait_file": str(tmp_path / "never")}]])
    kill_once_said([sys.executable, "-m", "mevedel_server.cli", "prompt", "first"], "working",
                   cwd=workspace, env=env(tmp_path))
    configure(tmp_path, [[{"say": "carrying on"}]])
    (record,) = (workspace / ".mevedel").rglob("runner.json")
    # A process with a command line like a prompt's, given the dead one's PID
    # as a PID reuse would: only its start time tells the two apart.
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "mevedel", "prompt"])
    try:
        written = json.loads(record.read_bytes())
        assert written["process"]["pid"] == written["pid"]
        record.write_text(json.dumps({**written, "pid": stranger.pid, "process": {**written["process"], "pid": stranger.pid}}))
        again = mevedel(workspace, tmp_path, "prompt", "Carry on")
    finally:
        stranger.kill()
        stranger.wait()
    assert again.returncode == 0, again.stderr
    assert (f"turn 1 was left in flight: the `mevedel prompt` running it (pid {stranger.pid}) ended before it settled"
            in again.stderr), again.stderr
    assert "carrying on" in again.stdout
    assert turns(workspace, tmp_path) == [("first", "interrupted"), ("Carry on", "completed")]
