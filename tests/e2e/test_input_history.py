"""The chat input history through the real server: ``mevedel/turn/prompt``
records what the person sent (even a prompt the agent then refuses),
``mevedel/input/history`` gives it back oldest first, and a corrupt history
file is renamed aside with one warning."""

from __future__ import annotations

from lsprotocol import types

from mevedel_protocol import methods

from .conftest import request
from .test_agent_turns import configure, prompt


async def test_prompts_sent_are_the_history_and_a_corrupt_file_is_renamed_aside_once(client, workspace):
    (workspace / ".mevedel").mkdir(exist_ok=True)
    (workspace / ".mevedel" / "input-history").write_text("not json")
    configure(client, workspace, [[{"say": "one"}], [{"say": "two"}], [{"say": "three"}]])
    first = await request(client, methods.INPUT_HISTORY, {})
    assert first["entries"] == [] and "renamed to .mevedel/input-history.corrupt-" in first["warning"]
    assert len(list((workspace / ".mevedel").glob("input-history.corrupt-*"))) == 1
    for text in ("fix the build", "add a test", "fix the build"):
        assert (await prompt(client, text))["outcome"] == "completed"
    again = await request(client, methods.INPUT_HISTORY, {})
    assert again["entries"] == ["add a test", "fix the build"] and again.get("warning") is None
    # the corrupt file was told once, to the reader that found it
    assert not [m for m in client.messages if "input history" in m.message]


async def test_a_prompt_that_finds_the_history_corrupt_shows_the_warning_once(client, workspace):
    (workspace / ".mevedel").mkdir(exist_ok=True)
    (workspace / ".mevedel" / "input-history").write_bytes(b'{"version": 2, "entries": []}')
    configure(client, workspace, [[{"say": "one"}], [{"say": "two"}]])
    await prompt(client, "first")
    await prompt(client, "second")
    warned = [m for m in client.messages if "input history" in m.message]
    assert len(warned) == 1 and warned[0].type == types.MessageType.Warning and "renamed to" in warned[0].message
    assert (await request(client, methods.INPUT_HISTORY, {}))["entries"] == ["first", "second"]
