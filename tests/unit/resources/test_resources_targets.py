"""One resolver over the Target seam: every file-backed family answers the
same through a ``LocalTarget`` and through an ``SshTarget`` to the real
OpenSSH fixture (``open_target``: each test runs on both), and neither
follows a symbolic link, opens a FIFO or writes where it should not.

Each request runs twice on one tree: through a context that names only
local directories (the resolver makes its own ``LocalTarget``) and through
one whose workspace is the parametrized target; the answers must be equal.
Then the security cases (symlinked ``.mevedel/shared``, ``.mevedel`` or a
session's ``local/``; entries swapped for links while requests run; a FIFO
in a searched directory) and ApplyPatch (same answers and trees, a file
changed between read and write, who may write a session's files)."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import os
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine import resolver
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    PatchOptions,
    ReadOptions,
)
from mevedel_server.targets import ControlProgram, ProgramResult, ProgramTarget

SID = "20261202T210000-abcd1234"
SECRET = "outside secret"
THROUGH_LINK = "is reached through a symbolic link, which mevedel does not follow"


def writable(session_id: str) -> bool:
    return session_id == SID


def build(workspace: Path) -> None:
    session = workspace / ".mevedel" / "sessions" / SID
    local = session / "local"
    (local / "plans" / "deep").mkdir(parents=True)
    (local / "plans" / "plan.md").write_text("step one\nstep two\n\nlast step\n")
    (local / "plans" / "deep" / "notes.txt").write_text("a step deeper\nnothing\n")
    (local / "plans" / "empty.md").write_text("")
    (local / "binary.bin").write_bytes(b"step\0binary")
    (local / "latin.txt").write_bytes(b"step caf\xe9\n")
    (local / "zeta.md").write_text("\ufeffSTEP with bom\n" + "x" * 2500 + "step far\n")
    (local / "shared").mkdir()  # work://shared names the workspace scope: hidden here
    (local / "shared" / "hidden.md").write_text("step hidden\n")
    (local / "empty-dir").mkdir()
    (local / "script.sh").write_text("#!/bin/sh\necho step\n")
    (local / "script.sh").chmod(0o755)
    outside = workspace / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"step {SECRET}\n")
    # Links, escaping or not, are neither listed, searched nor followed.
    os.symlink(outside / "secret.md", local / "plans" / "escape.md")
    os.symlink(outside, local / "escape-dir")
    os.symlink(local / "plans" / "plan.md", local / "alias.md")
    os.mkfifo(local / "plans" / "pipe")  # never listed, never opened
    shared = workspace / ".mevedel" / "shared"
    (shared / "team").mkdir(parents=True)
    (shared / "team" / "guide.md").write_text("shared step\n")
    results = session / "tool-results"
    (results / "executions").mkdir(parents=True)
    (results / "call-1.txt").write_text("tool step output\n")
    (results / ".partial.tmp").write_text("step private\n")
    (results / "executions" / "run-1.log.gz").write_bytes(gzip.compress(b"retired step log\nline two\n", mtime=0))
    (results / "executions" / "run-2.log").write_text("live step log\n")


REQUESTS = [
    (Operation.READ, "work://", ReadOptions()),
    (Operation.READ, "work://plans/", ReadOptions()),
    (Operation.READ, "work://plans/plan.md", ReadOptions(offset=2, limit=2)),
    (Operation.READ, "work://plans/empty.md", ReadOptions()),
    (Operation.READ, "work://empty-dir", ReadOptions()),
    (Operation.READ, "work://shared/", ReadOptions()),
    (Operation.READ, "work://shared/team/guide.md", ReadOptions()),
    (Operation.READ, "work://plans/none.md", ReadOptions()),
    (Operation.READ, "work://plans/plan.md/below", ReadOptions()),
    (Operation.READ, "work://latin.txt", ReadOptions()),
    (Operation.READ, "work://binary.bin", ReadOptions()),
    (Operation.READ, "work://plans/escape.md", ReadOptions()),
    (Operation.READ, "work://escape-dir/secret.md", ReadOptions()),
    (Operation.READ, "work://alias.md", ReadOptions()),
    (Operation.READ, "work://plans/pipe", ReadOptions()),
    (Operation.GLOB, "work://", GlobOptions()),
    (Operation.GLOB, "work://", GlobOptions(pattern="**/*.md")),
    (Operation.GLOB, "work://plans", GlobOptions(pattern="*.md")),
    (Operation.GLOB, "work://plans/plan.md", GlobOptions(pattern="*")),
    (Operation.GLOB, "work://", GlobOptions(limit=3)),
    (Operation.GLOB, "work://shared/", GlobOptions()),
    (Operation.GLOB, "work://nowhere/", GlobOptions()),
    (Operation.GLOB, "work://escape-dir/", GlobOptions()),
    (Operation.GREP, "work://", GrepOptions(pattern="step")),
    (Operation.GREP, "work://", GrepOptions(pattern="step", ignore_case=True, context_lines=1)),
    (Operation.GREP, "work://plans/", GrepOptions(pattern="st(e)p", glob="*.txt")),
    (Operation.GREP, "work://plans/", GrepOptions(pattern="step")),
    (Operation.GREP, "work://", GrepOptions(pattern="step", limit=2)),
    (Operation.GREP, "work://plans/plan.md", GrepOptions(pattern="^last")),
    (Operation.GREP, "work://binary.bin", GrepOptions(pattern="step")),
    (Operation.GREP, "work://shared", GrepOptions(pattern="step")),
    (Operation.GREP, "work://plans/pipe", GrepOptions(pattern="step")),
    (Operation.READ, "artifact://", ReadOptions()),
    (Operation.READ, "artifact://executions/", ReadOptions()),
    (Operation.READ, "artifact://executions/run-1.log", ReadOptions()),
    (Operation.READ, "artifact://executions/run-1.log.gz", ReadOptions()),
    (Operation.READ, "artifact://.partial.tmp", ReadOptions()),
    (Operation.GLOB, "artifact://", GlobOptions()),
    (Operation.GREP, "artifact://", GrepOptions(pattern="step")),
    (Operation.GREP, "artifact://executions/run-1.log", GrepOptions(pattern="two")),
]


async def answer(context: ResolverContext, operation: Operation, address: str, options) -> object:
    try:
        return await resolver.execute(resolver.prepare(operation, address, options, context))
    except AddressError as error:
        return ("error", error.kind, error.authored, error.reason)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    build(root)
    return root


def plain_context(workspace: Path) -> ResolverContext:
    return ResolverContext(
        workspace_root=workspace, session_dir=workspace / ".mevedel" / "sessions" / SID, session_writable=writable
    )


def target_context(target) -> ResolverContext:
    return ResolverContext(store_target=target, remote_workspace=True, remote_session=SID, session_writable=writable)


def no_secret(found: object) -> None:
    assert SECRET not in repr(found)


async def test_every_request_answers_as_through_a_local_directory(open_target, workspace):
    context = target_context(await open_target(workspace))
    for operation, address, options in REQUESTS:
        expected = await answer(plain_context(workspace), operation, address, options)
        got = await answer(context, operation, address, options)
        assert got == expected, (operation, address)
        no_secret(got)
        # No backing path: neither the root nor a target-relative one.
        assert str(workspace) not in repr(got) and ".mevedel" not in repr(got) and "tool-results" not in repr(got)


async def test_listings_show_directories_and_regular_files_only(open_target, workspace):
    context = target_context(await open_target(workspace))
    listing = await answer(context, Operation.READ, "work://", ReadOptions())
    assert listing.plain_text.splitlines() == [
        "work://binary.bin",
        "work://empty-dir/",
        "work://latin.txt",
        "work://plans/",
        "work://script.sh",
        "work://zeta.md",
        "work://shared/team/",
    ]
    plans = await answer(context, Operation.GLOB, "work://plans/", GlobOptions())
    assert plans.matches == ("work://plans/deep/notes.txt", "work://plans/empty.md", "work://plans/plan.md")
    for address in ("work://alias.md", "work://plans/escape.md", "work://escape-dir/secret.md"):
        refused = await answer(context, Operation.READ, address, ReadOptions())
        assert refused == ("error", ErrorKind.CONTAINMENT, address, THROUGH_LINK)
    pipe = await answer(context, Operation.READ, "work://plans/pipe", ReadOptions())
    assert pipe == ("error", ErrorKind.UNREADABLE, "work://plans/pipe", "is not a regular file or directory")


async def test_no_session_is_named_by_the_authored_address(open_target, workspace):
    context = dataclasses.replace(target_context(await open_target(workspace)), remote_session=None)
    for operation, address, options in [
        (Operation.GLOB, "work://plans/", GlobOptions()),
        (Operation.GREP, "work://", GrepOptions(pattern="x")),
        (Operation.READ, "artifact://", ReadOptions()),
    ]:
        got = await answer(context, operation, address, options)
        assert got[0] == "error" and got[1] is ErrorKind.OWNER_MISSING and got[2] == address


# -- security: planted links, swaps, FIFOs -------------------------------------

PLANTED = {
    ".mevedel/shared": ["work://shared/secret.md", "work://shared/", "work://"],
    ".mevedel": ["work://shared/secret.md", "work://shared/", "work://", "work://secret.md", "artifact://"],
    f".mevedel/sessions/{SID}/local": ["work://secret.md", "work://"],
}


@pytest.mark.parametrize("planted", list(PLANTED), ids=["shared", "mevedel", "session-local"])
async def test_a_planted_link_at_a_root_leaks_nothing(open_target, workspace, planted):
    outside = workspace.parent / "elsewhere"
    # The link's target holds what each root would look for there.
    for relative in ("secret.md", "shared/secret.md", f"sessions/{SID}/local/secret.md", f"sessions/{SID}/tool-results/x.md"):
        (outside / relative).parent.mkdir(parents=True, exist_ok=True)
        (outside / relative).write_text(f"{SECRET}\n")
    link = workspace / planted
    shutil.rmtree(link)
    link.symlink_to(outside)
    context = target_context(await open_target(workspace))
    for address in PLANTED[planted]:
        for operation, options in (
            (Operation.READ, ReadOptions()),
            (Operation.GLOB, GlobOptions()),
            (Operation.GREP, GrepOptions(pattern="secret")),
        ):
            got = await answer(context, operation, address, options)
            no_secret(got)
            assert got[0] == "error" and got[1] in (ErrorKind.CONTAINMENT, ErrorKind.MISSING_TARGET), (address, got)
    scope = "work://" if planted.endswith("local") else "work://shared/"
    got = await answer_patch(context, f"*** Begin Patch\n*** Add File: {scope}planted.md\n+x\n*** End Patch\n")
    assert got[0] == "error"
    assert not any(path.name == "planted.md" for path in outside.rglob("*"))


async def test_entries_swapped_for_links_while_requests_run_leak_nothing(open_target, workspace):
    shared = workspace / ".mevedel" / "shared"
    real = shared / "wdir"
    real.mkdir()
    (real / "notes.md").write_text("inside step\n")
    parked = workspace / "parked"
    outside = workspace / "outside"
    (outside / "notes.md").write_text(f"{SECRET}\n")
    context = target_context(await open_target(workspace))
    stop = threading.Event()

    def settle() -> None:
        # Back to wdir as a real directory (a patch may have made a new one
        # while it was away: that one goes).
        while True:
            try:
                if os.path.islink(real):
                    os.unlink(real)
                if parked.exists():
                    shutil.rmtree(real, ignore_errors=True)
                    os.rename(parked, real)
                return
            except OSError:
                continue

    def swap() -> None:
        # wdir is a real directory, then a link to the outside, and back.
        while not stop.is_set():
            try:
                os.rename(real, parked)
                os.symlink(outside, real)
                time.sleep(0.001)  # each state lasts long enough to be met
            except OSError:
                pass
            settle()
            time.sleep(0.001)

    swapper = threading.Thread(target=swap)
    swapper.start()
    answers = []
    try:
        for round_ in range(40):
            answers += await asyncio.gather(
                answer(context, Operation.READ, "work://shared/wdir/notes.md", ReadOptions()),
                answer(context, Operation.GREP, "work://shared/", GrepOptions(pattern="step|secret")),
                answer(context, Operation.GLOB, "work://shared/", GlobOptions()),
                answer_patch(context, f"*** Begin Patch\n*** Add File: work://shared/wdir/new-{round_}.md\n+x\n*** End Patch\n"),
            )
    finally:
        stop.set()
        swapper.join()
    for found in answers:
        no_secret(found)
    assert sorted(path.name for path in outside.iterdir()) == ["notes.md", "secret.md"]
    assert (outside / "notes.md").read_text() == f"{SECRET}\n"


class SwapsAfterTheFirstProgram(ProgramTarget):
    """The real target, with ``wdir`` swapped for a link to the outside
    right after the operation's first program: between a walk and its
    reads, a patch's read and its write."""

    def __init__(self, target, real: Path, outside: Path) -> None:
        self.target, self.real, self.outside, self.programs = target, real, outside, 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        result = await self.target.run(program)
        self.programs += 1
        if self.programs == 1:
            self.real.rename(self.real.with_name("parked"))
            self.real.symlink_to(self.outside)
        return result

    def restore(self) -> None:
        self.real.unlink()
        self.real.with_name("parked").rename(self.real)
        self.programs = 0


async def test_a_swap_between_two_programs_of_one_operation_is_refused(open_target, workspace):
    real = workspace / ".mevedel" / "shared" / "wdir"
    real.mkdir()
    (real / "notes.md").write_text("inside step\n")
    outside = workspace / "outside"
    (outside / "notes.md").write_text(f"{SECRET}\n")
    swapping = SwapsAfterTheFirstProgram(await open_target(workspace), real, outside)
    context = target_context(swapping)
    # Read: prepared on the directory, run on the link.
    attempt = resolver.prepare(Operation.READ, "work://shared/wdir/notes.md", ReadOptions(), context)
    await swapping.run(ControlProgram([]))
    with pytest.raises(AddressError) as caught:
        await resolver.execute(attempt)
    assert (caught.value.kind, caught.value.reason) == (ErrorKind.CONTAINMENT, THROUGH_LINK)
    swapping.restore()
    # Grep: walked the directory (its first files read with the listing),
    # then reads the rest through the link: nothing of it.
    for n in range(40):
        (real / f"n{n:02}.md").write_text("inside step\n")
        (outside / f"n{n:02}.md").write_text(f"{SECRET}\n")
    grep = await answer(context, Operation.GREP, "work://shared/", GrepOptions(pattern="step|secret"))
    assert swapping.programs >= 2
    no_secret(grep)
    assert grep.matches and all(match.preview in ("inside step", "shared step") for match in grep.matches)
    # guide.md and n00-n30 were read with the listing; the rest met the link.
    assert grep.notice.startswith("10 non-text files skipped: work://shared/wdir/n31.md, ")
    swapping.restore()
    # ApplyPatch: read the directory, write through the link: refused, nothing written.
    got = await answer_patch(context, "*** Begin Patch\n*** Add File: work://shared/wdir/new.md\n+x\n*** End Patch\n")
    assert swapping.programs == 2
    assert got == ("error", ErrorKind.CONTAINMENT, "work://shared/wdir/new.md", THROUGH_LINK + "; no file was changed")
    assert not (outside / "new.md").exists()
    swapping.restore()


async def test_a_fifo_in_a_searched_directory_blocks_nothing(open_target, workspace):
    local = workspace / ".mevedel" / "sessions" / SID / "local"
    for index in range(8):
        os.mkfifo(local / f"fifo-{index}")
    context = target_context(await open_target(workspace))
    # Eight Greps over FIFOs at once, and a Read beside them, all answer.
    greps = [answer(context, Operation.GREP, "work://", GrepOptions(pattern="step")) for _ in range(8)]
    found = await asyncio.wait_for(
        asyncio.gather(*greps, answer(context, Operation.READ, "work://plans/plan.md", ReadOptions())), 60
    )
    for grep in found[:8]:
        assert not any("fifo" in match.address or "pipe" in match.address for match in grep.matches)
        assert grep.notice is None or "fifo" not in grep.notice
    assert found[8].total_lines == 4
    explicit = await asyncio.wait_for(answer(context, Operation.GREP, "work://fifo-3", GrepOptions(pattern="x")), 60)
    assert explicit == ("error", ErrorKind.UNREADABLE, "work://fifo-3", "is not a regular file or directory")


# -- ApplyPatch ----------------------------------------------------------------

PATCHES = [
    # add, update, delete and move at once, in both scopes
    "*** Begin Patch\n"
    "*** Add File: work://new/dir/fresh.md\n+fresh\n+lines\n"
    "*** Update File: work://plans/plan.md\n@@\n step one\n-step two\n+step 2\n"
    "*** Delete File: work://plans/deep/notes.txt\n"
    "*** Update File: work://script.sh\n@@\n-echo step\n+echo stepped\n"
    "*** Update File: work://shared/team/guide.md\n*** Move to: work://shared/moved/guide.md\n@@\n-shared step\n+moved step\n"
    "*** End Patch\n",
    # refusals: each names the authored address, and nothing is written
    "*** Begin Patch\n*** Add File: work://new.md\n+x\n*** Add File: work://plans/plan.md\n+y\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: work://new.md\n+x\n*** Update File: work://plans/none.md\n@@\n-a\n+b\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://plans/plan.md\n@@\n-no such line\n+b\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://binary.bin\n@@\n-a\n+b\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://latin.txt\n@@\n-a\n+b\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: work://zeta.md/inside.md\n+x\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://plans\n@@\n-a\n+b\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://zeta.md\n*** Move to: work://plans/plan.md\n@@\n-step far\n+far\n*** End Patch\n",
    "*** Begin Patch\n*** Delete File: work://plans/plan.md\n*** Delete File: work://plans/plan.md\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: work://ok.md\n+x\n*** Delete File: work://plans/escape.md\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: work://escape-dir/x.md\n+x\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: work://alias.md\n@@\n-step one\n+one\n*** End Patch\n",
    "*** Begin Patch\n*** Delete File: work://plans/pipe\n*** End Patch\n",
]


def snapshot(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            out[str(path.relative_to(root))] = ("link", os.readlink(path).replace(str(root), "<root>"))
        elif stat.S_ISREG(info.st_mode):
            out[str(path.relative_to(root))] = (path.read_bytes(), stat.S_IMODE(info.st_mode))
        else:
            out[str(path.relative_to(root))] = stat.S_IFMT(info.st_mode)
    return out


async def answer_patch(context: ResolverContext, text: str) -> object:
    try:
        result = await resolver.execute(resolver.prepare(Operation.APPLY_PATCH, text, PatchOptions(), context))
        return result.summary()
    except AddressError as error:
        return ("error", error.kind, error.authored, error.reason)


async def test_every_patch_does_what_it_does_through_a_local_directory(open_target, tmp_path):
    for index, text in enumerate(PATCHES):
        mine, theirs = tmp_path / f"plain-{index}", tmp_path / f"target-{index}"
        build(mine)
        build(theirs)
        expected = await answer_patch(plain_context(mine), text)
        got = await answer_patch(target_context(await open_target(theirs)), text)
        assert got == expected, index
        assert snapshot(theirs) == snapshot(mine), index
        if index == 0:
            assert expected == (
                "A work://new/dir/fresh.md\nM work://plans/plan.md\nD work://plans/deep/notes.txt\n"
                "M work://script.sh\nR work://shared/team/guide.md -> work://shared/moved/guide.md"
            )
            local = theirs / ".mevedel" / "sessions" / SID / "local"
            assert stat.S_IMODE((local / "script.sh").stat().st_mode) == 0o755  # kept
            assert stat.S_IMODE((local / "new" / "dir" / "fresh.md").stat().st_mode) == 0o644
            assert not (theirs / ".mevedel" / "patches").exists()  # the journal is gone
        else:
            assert expected[0] == "error", index
    links = await answer_patch(plain_context(tmp_path / "plain-10"), PATCHES[10])
    assert links == ("error", ErrorKind.CONTAINMENT, "work://plans/escape.md", THROUGH_LINK)


class ChangesAfterTheRead(ProgramTarget):
    """The real target, with one file rewritten by somebody else just after
    the patch's first program (its read) and before its second (the write)."""

    def __init__(self, target, path: Path, data: bytes | None) -> None:
        self.target, self.path, self.data, self.programs = target, path, data, 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        result = await self.target.run(program)
        self.programs += 1
        if self.programs == 1:
            if self.data is None:
                self.path.unlink()
            else:
                self.path.write_bytes(self.data)
        return result


CHANGING = (
    "*** Begin Patch\n"
    "*** Add File: work://new.md\n+x\n"
    "*** Update File: work://shared/team/guide.md\n@@\n-shared step\n+team step\n"
    "*** Update File: work://plans/plan.md\n@@\n step one\n-step two\n+step 2\n"
    "*** End Patch\n"
)


@pytest.mark.parametrize(
    "data,reason",
    [
        (b"step one\nsomebody else\n", "changed while the patch was being applied; reread and retry; no file was changed"),
        (None, "was deleted while the patch was being applied; reread and retry; no file was changed"),
    ],
    ids=["changed", "deleted"],
)
async def test_a_file_changed_between_read_and_write_refuses_the_whole_patch(open_target, workspace, data, reason):
    plan = workspace / ".mevedel" / "sessions" / SID / "local" / "plans" / "plan.md"
    changing = ChangesAfterTheRead(await open_target(workspace), plan, data)
    before = snapshot(workspace)
    got = await answer_patch(target_context(changing), CHANGING)
    assert changing.programs == 2
    assert got == ("error", ErrorKind.CONFLICT, "work://plans/plan.md", reason)
    expected = dict(before)
    key = str(plan.relative_to(workspace))
    if data is None:
        del expected[key]
    else:
        expected[key] = (data, before[key][1])  # type: ignore[index]
    assert snapshot(workspace) == expected  # nothing of the patch written: no new.md, guide.md untouched


@pytest.mark.parametrize("answer_", [None, lambda sid: False], ids=["no-answer", "held-elsewhere"])
async def test_only_a_session_open_and_writable_here_takes_writes(open_target, workspace, answer_):
    target = await open_target(workspace)
    before = snapshot(workspace)
    refused = dataclasses.replace(target_context(target), session_writable=answer_)
    got = await answer_patch(refused, "*** Begin Patch\n*** Add File: work://intruder.md\n+x\n*** End Patch\n")
    assert got[:3] == ("error", ErrorKind.OWNER_MISSING, "work://intruder.md")
    unknown = dataclasses.replace(target_context(target), remote_session="2026-01-01T00-00-000000000000", session_writable=lambda sid: False)
    got = await answer_patch(unknown, "*** Begin Patch\n*** Add File: work://intruder.md\n+x\n*** End Patch\n")
    assert got[:3] == ("error", ErrorKind.OWNER_MISSING, "work://intruder.md")
    assert snapshot(workspace) == before


async def test_a_patch_adds_and_updates_a_file_with_the_longest_legal_name(open_target, workspace):
    """A 255-byte name is a legal file name: the patch's temporary and keep
    names must not push it over the filesystem's limit."""
    name = "n" * 251 + ".md"
    context = target_context(await open_target(workspace))
    added = await answer_patch(context, f"*** Begin Patch\n*** Add File: work://{name}\n+one\n*** End Patch\n")
    assert added == f"A work://{name}"
    updated = await answer_patch(context, f"*** Begin Patch\n*** Update File: work://{name}\n@@\n-one\n+two\n*** End Patch\n")
    assert updated == f"M work://{name}"
    local = workspace / ".mevedel" / "sessions" / SID / "local"
    assert (local / name).read_bytes() == b"two\n"
    too_long = await answer_patch(context, f"*** Begin Patch\n*** Add File: work://{'n' * 256}\n+x\n*** End Patch\n")
    assert too_long[:2] == ("error", ErrorKind.MALFORMED_ADDRESS)
