"""A CLI command whose SSH host goes silent after its answer was printed
(``mevedel prompt`` handing its lease to its client at exit, the host's
network then dropping every packet): the wait is said, naming the host,
and Ctrl-C stops it -- the command ends at once, interrupted, saying what
it left (before, it said nothing for about a minute, until the
connection's keepalives gave up, and a Ctrl-C still waited for the given-up
program's remote process to be ended through the silent connection). So
does every other command that holds an SSH target: ``mevedel apply-patch``
(as ``read``, ``glob`` and ``grep`` end) given up on with Ctrl-C while its
program waited on the host, and ``mevedel mcp`` whose client ended its
input while a call still ran there. A real OpenSSH server on loopback,
stopped with SIGSTOP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from settled_prompt import frozen_after_settlement, settled_then_frozen
from silent_host import held_lock, own_sshd_fixture, silenced, waiting_for_lock
from ssh_fixtures import ALIAS
from streamed import read_until

from .test_ssh_control_cli import client
from .test_ssh_workspace import ssh_home

own_sshd = own_sshd_fixture


def test_a_prompt_whose_host_goes_silent_at_exit_says_so_and_ctrl_c_ends_it(own_sshd, tmp_path):
    project = tmp_path / "remote project"
    project.mkdir()
    owner = client(tmp_path, ssh_home(tmp_path, own_sshd), "owner")
    (tmp_path / "owner-script.json").write_text(json.dumps(settled_then_frozen([[{"say": "all done"}]])))
    prompt = frozen_after_settlement(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Finish it", "--workspace", f"ssh://{ALIAS}{project}"], env=owner,
    )
    with silenced(own_sshd):
        prompt.send_signal(signal.SIGCONT)  # on to its exit: the lease's hand-over, on a host that no longer answers
        said = read_until(prompt, "Ctrl-C stops waiting", stderr=True)
        assert f"still finishing on the SSH host {ALIAS}" in said, said
        prompt.send_signal(signal.SIGINT)
        out, err = prompt.communicate(timeout=120)
    assert "all done" in out, out
    assert prompt.returncode == 130, err
    assert f"stopped waiting for {ALIAS}" in err and "taken over at once" in err, err
    assert "Traceback" not in said + err

#: A note for the next agent (``work://shared/`` is written without a
#: session): its write waits for the workspace's lock on the host.
HANDOFF = "*** Begin Patch\n*** Add File: work://shared/handoff.md\n+for the next agent\n*** End Patch\n"


def test_a_patch_given_up_on_a_host_gone_silent_says_the_wait_and_a_second_ctrl_c_ends_it(own_sshd, tmp_path):
    # ``mevedel apply-patch`` ends as ``read``, ``glob`` and ``grep`` do; its
    # program waits on the host at a known point (the workspace's lock,
    # held here), which the host's silence then freezes.
    project = tmp_path / "remote project"
    project.mkdir()
    change = tmp_path / "change.patch"
    change.write_text(HANDOFF)
    env = client(tmp_path, ssh_home(tmp_path, own_sshd), "owner")
    lock = held_lock(project)
    try:
        patch = subprocess.Popen(
            [sys.executable, "-m", "mevedel_server.cli", "apply-patch", str(change), "--workspace", f"ssh://{ALIAS}{project}"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        waiting_for_lock(own_sshd)
        with silenced(own_sshd):
            patch.send_signal(signal.SIGINT)  # the person gives up on a command that does not end
            said = read_until(patch, "Ctrl-C stops waiting", stderr=True)
            assert f"still finishing on the SSH host {ALIAS}" in said, said
            patch.send_signal(signal.SIGINT)
            out, err = patch.communicate(timeout=120)
    finally:
        os.close(lock)
    assert patch.returncode == 130, out + err
    assert f"stopped waiting for {ALIAS}" in err, err
    assert "Traceback" not in said + err


def test_mcp_whose_host_goes_silent_with_a_call_running_as_its_client_ends_says_so_and_ctrl_c_ends_it(own_sshd, tmp_path):
    # An agent ends the server by ending its input, with an ApplyPatch still
    # waiting on the host (the workspace's lock, held here); the host then
    # stops answering. What is said goes to standard error, the agent's log:
    # standard output stays the MCP wire.
    project = tmp_path / "remote project"
    project.mkdir()
    env = client(tmp_path, ssh_home(tmp_path, own_sshd), "owner")
    served = subprocess.Popen(
        [sys.executable, "-m", "mevedel_server.cli", "mcp", "--workspace", f"ssh://{ALIAS}{project}"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _send(served, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "agent", "version": "1"}}})
    assert json.loads(served.stdout.readline())["id"] == 1
    _send(served, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    lock = held_lock(project)
    try:
        _send(served, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ApplyPatch", "arguments": {"patch": HANDOFF}}})
        waiting_for_lock(own_sshd)
        with silenced(own_sshd):
            stdin, served.stdin = served.stdin, None
            stdin.close()  # the agent ends the server
            said = read_until(served, "Ctrl-C stops waiting", stderr=True)
            assert f"still finishing on the SSH host {ALIAS}" in said, said
            served.send_signal(signal.SIGINT)
            out, err = served.communicate(timeout=120)
    finally:
        os.close(lock)
    assert served.returncode == 130, err
    assert f"stopped waiting for {ALIAS}" in err, err
    assert "Traceback" not in said + err
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in out.splitlines()), out


def _send(process: subprocess.Popen, message: dict) -> None:
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()
