"""The editor goes away after a save its SSH host could not record, with
the host now out of reach: the server answers ``shutdown`` and its process
ends, however the editor goes -- ``shutdown`` and ``exit``, ``exit`` alone,
or its input simply closed -- and the save this machine kept stays in the
pending-save spool for the next start.

A real OpenSSH server on loopback that dies with its sessions (the save is
refused), whose port then accepts connections and never answers (a host
gone quiet: every new connection waits), and the real server over stdio."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods
from silent_host import black_hole, killed, own_sshd_fixture, ssh_home, within  # noqa: F401  (own_sshd: the fixture)

from .conftest import request, settled_turn_and_one_open, ssh_home_server, stop_server


async def shutdown_then_exit(client) -> None:
    await within(client.shutdown_async(None), "the shutdown request")
    client.exit(None)


async def exit_alone(client) -> None:
    client.exit(None)


async def close_input(client) -> None:
    client._server.stdin.close()


ENDINGS = {
    "shutdown-and-exit": (shutdown_then_exit, 0),
    "exit-without-shutdown": (exit_alone, 1),
    "input-closed": (close_input, 0),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_server_exits_with_the_host_out_of_reach_and_the_kept_save_stays(own_sshd, tmp_path, ending):
    end, expected_status = ENDINGS[ending]
    sshd = own_sshd
    client, url, log, state = await ssh_home_server(tmp_path, sshd)
    try:
        ws = {"workspaceFolder": url}
        sid = await settled_turn_and_one_open(client, ws)
        killed(sshd)
        with pytest.raises(JsonRpcException) as caught:
            await within(request(client, methods.TURN_SETTLE, ws), "the save with the host gone")
        assert caught.value.data["kind"] == "publication-pending", caught.value.data
        kept = sorted((state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json"))
        assert len(kept) == 1, kept
        with black_hole(sshd.port):
            await end(client)
            status = await within(client._server.wait(), f"the end of the process after {ending}")
        assert status == expected_status, log.read_text()
        # Nothing durable was lost: the next start on this machine records it on the host.
        assert sorted((state / "mevedel" / "unrecorded").glob(f"*/{sid}/pending-*.json")) == kept
        assert "Traceback" not in log.read_text()
    finally:
        await stop_server(client)
