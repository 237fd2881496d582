"""The kept threads a local target runs its programs on: outcomes reach the
awaiting task, a program is never cut short (a cancelled wait, more
programs than threads, the interpreter's exit), and one thread serves a
run of programs one after another."""

import asyncio
import subprocess
import sys
import threading

import pytest

from mevedel_server.targets.program_threads import ProgramThreads


async def test_a_result_and_an_exception_reach_the_awaiting_task_from_another_thread():
    threads = ProgramThreads()
    assert await threads.run(lambda x: (x * 2, threading.get_ident()), 21) != (42, threading.get_ident())
    assert (await threads.run(lambda x: x * 2, 21)) == 42

    def refuse(_):
        raise PermissionError("no")

    with pytest.raises(PermissionError, match="no"):
        await threads.run(refuse, None)


async def test_programs_one_after_another_run_on_one_thread():
    threads = ProgramThreads()
    idents = {await threads.run(lambda _: threading.get_ident(), None) for _ in range(20)}
    assert len(idents) == 1


async def test_more_programs_than_threads_wait_their_turn_and_all_finish():
    threads = ProgramThreads()
    threads.KEPT = 2
    release = threading.Event()
    running = []

    def program(n):
        running.append(n)
        release.wait(30)
        return n

    futures = [threads.run(program, n) for n in range(5)]
    while len(running) < 2:
        await asyncio.sleep(0.01)
    assert len(running) == 2 and not any(f.done() for f in futures)  # two threads, three waiting
    release.set()
    assert await asyncio.gather(*futures) == list(range(5))
    assert sorted(running) == list(range(5))


async def test_a_cancelled_wait_leaves_its_program_running_to_its_end():
    threads = ProgramThreads()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def program(_):
        started.set()
        release.wait(30)
        finished.set()

    task = asyncio.ensure_future(threads.run(program, None))
    while not started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.to_thread(threads.wait_for_running)
    assert finished.is_set()


def test_the_interpreter_exits_after_more_programs_than_threads_ran_at_once():
    """Programs that waited for a thread (more at once than are kept) end
    like the others: the interpreter's exit, which waits for running
    programs, does not wait forever for ones that ended."""
    script = """
import asyncio, threading
from mevedel_server.targets.program_threads import PROGRAM_THREADS, ProgramThreads

gate = threading.Event()

def program(n):
    gate.wait(30)
    return n

async def main():
    runs = [PROGRAM_THREADS.run(program, n) for n in range(ProgramThreads.KEPT + 3)]
    gate.set()
    assert await asyncio.gather(*runs) == list(range(ProgramThreads.KEPT + 3))

asyncio.run(main())
print("ran")
"""
    # The bound only tells a hang from an exit: the script runs in well
    # under a second.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr


def test_the_interpreter_exits_only_once_a_running_program_ended(tmp_path):
    """A command interrupted while a program runs (its task cancelled, the
    loop closed) still lets the program finish before the process ends."""
    done = tmp_path / "done"
    script = f"""
import asyncio, time
from mevedel_server.targets.program_threads import PROGRAM_THREADS

def program(_):
    time.sleep(0.5)
    open({str(done)!r}, "w").write("finished")

async def main():
    task = asyncio.ensure_future(PROGRAM_THREADS.run(program, None))
    await asyncio.sleep(0.05)
    task.cancel()

asyncio.run(main())
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert done.read_text() == "finished"


def test_a_forked_child_starts_with_no_threads_of_its_parent():
    """After fork the parent's threads do not exist in the child: a program
    the child runs starts a thread of its own instead of waiting forever
    for an inbox nobody reads."""
    script = """
import asyncio, os, sys
from mevedel_server.targets.program_threads import PROGRAM_THREADS

async def once():
    return await PROGRAM_THREADS.run(lambda x: x + 1, 1)

assert asyncio.run(once()) == 2
pid = os.fork()
if pid == 0:
    ok = asyncio.run(asyncio.wait_for(once(), 10)) == 2
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 0


