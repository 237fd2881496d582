"""The workspace artifact store's contracts, on this machine's target and
on a real SSH target: items by stable id with titles, whole-item writes
fenced by item leases, versions, discussions, duplicate and delete."""

import asyncio
import base64
import os

import pytest

from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.layout import ItemPaths
from mevedel_server.artifacts.records import (
    VersionEntry,
    VersionIndex,
    VersionReason,
    encode,
)
from mevedel_server.artifacts.store import ArtifactStore, Editor, revision_of
from mevedel_server.artifacts.versions import (
    publish_version,
    read_index,
    read_version,
    version_file_bytes,
)
from mevedel_server.store.authority.lease import ClientIdentity


def _store(target, name="a", **options):
    return ArtifactStore(target, ClientIdentity(f"client-{name}", f"host-{name}"), **options)


async def test_items_are_listed_by_title_and_keep_their_own_ids(root, open_target):
    store = _store(await open_target(root))
    first = await store.create("document", "Plan", b"# one\n")
    second = await store.create("document", "Plan", b"# two\n")
    board = await store.create("whiteboard", "Architecture")
    listed = await store.list()
    assert [item.meta.title for item in listed] == ["Architecture", "Plan", "Plan"]
    assert first.item_id != second.item_id
    assert (await store.read(first.item_id)).data == b"# one\n"
    assert (await store.read(second.item_id)).data == b"# two\n"
    assert b'"elements": []' in (await store.read(board.item_id)).data
    assert (root / ".mevedel/artifacts" / first.item_id / "document.md").read_bytes() == b"# one\n"
    assert (root / ".mevedel/artifacts/.state" / first.item_id / "meta.json").is_file()
    await store.close()


async def test_bad_input_is_refused_naming_it_and_writes_nothing(root, open_target):
    store = _store(await open_target(root))
    with pytest.raises(ArtifactError) as caught:
        await store.create("whiteboard", "Board", b"[1, 2]")
    assert caught.value.kind == "invalid-params" and "elements" in caught.value.reason
    with pytest.raises(ArtifactError) as caught:
        await store.create("artifact", "Run", b"x", file_name="run.sh")
    assert caught.value.authored == "run.sh"
    with pytest.raises(ArtifactError) as caught:
        await store.create("document", "   ")
    assert caught.value.kind == "invalid-params"
    with pytest.raises(ArtifactError) as caught:
        await store.read("../etc")
    assert caught.value.kind == "invalid-params"
    with pytest.raises(ArtifactError) as caught:
        await store.read("nosuchitem")
    assert caught.value.kind == "missing-target"
    assert await store.list() == []


async def test_a_write_based_on_an_old_revision_is_a_conflict(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("artifact", "Report", b"<p>v1</p>", file_name="report.html")
    base = (await store.read(item.item_id)).revision
    assert await store.write(item.item_id, b"<p>v2</p>", base_revision=base) == revision_of(b"<p>v2</p>")
    with pytest.raises(ArtifactError) as caught:
        await store.write(item.item_id, b"<p>v3</p>", base_revision=base)
    assert caught.value.kind == "conflict"
    assert (await store.read(item.item_id)).data == b"<p>v2</p>"


async def test_versions_are_capped_oldest_first_and_restore_is_an_ordinary_write(root, open_target):
    store = _store(await open_target(root), max_versions=3)
    item = await store.create("document", "Notes", b"v0")
    for n in range(1, 5):
        await store.write(item.item_id, f"v{n}".encode())
        await store.save_version(item.item_id)
    versions = await store.versions(item.item_id)
    assert [v.number for v in versions] == [5, 4, 3]
    assert [v.reason for v in versions] == [VersionReason.SAVED] * 3
    revision = await store.restore(item.item_id, 3)
    assert (await store.read(item.item_id)).data == b"v2"
    assert revision == revision_of(b"v2")
    latest = (await store.versions(item.item_id))[0]
    assert latest.reason is VersionReason.RESTORED and latest.number == 6
    with pytest.raises(ArtifactError) as caught:
        await store.restore(item.item_id, 1)
    assert caught.value.kind == "missing-target" and "kept: 6, 5, 4" in caught.value.reason
    await store.removals_done()  # the dropped blobs' removal is not waited for by a save
    blobs = sorted(os.listdir(root / ".mevedel/artifacts/.state" / item.item_id / "versions"))
    assert len(blobs) == 3
    await store.close()


async def test_the_latest_version_is_kept_even_over_the_byte_cap(root, open_target):
    store = _store(await open_target(root), max_version_bytes=10)
    item = await store.create("document", "Big", b"x" * 50)
    await store.write(item.item_id, b"y" * 40)
    await store.save_version(item.item_id)
    assert [v.size for v in await store.versions(item.item_id)] == [40]
    await store.close()


async def test_two_publishers_never_take_the_same_version_number(root, open_target):
    target = await open_target(root)
    one, two = _store(target, "one"), _store(target, "two")
    item = await one.create("artifact", "Chart", b"<svg/>", file_name="chart.svg")
    await asyncio.gather(*(store.save_version(item.item_id) for store in (one, two) for _ in range(5)))
    numbers = [v.number for v in await one.versions(item.item_id)]
    assert sorted(numbers) == list(range(1, 12)) and len(set(numbers)) == 11


async def test_saving_a_version_reads_the_item_once_and_then_proves_it_in_the_publication(root, open_target):
    target = await open_target(root)
    store = _store(target)
    item = await store.create("document", "Doc", b"# one\n")
    real_run = target.run

    async def save_counted(text: bytes | None):
        """Writes TEXT (None: nothing), saves a version; the version and the
        programs the save ran."""
        if text is not None:
            await store.write(item.item_id, text)
        programs = []

        async def counting(program):
            programs.append(program)
            return await real_run(program)

        target.run = counting
        try:
            return await store.save_version(item.item_id), len(programs)
        finally:
            del target.run

    saved, programs = await save_counted(b"# two\n")
    # The item's metadata (where its primary file is); its bytes and the
    # index; the publication (the clock stamped as it writes the index) --
    # each a round trip on SSH.
    assert programs == 3
    assert saved.reason is VersionReason.SAVED and saved.sha256 == revision_of(b"# two\n")
    assert [v.number for v in await store.versions(item.item_id)][0] == saved.number
    # An editor's next save, written through this store or not written at
    # all: the publication proves the metadata and bytes it knows -- one
    # round trip.
    for text in (b"# three\n", None):
        again, programs = await save_counted(text)
        assert programs == 1
        assert again.number == saved.number + 1 and again.sha256 == revision_of(b"# three\n")
        saved = again
    # Bytes written by other means (a model's ApplyPatch): the refused
    # proof carries them, and they are what the next program publishes.
    (root / ".mevedel/artifacts" / item.item_id / "document.md").write_bytes(b"# patched\n")
    patched, programs = await save_counted(None)
    assert programs == 2 and patched.sha256 == revision_of(b"# patched\n")
    # Another process's write: its new bytes come back with the refused
    # proof as above, or -- its metadata changed too (a later second in
    # ``updated_at``) -- the item is read again.
    await store.leases.release(item.item_id)
    other = _store(target, "other")
    await other.write(item.item_id, b"# elsewhere\n")
    await other.close()
    elsewhere, programs = await save_counted(None)
    assert programs in (2, 3) and elsewhere.sha256 == revision_of(b"# elsewhere\n")
    versions = await store.versions(item.item_id)
    assert [v.sha256 for v in versions][:4] == [revision_of(b) for b in (b"# elsewhere\n", b"# patched\n", b"# three\n", b"# three\n")]
    assert versions[0].at >= versions[-1].at > 0
    await store.close()


async def test_a_blob_a_crash_left_unnamed_goes_with_the_next_save(root, open_target):
    """A crash between a publication's commit and its removal of the blob
    the new index dropped leaves that blob behind: the next save that
    reads the item removes it, and keeps every blob an index names."""
    target = await open_target(root)
    store = _store(target, max_versions=2)
    item = await store.create("document", "Doc", b"# one\n")
    for _ in range(3):
        await store.save_version(item.item_id)
    await store.removals_done()
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    kept = sorted(p.name for p in versions.iterdir())
    assert kept == ["0000000003.version", "0000000004.version"]
    (versions / "0000000001.version").write_bytes((versions / "0000000003.version").read_bytes())  # as the crash left it
    (versions / "0000000002").write_bytes(b"# one\n")  # a blob of the layout before version files
    later = _store(target, max_versions=2)
    entry = await later.save_version(item.item_id)
    await later.removals_done()
    assert sorted(p.name for p in versions.iterdir()) == ["0000000004.version", f"{entry.number:010d}.version"]
    await store.close()
    await later.close()


async def test_a_version_file_a_crash_tore_is_passed_over_and_never_written_into(root, open_target, tmp_path):
    """A crash before a publication's flush can leave its version file torn
    under the next number: every reader passes over it to the whole one
    before it (the listing's count, the versions, the save's index), the
    next save takes the number after it and drops it, and a file planted
    there as a hard link to one outside the workspace is dropped as a
    name, its bytes untouched."""
    target = await open_target(root)
    store = _store(target, max_versions=3)
    item = await store.create("document", "Doc", b"# the document\n")
    first = await store.save_version(item.item_id)
    await store.removals_done()
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    whole = (versions / f"{first.number:010d}.version").read_bytes()
    torn = versions / f"{first.number + 1:010d}.version"
    reader = _store(target, max_versions=3)
    for cut in (len(whole) - 3, whole.index(b"\n", 20) - 5, 7, 0):
        torn.write_bytes(whole[:cut])  # header or bytes torn by the crash
        assert [s.versions for s in await reader.list()] == [2]
        assert [v.number for v in await reader.versions(item.item_id)] == [first.number, 1]
    torn.write_bytes(whole[:-3] + b"xyz")  # the size whole, a block of the bytes not written
    assert [v.number for v in await reader.versions(item.item_id)] == [first.number, 1]
    second = await reader.save_version(item.item_id)
    await reader.removals_done()
    assert second.number == first.number + 2
    assert not torn.exists()
    assert (await read_version(target, item.item_id, second.number))[1] == b"# the document\n"
    assert [v.number for v in await store.versions(item.item_id)] == [second.number, first.number, 1]
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"untouched")
    os.link(outside, versions / f"{second.number + 1:010d}.version")
    third = await store.save_version(item.item_id)
    await store.removals_done()
    assert third.number == second.number + 2
    assert (await read_version(target, item.item_id, third.number))[1] == b"# the document\n"
    assert outside.read_bytes() == b"untouched"
    assert [s.versions for s in await reader.list()] == [3]
    await store.close()
    await reader.close()


async def test_a_listing_counts_a_large_items_versions_from_its_header_and_size(root, open_target):
    """An item larger than a listing reads of each newest version file is
    counted from that file's header, its size proved; cut short by a crash
    it is passed over like any torn file, in the same listing."""
    target = await open_target(root)
    store = _store(target)
    big = b"# big\n" + b"x" * (200 * 1024)
    item = await store.create("document", "Big", big)
    await store.create("document", "Small", b"# small\n")
    await store.save_version(item.item_id)
    await store.removals_done()
    assert {s.meta.title: s.versions for s in await _store(target).list()} == {"Big": 2, "Small": 1}
    index = (await read_index(target, item.item_id)).index
    third = VersionEntry(number=3, at=1_800_000_000, reason=VersionReason.SAVED, size=len(big), sha256=revision_of(big))
    whole = version_file_bytes(VersionIndex(next_number=4, versions=[*index.versions, third]), big)
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    (versions / "0000000003.version").write_bytes(whole[:-1000])  # its header whole, its bytes cut short
    assert {s.meta.title: s.versions for s in await _store(target).list()} == {"Big": 2, "Small": 1}
    (versions / "0000000003.version").write_bytes(whole)  # and whole: counted
    assert {s.meta.title: s.versions for s in await _store(target).list()} == {"Big": 3, "Small": 1}
    await store.close()


@pytest.mark.parametrize("size", [6, 200 * 1024], ids=["small", "larger-than-a-head-read"])
async def test_a_version_file_read_while_its_publisher_wrote_it_is_not_passed_over(root, open_target, size):
    """Readers take no lock: one can read the newest version file while its
    publisher is still writing it, and take it for torn. A publication
    built on that read proves the file unchanged under the lock; finished
    by then, it is the index, and its version is kept, not skipped over.
    A file larger than a reader's head read is judged by its size, then
    read whole."""
    target = await open_target(root)
    store = _store(target)
    item = await store.create("document", "Doc", b"# one\n" + b"x" * (size - 6))
    saved = await store.save_version(item.item_id)
    await store.removals_done()
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    path = versions / f"{saved.number:010d}.version"
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # the publisher is half way
    view = await read_index(target, item.item_id)
    assert view.newest == path.name and [v.number for v in view.index.versions] == [1]
    path.write_bytes(whole)  # and done
    published = await publish_version(
        target, item.item_id, b"# later\n", reason=VersionReason.SAVED, max_count=20, max_bytes=1 << 20, known=view
    )
    assert published.entry.number == saved.number + 1
    assert [v.number for v in published.index.versions] == [1, saved.number, saved.number + 1]
    assert [v.number for v in await store.versions(item.item_id)] == [saved.number + 1, saved.number, 1]
    await store.close()


async def test_a_save_of_a_large_item_reads_the_primary_not_the_previous_version(root, open_target):
    """A save that reads the index (a CLI's, or a server's first) reads the
    newest version file's head and its size, not the previous version's
    bytes: over SSH those would cross the wire at every save."""
    target = await open_target(root)
    big = b"# big\n" + b"y" * (2 * 1024 * 1024)
    item = await _store(target).create("document", "Big", big)
    read: list[int] = []
    run = target.run

    async def counting(program):
        result = await run(program)
        for op_result in result:
            value = op_result.value
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], bytes):
                value = value[1]  # ReadNewest's (name, bytes)
            if isinstance(value, bytes):
                read.append(len(value))
        return result

    target.run = counting
    fresh = _store(target)
    entry = await fresh.save_version(item.item_id)
    await fresh.removals_done()
    assert entry.number == 2
    assert sum(read) < len(big) + 256 * 1024, read  # the primary, a head, the metadata
    assert (await read_version(target, item.item_id, 1))[1] == big
    await fresh.close()


async def test_version_files_cut_short_one_after_another_are_passed_over_and_none_whole_is_refused(root, open_target):
    """Two saves a crash cut short, one after the other, leave two version
    files that are not whole above the last whole one: both are passed
    over (and dropped by the next save). With no whole file at all, or a
    newest one of a later format, the item's versions and its save are
    refused naming the item and why, and no file is dropped."""
    target = await open_target(root)
    store = _store(target)
    item = await store.create("document", "Doc", b"# one\n")
    await store.save_version(item.item_id)
    await store.removals_done()
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    whole = (versions / "0000000002.version").read_bytes()
    (versions / "0000000003.version").write_bytes(whole[:40])
    (versions / "0000000004.version").write_bytes(b"")
    fresh = _store(target)
    assert [v.number for v in await fresh.versions(item.item_id)] == [2, 1]
    assert [s.versions for s in await fresh.list()] == [2]
    (versions / "0000000001.version").write_bytes(b"MEVEDEL-VERSION 1\n{}\n")
    (versions / "0000000002.version").write_bytes(whole[:-2])
    for attempt in (fresh.versions(item.item_id), fresh.save_version(item.item_id)):
        with pytest.raises(ArtifactError) as caught:
            await attempt
        assert caught.value.kind == "unreadable" and "is whole" in caught.value.reason, caught.value
    (versions / "0000000004.version").write_bytes(b"MEVEDEL-VERSION 2\nwhatever comes later\n")
    with pytest.raises(ArtifactError) as caught:
        await fresh.save_version(item.item_id)
    assert "later format" in caught.value.reason and "update mevedel" in caught.value.reason
    await fresh.removals_done()
    assert sorted(os.listdir(versions)) == [f"000000000{n}.version" for n in (1, 2, 3, 4)]
    assert [s.versions for s in await fresh.list()] == [0]  # listed, its count not guessed
    (versions / "0000000002.version").write_bytes(whole)
    (versions / "0000000004.version").write_bytes(b"")
    saved = await fresh.save_version(item.item_id)
    await fresh.removals_done()
    assert saved.number == 5
    assert sorted(os.listdir(versions)) == ["0000000001.version", "0000000002.version", "0000000005.version"]
    await store.close()
    await fresh.close()


async def test_a_store_of_the_layout_before_version_files_is_read_and_moves_on_its_next_save(root, open_target):
    """A workspace whose store kept ``versions.json`` and bare blobs (the
    layout before version files): its versions are listed and read, a save
    writes the next number as a version file that keeps the old versions
    (still read from their blobs), and the old index goes after it."""
    target = await open_target(root)
    store = _store(target, max_versions=3)
    item = await store.create("document", "Old", b"# one\n")
    state = root / ".mevedel/artifacts/.state" / item.item_id
    versions = state / "versions"
    # Rewrite it as the layout before version files had it: versions 2 and
    # 3 kept, next number 4.
    for name in os.listdir(versions):
        (versions / name).unlink()
    entries = []
    for number, data in ((2, b"# two\n"), (3, b"# three\n")):
        (versions / f"{number:010d}").write_bytes(data)
        entries.append(VersionEntry(number=number, at=1_700_000_000 + number, reason=VersionReason.SAVED, size=len(data), sha256=revision_of(data)))
    (state / "versions.json").write_bytes(encode(VersionIndex(next_number=4, versions=entries)))
    (root / ItemPaths(item.item_id).file("document.md")).write_bytes(b"# three\n")
    fresh = _store(target, max_versions=3)
    assert [s.versions for s in await fresh.list()] == [2]
    assert [v.number for v in await fresh.versions(item.item_id)] == [3, 2]
    assert (await read_version(target, item.item_id, 2))[1] == b"# two\n"
    await fresh.write(item.item_id, b"# four\n")
    saved = await fresh.save_version(item.item_id)
    await fresh.removals_done()
    assert saved.number == 4
    assert sorted(os.listdir(versions)) == ["0000000002", "0000000003", "0000000004.version"]
    assert not (state / "versions.json").exists()
    assert [v.number for v in await fresh.versions(item.item_id)] == [4, 3, 2]
    assert (await read_version(target, item.item_id, 2))[1] == b"# two\n"
    assert (await read_version(target, item.item_id, 4))[1] == b"# four\n"
    await fresh.save_version(item.item_id)
    await fresh.removals_done()
    assert sorted(os.listdir(versions)) == ["0000000003", "0000000004.version", "0000000005.version"]
    await store.close()
    await fresh.close()


async def test_a_save_after_the_versions_directory_went_makes_it_again(root, open_target):
    """A later save does not make the versions directory its index says
    exists; when something removed it, the save still lands."""
    import shutil

    store = _store(await open_target(root))
    item = await store.create("document", "Doc", b"# one\n")
    await store.save_version(item.item_id)
    await store.removals_done()
    versions = root / ".mevedel/artifacts/.state" / item.item_id / "versions"
    shutil.rmtree(versions)
    entry = await store.save_version(item.item_id)
    assert (await read_version(store.target, item.item_id, entry.number))[1] == b"# one\n"
    assert (versions / f"{entry.number:010d}.version").read_bytes().endswith(b"\n# one\n")
    assert [v.number for v in await store.versions(item.item_id)][0] == entry.number
    await store.close()


async def test_a_save_after_the_item_was_made_anew_under_another_primary_file_saves_that_file(root, open_target):
    """The id's item was deleted and adopted again (another process) with
    another primary file: a store that saved it before reads the metadata
    and saves the new primary file's bytes, not the old name's."""
    target = await open_target(root)
    saver, other = _store(target, "one"), _store(target, "two")
    first = await other.create("artifact", "Report", b"# old\n", file_name="report.md")
    await saver.save_version(first.item_id)
    await other.delete(first.item_id)
    (root / ".mevedel/artifacts" / first.item_id).mkdir(parents=True, exist_ok=True)
    (root / ".mevedel/artifacts" / first.item_id / "chart.svg").write_bytes(b"<svg/>")
    assert await other.adopt(first.item_id, "chart.svg") is not None
    saved = await saver.save_version(first.item_id)
    assert saved.sha256 == revision_of(b"<svg/>")
    await saver.close()
    await other.close()


async def test_a_turn_records_one_version_of_each_item_it_wrote(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("document", "Doc", b"a")
    for text in (b"b", b"c", b"d"):
        await store.write(item.item_id, text, editor=Editor("s1", 4))
    published = await store.settle_turn("s1", 4)
    assert [(v.reason, v.turn, v.session_id) for v in published] == [(VersionReason.TURN, 4, "s1")]
    assert (await store.versions(item.item_id))[0].size == 1
    assert await store.settle_turn("s1", 5) == []
    await store.close()


async def test_comments_and_duplicates_and_deletion(root, open_target):
    store = _store(await open_target(root))
    item = await store.create("artifact", "Logo", base64.b64decode(base64.b64encode(b"\x89PNG\r\n")), file_name="logo.png")
    (root / ".mevedel/artifacts" / item.item_id / "notes").mkdir()
    (root / ".mevedel/artifacts" / item.item_id / "notes/source.txt").write_bytes(b"src")
    await store.comment(item.item_id, "make it blue")
    await store.comment(item.item_id, "and bigger", author="s9", routed_to="s9")
    copy = await store.duplicate(item.item_id)
    assert copy.meta.title == "Logo (copy)" and copy.item_id != item.item_id
    assert (root / ".mevedel/artifacts" / copy.item_id / "notes/source.txt").read_bytes() == b"src"
    assert (await store.read(copy.item_id)).comments == ()
    assert [c.text for c in (await store.read(item.item_id)).comments] == ["make it blue", "and bigger"]
    await store.delete(item.item_id)
    assert [i.item_id for i in await store.list()] == [copy.item_id]
    for place in (".mevedel/artifacts", ".mevedel/artifacts/.state", ".mevedel/leases/artifacts"):
        assert not (root / place / item.item_id).exists()
    assert (root / ".mevedel/artifacts" / copy.item_id / "logo.png").read_bytes() == b"\x89PNG\r\n"


async def test_a_duplicate_keeps_file_modes_and_directories(root, open_target):
    """The ADR: Duplicate preserves file modes and applies directory modes
    after copying descendants -- an executable stays executable, a private
    file private, an empty or read-only directory is there as it was."""
    store = _store(await open_target(root))
    item = await store.create("artifact", "Tool", b"# Tool\n", file_name="tool.md")
    source = root / ".mevedel/artifacts" / item.item_id
    (source / "tool.md").chmod(0o640)
    (source / "run.sh").write_bytes(b"#!/bin/sh\necho ok\n")
    (source / "run.sh").chmod(0o755)
    (source / "data" / "empty").mkdir(parents=True)
    (source / "data" / "kept.csv").write_bytes(b"a,b\n")
    (source / "data").chmod(0o550)
    try:
        copy = await store.duplicate(item.item_id)
    finally:
        (source / "data").chmod(0o750)
    target = root / ".mevedel/artifacts" / copy.item_id

    def modes(directory):
        return {str(p.relative_to(directory)): p.stat().st_mode & 0o7777 for p in directory.rglob("*")}

    assert modes(target) == {
        "tool.md": 0o640,
        "run.sh": 0o755,
        "data": 0o550,
        "data/empty": (source / "data" / "empty").stat().st_mode & 0o7777,
        "data/kept.csv": (source / "data" / "kept.csv").stat().st_mode & 0o7777,
    }
    assert (target / "run.sh").read_bytes() == b"#!/bin/sh\necho ok\n"
    (target / "data").chmod(0o750)  # so the fixture can remove it
    await store.close()

async def test_a_live_item_has_one_writer_and_a_late_write_is_fenced(root, open_target):
    target = await open_target(root)
    one = _store(target, "one", lease_seconds=3, renew_every=3600)
    two = _store(target, "two", lease_seconds=3, renew_every=3600)
    item = await one.create("document", "Shared doc", b"start")
    await one.write(item.item_id, b"one wrote")
    with pytest.raises(ArtifactError) as caught:
        await two.write(item.item_id, b"two wrote")
    assert caught.value.kind == "item-held" and "host-one" in caught.value.reason
    read = await two.read(item.item_id)
    assert not read.writable and read.holder_host == "host-one"
    assert [i.holder_host for i in await two.list()] == ["host-one"]
    # The holder stops renewing (a suspended laptop): the next edit takes it over.
    await asyncio.sleep(3.2)
    stale = await one.leases.observe(item.item_id)  # one's write, planned before the takeover
    await two.write(item.item_id, b"two took over")
    observe = one.leases.observe

    async def late(item_id):
        one.leases.observe = observe
        return stale

    one.leases.observe = late
    with pytest.raises(ArtifactError) as caught:
        await one.write(item.item_id, b"late write")
    assert caught.value.kind == "item-lease-lost" and "nothing was written" in caught.value.reason
    assert not one.leases.holds(item.item_id)
    assert (await one.read(item.item_id)).data == b"two took over"
    assert not (await one.read(item.item_id)).writable
    with pytest.raises(ArtifactError) as caught:
        await one.write(item.item_id, b"again")
    assert caught.value.kind == "item-held"


async def test_the_holder_hands_over_once_asked_and_idle(root, open_target):
    target = await open_target(root)
    clock = [0.0]
    one = _store(target, "one", renew_every=3600)
    one.leases._monotonic = lambda: clock[0]
    two = _store(target, "two", renew_every=3600)
    item = await one.create("whiteboard", "Board")
    await one.write(item.item_id, (await one.read(item.item_id)).data)
    assert (await two.request_handover(item.item_id)).holder_host == "host-one"
    clock[0] = 5.0
    await one.leases.renew(item.item_id)  # asked, but edited 5 s ago: kept
    assert one.leases.holds(item.item_id)
    clock[0] = 10.0
    await one.leases.renew(item.item_id)  # idle 10 s: handed over
    assert not one.leases.holds(item.item_id)
    assert (await two.read(item.item_id)).writable
    await two.write(item.item_id, b'{"elements": [], "type": "excalidraw"}')
    assert two.leases.holds(item.item_id)
    await two.close()
    assert (await one.read(item.item_id)).writable  # released at close


async def test_a_planted_symlink_never_redirects_a_write(root, open_target, tmp_path):
    store = _store(await open_target(root))
    item = await store.create("document", "Doc", b"mine")
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"untouched")
    primary = root / ".mevedel/artifacts" / item.item_id / "document.md"
    primary.unlink()
    primary.symlink_to(outside)
    with pytest.raises(ArtifactError) as caught:
        await store.write(item.item_id, b"evil")
    assert caught.value.kind == "containment"
    state = root / ".mevedel/artifacts/.state" / item.item_id
    (state / "discussion.json").symlink_to(outside)
    with pytest.raises(ArtifactError):
        await store.comment(item.item_id, "hello")
    versions = state / "versions"
    os.rename(versions, state / "versions-real")
    versions.symlink_to(tmp_path)
    with pytest.raises(ArtifactError):
        await store.save_version(item.item_id)
    assert outside.read_bytes() == b"untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["outside.md", "ws"])
    await store.close()


async def test_concurrent_writes_and_renewals_in_one_process_never_lose_the_lease(root, open_target):
    store = _store(await open_target(root), renew_every=3600)
    item = await store.create("document", "Busy", b"0")
    writes = [store.write(item.item_id, f"{n}".encode()) for n in range(8)]
    renewals = [store.leases.renew(item.item_id) for _ in range(4)]
    await asyncio.gather(*writes, *renewals)
    assert store.leases.holds(item.item_id)
    assert (await store.read(item.item_id)).data in {f"{n}".encode() for n in range(8)}
    await store.close()


async def test_a_write_whose_answer_was_lost_is_still_this_processs_lease(root, open_target):
    """A dropped connection can lose the answer of a write that landed: the
    next renewal finds this process's own newer generation and keeps the
    item, rather than taking itself for fenced."""
    store = _store(await open_target(root), renew_every=3600)
    changes = []
    store.on_change.append(lambda item_id, reason: changes.append(reason))
    item = await store.create("document", "Doc", b"a")
    await store.write(item.item_id, b"b")
    remembered = store.leases._held[item.item_id]
    await store.write(item.item_id, b"c")
    store.leases._held[item.item_id] = remembered  # as if the second answer never came
    await store.leases.renew(item.item_id)
    assert store.leases.holds(item.item_id) and "fenced" not in changes
    await store.write(item.item_id, b"d")
    assert (await store.read(item.item_id)).data == b"d"
    await store.close()
