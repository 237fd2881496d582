"""What the store tells people: a title it cannot keep as typed is refused
saying why (never folded unsaid), and comments reaching an agent are a
change the editors showing the discussion hear of."""

import pytest

from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.store.authority.lease import ClientIdentity


def _store(target, name="a", **options):
    return ArtifactStore(target, ClientIdentity(f"client-{name}", f"host-{name}"), **options)


async def test_a_title_with_a_newline_is_refused_saying_so_not_folded(root, open_target):
    store = _store(await open_target(root))
    with pytest.raises(ArtifactError) as caught:
        await store.create("document", "Road\nmap")
    assert caught.value.kind == "invalid-params" and "no newline" in caught.value.reason
    assert await store.list() == []
    item = await store.create("document", "  Road   map ")
    assert item.meta.title == "Road map"
    await store.close()


async def test_comments_marked_delivered_are_announced(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("document", "Doc", b"x")
    comment = await store.comment(item.item_id, "Shorter, please", routed_to="s1")
    heard = []
    store.on_change.append(lambda item_id, reason: heard.append((item_id, reason)))
    await store.mark_delivered(item.item_id, [comment.number], 3)
    assert heard == [(item.item_id, "delivered")]
    await store.mark_delivered(item.item_id, [comment.number], 4)  # already delivered: no news
    assert heard == [(item.item_id, "delivered")]
    assert (await store.read(item.item_id)).comments[0].delivered_in == 3
    await store.close()
