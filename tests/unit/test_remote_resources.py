"""work:// and artifact:// on a workspace reached over SSH answer exactly as
the same tree read locally: one tree is built, then every request runs
through the local resolver (files on this machine), through the remote code
path over a LocalTarget, and through it over an SshTarget to the real
OpenSSH fixture, and the three answers are compared."""

from __future__ import annotations

import dataclasses
import gzip
import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, Operation
from mevedel_server.resources import resolver
from mevedel_server.resources.context import ResolverContext
from mevedel_server.resources.options import GlobOptions, GrepOptions, ReadOptions
from mevedel_server.targets import LocalTarget
from mevedel_server.targets.ssh import SshTarget

SID = "20261202T210000-abcd1234"


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
    outside = workspace / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("step secret\n")
    # Escaping links: skipped by the local walk, never followed remotely.
    os.symlink(outside / "secret.md", local / "plans" / "escape.md")
    os.symlink(outside, local / "escape-dir")
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
    (Operation.READ, "work://latin.txt", ReadOptions()),
    (Operation.READ, "work://binary.bin", ReadOptions()),
    (Operation.GLOB, "work://", GlobOptions()),
    (Operation.GLOB, "work://", GlobOptions(pattern="**/*.md")),
    (Operation.GLOB, "work://plans", GlobOptions(pattern="*.md")),
    (Operation.GLOB, "work://plans/plan.md", GlobOptions(pattern="*")),
    (Operation.GLOB, "work://", GlobOptions(limit=3)),
    (Operation.GLOB, "work://shared/", GlobOptions()),
    (Operation.GLOB, "work://nowhere/", GlobOptions()),
    (Operation.GREP, "work://", GrepOptions(pattern="step")),
    (Operation.GREP, "work://", GrepOptions(pattern="step", ignore_case=True, context_lines=1)),
    (Operation.GREP, "work://plans/", GrepOptions(pattern="st(e)p", glob="*.txt")),
    (Operation.GREP, "work://", GrepOptions(pattern="step", limit=2)),
    (Operation.GREP, "work://plans/plan.md", GrepOptions(pattern="^last")),
    (Operation.GREP, "work://binary.bin", GrepOptions(pattern="step")),
    (Operation.GREP, "work://shared", GrepOptions(pattern="step")),
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


def local_context(workspace: Path) -> ResolverContext:
    return ResolverContext(workspace_root=workspace, session_dir=workspace / ".mevedel" / "sessions" / SID)


def remote_context(target) -> ResolverContext:
    return ResolverContext(store_target=target, remote_workspace=True, remote_session=SID)


@pytest.mark.parametrize("operation,address,options", REQUESTS, ids=[f"{o.value}-{a}-{i}" for i, (o, a, _) in enumerate(REQUESTS)])
async def test_a_local_target_answers_as_the_local_tree(workspace, operation, address, options):
    expected = await answer(local_context(workspace), operation, address, options)
    got = await answer(remote_context(LocalTarget(workspace)), operation, address, options)
    assert got == expected


async def test_an_ssh_target_answers_as_the_local_tree(openssh_server, workspace):
    target = await SshTarget.connect(openssh_server.url(workspace), **openssh_server.options())
    async with target:
        remote = remote_context(target)
        for operation, address, options in REQUESTS:
            expected = await answer(local_context(workspace), operation, address, options)
            assert await answer(remote, operation, address, options) == expected, (operation, address)


async def test_escaping_links_are_neither_listed_nor_searched(workspace):
    remote = remote_context(LocalTarget(workspace))
    globbed = await answer(remote, Operation.GLOB, "work://", GlobOptions())
    assert "work://plans/escape.md" not in globbed.matches and not any("secret" in m for m in globbed.matches)
    grep = await answer(remote, Operation.GREP, "work://", GrepOptions(pattern="secret"))
    assert grep.matches == ()
    refused = await answer(remote, Operation.READ, "work://plans/escape.md", ReadOptions())
    assert refused[:3] == ("error", refused[1], "work://plans/escape.md") and refused[1].value == "unavailable"


async def test_no_session_is_named_by_the_authored_address(workspace):
    remote = dataclasses.replace(remote_context(LocalTarget(workspace)), remote_session=None)
    for operation, address, options in [
        (Operation.GLOB, "work://plans/", GlobOptions()),
        (Operation.GREP, "work://", GrepOptions(pattern="x")),
        (Operation.READ, "artifact://", ReadOptions()),
    ]:
        got = await answer(remote, operation, address, options)
        assert got[0] == "error" and got[1].value == "owner-missing" and got[2] == address


# -- ApplyPatch ----------------------------------------------------------------

PATCHES = [
    # add, update, delete and move at once, in both scopes
    "*** Begin Patch\n"
    "*** Add File: work://new/dir/fresh.md\n+fresh\n+lines\n"
    "*** Update File: work://plans/plan.md\n@@\n step one\n-step two\n+step 2\n"
    "*** Delete File: work://plans/deep/notes.txt\n"
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
]


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(path.relative_to(root)): None if path.is_dir() or path.is_symlink() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


async def patched(context: ResolverContext, text: str) -> object:
    from mevedel_server.resources.options import PatchOptions

    try:
        result = await resolver.execute(resolver.prepare(Operation.APPLY_PATCH, text, PatchOptions(), context))
        return result.summary()
    except AddressError as error:
        return ("error", error.kind, error.authored, error.reason)


@pytest.mark.parametrize("index", range(len(PATCHES)))
async def test_a_patch_over_a_local_target_does_what_a_local_patch_does(tmp_path, index):
    mine, theirs = tmp_path / "local", tmp_path / "remote"
    build(mine)
    build(theirs)
    expected = await patched(local_context(mine), PATCHES[index])
    got = await patched(remote_context(LocalTarget(theirs)), PATCHES[index])
    assert got == expected
    assert snapshot(theirs) == snapshot(mine)


async def test_a_patch_over_ssh_does_what_a_local_patch_does(openssh_server, tmp_path):
    target_root = tmp_path / "remote"
    build(target_root)
    target = await SshTarget.connect(openssh_server.url(target_root), **openssh_server.options())
    async with target:
        for index, text in enumerate(PATCHES):
            mine = tmp_path / f"local-{index}"
            build(mine)
            expected = await patched(local_context(mine), text)
            assert await patched(remote_context(target), text) == expected, index
            assert snapshot(target_root) == snapshot(mine), index
            if index == 0:  # later patches start from the built tree again
                import shutil

                shutil.rmtree(target_root)
                build(target_root)


class ChangesAfterTheRead:
    """The real target, with one file rewritten by somebody else just after
    the patch's first program (its read) and before its second (the write)."""

    def __init__(self, target, path: Path, data: bytes | None) -> None:
        self.target, self.path, self.data, self.programs = target, path, data, 0

    async def run(self, program):
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
)
async def test_a_file_changed_between_read_and_write_refuses_the_whole_patch(openssh_server, workspace, data, reason):
    plan = workspace / ".mevedel" / "sessions" / SID / "local" / "plans" / "plan.md"
    ssh = await SshTarget.connect(openssh_server.url(workspace), **openssh_server.options())
    async with ssh:
        changing = ChangesAfterTheRead(ssh, plan, data)
        before = snapshot(workspace)
        got = await patched(remote_context(changing), CHANGING)
    assert changing.programs == 2
    assert got[0] == "error" and got[1].value == "conflict" and got[2] == "work://plans/plan.md" and got[3] == reason
    after = snapshot(workspace)
    expected = dict(before)
    if data is None:
        del expected[str(plan.relative_to(workspace))]
    else:
        expected[str(plan.relative_to(workspace))] = data
    assert after == expected  # nothing of the patch written: no new.md, guide.md untouched


async def test_a_symlinked_target_is_refused_by_its_authored_address(workspace):
    text = "*** Begin Patch\n*** Add File: work://ok.md\n+x\n*** Delete File: work://plans/escape.md\n*** End Patch\n"
    before = snapshot(workspace)
    got = await patched(remote_context(LocalTarget(workspace)), text)
    assert got[0] == "error" and got[2] == "work://plans/escape.md" and "symbolic link" in got[3]
    assert snapshot(workspace) == before
    assert (workspace / "outside" / "secret.md").read_text() == "step secret\n"
