"""Shared test configuration: the SSH servers of the SSH target tests (see
``ssh_fixtures``), the hypothesis profile, and what keeps parallel workers
apart; everything else lives beside its tests.

The suite runs on several pytest-xdist workers (``scripts/test`` picks how
many). Each worker is a process of its own with its own temporary
directories (pytest gives each its ``basetemp``), its own throwaway sshd (a
session fixture, so one per worker, on a port of its own) and, set here
before any test runs, its own ``XDG_STATE_HOME``, ``XDG_CONFIG_HOME`` and
``XDG_RUNTIME_DIR``: the CLI's client identity, MCP approvals, config file
and the tool host's socket directory are never shared by two workers, nor
taken from the user running the suite; and its own session, which Linux
schedules as a unit (``_own_session``). Tests that must not run twice at
once (they build into the source tree) go to one worker together
(``SERIAL_FILES``, ``--dist loadgroup``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from ssh_fixtures import (  # noqa: F401
    fault_server,
    open_client_target,
    open_target,
    openssh_server,
    ssh_connect,
)

# CI machines are shared and slow at times: generating examples may take
# longer than hypothesis's default patience, and a slow example is not a
# failure. Every property still runs its full number of examples.
settings.register_profile("mevedel", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mevedel")

#: Test files whose tests must all run on one worker: they build into the
#: repository (the VS Code client's out/ and out-test/, a wheel of the
#: checkout). The two VS Code files share a group: both package the client
#: (`vsce package` rebuilds out/extension.js), and the real workbench's
#: module fixture (code-server, a browser, the .vsix) is then started once,
#: not on every worker its tests were dealt to.
SERIAL_FILES = {"test_vscode.py": "vscode", "test_vscode_workbench.py": "vscode", "test_wheel_docs.py": "wheel"}

_isolated: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """This process's own XDG directories, short (under /tmp) so the unix
    socket paths made below them fit; a worker's own session."""
    global _isolated
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker != "main":
        _own_session()
    _isolated = Path(tempfile.mkdtemp(prefix=f"mevedel-{worker}-", dir="/tmp" if os.path.isdir("/tmp") else None))
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        path = _isolated / name.lower()
        path.mkdir(mode=0o700)
        os.environ[name] = str(path)


def _own_session() -> None:
    """Linux's scheduler (autogroup) shares the CPU between sessions first:
    in the runner's session, every worker and all it starts (editors,
    servers, CLI commands) shared one session's slice, while the agents,
    SSH sessions and Neovim 0.10+'s servers each make a session of their
    own and got as much as the whole suite -- at load a server started by
    Neovim 0.7 or a CLI command then took minutes of wall clock for a second
    of CPU. A session per worker: a test's processes compete with the other
    sessions of the machine, not with every other worker's test."""
    try:
        os.setsid()
    except OSError:  # already a session's or a process group's leader
        pass


def pytest_unconfigure(config: pytest.Config) -> None:
    if _isolated is not None:
        shutil.rmtree(_isolated, ignore_errors=True)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``, with the serial files' tests one unit of work
    each: xdist groups by a suffix it writes into the test ids on the
    workers, which pytest 9.2's structured ids no longer take
    (pytest-xdist#1386) -- the ``xdist_group`` markers this file set were
    ignored and each worker compiled the VS Code client's out-test/ over
    the others' and built a wheel of its own. The controller groups here,
    from the ids, whatever the workers' ids say."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SerialFilesScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = SERIAL_FILES.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
            return f"@{group}" if group is not None else super()._split_scope(nodeid)

    return SerialFilesScheduling(config, log)
