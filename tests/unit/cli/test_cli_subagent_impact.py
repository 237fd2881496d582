"""A retained sub-agent's changes are listed under its name where a person
looks before undoing them: ``mevedel rewind N`` (the impact it prints before
the commit command) and ``mevedel session turn N``, on a pseudo-terminal as
a person runs them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from test_cli_prompt import AGENT, mevedel


def configure_delegation(tmp_path: Path) -> None:
    """``parent`` (the default) asks ``helper`` to work as ``reviewer``:
    it writes notes.txt through fs/* and makes made.txt with a command."""
    scripts = {
        "parent": [[{"say": "Asking.\n"}, {"mcp_call": {"id": "c1", "tool": "Agent",
                                                        "arguments": {"agent": "helper", "name": "reviewer", "prompt": "Review"}}}]],
        "helper": [[{"write": {"path": "notes.txt", "content": "reviewed\n"}},
                    {"terminal": {"command": "sh", "args": ["-c", "echo made > made.txt"]}},
                    {"say": "Reviewed."}]],
    }
    entries = {}
    for name, turns in scripts.items():
        script = tmp_path / f"{name}.json"
        script.write_text(json.dumps({"turns": turns}))
        entries[name] = {"command": [sys.executable, str(AGENT), str(script)]}
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": entries, "defaultAgent": "parent"}))


def test_rewind_and_the_turn_list_a_sub_agents_changes_under_its_name(workspace, tmp_path, terminal):
    (workspace / "notes.txt").write_text("original\n")
    configure_delegation(tmp_path)
    done = mevedel(workspace, tmp_path, "prompt", "Get a review")
    assert done.returncode == 0, done.stderr
    assert (workspace / "notes.txt").read_text() == "reviewed\n" and (workspace / "made.txt").exists()

    shown = terminal("session", "turn", "1")
    shown.wait_for("changed by reviewer: ")
    assert shown.process.wait(60) == 0
    assert "[agent reviewer (helper): completed]\n" in shown.output and "changed by reviewer: made.txt, notes.txt\n" in shown.output, shown.output

    impact = terminal("rewind", "1", "--before")
    impact.wait_for("to commit: mevedel rewind commit ")
    assert impact.process.wait(60) == 0
    lines = impact.output.splitlines()
    assert "  restore notes.txt (pre-turn of turn 1)" in lines and "  delete made.txt (pre-turn of turn 1)" in lines, impact.output
    agent_line = lines.index("  changed by agent reviewer: made.txt, notes.txt")
    assert agent_line < next(i for i, line in enumerate(lines) if line.startswith("to commit:"))
    # The same impact as JSON names the agent on each row it changed.
    data = json.loads(mevedel(workspace, tmp_path, "rewind", "1", "--before", "--json").stdout)
    assert {row["path"]: row["agents"] for row in data["restores"]} == {"made.txt": ["reviewer"], "notes.txt": ["reviewer"]}
    # Nothing changed until the commit, which restores what the sub-agent changed.
    assert (workspace / "notes.txt").read_text() == "reviewed\n"
    token = re.search(r"to commit: mevedel rewind commit (\S+)", impact.output).group(1)
    committed = mevedel(workspace, tmp_path, "rewind", "commit", token)
    assert committed.returncode == 0, committed.stderr
    assert (workspace / "notes.txt").read_text() == "original\n" and not (workspace / "made.txt").exists()
