"""A command's execution log on an SSH workspace (a real OpenSSH server):
the command runs on the host through the SSH channel and its bounded output
is written into the session's tool-results/executions/ through the same
target, where artifact:// reads it."""

from __future__ import annotations

from mevedel_server.agents.execution_log import ExecutionLog, log_name
from mevedel_server.agents.terminals import Terminals


async def test_a_remote_commands_output_is_kept_bounded_in_the_session(ssh_connect, tmp_path):
    ssh_target = await ssh_connect(tmp_path)
    sid = "2026-12-04T22-00-0123456789ab"
    saved: list[str | None] = []

    async def nothing() -> None:
        return None

    async def keep(terminal) -> None:
        saved.append(await terminal.log.save(ssh_target, sid))

    terminals = Terminals(ssh_target, str(tmp_path), before=nothing, after=nothing, keep=keep)
    log = ExecutionLog(log_name(4, "seq"), 4096)
    terminal = await terminals.create("seq", ["1", "5000"], {}, None, None, log=log)
    await terminals.wait(terminal.terminal_id)
    assert saved == [log.address] and log.address.startswith("artifact://executions/turn-4-seq-")
    stored = tmp_path / ".mevedel" / "sessions" / sid / "tool-results" / "executions" / log.name
    text = stored.read_text()
    assert text.startswith("1\n2\n3\n") and text.endswith("4999\n5000\n")
    assert "bytes of output cut here" in text and len(text.encode()) <= 4096 + 200
    await terminals.close_all()
