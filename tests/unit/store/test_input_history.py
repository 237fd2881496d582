"""The workspace's chat input history (.mevedel/input-history), on this
machine and on a real OpenSSH server: recorded newest last, a repeated
prompt moved rather than kept twice, bounded, a corrupt file renamed aside
with one warning, two writers at once both kept, and only prompts sent to a
session held writable here recorded."""

from __future__ import annotations

import asyncio
import json

from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.store.workspace_wide.input_history import (
    HISTORY_PATH,
    MAX_ENTRIES,
    InputHistory,
)
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")


async def test_prompts_are_recalled_newest_last_without_repeats(open_target, tmp_path):
    history = InputHistory(await open_target(tmp_path))
    assert (await history.read()).entries == ()  # no file: an empty history, no warning
    for text in ("fix the build", "add a test", "fix the build", "   ", "multi\nline"):
        await history.record(text)
    again = await InputHistory(await open_target(tmp_path)).read()
    assert again.entries == ("add a test", "fix the build", "multi\nline") and again.warning is None
    stored = json.loads((tmp_path / HISTORY_PATH).read_text())
    assert stored == {"version": 1, "entries": ["add a test", "fix the build", "multi\nline"]}


async def test_a_corrupt_history_is_renamed_aside_with_one_warning(open_target, tmp_path):
    (tmp_path / ".mevedel").mkdir()
    (tmp_path / HISTORY_PATH).write_bytes(b'{"version": 1, "entries": [3]')
    history = InputHistory(await open_target(tmp_path))
    first = await history.read()
    assert first.entries == () and first.warning is not None
    asides = list((tmp_path / ".mevedel").glob("input-history.corrupt-*"))
    assert len(asides) == 1 and asides[0].read_bytes() == b'{"version": 1, "entries": [3]'
    assert asides[0].name in first.warning and "could not be read" in first.warning
    assert (await history.read()).warning is None  # warned once: the file is gone
    assert (await history.record("after")).entries == ("after",)
    assert len(list((tmp_path / ".mevedel").glob("input-history.corrupt-*"))) == 1


async def test_the_history_keeps_the_newest_entries_within_its_bound(tmp_path):
    (tmp_path / ".mevedel").mkdir()
    many = [f"prompt {n}" for n in range(MAX_ENTRIES + 20)]
    (tmp_path / HISTORY_PATH).write_text(json.dumps({"version": 1, "entries": many}))
    history = InputHistory(LocalTarget(tmp_path))
    assert (await history.read()).entries == tuple(many[-MAX_ENTRIES:])
    recorded = await history.record("newest")
    assert len(recorded.entries) == MAX_ENTRIES and recorded.entries[-1] == "newest" and "prompt 20" not in recorded.entries


async def test_two_writers_at_once_lose_neither_prompt(tmp_path):
    one, two = InputHistory(LocalTarget(tmp_path)), InputHistory(LocalTarget(tmp_path))
    await asyncio.gather(*(h.record(f"{name} {n}") for n in range(5) for name, h in (("one", one), ("two", two))))
    entries = (await one.read()).entries
    assert sorted(entries) == sorted(f"{name} {n}" for n in range(5) for name in ("one", "two"))


async def test_only_a_prompt_to_a_session_held_writable_here_is_recorded(tmp_path):
    owner = SessionService(LocalTarget(tmp_path), ME)
    sid = (await owner.sessions.create()).session_id
    await owner.turns.begin_turn(sid, "materialise")
    await owner.turns.settle(sid)
    assert await owner.sessions.record_input(sid, "to my session") is None
    reader = SessionService(LocalTarget(tmp_path), OTHER)
    await reader.sessions.open(sid, "join")  # read-only: another client holds it
    assert await reader.sessions.record_input(sid, "to someone else's session") is None
    assert await reader.sessions.record_input("2026-12-04T22-00-0123456789ab", "to no open session") is None
    assert (await reader.sessions.input_history()).entries == ("to my session",)
    await reader.sessions.close(sid)
    await owner.sessions.close(sid)
