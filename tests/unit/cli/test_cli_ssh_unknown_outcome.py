"""``mevedel rewind --yes`` over SSH when the connection drops in its
program and the host goes away: what a person reads is what may be true and
the command to run once the host is back; that command then answers with
what the host holds. Real CLI processes, a real SSH server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from tests.unit.store.transactions.test_ssh_drops_rewind import _connect, _three_turns


async def mevedel(fault_server, tmp_path: Path, root: Path, *args: str) -> tuple[int, dict, str]:
    home = fault_server.home(tmp_path)
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")}
    # The SSH server answers in this event loop: the CLI runs beside it.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mevedel_server.cli", *args, "--json", "--workspace", fault_server.url(root),
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert b"Traceback" not in out + err, err.decode()
    return process.returncode, json.loads(out), err.decode()


async def settlement_kept_here(fault_server, tmp_path: Path, root: Path, drop: str = "drop-before-run") -> tuple[str, dict]:
    """A new session over SSH whose first turn's settlement the host lost
    (``drop``: before or after running it) as it went away, so that
    ``mevedel turn settle`` kept it on this machine: the session's ID and
    the command's refusal."""
    status, begun, _ = await mevedel(fault_server, tmp_path, root, "turn", "begin", "--new", "first")
    assert status == 0, begun
    sid = begun["session_id"]
    assert (await mevedel(fault_server, tmp_path, root, "turn", "append", "response", "--text", "done"))[0] == 0
    fault_server.when, fault_server.then_unreachable = (b"Barrier", drop), True
    status, told, _ = await mevedel(fault_server, tmp_path, root, "turn", "settle")
    assert status == 1 and told["error"]["kind"] == "publication-pending", told
    return sid, told


async def _three_turns_over_ssh(tmp_path: Path, fault_server) -> tuple[Path, str]:
    """A workspace over SSH whose session has three turns: its root and the session's ID."""
    root = tmp_path / "ws"
    root.mkdir()
    target = await _connect(fault_server, root)
    try:
        return root, await _three_turns(target, root)
    finally:
        await target.close()


async def test_a_rewind_whose_host_went_away_names_the_command_that_answers_once_it_is_back(tmp_path, fault_server):
    root, sid = await _three_turns_over_ssh(tmp_path, fault_server)
    fault_server.when, fault_server.then_unreachable = (b"PutEntry", "drop-after-run"), True
    status, told, logged = await mevedel(fault_server, tmp_path, root, "rewind", "1", "--yes", "--session", sid)
    error = told["error"]
    assert status == 1 and error["kind"] == "unavailable", (told, logged)
    assert error["message"].startswith(f"session {sid}: the rewind may or may not have been applied: the connection to ssh target"), logged
    assert "may be left on the host" in error["message"] and "keeps" not in error["message"]
    assert error["message"].endswith("(run: mevedel rewind --retry-recovery)")
    await fault_server.start()
    status, answer, _ = await mevedel(fault_server, tmp_path, root, "rewind", "--retry-recovery", "--session", sid)
    assert status == 1 and answer["error"]["kind"] == "missing-target", answer
    assert "no Rewind or Redo was left half done; the session holds 1 settled turn" in answer["error"]["message"]
    assert (root / "notes.txt").read_text() == "v1\n"


@pytest.mark.parametrize("drop", ["drop-before-run", "drop-after-run"])
async def test_a_settlement_whose_host_went_away_is_kept_here_until_the_host_answers(tmp_path, fault_server, drop):
    """The pending save could not be recorded on the host and the command
    ends: this machine keeps it, and the retry the person is sent to once
    the host answers records it there and publishes it -- or finds the host
    already holds it -- in another process."""
    root = tmp_path / "ws"
    root.mkdir()
    sid, told = await settlement_kept_here(fault_server, tmp_path, root, drop)
    message = told["error"]["message"]
    assert "it may or may not have been published" in message and "this command ends" not in message
    assert f"the host could not record it, so this machine keeps it (in {tmp_path / 'state' / 'mevedel'})" in message
    assert "once the host answers, mevedel session retry-publication records it there and publishes it" in message
    [spooled] = (tmp_path / "state" / "mevedel" / "unrecorded").glob(f"*/{sid}")
    assert len(list(spooled.glob("pending-*.json"))) == 1
    await fault_server.start()
    status, retried, logged = await mevedel(fault_server, tmp_path, root, "session", "retry-publication")
    if drop == "drop-before-run":
        assert status == 0 and retried["committed"] is True, (retried, logged)
    else:  # the lost program had published it
        assert status == 1 and "has no pending publication to retry" in retried["error"]["message"], (retried, logged)
    assert not spooled.exists()
    assert not (root / ".mevedel" / "sessions" / sid / ".pending-publication").exists()
    _, turns, _ = await mevedel(fault_server, tmp_path, root, "session", "turns")
    assert [t["state"] for t in turns["turns"]] == ["completed"], turns


async def test_a_rewind_whose_connection_dropped_before_it_ran_is_told_undone_and_an_edit_made_then_stays(tmp_path, fault_server):
    """The connection drops as the program is sent, someone edits the file
    the Rewind restores at that moment, and the host answers again: the
    person reads, once, that the Rewind did not happen and can be run
    again -- no publication said to be pending, no command to resolve an
    unknown outcome -- and their edit is still there."""
    root, sid = await _three_turns_over_ssh(tmp_path, fault_server)
    notes = root / "notes.txt"
    fault_server.when, fault_server.struck = (b"PutEntry", "drop-before-run"), lambda: notes.write_text("theirs\n")
    status, told, logged = await mevedel(fault_server, tmp_path, root, "rewind", "1", "--yes", "--session", sid)
    error = told["error"]
    assert status == 1 and error["kind"] == "unavailable", (told, logged)
    message = error["message"]
    assert message.startswith(f"session {sid}: the rewind did not happen: the connection to ssh target"), message
    assert message.count(sid) == 1 and "pending" not in message and "(run:" not in message
    assert message.endswith("so the rewind can be run again"), message
    assert notes.read_text() == "theirs\n"
    status, again, logged = await mevedel(fault_server, tmp_path, root, "rewind", "1", "--yes", "--session", sid)
    assert status == 0, (again, logged)
    assert notes.read_text() == "v1\n"
