"""Crash at every write point of the artifact store's transactions, on a
local and an SSH target, as a process death and as a power loss.

Transactions walked: the item lease's transitions (acquire by a write,
renewal, release, hand-over release, takeover of an expired lease by a
write), whole-item writes (a live document under its lease; an artifact
against its base revision), version publication (below the cap, and at the
cap where a blob is dropped), create (with a secondary file), adopting a
file a model wrote into a new id directory, and delete.

After each crash a fresh reader -- a new ``ArtifactStore`` on a fresh target
over the same directory -- sees the item as it was before the transaction
or as it is after it, field by field, never torn: listing and reading
succeed or report a clean ``missing-target``; the primary file is wholly old
or wholly new; the version index is the old or the new one and names only
blobs that exist with their recorded digest; the lease head decodes and is
the old or the new generation. Then the restarted process (the crashed
client's identity on a fresh target) makes the next edit, and a third
process is refused it: one writer afterwards.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.layout import LIVE_PRIMARY, ItemPaths
from mevedel_server.artifacts.records import ItemLeaseRecord, ItemLeaseState, encode
from mevedel_server.artifacts.store import ArtifactStore, revision_of
from mevedel_server.artifacts.versions import parse_version_file, read_version
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

A = ClientIdentity("client-a", "host-a")
B = ClientIdentity("client-b", "host-b")
READER = ClientIdentity("client-reader", "host-reader")
THIRD = ClientIdentity("client-third", "host-third")
ITEM = "item0001"
OLD = b"# old\n" + b"o" * 300 + b"\n"
MID = b"# mid\n" + b"m" * 300 + b"\n"
NEW = b"# new\n" + b"n" * 400 + b"\n"
AFTER = b"# after the crash\n"
HTML_OLD = b"<p>old</p>" + b"o" * 200
HTML_NEW = b"<p>new</p>" + b"n" * 300
WALKED: Counter[str] = Counter()
WALKED_OUTCOMES: dict[str, dict] = {}


def store(target, client, **options) -> ArtifactStore:
    options.setdefault("renew_every", 3600)  # renewals only when a test asks
    return ArtifactStore(target, client, lease_seconds=600, **options)


def abandon(*stores: ArtifactStore) -> None:
    """The process is gone: its renewal task stops, nothing is released."""
    for s in stores:
        task = s.leases._renewal
        if task is not None:
            task.cancel()


async def close_target(target) -> None:
    inner = getattr(target, "inner", target)
    close = getattr(inner, "close", None)
    if close is not None:
        await close()


# Transactions ---------------------------------------------------------------
#
# Each prepares its item through the crashing process's own (still disarmed)
# fault target and returns the stores and the transaction to crash.


@dataclass
class Prepared:
    transaction: object
    stores: tuple[ArtifactStore, ...]
    #: The identity of the process that runs (and crashes in) the transaction.
    crashing: ClientIdentity
    item_id: str = ITEM
    options: dict | None = None
    #: What the restarted process does again when the item is not there
    #: (None: it creates another item).
    retry: object = None


async def _holding(root: Path, target) -> tuple[ArtifactStore, ArtifactStore]:
    """A created the document, B wrote it and holds its lease (generation 3,
    so the next transition also prunes generation 2)."""
    a, b = store(target, A), store(target, B)
    await a.create("document", "Doc", OLD, item_id=ITEM)
    await b.write(ITEM, MID)
    await b.leases.renew(ITEM)
    await b.leases.renew(ITEM)
    assert (await b.leases.observe(ITEM)).generation == 3
    return a, b


async def acquire_by_write(root, target):
    a, b = store(target, A), store(target, B)
    await a.create("document", "Doc", OLD, item_id=ITEM)
    return Prepared(lambda: b.write(ITEM, NEW), (a, b), B)


async def renewal(root, target):
    a, b = await _holding(root, target)
    return Prepared(lambda: b.leases.renew(ITEM), (a, b), B)


async def release(root, target):
    a, b = await _holding(root, target)
    return Prepared(lambda: b.leases.release(ITEM), (a, b), B)


async def handover_release(root, target):
    a, b = await _holding(root, target)
    await a.request_handover(ITEM)
    b.leases._monotonic = lambda: 1e9  # no edit for far longer than 10 s
    return Prepared(lambda: b.leases.renew(ITEM), (a, b), B)


async def takeover_of_expired(root, target):
    a, b = await _holding(root, target)
    # B's machine was suspended: its newest generation expired long ago.
    head = (await b.leases.observe(ITEM)).record
    expired = ItemLeaseRecord(
        generation=head.generation + 1, state=ItemLeaseState.ACTIVE, client_id=B.client_id, host=B.host,
        renewed_at=100, expires_at=160,
    )
    path = root / ItemPaths(ITEM).generation(expired.generation)
    with open(path, "xb") as handle:
        handle.write(encode(expired))
    abandon(b)
    return Prepared(lambda: a.write(ITEM, NEW), (a, b), A)


async def live_write(root, target):
    a, b = await _holding(root, target)
    return Prepared(lambda: b.write(ITEM, NEW), (a, b), B)


async def artifact_write(root, target):
    a, b = store(target, A), store(target, B)
    await a.create("artifact", "Report", HTML_OLD, file_name="report.html", item_id=ITEM)
    return Prepared(lambda: b.write(ITEM, HTML_NEW, base_revision=revision_of(HTML_OLD)), (a, b), B)


async def publication(root, target):
    a, b = await _holding(root, target)
    await b.write(ITEM, NEW)
    return Prepared(lambda: b.save_version(ITEM), (a, b), B)


async def publication_at_cap(root, target):
    a, b = store(target, A, max_versions=3), store(target, B, max_versions=3)
    await a.create("document", "Doc", OLD, item_id=ITEM)
    for n in range(3):
        await b.write(ITEM, b"# v%d\n" % n)
        await b.save_version(ITEM)
    await b.write(ITEM, NEW)
    # The third save dropped the created version: its blob's removal, which
    # that save did not wait for, is over before the transaction is counted
    # (else it ran inside the transaction's count in one run and not in
    # another: a crash point the transaction never reached, at load).
    await b.removals_done()
    # Publishing drops the oldest kept version and its blob.
    return Prepared(lambda: b.save_version(ITEM), (a, b), B, options={"max_versions": 3})


async def create(root, target):
    b = store(target, B)
    return Prepared(
        lambda: b.create("artifact", "Report", HTML_NEW, file_name="report.html", item_id=ITEM,
                         files=[("assets/logo.svg", b"<svg/>")]),
        (b,), B,
    )


async def adopt(root, target):
    # A model's ApplyPatch wrote a file into a new id directory.
    authored = root / ".mevedel/artifacts" / ITEM
    authored.mkdir(parents=True)
    (authored / "report.md").write_bytes(NEW)
    b = store(target, B)
    return Prepared(lambda: b.adopt(ITEM, "report.md"), (b,), B, retry=lambda s: s.adopt(ITEM, "report.md"))


async def delete(root, target):
    a, b = await _holding(root, target)
    await a.comment(ITEM, "looks good")
    await b.save_version(ITEM)
    (root / ".mevedel/artifacts" / ITEM / "notes.md").write_bytes(b"secondary")
    return Prepared(lambda: b.delete(ITEM), (a, b), B)


TRANSACTIONS = {
    "acquire-by-write": acquire_by_write,
    "renewal": renewal,
    "release": release,
    "handover-release": handover_release,
    "takeover-of-expired": takeover_of_expired,
    "live-write": live_write,
    "artifact-write": artifact_write,
    "publication": publication,
    "publication-at-cap": publication_at_cap,
    "create": create,
    "adopt": adopt,
    "delete": delete,
}


# What a fresh reader sees ----------------------------------------------------


@dataclass(frozen=True)
class Seen:
    listed: bool
    title: str | None = None
    data: bytes | None = None
    #: (number, sha256) of every kept version, oldest first.
    versions: tuple | None = None
    #: (generation, client, state) of the lease head, or None.
    lease: tuple | None = None
    handover_asked: bool = False
    comments: tuple = ()


async def fresh_look(open_client_target, root: Path, item_id: str = ITEM) -> Seen:
    target = await open_client_target(root)
    try:
        reader = store(target, READER)
        listed = await reader.list()  # never raises on a crashed store
        summary = [s for s in listed if s.item_id == item_id]
        view = await reader.leases.observe(item_id)  # a torn head raises "unreadable"
        lease = (view.generation, view.record.client_id, view.record.state.value) if view.record else None
        if not summary:
            with pytest.raises(ArtifactError) as caught:
                await reader.read(item_id)
            assert caught.value.kind == "missing-target"
            return Seen(False, lease=lease)
        content = await reader.read(item_id)
        # The primary file, as the project sees it on disk, is the bytes read.
        assert (root / ItemPaths(item_id).file(content.meta.primary)).read_bytes() == content.data
        versions = await reader.versions(item_id)
        assert summary[0].versions == len(versions)
        for entry in versions:
            # Through the store (which checks the digest) and on disk.
            got, blob = await read_version(target, item_id, entry.number)
            assert hashlib.sha256(blob).hexdigest() == entry.sha256 == got.sha256
            parsed = parse_version_file((root / ItemPaths(item_id).version_file(entry.number)).read_bytes(), entry.number)
            assert parsed is not None and parsed[1] == blob
        numbers = [v.number for v in versions]
        assert len(set(numbers)) == len(numbers)
        return Seen(
            True,
            content.meta.title,
            content.data,
            tuple((v.number, v.sha256) for v in reversed(versions)),
            lease,
            view.handover is not None,
            tuple(c.text for c in content.comments),
        )
    finally:
        await close_target(target)


def judge(seen: Seen, old: Seen, new: Seen, point: int) -> str:
    """Every field is the old or the new one; which, overall."""
    for name in Seen.__dataclass_fields__:
        value = getattr(seen, name)
        assert value in (getattr(old, name), getattr(new, name)), (
            f"crash point {point}: {name} is {value!r}, neither before ({getattr(old, name)!r}) "
            f"nor after ({getattr(new, name)!r})"
        )
    if seen == old:
        return "old"
    if seen == new:
        return "new"
    return "between"  # e.g. the lease renewed ahead of a write that never ran


async def next_edit(open_client_target, root: Path, prepared: Prepared, seen: Seen) -> None:
    """The crashed process restarts and carries on; a third one cannot
    write the item while it holds it."""
    target = await open_client_target(root)
    options = prepared.options or {}
    again = store(target, prepared.crashing, **options)
    third = store(target, THIRD, **options)
    try:
        if not seen.listed and prepared.retry is not None:
            # Done again after the restart, it makes the item whole.
            assert await prepared.retry(again) is not None
            assert [s.item_id for s in await again.list()] == [prepared.item_id]
            assert [v.number for v in await again.versions(prepared.item_id)] == [1]
            return
        if not seen.listed:
            made = await again.create("document", "Next", b"# next\n")
            assert [s.item_id for s in await again.list()] == [made.item_id]
            return
        meta, _ = await again.meta(prepared.item_id)
        if meta.kind in LIVE_PRIMARY:
            await again.write(prepared.item_id, AFTER)
            assert again.leases.holds(prepared.item_id)
            with pytest.raises(ArtifactError) as caught:
                await third.write(prepared.item_id, b"# third\n")
            assert caught.value.kind == "item-held"
            assert (await third.read(prepared.item_id)).data == AFTER
        else:
            await again.write(prepared.item_id, b"<p>after</p>", base_revision=revision_of(seen.data))
        entry = await again.save_version(prepared.item_id)
        kept = [v.number for v in await third.versions(prepared.item_id)]
        assert entry.number == kept[0] and entry.number not in {n for n, _ in seen.versions}
        _, blob = await read_version(target, prepared.item_id, entry.number)
        assert blob == (AFTER if meta.kind in LIVE_PRIMARY else b"<p>after</p>")
    finally:
        abandon(again, third)
        await close_target(target)


def leftovers(root: Path) -> list[str]:
    """What a crashed delete or create leaves of an item nobody lists."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if ITEM in str(p) and not p.name.endswith(".crash.tmp") and p.is_file()
    )


@pytest.mark.parametrize("power_loss", [False, True], ids=["process-death", "power-loss"])
@pytest.mark.parametrize("name", sorted(TRANSACTIONS))
async def test_a_crash_at_every_write_leaves_the_item_old_or_new(open_client_target, tmp_path, name, power_loss):
    prepare = TRANSACTIONS[name]

    async def prepared_at(root: Path) -> tuple[FaultInjectingTarget, Prepared]:
        root.mkdir()
        # The item is prepared through a local target -- the executor that
        # writes its bytes is the same code on both targets -- and the
        # transaction that crashes runs on the target under test, as do the
        # fresh reader and the restarted process. (Preparing over SSH again
        # at every crash point was half the SSH round trips of this file.)
        local = LocalTarget(root)
        target = FaultInjectingTarget(local, power_loss=power_loss)
        prepared = await prepare(root, target)
        target.inner = await open_client_target(root)
        await close_target(local)
        target.arm(None)
        return target, prepared

    baseline_root = tmp_path / "baseline"
    baseline, prepared = await prepared_at(baseline_root)
    old = await fresh_look(open_client_target, baseline_root)
    await prepared.transaction()
    total = baseline.writes
    new = await fresh_look(open_client_target, baseline_root)
    abandon(*prepared.stores)
    await close_target(baseline)
    assert old != new, "the transaction changed nothing a reader sees"

    walked = 0
    outcomes: Counter[str] = Counter()
    residue: dict[int, list[str]] = {}
    for point in range(1, total + 2):
        root = tmp_path / f"crash-{point}"
        target, prepared = await prepared_at(root)
        target.arm(point, "crash")
        try:
            await prepared.transaction()
        except SimulatedCrash:
            pass
        else:
            assert point == total + 1 and not target.fired
            assert await fresh_look(open_client_target, root) == new
            abandon(*prepared.stores)
            await close_target(target)
            break
        walked += 1
        abandon(*prepared.stores)  # the process is dead: nothing of it runs again
        await close_target(target)
        seen = await fresh_look(open_client_target, root)
        outcomes[judge(seen, old, new, point)] += 1
        if not seen.listed and leftovers(root):
            residue[point] = leftovers(root)
        if name == "delete" and not seen.listed:
            # Past its commit point a delete is finished by the next listing.
            assert leftovers(root) == [], (point, leftovers(root))
        await next_edit(open_client_target, root, prepared, seen)
    kind = "power loss" if power_loss else "process death"
    WALKED[f"{name} ({kind})"] = walked
    print(f"\n{name} ({kind}): {walked} crash points walked, outcomes {dict(outcomes)}")
    for point, files in residue.items():
        print(f"  crash point {point}: unlisted item left {files}")
    assert walked == total >= 1
    # A crash comes before the point's write, so the first leaves it old; the
    # new side is the completed run above (or a crash after the commit).
    assert outcomes["old"] >= 1
    WALKED_OUTCOMES[f"{name} ({kind})"] = dict(outcomes)


async def test_a_file_written_into_the_id_of_a_crashed_delete_becomes_an_item(open_client_target, tmp_path):
    """A delete that crashed after removing meta.json (its commit point) left
    the item's ``.state/ID/``; adopting a file the model writes into that id
    again once answered 'exists already' (None) although nothing listed the
    item, so the file never became one."""
    root = tmp_path / "ws"
    root.mkdir()
    target = FaultInjectingTarget(await open_client_target(root))
    b = store(target, B)
    await b.create("artifact", "Report", HTML_OLD, file_name="report.html", item_id=ITEM)
    await b.comment(ITEM, "of the deleted item")
    target.arm(3, "crash")  # the first write after the marker and Remove(meta.json)
    with pytest.raises(SimulatedCrash):
        await b.delete(ITEM)
    abandon(b)
    await close_target(target)
    assert not (await fresh_look(open_client_target, root)).listed
    # The listing finished the delete; the model, which still knows the
    # item's path, writes the file again.
    assert not (root / ".mevedel/artifacts" / ITEM).exists()
    (root / ".mevedel/artifacts" / ITEM).mkdir()
    (root / ".mevedel/artifacts" / ITEM / "report.html").write_bytes(HTML_NEW)
    restarted = await open_client_target(root)
    again = store(restarted, B)
    try:
        adopted = await again.adopt(ITEM, "report.html")
        assert adopted is not None, "adopt answered 'exists already' for an item nobody lists"
        assert [s.item_id for s in await again.list()] == [ITEM]
        item = await again.read(ITEM)
        assert item.data == HTML_NEW and item.comments == ()
        assert [(v.number, v.reason.value) for v in await again.versions(ITEM)] == [(1, "created")]
        assert await again.adopt(ITEM, "report.html") is None  # now it does exist
    finally:
        await close_target(restarted)
