"""Which operands read the open session (``SESSION_FAMILIES``), so a front
end looks its default session up for them alone, and which reach an MCP
server: the rule the CLI's ``read`` follows to skip the session store and
the MCP configuration for everything else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mevedel_server.resources.families as families
from mevedel_server.addresses.model import Family, Operation
from mevedel_server.resources import SESSION_FAMILIES, reaches_mcp, reads_session
from mevedel_server.resources.engine.resolver import _FAMILIES

#: What of the context and the places names the open session.
_SESSION_STATE = re.compile(r"\b(session_dir|session_id|session_local|tool_results|remote_session|live_history|session_writable)\b|\.session\b")


@pytest.mark.parametrize("family", [f for f in Family if f not in SESSION_FAMILIES], ids=lambda f: f.value)
def test_a_family_left_out_reads_nothing_of_the_session(family):
    source = (Path(families.__file__).parent / f"{_FAMILIES[family]}.py").read_text(encoding="utf-8")
    code = re.sub(r'""".*?"""', "", source, flags=re.S)  # docstrings may speak of sessions
    assert _SESSION_STATE.findall(code) == [], f"{family.value}:// reads the session: add it to SESSION_FAMILIES"


@pytest.mark.parametrize(
    ("operation", "operand", "session", "mcp"),
    [
        (Operation.READ, "mevedel://", False, False),
        (Operation.READ, "memory://local-mevedel/a.md", False, False),
        (Operation.GREP, "src/app.py", False, False),  # a plain path
        (Operation.READ, "work://notes.md", True, False),
        (Operation.READ, "history://root", True, False),
        (Operation.GLOB, "shared://", True, False),
        (Operation.READ, "mcp://docs/readme", False, True),
        (Operation.READ, "nonsense://x", False, False),  # prepare reports it
        (Operation.APPLY_PATCH, "*** Begin Patch\n*** End Patch\n", True, False),
    ],
)
def test_what_an_operand_reads(operation, operand, session, mcp):
    assert reads_session(operation, operand) is session
    assert reaches_mcp(operation, operand) is mcp
