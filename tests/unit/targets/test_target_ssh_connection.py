"""Connecting an SshTarget to a real OpenSSH server: the user's ssh config
(host alias, IdentityFile, UserKnownHostsFile), an agent, host key checking
that cannot be skipped, and clear errors for an unknown host key, a refused
login and a host without the interpreter."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess

import pytest

from mevedel_server.targets import ControlProgram, CreateExclusive, Read
from mevedel_server.targets.asyncssh_import import asyncssh
from mevedel_server.targets.remote_errors import HostKeyRefused, TargetUnavailable
from mevedel_server.targets.ssh import SshTarget
from ssh_fixtures import ALIAS


async def test_host_alias_key_and_known_hosts_come_from_the_ssh_config(openssh_server, tmp_path):
    # Nothing but the config file: HostName, Port, User, IdentityFile and
    # UserKnownHostsFile are all the alias's.
    target = await SshTarget.connect(f"ssh://{ALIAS}{tmp_path}", config=[str(openssh_server.config)], agent_path=None)
    async with target:
        await target.create_exclusive("via-alias", b"hello")
        assert target.host == ALIAS
        assert repr(target) == f"SshTarget({ALIAS}, <root>)"
    assert (tmp_path / "via-alias").read_bytes() == b"hello"


async def test_a_host_and_a_separate_root_work_too(openssh_server, tmp_path):
    target = await SshTarget.connect(ALIAS, str(tmp_path), config=[str(openssh_server.config)], agent_path=None)
    async with target:
        assert await target.list_dir(".") == []


async def test_keys_from_an_ssh_agent(openssh_server, tmp_path):
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            await asyncio.sleep(0.02)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", "-q", str(openssh_server.client_key)], env=env, check=True, stderr=subprocess.DEVNULL)
        root = tmp_path / "root"
        root.mkdir()
        target = await SshTarget.connect(
            openssh_server.url(root),
            config=None,
            known_hosts=str(openssh_server.known_hosts),
            agent_path=str(sock),  # no client_keys: the agent's, as ssh would
        )
        async with target:
            await target.create_exclusive("agent", b"a")
        assert (root / "agent").read_bytes() == b"a"
    finally:
        agent.terminate()
        agent.wait()


async def test_an_unknown_host_key_is_refused_naming_the_host(openssh_server, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    options = dict(openssh_server.options(), known_hosts=str(empty))
    with pytest.raises(HostKeyRefused) as info:
        await SshTarget.connect(openssh_server.url(tmp_path), **options)
    message = str(info.value)
    assert f"127.0.0.1:{openssh_server.port}" in message and "not trusted" in message
    assert str(tmp_path) not in message
    assert not info.value.outcome_unknown


async def test_a_changed_host_key_is_refused(openssh_server, tmp_path):
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{openssh_server.port} {other}\n")
    with pytest.raises(HostKeyRefused):
        await SshTarget.connect(openssh_server.url(tmp_path), **dict(openssh_server.options(), known_hosts=str(wrong)))


async def test_host_key_checking_cannot_be_turned_off(openssh_server, tmp_path):
    lax = tmp_path / "ssh_config"
    lax.write_text(openssh_server.config.read_text().replace(f"UserKnownHostsFile {openssh_server.known_hosts}", "UserKnownHostsFile none"))
    with pytest.raises(HostKeyRefused, match="host key checking is turned off"):
        await SshTarget.connect(f"ssh://{ALIAS}{tmp_path}", config=[str(lax)], agent_path=None)
    with pytest.raises(HostKeyRefused, match="host key checking is turned off"):
        await SshTarget.connect(openssh_server.url(tmp_path), **dict(openssh_server.options(), known_hosts=None))


async def test_a_refused_login_is_a_clear_error(openssh_server, tmp_path):
    stranger = tmp_path / "stranger_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    options = dict(openssh_server.options(), client_keys=[str(stranger)])
    with pytest.raises(TargetUnavailable, match="authentication failed"):
        await SshTarget.connect(openssh_server.url(tmp_path), **options)


async def test_a_missing_interpreter_is_a_clear_error(openssh_server, tmp_path):
    with pytest.raises(TargetUnavailable, match=r"no 'python3-absent' command \(exit status 127\)"):
        await SshTarget.connect(openssh_server.url(tmp_path), python="python3-absent", **openssh_server.options())


async def test_a_connection_dropped_mid_program_on_a_real_server_is_not_success(openssh_server, tmp_path):
    """The program waits for a lock this test holds; the connection is cut
    while it waits. The caller gets TargetUnavailable; the next program
    reconnects."""
    (tmp_path / "lock").mkdir()
    target = await SshTarget.connect(openssh_server.url(tmp_path), reconnect_delay=0.01, **openssh_server.options())
    fd = os.open(tmp_path / "lock", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        guarded = asyncio.ensure_future(target.run(ControlProgram([CreateExclusive("late", b"x")], lock="lock")))
        await asyncio.sleep(1.0)
        assert not guarded.done()
        target._conn.abort()  # the network goes away mid-program
        with pytest.raises(TargetUnavailable) as info:
            await guarded
        assert info.value.outcome_unknown
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    async with target:
        await target.create_exclusive("after", b"y")
        assert (await target.run(ControlProgram([Read("after")])))[0].value == b"y"
        assert target.connections == 2


async def test_a_known_hosts_file_that_is_not_there_is_named_at_once(openssh_server, tmp_path):
    # No retry can make the file appear: the first attempt says which file.
    # (A retry would sleep an hour here and the wait_for below would fail.)
    missing = tmp_path / "no-such-known_hosts"
    options = dict(openssh_server.options(), known_hosts=str(missing))
    with pytest.raises(TargetUnavailable) as caught:
        await asyncio.wait_for(
            SshTarget.connect(openssh_server.url(tmp_path), reconnect_attempts=5, reconnect_delay=3600, **options), 60
        )
    assert str(missing) in str(caught.value) and "known hosts file" in str(caught.value)
    assert not caught.value.outcome_unknown
