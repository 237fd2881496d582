"""``LocalTarget``: a target root on this machine's filesystem.

The operations themselves live in :mod:`.executor`, the same code the SSH
target's remote program runs: every operation opens the root and then each
parent component in turn with ``O_DIRECTORY | O_NOFOLLOW`` (a chain of
directory descriptors), so what it touches is proven to be the requested
physical entry; a symlinked root, parent or leaf fails closed instead of
being followed. The root's identity (device and inode) is pinned when the
target is constructed and re-proved by every operation, so a root swapped for
another directory is refused too. Writes are whole or absent (see the
executor).

A program runs on one kept thread (:mod:`.program_threads`): one thread hop
per program, however many operations it carries. A process that does one
thing at a time (a CLI listing: nothing else waits on the event loop while a
program runs) makes its target ``inline``: each program runs on the calling
thread, and no worker thread is started, handed the program and joined at
exit -- a tenth of such a command's own work.
"""

from __future__ import annotations

import os

import msgspec

from .executor import Executor, ProgramRefused, pin_root
from .plain_form import plain_operations, program_result, refusal_error
from .program import ControlProgram, ProgramResult
from .program_threads import PROGRAM_THREADS
from .target import ProgramTarget


def _json_value(data: bytes) -> object:
    """The JSON value of a file a chain follows (None: not JSON), read by
    msgspec as the store's decoders read it -- in about a fifth of the time
    the executor's own reader, CPython's scanner (all a remote program can
    count on), takes; a listing follows two a session."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class LocalTarget(ProgramTarget):
    """A target rooted at an existing, non-symlinked local directory."""

    def __init__(self, root: str | os.PathLike[str], *, inline: bool = False) -> None:
        self._root = os.path.abspath(os.fspath(root))
        self._inline = inline
        try:
            identity = pin_root(self._root)
        except ProgramRefused as refusal:
            raise refusal_error(refusal) from None
        self._executor = Executor(self._root, identity, _json_value)

    @property
    def root(self) -> str:
        """Backing location of the root. Internal: never show it to a user."""
        return self._root

    @property
    def identity(self) -> tuple[int, int]:
        """The root's ``(device, inode)``, pinned when the target was made
        and re-proved by every operation."""
        return self._executor.identity  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "LocalTarget(<root>)"

    async def run(self, program: ControlProgram) -> ProgramResult:
        if self._inline:
            return self._run_program(program)
        return await PROGRAM_THREADS.run(self._run_program, program)

    def _run_program(self, program: ControlProgram) -> ProgramResult:
        try:
            results, stopped_at = self._executor.run(plain_operations(program), program.lock)
        except ProgramRefused as refusal:
            raise refusal_error(refusal) from None
        return program_result(program, results, stopped_at)
