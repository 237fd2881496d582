"""A ``mevedel`` command on a pseudo-terminal, as a person runs it: what
it prints is read as it comes, keys are written to it (the CLI tests of
line editing, Ctrl-C and questions share it)."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from test_cli_prompt import env


def _a_terminal_session() -> None:
    """In the child: the pseudo-terminal becomes its controlling terminal,
    and the hangup and interrupt signals act as a terminal's shell leaves
    them. A run under ``nohup`` (or a runner that ignores them) would pass
    the ignoring on, and a closed terminal would not end the command."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    for number in (signal.SIGHUP, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)


class Terminal:
    """``mevedel ARGS`` with a pseudo-terminal as its controlling terminal
    and its stdin, stdout and stderr; what it writes is collected."""

    def __init__(self, workspace: Path, tmp_path: Path, *args: str) -> None:
        self.master, self.slave = pty.openpty()
        attributes = termios.tcgetattr(self.slave)
        attributes[3] &= ~termios.ECHO  # what the test types is not output
        termios.tcsetattr(self.slave, termios.TCSANOW, attributes)
        self.output = ""
        self.changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mevedel_server.cli", *args], cwd=workspace, env=env(tmp_path),
            stdin=self.slave, stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=_a_terminal_session,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            with self.changed:
                self.output += data.decode("utf-8", "replace").replace("\r\n", "\n")
                self.changed.notify_all()

    def wait_for(self, text: str, count: int = 1, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        with self.changed:
            while self.output.count(text) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{text!r} never appeared:\n{self.output}"
                self.changed.wait(left)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.slave)
        os.close(self.master)
