"""Running the real ``git`` where a workspace's files are.

A Worktree Fork and the Git index check of a Rewind or Redo ask the
workspace's own ``git`` about its repository, so git must run on the
machine that holds the files: :class:`LocalGit` runs it as a subprocess (in
a worker thread) for a workspace on this machine, :class:`RemoteGit` on the
host of an SSH target through ``SshTarget.run_command``.
:func:`git_runner_for` picks one from the store's target, so callers run git
one way whatever the target.

Both take a workspace-relative directory and workspace-relative arguments,
run git with the same environment (C locale, so messages are the same on
both; no terminal prompt; literal pathspecs; no optional locks), and return
its standard error with every known absolute spelling of the workspace root
replaced by the workspace-relative one: a message built from git's output
names relative paths only, never where the workspace is backed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...targets import LocalTarget, Target, split_target_path

#: Seconds one git command may take (a check; a checkout gets longer).
GIT_TIMEOUT = 30
#: The exit status of a command the shell could not find.
_NOT_FOUND = 127
_ENVIRONMENT = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_LITERAL_PATHSPECS": "1", "GIT_OPTIONAL_LOCKS": "0"}


class GitMissing(Exception):
    """``git`` is not installed where the workspace is."""


class GitDidNotFinish(Exception):
    """A local git command outlived its timeout or could not start;
    what it did is unknown. (On an SSH target the same is a
    ``TargetUnavailable`` with an unknown outcome, naming the host.)"""


@dataclass(frozen=True)
class GitOutcome:
    returncode: int
    stdout: bytes
    #: With the workspace root's absolute spellings made relative.
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_error_line(self, otherwise: str | None = None) -> str:
        """git's final line of standard error (its own summary of a
        failure); when it said nothing, ``otherwise`` or the exit status."""
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else otherwise or f"exit {self.returncode}"


class GitRunner(Protocol):
    async def run(self, cwd: str, *args: str, timeout: float = GIT_TIMEOUT) -> GitOutcome:
        """Run ``git *args`` in the workspace-relative directory ``cwd``
        (``.``: the workspace). Raises :class:`GitMissing` when git is not
        installed there; a non-zero exit is an outcome, not an error."""
        ...

    def learn_root_spelling(self, spelling: str) -> None:
        """Another absolute spelling of the workspace root that git may
        print (it reports directories with symbolic links resolved)."""
        ...


class _Spellings:
    """Absolute spellings of the workspace root, for taking out of git's
    messages."""

    def __init__(self) -> None:
        self._known: list[str] = []

    def add(self, spelling: str) -> None:
        spelling = spelling.rstrip("/")
        if spelling and spelling not in self._known:
            self._known.append(spelling)
            # A spelling that contains another must be replaced first.
            self._known.sort(key=len, reverse=True)

    def scrub(self, text: bytes) -> bytes:
        for spelling in self._known:
            raw = os.fsencode(spelling)
            text = text.replace(raw + b"/", b"").replace(raw, b".")
        return text


class LocalGit:
    """git as a subprocess in a directory of this machine."""

    def __init__(self, root: Path, program: str = "git") -> None:
        self._root = Path(root)
        self._program = program
        self._spellings = _Spellings()
        self._spellings.add(str(self._root))
        self._spellings.add(os.path.realpath(self._root))

    def learn_root_spelling(self, spelling: str) -> None:
        self._spellings.add(spelling)

    async def run(self, cwd: str, *args: str, timeout: float = GIT_TIMEOUT) -> GitOutcome:
        directory = self._root.joinpath(*split_target_path(cwd))
        return await asyncio.to_thread(self._run, directory, args, timeout)

    def _run(self, directory: Path, args: Sequence[str], timeout: float) -> GitOutcome:
        env = dict(os.environ)
        env.update(_ENVIRONMENT)
        try:
            done = subprocess.run(
                [self._program, *args], cwd=directory, capture_output=True, env=env, timeout=timeout, check=False
            )
        except FileNotFoundError as exc:
            # A missing working directory raises this too: only the program
            # itself missing means git is not installed.
            if exc.filename is not None and os.fspath(exc.filename) == os.fspath(directory):
                raise GitDidNotFinish("its directory does not exist") from None
            raise GitMissing() from None
        except subprocess.TimeoutExpired:
            raise GitDidNotFinish(f"it did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise GitDidNotFinish(exc.strerror or type(exc).__name__) from None
        return GitOutcome(done.returncode, done.stdout, self._spellings.scrub(done.stderr))


class RemoteGit:
    """git on the host of an SSH target, in a directory below its pinned
    root (``target.run_command``)."""

    def __init__(self, target, program: str = "git") -> None:
        self._target = target
        self._program = program
        self._spellings = _Spellings()

    def learn_root_spelling(self, spelling: str) -> None:
        self._spellings.add(spelling)

    async def run(self, cwd: str, *args: str, timeout: float = GIT_TIMEOUT) -> GitOutcome:
        # run_command takes no environment, so ``env`` sets it; when env
        # cannot find git it exits 127, as the shell does.
        argv = ["env", *(f"{key}={value}" for key, value in _ENVIRONMENT.items()), self._program, *args]
        done = await self._target.run_command(argv, cwd, timeout=timeout)
        if done.exit_status == _NOT_FOUND:
            raise GitMissing()
        # The root is pinned by the first command, so it is known only now.
        self._spellings.add(self._target.root)
        return GitOutcome(done.exit_status, done.stdout, self._spellings.scrub(done.stderr))


def git_runner_for(target: Target) -> GitRunner | None:
    """The git of the machine ``target`` (or the target a fault-injecting
    wrapper wraps) keeps its files on; None for a target that can run no
    command."""
    for _ in range(8):
        if isinstance(target, LocalTarget):
            return LocalGit(Path(target.root))
        if callable(getattr(target, "run_command", None)):
            return RemoteGit(target)
        inner = getattr(target, "inner", None)
        if inner is None:
            return None
        target = inner
    return None
