"""SSH servers for the SSH target tests.

- ``openssh_server`` (session): a real OpenSSH ``sshd`` on 127.0.0.1 with a
  throwaway host key and user key, a known_hosts file for it and an ssh
  client config naming it by an alias. Skipped when ``/usr/sbin/sshd`` is
  absent. Its sessions get a throwaway ``HOME`` (sshd's ``SetEnv``), so
  the shell sshd starts for every command finds no rc files: the user's
  own ``~/.bashrc`` (a ``pyenv init`` there costs ~200 ms per command)
  neither slows the tests nor changes what ``python3`` they run, and the
  user's real files are left alone. A remote ``~`` is that home.
- ``ssh_connect`` (per test): ``await ssh_connect(root)`` is an
  ``SshTarget`` on ``root`` through ``openssh_server``, closed after the
  test; ``open_target`` (per test, parametrized ``local`` / ``ssh``):
  ``await open_target(root)`` is a ``LocalTarget`` or such an
  ``SshTarget``, for contracts both targets must keep alike.
  ``open_client_target`` is ``open_target`` for tests that open many
  targets, each standing for a freshly started client process: every call
  is a new ``SshTarget`` (its own root pin, warm processes and caches) but
  all ride one SSH connection of the test.
- ``fault_server`` (per test): an in-process asyncssh server that runs the
  same remote program in-process, and can be told to misbehave on the Nth
  program (faults of the channel itself -- refused, no ``python3`` -- on
  the Nth channel opened; every other fault on the Nth request received,
  so it hits the program whichever process, warm or fresh, serves it):
  drop the connection before or after running it or in the middle of its
  answer, be slow, refuse the channel, lack ``python3``, kill the program
  after it answered, print login noise or answer with a stale frame.
"""

from __future__ import annotations

import asyncio
import fcntl
import getpass
import io
import marshal
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mevedel_server.targets import remote_program, wire
from mevedel_server.targets.asyncssh_import import asyncssh  # without its DSA warnings
from mevedel_server.targets.remote_bundle import compiled_script, remote_script

SSHD = Path("/usr/sbin/sshd")
ALIAS = "mevedel-test-host"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mevedel-test", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class OpenSshServer:
    host: str
    port: int
    user: str
    known_hosts: Path
    client_key: Path
    #: An ssh client config with ``Host mevedel-test-host`` -> this server.
    config: Path
    directory: Path
    #: The ``HOME`` of the server's sessions (empty: no rc files).
    home: Path

    def url(self, root: Path | str) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}{root}"

    def options(self) -> dict:
        """Explicit settings that ignore any ~/.ssh of the machine."""
        return dict(config=None, known_hosts=str(self.known_hosts), client_keys=[str(self.client_key)], agent_path=None)


def _wait_listening(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on port {port}: {log.read_text()[-2000:]}")


@contextmanager
def throwaway_sshd(directory: Path) -> Iterator[OpenSshServer]:
    """Run ``sshd`` on a free port of 127.0.0.1 with keys made in
    ``directory`` for as long as the block runs (the benchmarks use it too)."""
    host_key = directory / "host_ed25519"
    host_pub = _keygen(host_key)
    client_key = directory / "user_ed25519"
    (directory / "authorized_keys").write_text(_keygen(client_key) + "\n")
    user = getpass.getuser()
    home = directory / "home"
    home.mkdir()
    # The privilege separation directory sshd insists on.
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    log = directory / "sshd.log"
    # A free port may be taken between the probe and sshd's bind: parallel
    # workers start their sshd at the same moment, so they take turns (a
    # lock file all of this machine's test runs share) from the probe until
    # sshd listens -- else one worker's probe could reach another's sshd --
    # and a port taken by anything else is tried again with another.
    with open(os.path.join(tempfile.gettempdir(), "mevedel-tests-sshd.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for attempt in range(5):
            port = _free_port()
            _write_sshd_config(directory, port, user, host_key, home)
            with log.open("wb") as log_file:
                process = subprocess.Popen([str(SSHD), "-D", "-f", str(directory / "sshd_config"), "-e"], stdout=log_file, stderr=log_file)
            try:
                _wait_listening(port, process, log)
                break
            except RuntimeError:
                _stop(process)
                if attempt == 4 or "Address already in use" not in log.read_text():
                    raise
    try:
        known_hosts = directory / "known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        client_config = directory / "ssh_config"
        client_config.write_text(
            f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
            f"  IdentityFile {client_key}\n  UserKnownHostsFile {known_hosts}\n  IdentityAgent none\n"
        )
        yield OpenSshServer("127.0.0.1", port, user, known_hosts, client_key, client_config, directory, home)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _write_sshd_config(directory: Path, port: int, user: str, host_key: Path, home: Path) -> None:
    (directory / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                f"PidFile {directory / 'sshd.pid'}",
                "StrictModes no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"AllowUsers {user}",
                "MaxSessions 32",
                "UseDNS no",
                "PrintMotd no",
                "PrintLastLog no",
                "X11Forwarding no",
                "MaxStartups 64",
                "LogLevel ERROR",
                # Overrides the passwd home sshd set before it: a shell that
                # sources nothing, whatever the user's real home holds.
                f"SetEnv HOME={home}",
                "",
            ]
        )
    )


def sshd_missing() -> str | None:
    """Why a throwaway sshd cannot run here, or ``None``."""
    if not SSHD.exists():
        return "OpenSSH server not installed (/usr/sbin/sshd absent; .ci/run installs openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not installed"
    return None


@pytest.fixture(scope="session")
def openssh_server(tmp_path_factory):
    missing = sshd_missing()
    if missing:
        pytest.skip(missing)
    with throwaway_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


# -- in-process server for fault injection ---------------------------------

#: What the fault server does with one program.
FAULTS = (
    "normal",
    "refuse-channel",  # the session channel is refused
    "command-not-found",  # the shell cannot find python3 (exit status 127)
    "drop-before-run",  # request read, connection dropped, nothing run
    "drop-after-run",  # program run, connection dropped before any answer
    "drop-mid-answer",  # program run, half the answer sent, connection dropped
    "kill-after-answer",  # program run and answered, then killed by a signal
    "slow",  # waits ``slow_seconds`` before running the program
    "login-noise",  # a login script prints before the answer
    "stale-answer",  # answers with a frame carrying another nonce
)
CHANNEL_FAULTS = ("refuse-channel", "command-not-found")


@dataclass
class FaultServer:
    host: str
    port: int
    known_hosts: Path
    client_key: Path
    #: Faults for the programs to come, in order; then "normal".
    plan: list[str] = field(default_factory=list)
    #: ``(marker, fault)``: the first program whose request holds ``marker``
    #: (an operation's name, say ``b"WriteProject"``) gets ``fault`` instead
    #: of the plan's, once -- for a fault at one kind of program whatever
    #: else (renewals, checkpoints) runs around it.
    when: tuple[bytes, str] | None = None
    #: Programs holding ``when``'s marker that run as the plan says before
    #: the one that gets its fault.
    when_skip: int = 0
    slow_seconds: float = 2.0
    #: With ``when``: the host goes away as its fault strikes -- it stops
    #: listening, so reconnecting fails, until :meth:`start` brings it back.
    then_unreachable: bool = False
    #: With ``when``: called as its fault strikes, before it acts -- what
    #: else happens on the host at that moment (someone edits a file).
    struck: Callable[[], None] | None = None
    #: Every program's fault as it was applied.
    seen: list[str] = field(default_factory=list)
    #: Programs the in-process remote program actually ran.
    ran: int = 0
    #: Every command the client asked to run.
    commands: list[str] = field(default_factory=list)
    #: Which bundle each program that got that far arrived as.
    scripts: list[str] = field(default_factory=list)
    host_key: asyncssh.SSHKey | None = None
    authorized: str = ""
    acceptor: asyncssh.SSHAcceptor | None = None
    live: list = field(default_factory=list)
    #: Processes that have their script and wait for a request (warm ones).
    waiting: list = field(default_factory=list)

    def home(self, directory: Path) -> Path:
        """``directory``/home, made once: a ``HOME`` whose SSH config reaches
        this server as ``127.0.0.1`` (for a CLI or a server run as a
        process)."""
        home = directory / "home"
        if not home.exists():
            (home / ".ssh").mkdir(parents=True)
            (home / ".ssh" / "config").write_text(
                f"Host 127.0.0.1\n  Port {self.port}\n  IdentityFile {self.client_key}\n"
                f"  UserKnownHostsFile {self.known_hosts}\n  IdentityAgent none\n"
            )
        return home

    async def start(self) -> None:
        self.acceptor = await asyncssh.create_server(
            lambda: _Server(self),
            self.host,
            self.port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self.authorized),
            encoding=None,
        )
        self.port = self.acceptor.get_port()

    async def stop(self) -> None:
        """Stop listening and drop every connection (the host went away)."""
        if self.acceptor is not None:
            self.acceptor.close()
            await self.acceptor.wait_closed()
            self.acceptor = None
        for conn in self.live:
            conn.abort()
        self.live.clear()

    def stop_listening(self) -> None:
        """New connections are refused from now on (connections already
        made stay until their own fault drops them)."""
        if self.acceptor is not None:
            self.acceptor.close()
            self.acceptor = None

    def kill_waiting(self) -> None:
        """Kill every process waiting for its request (as an OOM killer or
        an administrator would)."""
        for process in list(self.waiting):
            process.exit_with_signal("KILL")

    def drop_connections(self) -> None:
        for conn in self.live:
            conn.abort()
        self.live.clear()

    def url(self, root: Path | str) -> str:
        return f"ssh://{self.host}:{self.port}{root}"

    def options(self) -> dict:
        return dict(config=None, known_hosts=str(self.known_hosts), client_keys=[str(self.client_key)], agent_path=None)

    def next_fault(self) -> str:
        fault = self.plan.pop(0) if self.plan else "normal"
        assert fault in FAULTS, fault
        self.seen.append(fault)
        return fault

    def channel_fault(self) -> str | None:
        """The fault for a channel being opened, if the plan's next one is a
        fault of channels."""
        if self.plan and self.plan[0] in CHANNEL_FAULTS:
            return self.next_fault()
        return None

    def program_fault(self) -> str:
        """The fault for a request just received; a channel fault next in
        the plan waits for its channel."""
        if self.plan and self.plan[0] in CHANNEL_FAULTS:
            return "normal"
        return self.next_fault()

    async def _command(self, process: asyncssh.SSHServerProcess, connection) -> None:
        await _command_of(self, process, connection)

    async def handle(self, process: asyncssh.SSHServerProcess, fault: str | None) -> None:
        connection = process.get_extra_info("connection")
        self.commands.append(process.command or "")
        if fault == "command-not-found":
            process.stderr.write(b"sh: 1: python3: not found\n")
            process.exit(127)
            return
        match = re.search(r"read\((\d+)\)", process.command or "")
        if match is None:  # a command (SshTarget.run_command), run here by sh
            await self._command(process, connection)
            return
        script = await process.stdin.readexactly(int(match.group(1)))
        kind = _bundle_kind(script)
        assert kind is not None, "the client did not send the remote program"
        self.scripts.append(kind)
        self.waiting.append(process)
        try:
            head = await process.stdin.readexactly(wire.HEAD_SIZE)
        finally:
            self.waiting.remove(process)
        nonce, length = wire.parse_head(head)
        rest = await process.stdin.readexactly(length + wire.TAIL_SIZE)
        if self.when is not None and self.when[0] in rest and self.when_skip:
            self.when_skip -= 1
            fault = self.program_fault()
        elif self.when is not None and self.when[0] in rest:
            fault, self.when = self.when[1], None
            self.seen.append(fault)
            if self.struck is not None:
                self.struck()
            if self.then_unreachable:
                self.stop_listening()
        else:
            fault = self.program_fault()
        if fault == "drop-before-run":
            connection.abort()
            return
        if fault == "slow":
            await asyncio.sleep(self.slow_seconds)
        answer = io.BytesIO()
        status = await asyncio.to_thread(remote_program.serve, io.BytesIO(head + rest).read, answer.write)
        self.ran += 1
        data = answer.getvalue()
        if fault == "drop-after-run":
            connection.abort()
            return
        if fault == "drop-mid-answer":
            process.stdout.write(data[: len(data) // 2])
            await process.stdout.drain()
            connection.abort()
            return
        if fault == "stale-answer":
            stale = os.urandom(wire.NONCE_SIZE)
            data = data.replace(nonce, stale)
        if fault == "login-noise":
            process.stdout.write(b"Welcome to the test host!\n\x00\xff MEVEDEL noise\n")
        process.stdout.write(data)
        await process.stdout.drain()
        if fault == "kill-after-answer":
            process.exit_with_signal("KILL")
            return
        process.exit(status)


def _bundle_kind(script: bytes) -> str | None:
    """``source`` or ``compiled``: which remote program ``script`` is. A
    compiled one is recognised by its loader and the modules it loads, not
    its bytes: ``marshal`` writes a back-reference only for an object with
    other references, so the bytes depend on the sending process (a CLI
    subprocess's bundle need not be this process's)."""
    if script == remote_script():
        return "source"
    if script == compiled_script():
        return "compiled"
    try:
        loader, modules = marshal.loads(zlib.decompress(script))
        names = [name for name, _code in modules]
    except (zlib.error, EOFError, ValueError, TypeError):
        return None
    our_loader, our_modules = marshal.loads(zlib.decompress(compiled_script()))
    same = loader.co_code == our_loader.co_code and names == [name for name, _code in our_modules]
    return "compiled" if same else None


async def _command_of(faults: "FaultServer", process, connection) -> None:
    command = process.command or ""
    fault = "normal"
    if faults.when is not None and faults.when[0] in command.encode():
        fault, faults.when = faults.when[1], None
        faults.seen.append(fault)
    if fault == "drop-before-run":
        connection.abort()
        return
    # Its standard input stays open while it runs: run_command's watchdog
    # ends the command when it closes, as the channel's would.
    child = await asyncio.create_subprocess_exec(
        "sh", "-c", command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out = asyncio.ensure_future(child.stdout.read())
    err = asyncio.ensure_future(child.stderr.read())
    status = await child.wait()
    child.stdin.close()
    if fault == "drop-after-run":
        connection.abort()
        return
    process.stdout.write(await out)
    process.stderr.write(await err)
    process.exit(status)


class _Server(asyncssh.SSHServer):
    def __init__(self, faults: FaultServer) -> None:
        self.faults = faults

    def connection_made(self, conn) -> None:
        self.faults.live.append(conn)

    def session_requested(self):
        fault = self.faults.channel_fault()
        if fault == "refuse-channel":
            return False

        async def run(process: asyncssh.SSHServerProcess) -> None:
            try:
                await self.faults.handle(process, fault)
            except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
                pass  # the client went away; a real remote program would die too

        return asyncssh.SSHServerProcess(run, None, 3, False)


@pytest.fixture
async def fault_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fault-sshd")
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key_path = directory / "user_ed25519"
    client_key.write_private_key(str(client_key_path))
    faults = FaultServer(
        "127.0.0.1",
        0,
        directory / "known_hosts",
        client_key_path,
        host_key=host_key,
        authorized=client_key.export_public_key().decode(),
    )
    await faults.start()
    faults.known_hosts.write_text(f"[127.0.0.1]:{faults.port} {host_key.export_public_key().decode().strip()}\n")
    try:
        yield faults
    finally:
        await faults.stop()


class _Connections:
    """SshTargets opened on demand through one server, closed together.
    ``shared``: they all ride one SSH connection (see ``connection`` of
    ``SshTarget.connect``), each still standing for a freshly started client
    process, without the handshake and sshd session each connection costs."""

    def __init__(self, server: OpenSshServer, *, shared: bool = False) -> None:
        self.server = server
        self.shared = shared
        self.opened: list = []
        self.conn: asyncssh.SSHClientConnection | None = None

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self.conn is None or self.conn.is_closed():
            self.conn = await asyncssh.connect(
                self.server.host, self.server.port, username=self.server.user, **self.server.options()
            )
        return self.conn

    async def __call__(self, root):
        from mevedel_server.targets.ssh import SshTarget

        lend = dict(connection=self._connection) if self.shared else {}
        target = await SshTarget.connect(self.server.url(root), **self.server.options(), **lend)
        self.opened.append(target)
        return target

    async def close(self) -> None:
        for target in self.opened:
            await target.close()
        if self.conn is not None:
            self.conn.close()
            await self.conn.wait_closed()


@pytest.fixture
async def ssh_connect(openssh_server):
    connections = _Connections(openssh_server)
    yield connections
    await connections.close()


def _target_opener(name: str, *, shared: bool):
    """A fixture, parametrized ``local`` / ``ssh``, whose value opens a
    target on a root: a ``LocalTarget``, or an ``SshTarget`` through
    ``openssh_server`` (requested only then, so that local runs need no
    sshd)."""

    @pytest.fixture(name=name, params=["local", "ssh"])
    async def opener(request):
        from mevedel_server.targets import LocalTarget

        if request.param == "local":

            async def local(root):
                return LocalTarget(root)

            yield local
            return
        connections = _Connections(request.getfixturevalue("openssh_server"), shared=shared)
        yield connections
        await connections.close()

    return opener


open_target = _target_opener("open_target", shared=False)
open_client_target = _target_opener("open_client_target", shared=True)
