"""The proof that a recorded process has ended, on real processes: a child
that reports its own identity, then is killed (reaped or left a zombie),
and the same identity carried to another boot, host or namespace, where
nothing can be proven."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import msgspec
import pytest

from mevedel_server.targets import ProcessIdentity, process_has_ended, this_process

REPORT = "import sys, time, msgspec\nfrom mevedel_server.targets import this_process\n" \
         "sys.stdout.buffer.write(msgspec.json.encode(this_process()) + b'\\n'); sys.stdout.flush(); time.sleep(300)\n"


@pytest.fixture
def child():
    """A live process and the identity it reports for itself."""
    process = subprocess.Popen([sys.executable, "-c", REPORT], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        identity = msgspec.json.decode(process.stdout.readline(), type=ProcessIdentity)
        assert identity.pid == process.pid
        yield process, identity
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_this_process_and_a_live_one_have_not_ended(child):
    process, identity = child
    me = this_process()
    assert me is not None and me.pid == os.getpid()
    assert not process_has_ended(me)
    assert not process_has_ended(identity)
    assert (identity.hostname, identity.boot_id, identity.pid_namespace) == (me.hostname, me.boot_id, me.pid_namespace)


def test_a_killed_process_has_ended_reaped_or_not(child):
    process, identity = child
    process.send_signal(signal.SIGKILL)
    # Waited for without reaping: a zombie, which has exited all the same.
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{process.pid}/stat") as stat:
        assert stat.read().rpartition(")")[2].split()[0] == "Z"
    assert process_has_ended(identity)
    process.wait()
    assert process_has_ended(identity)


def test_a_live_pid_that_started_at_another_time_is_another_process(child):
    _process, identity = child
    reused = msgspec.structs.replace(identity, start_ticks=identity.start_ticks + 1)
    assert process_has_ended(reused)
    me = this_process()
    assert me is not None and process_has_ended(msgspec.structs.replace(me, start_ticks=me.start_ticks - 1))


@pytest.mark.parametrize(
    "elsewhere",
    [
        {"boot_id": "00000000-0000-4000-8000-000000000000"},
        {"hostname": "another-machine"},
        {"pid_namespace": 1},
        {"time_namespace": None},
    ],
    ids=["another boot", "another host", "another PID namespace", "another time namespace"],
)
def test_a_dead_process_recorded_elsewhere_is_never_proven_ended(child, elsewhere):
    process, identity = child
    process.kill()
    process.wait()
    assert process_has_ended(identity)
    assert not process_has_ended(msgspec.structs.replace(identity, **elsewhere))


def test_a_recorded_identity_is_decoded_strictly():
    me = this_process()
    assert me is not None
    encoded = msgspec.json.encode(me)
    assert msgspec.json.decode(encoded, type=ProcessIdentity) == me
    for bad in (encoded.replace(me.boot_id.encode(), b"not-a-boot-id"), encoded.replace(b'"pid":', b'"pid":-')):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(bad, type=ProcessIdentity)
