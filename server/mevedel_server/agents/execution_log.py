"""A command's output, kept: ``artifact://executions/NAME.log``.

A terminal shows the agent only the last ``terminalOutputMaxBytes`` of what
its command printed, and only while the turn runs. So that a long build or
test log can be read later -- by the agent in a later turn, by the person
through ``mevedel read``, by Read and Grep over LSP or MCP -- every
command's output is also kept as an execution log of the session: written
when the command ends, into the session's ``tool-results/executions/``
through the workspace's target (:func:`..resources.families.artifact_output.save_artifact`,
the storage oversized tool answers already use), so it is an ordinary
``artifact://`` resource, local or over SSH.

The log is bounded by ``executionLogMaxBytes`` (4 MiB by default): past it,
it keeps the first half and the last half of the output with one marker line
where the middle was cut -- the start says what ran and how, the end how it
ended. A cut never splits a UTF-8 sequence.
"""

from __future__ import annotations

import re
import secrets

from ..resources import EXECUTIONS, TOOL_RESULTS, save_artifact
from ..store import SessionPaths
from ..targets import Target


def _utf8_start(data: bytes | bytearray, index: int) -> int:
    """The first index at or after ``index`` that starts a UTF-8 sequence."""
    while index < len(data) and (data[index] & 0xC0) == 0x80:
        index += 1
    return index


class ExecutionLog:
    """One command's output, head and tail within ``cap`` bytes."""

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self._half = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._sealed = False
        #: Bytes cut from the middle.
        self.cut = 0

    @property
    def address(self) -> str:
        return f"artifact://{EXECUTIONS}/{self.name}"

    def add(self, data: bytes) -> None:
        if not self._sealed:
            room = self._half - len(self._head)
            self._head += data[:room]
            data = data[room:]
            if len(self._head) >= self._half:
                # The head ends on a whole character; a split one starts the tail.
                keep = _whole_prefix(self._head)
                data = bytes(self._head[keep:]) + data
                del self._head[keep:]
                self._sealed = True
        if not data:
            return
        self._tail += data
        limit = self.cap - len(self._head)
        if len(self._tail) > limit:
            drop = _utf8_start(self._tail, len(self._tail) - limit)
            del self._tail[:drop]
            self.cut += drop

    def content(self) -> bytes:
        if not self.cut:
            return bytes(self._head + self._tail)
        marker = (
            f"\n[mevedel: {self.cut} bytes of output cut here; the log keeps the first {len(self._head)} "
            f"and the last {len(self._tail)} (executionLogMaxBytes {self.cap})]\n"
        ).encode()
        return bytes(self._head) + marker + bytes(self._tail)

    async def save(self, target: Target, session_id: str) -> str | None:
        """Write the log into the session; its address, or None when the
        target refused (the command's answer to the agent is unaffected)."""
        return await save_artifact(
            target, SessionPaths(session_id).inside(TOOL_RESULTS), [EXECUTIONS, self.name], self.content()
        )


def _whole_prefix(data: bytearray) -> int:
    """The length of the longest prefix of ``data`` that ends on a whole
    UTF-8 character (bytes that are not UTF-8 count as whole)."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if (lead & 0xC0) == 0x80:
            continue
        need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
        return len(data) if back >= need else len(data) - back
    return len(data)


def log_name(turn: int | None, command: str) -> str:
    """``turn-3-make-1a2b3c4d.log``: the turn, the program, and a random
    part so no two commands share a name (the write is exclusive)."""
    program = command.strip().split()[0] if command.strip() else "command"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", program.rsplit("/", 1)[-1]).strip(".-")[:32] or "command"
    prefix = f"turn-{turn}-" if turn is not None else ""
    return f"{prefix}{slug}-{secrets.token_hex(4)}.log"
