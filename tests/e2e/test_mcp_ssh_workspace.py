"""``mevedel mcp --workspace ssh://...`` (standalone, as an agent the user
set up by hand starts it): the official ``mcp`` client drives the real
command over stdio, and the command reaches a real OpenSSH server on
loopback whose directory the test reads on disk. The tools read and write
the remote workspace through its target, never outside it; a workspace
.mcp.json server never runs unapproved; a host, address, host key or root
that cannot be used stops the command at start, naming what was written."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ssh_fixtures import ALIAS, OpenSshServer

from .test_mcp_tool_server import add, envelope, error, ok
from .test_ssh_workspace import ssh_home

SECRET = "top-secret-outside-the-workspace"


class Machine:
    """This machine as the user has it: a home whose ``~/.ssh/config``
    reaches the loopback sshd by its alias, and one state directory for
    every mevedel process started here."""

    def __init__(self, tmp_path: Path, server: OpenSshServer, project: Path) -> None:
        self.home = ssh_home(tmp_path, server)
        self.env = {**os.environ, "HOME": str(self.home), "XDG_STATE_HOME": str(tmp_path / "state"),
                    "XDG_CONFIG_HOME": str(tmp_path / "config")}
        self.url = f"ssh://{ALIAS}{project}"

    def mevedel(self, *args: str, workspace: str | None = None) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", workspace or self.url],
                             env=self.env, cwd=self.home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in ran.stderr, ran.stderr
        return ran

    @contextlib.asynccontextmanager
    async def served(self, *args: str, workspace: str | None = None) -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "mevedel_server.cli", "mcp", "--workspace", workspace or self.url, *args],
                                       env=self.env, cwd=str(self.home))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "remote project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 'hello over ssh'\n")
    (root / "README.md").write_text("# Remote\nhello readme\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of the host beside the workspace, holding a secret."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text(SECRET + "\n")
    return elsewhere


@pytest.fixture
def machine(tmp_path: Path, openssh_server: OpenSshServer, project: Path) -> Machine:
    return Machine(tmp_path, openssh_server, project)


async def test_read_glob_grep_and_apply_patch_work_on_the_remote_workspace(machine, project):
    created = machine.mevedel("session", "create", "--prompt", "start", "--json")
    assert created.returncode == 0, created.stderr
    sid = json.loads(created.stdout)["session_id"]
    # This CLI client holds the session it created: the server resumes it, and may write project files.
    async with machine.served("--session", sid) as session:
        assert "     4\t    return 'hello over ssh'" in await ok(session, "Read", path="src/app.py")
        assert await ok(session, "Glob", pattern="**/*.py") == "src/app.py"
        assert (await ok(session, "Grep", pattern="hello", path=".")).splitlines() == [
            "README.md:2:1: hello readme",
            "src/app.py:4:13:     return 'hello over ssh'",
            "-- 2 matching lines in 2 files (2 searched)",
        ]
        patch = envelope(
            add("src/util.py", "def helper():", "    return 42"),
            "*** Update File: README.md\n@@\n-hello readme\n+hello remote readme\n",
            add("work://plans/plan.md", "step one"),
            add("work://shared/handoff.md", "for the next agent"),
        )
        assert await ok(session, "ApplyPatch", patch=patch) == (
            "A src/util.py\nM README.md\nA work://plans/plan.md\nA work://shared/handoff.md"
        )
        assert "     1\tstep one" in await ok(session, "Read", path="work://plans/plan.md")
        assert "src/util.py:2:12:     return 42" in await ok(session, "Grep", pattern="42", path="src")
    # The files are on the host, where the addresses said.
    assert (project / "src" / "util.py").read_text() == "def helper():\n    return 42\n"
    assert (project / "README.md").read_text() == "# Remote\nhello remote readme\n"
    assert (project / ".mevedel" / "sessions" / sid / "local" / "plans" / "plan.md").read_text() == "step one\n"
    assert (project / ".mevedel" / "shared" / "handoff.md").read_text() == "for the next agent\n"


async def test_without_a_session_reads_work_and_only_shared_notes_are_written(machine, project):
    async with machine.served() as session:
        assert "hello readme" in await ok(session, "Read", path="README.md")
        assert await ok(session, "ApplyPatch", patch=envelope(add("work://shared/notes.md", "noted"))) == "A work://shared/notes.md"
        refused = await error(session, "ApplyPatch", patch=envelope(add("src/new.py", "x")))
        assert refused.startswith("src/new.py: ")
    assert (project / ".mevedel" / "shared" / "notes.md").read_text() == "noted\n"
    assert not (project / "src" / "new.py").exists()


async def test_paths_that_leave_the_workspace_are_refused(machine, project, outside):
    # Links planted on the host: to a file and to a directory outside.
    (project / "leak.txt").symlink_to(outside / "secret.txt")
    (project / "linked").symlink_to(outside)
    created = machine.mevedel("session", "create", "--prompt", "start", "--json")
    sid = json.loads(created.stdout)["session_id"]
    async with machine.served("--session", sid) as session:
        for path in ("../elsewhere/secret.txt", str(outside / "secret.txt"), "src/../../elsewhere/secret.txt"):
            refused = await error(session, "Read", path=path)
            assert refused.startswith(f"{path}: containment:") and SECRET not in refused, refused
        for path in ("leak.txt", "linked/secret.txt"):
            refused = await error(session, "Read", path=path)
            assert refused.startswith(f"{path}: ") and SECRET not in refused, refused
        # A search of the whole workspace follows neither link.
        found = await ok(session, "Grep", pattern="top-secret", path=".")
        assert SECRET not in found
        for patch in (
            envelope("*** Update File: leak.txt\n@@\n-" + SECRET + "\n+overwritten\n"),
            envelope(add("linked/planted.txt", "x")),
            envelope(add("../elsewhere/planted.txt", "x")),
        ):
            refused = await error(session, "ApplyPatch", patch=patch)
            assert SECRET not in refused, refused
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_an_absolute_path_inside_the_workspace_is_its_relative_path_and_one_leaving_it_is_refused(machine, project, outside):
    """As the tools say and a local workspace does: an absolute path on the
    host inside the root the ssh:// address names is that file, named by
    its workspace-relative path; one that leaves it (by ``..`` or a link)
    is refused before any byte of it is read."""
    (project / "leak.txt").symlink_to(outside / "secret.txt")
    created = machine.mevedel("session", "create", "--prompt", "start", "--json")
    sid = json.loads(created.stdout)["session_id"]
    async with machine.served("--session", sid) as session:
        assert "     4\t    return 'hello over ssh'" in await ok(session, "Read", path=f"{project}/src/app.py")
        assert await ok(session, "Glob", pattern="**/*.py", path=f"{project}/src") == "src/app.py"
        assert await ok(session, "Grep", pattern="hello readme", path=str(project)) == (
            "README.md:2:1: hello readme\n-- 1 matching line in 1 file (2 searched)"
        )
        patch = envelope(add(f"{project}/src/abs.py", "x = 1"), f"*** Update File: {project}/README.md\n@@\n-hello readme\n+hello absolute\n")
        assert await ok(session, "ApplyPatch", patch=patch) == "A src/abs.py\nM README.md"  # as the other tools name them
        for path in (f"{project}/../elsewhere/secret.txt", f"{project}/src/../../elsewhere/secret.txt"):
            refused = await error(session, "Read", path=path)
            assert refused.startswith(f"{path}: containment: is outside the workspace") and SECRET not in refused, refused
        refused = await error(session, "Read", path=f"{project}/leak.txt")
        assert refused.startswith(f"{project}/leak.txt: ") and SECRET not in refused, refused
        refused = await error(session, "ApplyPatch", patch=envelope(add(f"{project}/../elsewhere/planted.txt", "x")))
        assert "outside the workspace" in refused, refused
    assert (project / "src" / "abs.py").read_text() == "x = 1\n"
    assert (project / "README.md").read_text() == "# Remote\nhello absolute\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.fixture
def home_project(project: Path, openssh_server: OpenSshServer) -> Iterator[Path]:
    """The project again under the home the host gives its sessions."""
    remote = openssh_server.home / f"project-{secrets.token_hex(6)}"
    shutil.copytree(project, remote)
    try:
        yield remote
    finally:
        shutil.rmtree(remote, ignore_errors=True)


async def test_a_home_relative_workspace_takes_an_absolute_path_inside_it(machine, home_project):
    """``ssh://host/~/p``, as people often write it: an absolute path inside
    it, as the host spells its home, is that file too (a model names files
    by absolute paths); one leaving it is refused."""
    async with machine.served(workspace=f"ssh://{ALIAS}/~/{home_project.name}") as session:
        assert "     4\t    return 'hello over ssh'" in await ok(session, "Read", path=f"{home_project}/src/app.py")
        assert await ok(session, "Glob", pattern="*.py", path=f"{home_project}/src") == "src/app.py"
        path = f"{home_project}/../.bashrc"
        refused = await error(session, "Read", path=path)
        assert refused.startswith(f"{path}: containment: is outside the workspace"), refused


async def test_a_workspace_mcp_json_server_never_runs_unapproved(machine, project, tmp_path):
    ran = tmp_path / "the-server-ran"
    command = {"command": sys.executable, "args": ["-c", f"open({str(ran)!r}, 'w')"]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"planted": command}}))
    async with machine.served() as session:
        refused = await error(session, "Read", path="mcp://planted")
        assert refused.startswith("mcp://planted: unavailable:") and "mevedel read mcp://planted --approve-mcp planted" in refused, refused
    assert not ran.exists()


async def test_memory_roots_are_this_machines_absolute_paths(machine, tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "facts.md").write_text("the host is remote\n")
    async with machine.served("--memory-root", f"local:mevedel:{memory}") as session:
        assert "the host is remote" in await ok(session, "Read", path="memory://local-mevedel/facts.md")
    refused = machine.mevedel("mcp", "--memory-root", "local:mevedel:notes")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == (
        "mevedel: --memory-root 'local:mevedel:notes': a relative root needs a local workspace; give this machine's absolute path"
    )
    refused = machine.mevedel("mcp", "--skill-root", "user:skills")
    assert refused.returncode == 2 and refused.stderr.startswith("mevedel: --skill-root 'user:skills': a relative root"), refused.stderr


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_workspace_that_cannot_be_used_stops_the_command_naming_it(machine, openssh_server, project):
    home = machine.home
    # A host key nobody vouched for: the same server, an empty known_hosts.
    (home / "empty_known_hosts").write_text("")
    with (home / ".ssh" / "config").open("a") as config:
        config.write(f"Host untrusted\n  HostName 127.0.0.1\n  Port {openssh_server.port}\n  IdentityFile {openssh_server.client_key}\n"
                     f"  UserKnownHostsFile {home / 'empty_known_hosts'}\n  IdentityAgent none\n")
    unreachable = f"ssh://127.0.0.1:{_closed_port()}{project}"
    cases = {
        unreachable: f"mevedel mcp: --workspace {unreachable}: cannot connect after ",
        f"ssh://untrusted{project}": f"mevedel mcp: --workspace ssh://untrusted{project}: the host key is not trusted",
        f"ssh://{ALIAS}{project}/nowhere": f"mevedel mcp: --workspace ssh://{ALIAS}{project}/nowhere: ",
        "ssh:/no-host/x": "mevedel mcp: --workspace 'ssh:/no-host/x': an SSH workspace is written ssh://[user@]host[:port]/path",
    }
    for workspace, said in cases.items():
        ran = machine.mevedel("mcp", workspace=workspace)
        assert ran.returncode == 1 and ran.stdout == "", (workspace, ran.stdout)
        assert ran.stderr.startswith(said) and len(ran.stderr.splitlines()) == 1, (workspace, ran.stderr)
    assert not (project / ".mevedel").exists()


async def test_a_save_the_cli_kept_for_the_host_reaches_it_when_the_server_resumes_the_session(tmp_path, fault_server):
    """One spool per machine: a settlement the host could not record was
    kept here by ``mevedel turn settle``; ``mevedel mcp --session`` of the
    same client resumes the session once the host answers, records the
    kept save there and says so on its standard error."""
    from unit.cli.test_cli_ssh_unknown_outcome import settlement_kept_here

    root = tmp_path / "ws"
    root.mkdir()
    sid, _told = await settlement_kept_here(fault_server, tmp_path, root)
    kept = sorted((tmp_path / "state" / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json"))
    assert len(kept) == 1
    await fault_server.start()

    log = tmp_path / "mcp-stderr.log"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "mevedel_server.cli", "mcp", "--workspace", fault_server.url(root),
                                                                 "--session", sid], env=env, cwd=str(tmp_path))
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert "done" in await ok(session, "Read", path="history://root")
                # Resumed, not joined: this client writes the session's notes.
                assert await ok(session, "ApplyPatch", patch=envelope(add("work://after.md", "x"))) == "A work://after.md"
    said = log.read_text()
    assert "Traceback" not in said, said
    host = f"127.0.0.1:{fault_server.port}"
    assert f"mevedel: session {sid}: the save this machine kept since " in said and f"is recorded on {host} now, pending" in said, said
    assert not kept[0].exists()
    on_the_host = list((root / ".mevedel" / "sessions" / sid / ".pending-publication").glob("pending-*.json"))
    assert [p.name for p in on_the_host] == [kept[0].name]


async def test_a_host_that_goes_away_fails_the_calls_it_reaches_and_the_server_answers_again_once_it_is_back(tmp_path, fault_server):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("still here\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  Port {fault_server.port}\n  IdentityFile {fault_server.client_key}\n"
        f"  UserKnownHostsFile {fault_server.known_hosts}\n  IdentityAgent none\n"
    )
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "mevedel_server.cli", "mcp", "--workspace", fault_server.url(root)],
                                   env=env, cwd=str(tmp_path))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert "still here" in await ok(session, "Read", path="notes.txt")
            await fault_server.stop()
            refused = await error(session, "Read", path="notes.txt")
            assert refused.startswith("notes.txt: unavailable: ") and "cannot connect" in refused, refused
            await fault_server.start()
            assert "still here" in await ok(session, "Read", path="notes.txt")
