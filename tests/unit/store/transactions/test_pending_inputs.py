"""The durable record of queued prompts and steering
(``store/transactions/pending_inputs.py``): one file per entry behind the
lease proof, an unreadable entry named and left in place (never a crash,
never a guess), and only the lease's owner writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, LeaseLost
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.pending_inputs import (
    InputRecord,
    load_inputs,
    remove_input,
    write_inputs,
)
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")


def record(sid: str, entry_id: str, text: str, order: int, **fields) -> InputRecord:
    return InputRecord(entry_id=entry_id, session_id=sid, kind="follow-up", state="queued", order=order, text=text,
                       client_id=ME.client_id, host=ME.host, queued_at=1, **fields)


async def saved_session(root: Path) -> tuple[SessionService, str]:
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await svc.turns.begin_turn(sid, "first")
    await svc.turns.append(sid, EvidenceInput("response", text="ok"))
    await svc.turns.settle(sid)
    return svc, sid


async def test_entries_are_kept_one_file_each_in_order_and_an_unreadable_one_is_named(tmp_path):
    svc, sid = await saved_session(tmp_path)
    session = svc.session(sid)
    a, b = "a" * 32, "b" * 32
    await write_inputs(session.lease, [record(sid, b, "later", 2), record(sid, a, "sooner", 1, attachments=("x.md",))], new=[a, b])
    folder = tmp_path / ".mevedel" / "sessions" / sid / ".pending-input"
    assert sorted(p.name for p in folder.iterdir()) == [f"{a}.json", f"{b}.json"]
    (folder / f"{'c' * 32}.json").write_text("{not json")
    records, problems = await load_inputs(svc.target, session.paths)
    assert [(r.text, r.attachments) for r in records] == [("sooner", ("x.md",)), ("later", ())]
    assert len(problems) == 1 and "c" * 32 in problems[0] and "left in .pending-input/" in problems[0]
    assert (folder / f"{'c' * 32}.json").exists()

    await remove_input(session.lease, a)
    await remove_input(session.lease, a)  # already gone: not an error
    records, _ = await load_inputs(svc.target, session.paths)
    assert [r.text for r in records] == ["later"]


async def test_a_client_that_lost_the_lease_writes_nothing(tmp_path):
    svc, sid = await saved_session(tmp_path)
    lease = svc.session(sid).lease
    await svc.sessions.close(sid)  # released
    with pytest.raises(LeaseLost):
        await write_inputs(lease, [record(sid, "d" * 32, "too late", 1)], new=["d" * 32])
    assert not (tmp_path / ".mevedel" / "sessions" / sid / ".pending-input" / f"{'d' * 32}.json").exists()


async def test_rewind_and_clear_are_refused_while_prompts_wait_and_go_once_they_are_gone(tmp_path):
    from mevedel_server.store.service.errors import TurnStateConflict

    svc, sid = await saved_session(tmp_path)
    session = svc.session(sid)
    entry = "e" * 32
    await write_inputs(session.lease, [record(sid, entry, "queued meanwhile", 1)], new=[entry])
    with pytest.raises(TurnStateConflict) as refused:
        await svc.history.prepare_rewind(sid, "before", 1)
    assert "has 1 queued prompt: send or cancel it before you rewind it" in str(refused.value)
    with pytest.raises(TurnStateConflict):
        await svc.turns.clear(sid)
    await remove_input(session.lease, entry)
    impact = await svc.history.prepare_rewind(sid, "before", 1)
    await svc.history.commit_rewind(sid, impact.token)
    assert [t.turn for t in await svc.turns.summaries(sid)] == []


async def test_a_resume_lists_the_queued_input_in_its_claim_for_the_first_load_alone(tmp_path):
    """The claim's program lists the queue (no program of its own for the
    first load after a resume); later loads list again."""
    svc, sid = await saved_session(tmp_path)
    a = "a" * 32
    await write_inputs(svc.session(sid).lease, [record(sid, a, "waiting", 1)], new=[a])
    await svc.sessions.close(sid)
    again = SessionService(LocalTarget(tmp_path), ME)
    await again.sessions.open(sid, "resume")
    session = again.session(sid)
    listed = session.take_inputs_listing()
    assert listed is not None and listed.ok and f"{a}.json" in listed.value
    records, _ = await load_inputs(again.target, session.paths, listed=listed)
    assert [r.text for r in records] == ["waiting"]
    assert session.take_inputs_listing() is None  # once
    await remove_input(session.lease, a)
    assert await load_inputs(again.target, session.paths) == ([], [])
    await again.sessions.close(sid)
