"""A restore never loses the text it replaces: the current content is
recorded as a version first (unless the latest version already holds it),
so the restore can itself be undone by restoring that version."""

import pytest

from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.records import VersionReason
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.store.authority.lease import ClientIdentity


def _store(target, name="a", **options):
    return ArtifactStore(target, ClientIdentity(f"client-{name}", f"host-{name}"), **options)


async def test_a_restore_keeps_the_unversioned_text_it_replaces(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("document", "Notes", b"")
    await store.write(item.item_id, b"saved as a version\n")
    await store.save_version(item.item_id)
    edited = b"forty bytes of edits nobody versioned..\n"
    await store.write(item.item_id, edited)
    await store.restore(item.item_id, 2)
    assert (await store.read(item.item_id)).data == b"saved as a version\n"
    versions = await store.versions(item.item_id)
    assert [(v.number, v.reason) for v in versions][:2] == [(4, VersionReason.RESTORED), (3, VersionReason.REPLACED)]
    # The replaced text is a version like any other: restoring it undoes the restore.
    await store.restore(item.item_id, 3)
    assert (await store.read(item.item_id)).data == edited
    await store.close()


async def test_no_replaced_version_when_the_latest_version_holds_the_text(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("document", "Notes", b"one\n")
    await store.write(item.item_id, b"two\n")
    await store.save_version(item.item_id)
    await store.restore(item.item_id, 1)
    reasons = [v.reason for v in await store.versions(item.item_id)]
    assert reasons == [VersionReason.RESTORED, VersionReason.SAVED, VersionReason.CREATED]
    await store.close()


async def test_a_restore_of_an_item_another_process_holds_records_nothing(root, open_target):
    target = await open_target(root)
    one = _store(target, "one", renew_every=3600)
    two = _store(target, "two", renew_every=3600)
    item = await one.create("document", "Shared", b"start\n")
    await one.write(item.item_id, b"one's unversioned text\n")
    with pytest.raises(ArtifactError) as caught:
        await two.restore(item.item_id, 1)
    assert caught.value.kind == "item-held"
    assert [v.number for v in await two.versions(item.item_id)] == [1]
    assert (await two.read(item.item_id)).data == b"one's unversioned text\n"
    await one.close()
    await two.close()

