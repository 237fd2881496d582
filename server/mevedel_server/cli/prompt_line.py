"""``mevedel prompt`` with no TEXT on a terminal: the prompt is typed on a
line editor whose history is the workspace's chat input history (the same
``.mevedel/input-history`` the editors' chat inputs step through), so
up/down (and Ctrl-P/Ctrl-N, Ctrl-R) recall what was sent before, from any
front end. GNU readline (or libedit) where Python has it; a plain line
otherwise."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

PROMPT = "prompt> "


def _readline():
    try:
        import readline
    except ImportError:  # a Python built without it: a plain line still works
        return None
    return readline


def read_prompt(history: Sequence[str]) -> str | None:
    """One prompt typed on the terminal, with ``history`` (oldest first) to
    step through; None at end of input (Ctrl-D on an empty line). Ctrl-C
    raises KeyboardInterrupt, as at any shell prompt."""
    readline = _readline()
    if readline is not None:
        readline.clear_history()
        for entry in history:
            readline.add_history(entry)
    with _ctrl_c_interrupts_the_read():
        try:
            # input() writes its prompt to stdout, which may be piped; the
            # question belongs to the terminal, so it goes to stderr when so.
            if sys.stdout.isatty():
                return input(PROMPT)
            sys.stderr.write(PROMPT)
            sys.stderr.flush()
            return input()
        except EOFError:  # Ctrl-D: the terminal echoed no end of line
            sys.stderr.write("\n")
            sys.stderr.flush()
            return None


@contextlib.contextmanager
def _ctrl_c_interrupts_the_read() -> Iterator[None]:
    """The first Ctrl-C raises KeyboardInterrupt in the blocking read on
    this (the main) thread. asyncio.run's own handler only cancels its
    main task, which a blocking read never yields to; and the kernel may
    give the signal to any of the process's threads (executor workers,
    child waiters), which leaves the main thread's read waiting. So the
    handler raises, and a relay thread woken by the signal's wakeup byte
    sends it on to this thread; a second one is ignored."""
    main = threading.get_ident()
    taken = threading.Event()

    def interrupted(_signum, _frame) -> None:
        if not taken.is_set():
            taken.set()
            raise KeyboardInterrupt

    receive, send = os.pipe()
    os.set_blocking(send, False)

    def relay() -> None:
        while not taken.is_set():
            try:
                woke = os.read(receive, 64)
            except OSError:
                return
            if not woke:
                return
            if signal.SIGINT in woke and not taken.is_set():
                signal.pthread_kill(main, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, interrupted)
    previous_fd = signal.set_wakeup_fd(send, warn_on_full_buffer=False)
    thread = threading.Thread(target=relay, name="ctrl-c relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        taken.set()
        signal.set_wakeup_fd(previous_fd)
        os.close(send)
        thread.join()
        os.close(receive)
        signal.signal(signal.SIGINT, previous)


async def typed_prompt(service, note) -> str:
    """The prompt of a ``mevedel prompt`` given no TEXT: typed on the
    terminal with the workspace's input history (a corrupt history is
    renamed aside and told through ``note``). Refused without a terminal,
    and when nothing is typed."""
    from .session_client import CommandError

    if not sys.stdin.isatty():
        raise CommandError("invalid-params", "no TEXT was given and standard input is no terminal to type it on: "
                                             "give the prompt as TEXT, or '-' to read it from standard input")
    try:
        found = await service.sessions.input_history()
        entries, warning = found.entries, found.warning
    except Exception as error:  # the prompt can still be typed, without history
        entries, warning = (), f"the input history could not be read: {getattr(error, 'reason', None) or error}"
    if warning:
        note(f"[{warning}]")
    try:
        text = read_prompt(entries)
    except KeyboardInterrupt:
        sys.stderr.write("\nmevedel: interrupted; nothing was sent\n")
        raise
    if text is None or not text.strip():
        raise CommandError("invalid-params", "the prompt is blank; nothing was sent")
    return text
