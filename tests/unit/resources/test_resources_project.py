"""Plain workspace paths through the resolver (``resources/project.py``):
what counts as a path, containment, links and FIFOs, the walk leaving out
``.git``/``.mevedel``, and writes (the held session, protected directories,
one transaction with work:// files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources import (
    GlobOptions,
    GrepOptions,
    PatchOptions,
    ReadOptions,
    ResolverContext,
    execute,
    prepare,
)
from mevedel_server.resources.families.project import is_project_path, parts_of

SID = "2026-07-19T09-47-bf87b5dd793a"


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hi')\nneedle here\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("needle in git\n")
    (root / ".mevedel" / "sessions" / SID).mkdir(parents=True)
    (root / ".mevedel" / "shared").mkdir()
    (root / ".mevedel" / "shared" / "n.md").write_text("needle in shared\n")
    return root


def context_of(workspace: Path, *, writable: bool = True, session: bool = True) -> ResolverContext:
    return ResolverContext(
        workspace_root=workspace,
        session_dir=workspace / ".mevedel" / "sessions" / SID if session else None,
        session_writable=(lambda sid: writable and sid == SID),
    )


async def run(operation: Operation, operand: str, options, context: ResolverContext):
    return await execute(prepare(operation, operand, options, context))


async def failure(operation: Operation, operand: str, options, context: ResolverContext) -> AddressError:
    with pytest.raises(AddressError) as caught:
        await run(operation, operand, options, context)
    return caught.value


@pytest.mark.parametrize(
    ("text", "plain"),
    [("src/main.py", True), ("C:notes", True), ("a:b/c", True), (".", True), ("work://x", False), ("http://x", False)],
)
def test_a_string_is_a_path_unless_it_has_a_scheme(text, plain):
    assert is_project_path(text) is plain


def test_paths_are_lexically_contained(workspace):
    context = context_of(workspace)
    assert parts_of("src/main.py", context) == ("src", "main.py")
    assert parts_of("./src/../src/main.py", context) == ("src", "main.py")
    assert parts_of(str(workspace / "src" / "main.py"), context) == ("src", "main.py")
    assert parts_of(str(workspace), context) == ()
    for outside in ("../x", "src/../../x", "/etc/passwd", str(workspace) + "-other/x", "~/x"):
        with pytest.raises(AddressError) as caught:
            parts_of(outside, context)
        assert caught.value.kind is ErrorKind.CONTAINMENT and caught.value.authored == outside
        assert "outside the workspace" in caught.value.reason
    with pytest.raises(AddressError) as caught:
        parts_of("", context)
    assert caught.value.kind is ErrorKind.MALFORMED_ADDRESS


async def test_read_glob_grep_of_plain_paths(workspace):
    context = context_of(workspace)
    read = await run(Operation.READ, "src/main.py", ReadOptions(), context)
    assert (read.address, read.canonical, read.text) == ("src/main.py", "src/main.py", "     1\tprint('hi')\n     2\tneedle here")
    listing = await run(Operation.READ, ".", ReadOptions(), context)
    assert listing.text == "     1\tsrc/"
    # An explicit path into .git still reads; walks leave it (and .mevedel) out.
    assert (await run(Operation.READ, ".git/HEAD", ReadOptions(), context)).text == "     1\tneedle in git"
    glob = await run(Operation.GLOB, ".", GlobOptions(pattern="**/*"), context)
    assert glob.matches == ("src/main.py",)
    assert (await run(Operation.GLOB, "src", GlobOptions(pattern="*.py"), context)).matches == ("src/main.py",)
    grep = await run(Operation.GREP, ".", GrepOptions(pattern="needle"), context)
    assert [(m.address, m.line, m.column) for m in grep.matches] == [("src/main.py", 2, 1)]


async def test_links_and_fifos_are_refused_without_naming_their_target(workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (workspace / "link.txt").symlink_to(secret)
    (workspace / "dir-link").symlink_to(tmp_path)
    os.mkfifo(workspace / "pipe")
    context = context_of(workspace)
    for operand in ("link.txt", "dir-link/secret.txt"):
        error = await failure(Operation.READ, operand, ReadOptions(), context)
        assert error.kind is ErrorKind.CONTAINMENT and error.authored == operand
        assert str(tmp_path) not in error.reason
    error = await failure(Operation.READ, "pipe", ReadOptions(), context)
    assert (error.kind, error.reason) == (ErrorKind.UNREADABLE, "is not a regular file or directory")
    grep = await run(Operation.GREP, ".", GrepOptions(pattern="secret"), context)
    assert grep.matches == ()
    assert (await run(Operation.GLOB, ".", GlobOptions(pattern="**/*"), context)).matches == ("src/main.py",)
    error = await failure(Operation.APPLY_PATCH, "*** Begin Patch\n*** Add File: dir-link/new.txt\n+x\n*** End Patch\n", None, context)
    assert error.kind is ErrorKind.CONTAINMENT and not (tmp_path / "new.txt").exists()


def patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


async def test_a_project_write_needs_the_session_held_here(workspace):
    text = patch("*** Add File: src/new.py\n+x\n")
    for context, reason in (
        (context_of(workspace, session=False), "no session is open"),
        (context_of(workspace, writable=False), f"session {SID} is not open for writing by this client"),
    ):
        error = await failure(Operation.APPLY_PATCH, text, PatchOptions(), context)
        assert error.kind is ErrorKind.OWNER_MISSING and error.authored == "src/new.py" and reason in error.reason
        assert not (workspace / "src" / "new.py").exists()
    result = await run(Operation.APPLY_PATCH, text, PatchOptions(), context_of(workspace))
    assert result.summary() == "A src/new.py" and (workspace / "src" / "new.py").read_text() == "x\n"


def test_prepare_names_project_paths_in_the_facts(workspace):
    attempt = prepare(
        Operation.APPLY_PATCH,
        patch(
            "*** Add File: work://plan.md\n+p\n",
            f"*** Update File: {workspace}/src/main.py\n*** Move to: src/renamed.py\n@@\n-print('hi')\n+print('bye')\n",
        ),
        PatchOptions(),
        context_of(workspace),
    )
    assert [(fact.authored, fact.project_path, fact.writes) for fact in attempt.facts] == [
        ("work://plan.md", None, True),
        (f"{workspace}/src/main.py", "src/main.py", True),
        ("src/renamed.py", "src/renamed.py", True),
    ]


@pytest.mark.parametrize("path", [".git/config", ".mevedel/shared/x.md", ".mevedel/sessions/x", "."])
def test_git_and_mevedel_state_are_never_project_files(workspace, path):
    with pytest.raises(AddressError) as caught:
        prepare(Operation.APPLY_PATCH, patch(f"*** Add File: {path}\n+x\n"), PatchOptions(), context_of(workspace))
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION and caught.value.authored == path
