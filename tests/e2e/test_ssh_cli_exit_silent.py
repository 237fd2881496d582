"""A CLI command whose SSH host goes silent after its answer was printed
(``mevedel prompt`` handing its lease to its client at exit, the host's
network then dropping every packet): the wait is said, naming the host,
and Ctrl-C stops it -- the command ends at once, interrupted, saying what
it left (before, it said nothing for about a minute, until the
connection's keepalives gave up, and a Ctrl-C still waited for the given-up
program's remote process to be ended through the silent connection). A
real OpenSSH server on loopback, stopped with SIGSTOP."""

from __future__ import annotations

import json
import signal
import sys

from settled_prompt import frozen_after_settlement, settled_then_frozen
from silent_host import own_sshd_fixture, silenced
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
