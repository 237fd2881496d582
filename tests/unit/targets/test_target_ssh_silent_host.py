"""An SSH host that goes silent (its network drops every packet) never
leaves a program waiting: keepalives find the connection dead and the
program ends unavailable, its outcome unknown; connecting again gives up
within the connect time limit, with an error that names the host and what
to check, and programs queued behind that dial share its failure. A healthy
connection left idle is no dead one.

A real OpenSSH server on loopback, stopped with SIGSTOP after a first
program succeeded, and a port that accepts connections and never speaks.
The limits are the user's OpenSSH ones (``ServerAliveInterval``,
``ServerAliveCountMax``, ``ConnectTimeout`` in the ssh config), short."""

from __future__ import annotations

import asyncio

import pytest

from deadlines import ticks
from mevedel_server.targets.remote_errors import TargetUnavailable
from mevedel_server.targets.ssh import SshTarget
from mevedel_server.targets.ssh_config import (
    CONNECT_TIMEOUT,
    KEEPALIVE_COUNT_MAX,
    KEEPALIVE_INTERVAL,
    client_options,
    parse_ssh_location,
)
from silent_host import own_sshd_fixture, silenced, silent_host_config, within  # noqa: F401
from ssh_fixtures import ALIAS

SHORT = dict(ServerAliveInterval=1, ServerAliveCountMax=2, ConnectTimeout=2)


async def test_a_host_gone_silent_ends_the_program_unavailable_then_connecting_gives_up(own_sshd, tmp_path):
    config = silent_host_config(own_sshd, tmp_path / "ssh_config", **SHORT)
    root = tmp_path / "root"
    root.mkdir()
    target = await SshTarget.connect(f"ssh://{ALIAS}{root}", config=[str(config)], agent_path=None)
    async with target:
        await target.create_exclusive("before", b"1")
        with silenced(own_sshd):
            with pytest.raises(TargetUnavailable) as lost:
                await within(target.create_exclusive("during", b"2"), "a program on the silent host")
            # It may have run before the host went quiet: never a success, never a refusal.
            assert lost.value.outcome_unknown, lost.value
            with pytest.raises(TargetUnavailable) as dialed:
                await within(target.read("before"), "a program that must connect to the silent host")
            message = str(dialed.value)
            assert ALIAS in message and "no answer while connecting within 2 s" in message, message
            assert "check that the host is up" in message and "ConnectTimeout" in message, message
            assert not dialed.value.outcome_unknown
        # The host is back: programs connect again (once the silent dial's
        # answer no longer stands for the programs that follow it).
        for _ in ticks():
            try:
                assert await within(target.read("before"), "a program once the host answers again") == b"1"
                break
            except TargetUnavailable as held:
                assert "no answer while connecting" in str(held), held
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the target never connected again once the host answered")


async def test_a_healthy_connection_idle_past_the_keepalive_bound_keeps_working(own_sshd, tmp_path):
    config = silent_host_config(own_sshd, tmp_path / "ssh_config", **SHORT)
    root = tmp_path / "root"
    root.mkdir()
    target = await SshTarget.connect(f"ssh://{ALIAS}{root}", config=[str(config)], agent_path=None)
    async with target:
        await target.create_exclusive("first", b"1")
        # Longer than three unanswered keepalives would take to end it:
        # the host answers them, so the connection stays.
        await asyncio.sleep(4)
        assert await within(target.read("first"), "a program after the idle time") == b"1"
        assert target.connections == 1


class _Mute:
    """A port that accepts connections and never says a word (an SSH
    server that hangs before its greeting)."""

    def __init__(self) -> None:
        self.accepted = 0
        self._held: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> int:
        async def hold(reader, writer) -> None:
            self.accepted += 1
            self._held.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc_info) -> None:
        for writer in self._held:
            writer.close()
        self._server.close()
        await self._server.wait_closed()


async def test_a_host_that_never_speaks_ssh_is_a_clear_error_and_one_dial_for_every_waiting_program(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("ConnectTimeout 2\n")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    mute = _Mute()
    async with mute as port:
        target = SshTarget.deferred(
            f"ssh://127.0.0.1:{port}{tmp_path}", config=[str(config)], known_hosts=str(known_hosts),
            client_keys=None, agent_path=None,
        )
        async with target:
            programs = [target.read("a"), target.list_dir("."), target.stat(".")]
            outcomes = await within(
                asyncio.gather(*programs, return_exceptions=True), "programs on a host that never speaks SSH"
            )
    for outcome in outcomes:
        assert isinstance(outcome, TargetUnavailable), outcome
        message = str(outcome)
        assert f"127.0.0.1:{port}" in message and "no answer while connecting within 2 s" in message, message
        assert "check that the host is up and reachable" in message, message
        assert not outcome.outcome_unknown
    # One dial, given up at its time limit; the programs queued behind it took its answer.
    assert mute.accepted == 1


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("", (KEEPALIVE_INTERVAL, KEEPALIVE_COUNT_MAX, CONNECT_TIMEOUT)),
        # OpenSSH's "off": a save would wait forever on a silent host.
        ("ServerAliveInterval 0\nConnectTimeout 0\n", (KEEPALIVE_INTERVAL, KEEPALIVE_COUNT_MAX, CONNECT_TIMEOUT)),
        ("ServerAliveInterval 7\nServerAliveCountMax 5\nConnectTimeout 3\n", (7, 5, 3)),
    ],
    ids=["unset", "turned-off", "the-users"],
)
async def test_the_limits_come_from_the_users_ssh_config_and_are_never_off(tmp_path, written, expected):
    # The limits a connection is opened with, as asyncssh reads them: the
    # defaults are too long to wait out in a test.
    config = tmp_path / "ssh_config"
    config.write_text(f"Host silent.example\n{written}")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    options = await client_options(
        parse_ssh_location("ssh://silent.example/srv"), [str(config)], known_hosts=str(known_hosts)
    )
    assert (options.keepalive_interval, options.keepalive_count_max, options.connect_timeout) == expected
