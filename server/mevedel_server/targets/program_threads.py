"""The threads a :class:`~.local.LocalTarget` runs its programs on, off the
event loop.

``asyncio.to_thread`` hands each program to the loop's default executor,
whose futures are bridged to the loop's and whose idle threads take work in
turn: measured on a 2-core VM, about 40 us a program more than waking a
thread kept for it, which was a tenth of a small publication (a save of an
artifact version, two flushes and some fifty system calls). Here the
thread that went idle last takes the next program (it is the one the
scheduler still has warm), a program finished is told to its loop with one
``call_soon_threadsafe``, and threads are started only while all are busy,
up to :data:`ProgramThreads.KEPT`; past that, programs wait their turn.

A program is never cut short: awaiting it may be cancelled, but it runs to
its end (as ``to_thread``'s did), and the interpreter's exit waits for the
programs running then, as ``asyncio.run`` waited for the default executor.
A forked child starts with none (the parent's threads do not exist there).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any


class ProgramThreads:
    """Kept threads running blocking calls for event loops."""

    #: At most this many threads (as many as the default executor's);
    #: more programs at once wait for one.
    KEPT = min(32, (os.cpu_count() or 1) + 4)

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._all_idle = threading.Condition(self._lock)
        #: Inboxes of idle threads, the one idle longest first.
        self._idle: list[SimpleQueue] = []
        self._started = 0
        #: Programs handed in and not ended (running or waiting).
        self._busy = 0
        #: Programs waiting for a thread while all are busy.
        self._waiting: deque[tuple] = deque()

    def run(self, function: Callable[[Any], Any], argument: Any) -> asyncio.Future:
        """``function(argument)`` on a kept thread; the running loop's
        future of its result."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        job = (loop, future, function, argument)
        with self._lock:
            self._busy += 1
            if self._idle:
                inbox = self._idle.pop()
            elif self._started < self.KEPT:
                self._started += 1
                inbox = SimpleQueue()
                threading.Thread(target=self._serve, args=(inbox,), name="mevedel-program", daemon=True).start()
            else:
                self._waiting.append(job)
                return future
        inbox.put(job)
        return future

    def _serve(self, inbox: SimpleQueue) -> None:
        job = inbox.get()
        while True:
            loop, future, function, argument = job
            try:
                outcome, failed = function(argument), False
            except BaseException as exc:  # the awaiting task re-raises it
                outcome, failed = exc, True
            # Idle (or on to a waiting program) before the loop hears of
            # this one: the loop's next program then finds this thread.
            with self._lock:
                # This program ended, whether or not a waiting one follows
                # on this thread (it was counted when it was handed in).
                self._busy -= 1
                if self._waiting:
                    job = self._waiting.popleft()
                else:
                    job = None
                    self._idle.append(inbox)
                    if not self._busy:
                        self._all_idle.notify_all()
            try:
                loop.call_soon_threadsafe(_settle, future, outcome, failed)
            except RuntimeError:
                pass  # the loop closed meanwhile: nobody awaits the outcome
            del outcome
            if job is None:
                job = inbox.get()

    def wait_for_running(self) -> None:
        """Return once no program is running or waiting."""
        with self._lock:
            while self._busy:
                self._all_idle.wait()


def _settle(future: asyncio.Future, outcome: Any, failed: bool) -> None:
    if future.cancelled():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


PROGRAM_THREADS = ProgramThreads()
atexit.register(PROGRAM_THREADS.wait_for_running)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PROGRAM_THREADS._reset)
