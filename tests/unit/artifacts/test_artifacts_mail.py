"""Comments reach the agent of the session they were routed to: its next
turn's mail holds the comments routed to it and not yet delivered (on its
attached items and on the item whose own conversation it is), never
another session's; marking them delivered keeps them out of later mail and
shows in the discussion. Local and SSH workspaces alike; a planted link
in place of a discussion is never followed."""

from __future__ import annotations

import pytest

from mevedel_server.artifacts import ArtifactStore
from mevedel_server.artifacts import mail as mail_module
from mevedel_server.artifacts.attachments import SessionArtifacts
from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.mail import mail_text, mark_delivered, pending_mail
from mevedel_server.resources.families.shared import discussion_lines
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService

ME = ClientIdentity("client-me", "host-me")


@pytest.fixture
async def work(tmp_path, open_target):
    root = tmp_path / "ws"
    root.mkdir()
    service = SessionService(await open_target(root), ME)
    artifacts = SessionArtifacts(ArtifactStore(service.target, ME), service)
    yield artifacts
    await artifacts.close()
    await service.sessions.close_all()


async def _session(work: SessionArtifacts, name: str) -> str:
    sid = (await work.service.sessions.create(name)).session_id
    await work.service.turns.begin_turn(sid, "start")
    await work.service.turns.settle(sid)
    return sid


async def test_a_sessions_mail_is_what_was_routed_to_it_until_delivered(work):
    mine, other = await _session(work, "Mine"), await _session(work, "Other")
    plan = (await work.create(mine, "document", "Plan", b"# plan\n")).item.item_id
    await work.comment(mine, plan, "Split step two\ninto two steps.")
    await work.comment(other, plan, "Also for Other")  # Other has not attached it: routed nowhere...
    assert (await work.store.discussions([plan]))[plan][1][1].session_id is None
    await work.comment(mine, plan, "And name the owner.")

    mail = await pending_mail(work, mine)
    assert [(m.title, [c.number for c in m.comments]) for m in mail] == [("Plan", [1, 3])]
    assert await pending_mail(work, other) == []
    text = mail_text(mail)
    assert f'"Plan" (shared://{plan}):' in text
    assert "- comment 1 by user: Split step two\n  into two steps." in text and "Also for Other" not in text

    await mark_delivered(work, mail, 4)
    assert await pending_mail(work, mine) == []
    comments = (await work.store.discussions([plan]))[plan][1]
    assert [c.delivered_in for c in comments] == [4, None, 4]
    assert f"(to session {mine}, delivered in turn 4)" in "\n".join(discussion_lines(comments))
    await work.comment(mine, plan, "One more.")
    assert [[c.number for c in m.comments] for m in await pending_mail(work, mine)] == [[4]]


async def test_an_items_own_conversation_gets_the_comments_nobody_attached_took(work):
    plan = (await work.create(None, "document", "Spec", b"# spec\n")).item.item_id
    conversation, _created = await work.conversation(plan)
    await work.comment(None, plan, "Who reviews this?")
    mail = await pending_mail(work, conversation)
    assert [(m.item_id, [c.text for c in m.comments]) for m in mail] == [(plan, ["Who reviews this?"])]


async def test_one_prompt_carries_at_most_the_cap_and_a_deleted_item_is_skipped(work, monkeypatch):
    monkeypatch.setattr(mail_module, "MAX_COMMENTS_PER_PROMPT", 3)
    sid = await _session(work, "Busy")
    first = (await work.create(sid, "document", "A", b"a\n")).item.item_id
    second = (await work.create(sid, "document", "B", b"b\n")).item.item_id
    for n in range(2):
        await work.comment(sid, first, f"on A {n}")
        await work.comment(sid, second, f"on B {n}")
    mail = await pending_mail(work, sid)
    assert sum(len(m.comments) for m in mail) == 3
    await work.delete(sorted([first, second])[0])
    mail = await pending_mail(work, sid)
    assert [m.item_id for m in mail] == [sorted([first, second])[1]]


async def test_a_linked_discussion_is_not_followed_and_the_others_still_arrive(work, tmp_path):
    sid = await _session(work, "Linked")
    good = (await work.create(sid, "document", "Good", b"g\n")).item.item_id
    bad = (await work.create(sid, "document", "Bad", b"b\n")).item.item_id
    await work.comment(sid, good, "Read me.")
    await work.comment(sid, bad, "Hidden")
    outside = tmp_path / "outside.json"
    outside.write_text('{"format_version": 1, "comments": []}')
    discussion = tmp_path / "ws" / ".mevedel/artifacts/.state" / bad / "discussion.json"
    discussion.unlink()
    discussion.symlink_to(outside)
    mail = await pending_mail(work, sid)
    assert [(m.item_id, [c.text for c in m.comments]) for m in mail] == [(good, ["Read me."])]
    await mark_delivered(work, mail, 2)
    assert outside.read_text() == '{"format_version": 1, "comments": []}'
    with pytest.raises(ArtifactError) as refused:
        await work.comment(sid, bad, "Through the link?")
    assert refused.value.kind == "containment" and "follows no link" in str(refused.value)
    assert outside.read_text() == '{"format_version": 1, "comments": []}'
