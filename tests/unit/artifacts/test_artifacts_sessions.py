"""Sessions attach to items and never own them: attachments survive
Rewind and travel with Save As; deleting a session leaves its items;
deleting an item deletes its own conversation but not other sessions;
expiry cleanup keeps an existing item's conversation."""

from __future__ import annotations

from mevedel_server.artifacts import ArtifactStore
from mevedel_server.artifacts.attachments import SessionArtifacts
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "host-me")


def _work(root) -> tuple[SessionService, SessionArtifacts]:
    service = SessionService(LocalTarget(root), ME)
    return service, SessionArtifacts(ArtifactStore(service.target, ME), service)


async def _turn(service: SessionService, sid: str, prompt: str) -> None:
    await service.turns.begin_turn(sid, prompt)
    await service.turns.settle(sid)


async def test_a_deleted_session_leaves_its_items(root):
    service, work = _work(root)
    sid = (await service.sessions.create("Temp")).session_id
    await _turn(service, sid, "one")
    item = await work.create(sid, "document", "Kept", b"text")
    assert item.attached
    await service.sessions.delete_session(sid)
    assert not (root / ".mevedel/sessions" / sid).exists()
    assert [i.item.meta.title for i in await work.list(None)] == ["Kept"]
    assert (await work.store.read(item.item.item_id)).data == b"text"
    await work.close()


async def test_rewind_leaves_attachments_and_save_as_carries_them(root):
    service, work = _work(root)
    sid = (await service.sessions.create("Main")).session_id
    await _turn(service, sid, "one")
    await _turn(service, sid, "two")
    item = await work.create(sid, "whiteboard", "Board", None)
    impact = await service.history.prepare_rewind(sid, "after", 1)
    await service.history.commit_rewind(sid, impact.token)
    assert service.info(sid).settled_turns == 1
    assert service.sessions.attached_artifacts(sid) == (item.item.item_id,)
    prepared = await service.history.prepare_save_as(sid, "Copy")
    child = await service.history.commit_save_as(sid, prepared.token)
    assert service.sessions.attached_artifacts(child.session_id) == (item.item.item_id,)
    await work.close()


async def test_an_items_conversation_goes_with_it_and_expiry_keeps_it_meanwhile(root):
    service, work = _work(root)
    main = (await service.sessions.create("Main")).session_id
    await _turn(service, main, "one")
    item = await work.create(main, "document", "Spec", b"# spec\n")
    conversation, created = await work.conversation(item.item.item_id)
    assert created and conversation != main
    assert await work.conversation(item.item.item_id) == (conversation, False)
    listing = await service.sessions.list()
    assert await work.hidden_sessions(listing.rows) == {conversation}
    exempt = await service.sessions.expiry_exemptions()
    assert set(exempt) == {conversation} and "Spec" in exempt[conversation]
    assert await work.delete(item.item.item_id) is None
    assert not (root / ".mevedel/sessions" / conversation).exists()
    assert (root / ".mevedel/sessions" / main).exists()
    assert await service.sessions.expiry_exemptions() == {}
    await work.close()


async def test_an_items_conversation_running_a_turn_is_kept_as_an_ordinary_session(root):
    service, work = _work(root)
    item = await work.create(None, "document", "Spec", b"x")
    conversation, _ = await work.conversation(item.item.item_id)
    await service.turns.begin_turn(conversation, "still working")
    assert await work.delete(item.item.item_id) == conversation
    assert service.sessions.dedicated_artifact(conversation) is None
    assert (root / ".mevedel/sessions" / conversation).exists()
    await work.close()
