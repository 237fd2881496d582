"""shared:// over a real workspace artifact store (LocalTarget): the listing
of whiteboards and documents by title with the session's attachments
marked, hashed overviews, parts, element libraries, refusals (images,
unknown ids, plain artifacts, links), completion and the roster; and the
ApplyPatch side: authored files of the store are writable project paths,
its bookkeeping is not, and a committed write teaches the store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.artifacts import ArtifactStore, learn_patch_writes
from mevedel_server.artifacts.attachments import SessionArtifacts
from mevedel_server.resources import (
    GrepOptions,
    PatchOptions,
    ReadOptions,
    ResolverContext,
    complete,
    describe,
    execute,
    prepare,
    writable_sessions,
)
from mevedel_server.resources.families.shared import (
    block_hash,
    element_hash,
    has_items,
    markdown_blocks,
)
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget
from mevedel_server.tool_server.roster import roster, usable

ME = ClientIdentity("client-me", "host-me")

DOCUMENT = "# Plan\n\nFirst paragraph\nstill first.\n\n- one\n- two\n  more of two\n\n```\ncode\n\nblock\n```\n"
SCENE = {
    "type": "excalidraw",
    "version": 2,
    "elements": [
        {"id": "title-1", "type": "text", "text": "Needle on the board"},
        {"id": "box-2", "type": "rectangle", "x": 1},
        {"id": "gone-3", "type": "text", "text": "deleted", "isDeleted": True},
        {"id": "long-4", "type": "text", "text": "x" * 300},
    ],
}


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.service = SessionService(LocalTarget(root), ME)
        self.work = SessionArtifacts(ArtifactStore(self.service.target, ME), self.service)

    def context(self, session_id: str | None = None) -> ResolverContext:
        session_dir = self.root / ".mevedel" / "sessions" / session_id if session_id else None
        return ResolverContext(
            workspace_root=self.root,
            session_dir=session_dir,
            store_target=self.service.target,
            session_writable=writable_sessions(self.service),
        )

    async def session(self) -> str:
        sid = (await self.service.sessions.create("Main")).session_id
        await self.service.turns.begin_turn(sid, "one")
        await self.service.turns.settle(sid)
        return sid


@pytest.fixture
async def world(root):
    made = World(root)
    yield made
    await made.work.close()


async def read(context: ResolverContext, address: str, **options):
    return await execute(prepare(Operation.READ, address, ReadOptions(**options), context))


async def refused(context: ResolverContext, address: str, operation=Operation.READ, options=None) -> AddressError:
    with pytest.raises(AddressError) as caught:
        await execute(prepare(operation, address, options or ReadOptions(), context))
    return caught.value


def lines(result) -> list[str]:
    return result.plain_text.split("\n") if result.text else []


async def test_the_listing_has_documents_and_whiteboards_by_title_with_attachments_marked(world):
    sid = await world.session()
    board = await world.work.create(None, "whiteboard", "Zebra board", json.dumps(SCENE).encode())
    doc = await world.work.create(sid, "document", "Alpha plan", DOCUMENT.encode())
    await world.work.create(sid, "artifact", "Report", b"# r\n", file_name="report.md")
    found = await read(world.context(sid), "shared://")
    assert found.kind == "listing"
    assert lines(found) == [
        f"Alpha plan -- shared://{doc.item.item_id} (document, attached to this session)",
        f"Zebra board -- shared://{board.item.item_id} (whiteboard)",
        "shared://library -- element libraries",
    ]
    anonymous = await read(world.context(None), "shared://")
    assert "attached" not in anonymous.text and "no session is bound" in anonymous.notice


async def test_an_empty_store_lists_only_the_library_and_says_so(world):
    found = await read(world.context(), "shared://")
    assert lines(found) == ["shared://library -- element libraries"]
    assert "no whiteboards or documents" in found.notice
    assert not (world.root / ".mevedel").exists()  # reading created nothing


async def test_a_document_overview_has_one_hashed_line_per_block(world):
    doc = (await world.work.create(None, "document", "Plan", DOCUMENT.encode())).item.item_id
    assert markdown_blocks(DOCUMENT) == ["# Plan", "First paragraph\nstill first.", "- one", "- two\n  more of two", "```\ncode\n\nblock\n```"]
    found = await read(world.context(), f"shared://{doc}")
    assert lines(found) == [f"{block_hash(b)}  {b.replace(chr(10), ' ⏎ ')}" for b in markdown_blocks(DOCUMENT)]
    assert lines(found)[0] == hashlib.sha256(b"# Plan").hexdigest()[:8] + "  # Plan"
    # A block's hash does not move when another block changes.
    await world.work.write(None, doc, DOCUMENT.replace("- one", "- uno").encode())
    again = lines(await read(world.context(), f"shared://{doc}"))
    assert again[0] == lines(found)[0] and again[2] != lines(found)[2] and again[3] == lines(found)[3]
    grep = await execute(prepare(Operation.GREP, f"shared://{doc}", GrepOptions(pattern="more of"), world.context()))
    assert [(m.address, m.line) for m in grep.matches] == [(f"shared://{doc}", 4)]


async def test_a_whiteboard_overview_and_one_element_in_full(world):
    board = (await world.work.create(None, "whiteboard", "Board", json.dumps(SCENE).encode())).item.item_id
    found = lines(await read(world.context(), f"shared://{board}"))
    elements = SCENE["elements"]
    assert found[0] == f"{element_hash(elements[0])}  title-1  text  Needle on the board"
    assert found[1] == f"{element_hash(elements[1])}  box-2  rectangle"
    assert len(found) == 3  # the deleted element is left out
    assert found[2].endswith(f"(cut; the whole element: shared://{board}/elements/long-4)") and len(found[2]) < 300
    full = await read(world.context(), f"shared://{board}/elements/long-4")
    assert json.loads(full.plain_text) == elements[3]
    grep = await execute(prepare(Operation.GREP, f"shared://{board}", GrepOptions(pattern="Needle"), world.context()))
    assert [m.line for m in grep.matches] == [1]
    missing = await refused(world.context(), f"shared://{board}/elements/nope")
    assert missing.kind is ErrorKind.MISSING_TARGET and f"shared://{board}" in missing.reason


async def test_discussions_and_history(world):
    sid = await world.session()
    doc = (await world.work.create(sid, "document", "Plan", b"# x\n")).item.item_id
    await world.work.comment(sid, doc, "first remark\nsecond line")
    await world.work.write(sid, doc, b"# y\n")
    await world.work.save_version(sid, doc)
    talk = lines(await read(world.context(sid), f"shared://{doc}/discussions"))
    assert talk[0].startswith("#1  ") and f"(to session {sid})" in talk[0]
    assert talk[1:] == ["    first remark", "    second line"]
    history = lines(await read(world.context(sid), f"shared://{doc}/history"))
    assert history[0].startswith("version 2  ") and " saved " in history[0] and f"session {sid}" in history[0]
    assert history[1].startswith("version 1  ") and " created " in history[1]


async def test_images_are_unavailable_and_name_the_text_view(world):
    for address, text in (
        ("shared://abc/view.png", "shared://abc"),
        ("shared://abc/images/key1", "shared://abc"),
        ("shared://library/sheet.png", "shared://library"),
        ("shared://library/mine/sheet.png", "shared://library/mine"),
    ):
        error = await refused(world.context(), address)
        assert error.kind is ErrorKind.UNAVAILABLE
        assert "cannot render" in error.reason and f"Read {text} for its text view" in error.reason


async def test_unknown_ids_plain_artifacts_and_bad_shapes(world):
    report = (await world.work.create(None, "artifact", "Report", b"r", file_name="report.md")).item.item_id
    unknown = await refused(world.context(), "shared://no-such-item")
    assert unknown.kind is ErrorKind.MISSING_TARGET and "no-such-item" in unknown.reason
    assert (await refused(world.context(), "shared://_lead")).kind is ErrorKind.MISSING_TARGET
    artifact = await refused(world.context(), f"shared://{report}")
    assert artifact.kind is ErrorKind.MISSING_TARGET and f".mevedel/artifacts/{report}/report.md" in artifact.reason
    for bad in ("shared://a.b", "shared://" + "x" * 81, "shared://abc/elements/a%2Fb", "shared://abc/nope"):
        with pytest.raises(AddressError) as caught:
            prepare(Operation.READ, bad, ReadOptions(), world.context())
        assert caught.value.kind is ErrorKind.MALFORMED_ADDRESS
    # The matrix: no Glob, no ApplyPatch, no Grep of the listing.
    for operation, options in ((Operation.GLOB, None), (Operation.GREP, GrepOptions(pattern="x"))):
        with pytest.raises(AddressError) as caught:
            prepare(operation, "shared://", options, world.context())
        assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION
    assert (await refused(ResolverContext(), "shared://")).kind is ErrorKind.OWNER_MISSING


async def test_a_linked_item_state_is_refused_not_followed(world, tmp_path):
    outside = tmp_path / "outside" / "evil1"
    outside.mkdir(parents=True)
    (outside / "meta.json").write_text(json.dumps({"id": "evil1", "kind": "document", "title": "Secret", "primary": "document.md", "created_at": 1, "updated_at": 1}))
    state = world.root / ".mevedel" / "artifacts" / ".state"
    state.mkdir(parents=True)
    os.symlink(outside, state / "evil1")
    error = await refused(world.context(), "shared://evil1")
    assert error.kind is ErrorKind.CONTAINMENT
    assert "Secret" not in (await read(world.context(), "shared://")).text


async def test_element_libraries(world):
    library = world.root / ".mevedel" / "artifacts" / ".library"
    assert lines(await read(world.context(), "shared://library")) == []
    assert "no element libraries" in (await read(world.context(), "shared://library")).notice
    library.mkdir(parents=True)
    items = {
        "type": "excalidrawlib",
        "version": 2,
        "libraryItems": [
            {"id": "arrow-a", "status": "published", "name": "Arrow", "elements": [{"type": "arrow", "id": "e1"}]},
            {"id": "label-b", "elements": [{"type": "text", "id": "e2", "text": "Caption"}, {"type": "rectangle", "id": "e3"}]},
        ],
    }
    (library / "shapes.excalidrawlib").write_text(json.dumps(items))
    one = lines(await read(world.context(), "shared://library/shapes"))
    assert one[0].startswith("1. ") and "arrow-a" in one[0] and "'Arrow'" in one[0] and "(1 elements: arrow)" in one[0]
    assert "label-b" in one[1] and "rectangle, text" in one[1] and "Caption" in one[1]
    every = lines(await read(world.context(), "shared://library"))
    assert every[0] == "shared://library/shapes -- 2 item(s)" and every[1] == "  " + one[0]
    grep = await execute(prepare(Operation.GREP, "shared://library/shapes", GrepOptions(pattern="Caption"), world.context()))
    assert [m.line for m in grep.matches] == [2]
    missing = await refused(world.context(), "shared://library/other")
    assert missing.kind is ErrorKind.MISSING_TARGET and "other" in missing.reason


async def test_completion_offers_item_ids_with_titles_and_the_roster_follows_the_store(world):
    ctx = world.context()
    assert [c.label for c in complete("shared://", ctx)] == ["shared://library"]
    assert not await has_items(ctx)
    await world.work.create(None, "artifact", "Report", b"r", file_name="report.md")
    assert not await has_items(ctx)  # a plain artifact is no shared item
    doc = (await world.work.create(None, "document", "Alpha plan", b"# a\n")).item.item_id
    found = complete("shared://", ctx)
    assert [(c.label, c.detail) for c in found] == [
        ("shared://library", "shared element libraries"),
        (f"shared://{doc}", "Alpha plan (document)"),
    ]
    assert [c.label for c in complete(f"shared://{doc[:3]}", ctx)] == [f"shared://{doc}"]
    assert {c.label: c.available for c in complete("", ctx)}["shared://"] is True
    assert await has_items(ctx)
    assert "shared://" in usable(ctx, shared_items=True) and "shared://" not in usable(ctx)
    assert "- shared:// -- " in roster(ctx, shared_items=True)
    hover = await describe(f"shared://{doc}", ctx)
    assert hover.status == "exists" and hover.detail == "Alpha plan (document)"
    assert (await describe("shared://nothing", ctx)).status == "missing"


# -- ApplyPatch of authored files ---------------------------------------------------------


def _patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def _add(path: str, text: str) -> str:
    return f"*** Add File: {path}\n+{text}\n"


async def _apply(context: ResolverContext, patch: str):
    attempt = prepare(Operation.APPLY_PATCH, patch, PatchOptions(), context)
    result = await execute(attempt)
    return result, sorted({f.project_path for f in attempt.facts if f.project_path})


@pytest.mark.parametrize(
    "path",
    [
        ".mevedel/artifacts/.state/abc/meta.json",
        ".mevedel/artifacts/.library/x.excalidrawlib",
        ".mevedel/leases/artifacts/abc/generation-1.json",
        ".mevedel/artifacts/abc",
        ".mevedel/artifacts/_bad/x.md",
        ".mevedel/artifacts/ok/../.state/ok/meta.json",
        ".mevedel/sessions/x.md",
        ".mevedel/shared/x.md",
    ],
)
async def test_the_stores_bookkeeping_is_read_only_to_apply_patch(world, path):
    sid = await world.session()
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, _patch(_add(path, "x")), PatchOptions(), world.context(sid))
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION
    assert "read-only to the model's tools" in caught.value.reason and "cannot be patched" in caught.value.reason


async def test_a_write_into_a_new_id_directory_creates_an_attached_artifact_and_a_turn_version(world):
    sid = await world.session()
    context = world.context(sid)
    await world.service.turns.begin_turn(sid, "write a report")
    result, paths = await _apply(context, _patch(_add(".mevedel/artifacts/report-1/report.md", "# Findings"), _add(".mevedel/artifacts/report-1/data/a.png", "png")))
    assert result.summary() == "A .mevedel/artifacts/report-1/report.md\nA .mevedel/artifacts/report-1/data/a.png"
    notes = await learn_patch_writes(world.work, sid, paths)
    assert notes == [f"created artifact report-1 (report.md), attached to session {sid}"]
    listed = {item.item.item_id: item for item in await world.work.list(sid)}
    assert listed["report-1"].attached and listed["report-1"].item.meta.kind == "artifact"
    assert listed["report-1"].item.meta.primary == "report.md"
    # A later write of its primary file in the same turn: one turn version at settlement.
    update = "*** Update File: .mevedel/artifacts/report-1/report.md\n@@\n-# Findings\n+# Findings, revised\n"
    _result, paths = await _apply(context, _patch(update))
    assert await learn_patch_writes(world.work, sid, paths) == []
    await world.service.turns.settle(sid)
    await world.work.settled()
    versions = await world.work.versions("report-1")
    assert [(v.number, v.reason.value, v.turn) for v in versions] == [(2, "turn", 2), (1, "created", 2)]
    # A new directory without a primary file creates nothing, and says why.
    _result, paths = await _apply(context, _patch(_add(".mevedel/artifacts/loose/sub/x.md", "x")))
    assert "no artifact was created" in (await learn_patch_writes(world.work, sid, paths))[0]
    assert "loose" not in {item.item.item_id for item in await world.work.list(sid)}


async def test_a_linked_authored_directory_is_refused_and_nothing_is_written_outside(world, tmp_path):
    sid = await world.session()
    outside = tmp_path / "outside"
    outside.mkdir()
    authored = world.root / ".mevedel" / "artifacts"
    authored.mkdir(parents=True)
    os.symlink(outside, authored / "evil")
    with pytest.raises(AddressError) as caught:
        await _apply(world.context(sid), _patch(_add(".mevedel/artifacts/evil/x.md", "x")))
    assert caught.value.kind is ErrorKind.CONTAINMENT
    assert list(outside.iterdir()) == []


async def test_the_same_on_a_target_reached_as_a_remote_workspace(root, open_target):
    """shared:// and the store's learning go through the workspace's target
    only: the same over SSH (a context with no local root)."""
    target = await open_target(root)
    service = SessionService(target, ME)
    work = SessionArtifacts(ArtifactStore(target, ME), service)
    try:
        sid = (await service.sessions.create("Remote")).session_id
        await service.turns.begin_turn(sid, "one")
        await service.turns.settle(sid)
        doc = (await work.create(sid, "document", "Remote plan", b"# Remote\n\nbody\n")).item.item_id
        context = ResolverContext(
            store_target=target, remote_workspace=True, remote_session=sid, session_writable=writable_sessions(service)
        )
        listing = lines(await read(context, "shared://"))
        assert listing[0] == f"Remote plan -- shared://{doc} (document, attached to this session)"
        assert [line[10:] for line in lines(await read(context, f"shared://{doc}"))] == ["# Remote", "body"]
        assert await has_items(context)
        # Completion lists a local store only (nothing over SSH).
        offered = [c.label for c in complete("shared://", context)[1:]]
        assert offered == ([f"shared://{doc}"] if isinstance(target, LocalTarget) else [])
        result, paths = await _apply(context, _patch(_add(".mevedel/artifacts/remote-1/page.html", "<p>hi</p>")))
        assert await learn_patch_writes(work, sid, paths) == [f"created artifact remote-1 (page.html), attached to session {sid}"]
        assert "remote-1" in service.sessions.attached_artifacts(sid)
    finally:
        await work.close()
        await service.sessions.detach()
