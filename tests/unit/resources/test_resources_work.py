"""work:// through prepare/execute: both scopes, discovery without storage,
owner errors, containment, and the Read/Glob/Grep contracts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import (
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
)
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.resources.engine.resolver import execute, prepare


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    workspace = tmp_path / "workspace"
    session = tmp_path / "sessions" / "s1"
    workspace.mkdir()
    session.mkdir(parents=True)
    return ResolverContext(workspace_root=workspace, session_dir=session, docs_root=tmp_path / "docs")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def run(operation: Operation, address: str, options, context: ResolverContext):
    return await execute(prepare(operation, address, options, context))


async def read(address: str, context: ResolverContext, **options):
    return await run(Operation.READ, address, ReadOptions(**options), context)


def assert_no_paths(text: str, context: ResolverContext) -> None:
    for root in (context.workspace_root, context.session_dir):
        assert root is None or str(root) not in text
    assert str(Path(os.sep, "tmp")) + os.sep not in text


async def test_session_file_reads_with_line_numbers(context):
    write(context.session_dir / "local" / "notes.md", "first\nsecond\n")
    result = await read("work://notes.md", context)
    assert result.text == "     1\tfirst\n     2\tsecond"
    assert result.kind == "file" and result.address == "work://notes.md"
    assert result.canonical == "work://notes.md"


async def test_shared_file_reads_from_the_workspace(context):
    write(context.workspace_root / ".mevedel" / "shared" / "handoff.md", "done\n")
    result = await read("work://shared/handoff.md", context)
    assert result.text == "     1\tdone"


async def test_prepare_exposes_only_logical_authority_facts(context):
    attempt = prepare(Operation.READ, "work://shared/a%2Db.md", ReadOptions(), context)
    (facts,) = attempt.facts
    assert facts.family is Family.WORK and facts.operation is Operation.READ
    assert facts.authored == "work://shared/a%2Db.md"
    assert facts.canonical == "work://shared/a-b.md"
    assert facts.locator_class is LocatorClass.EXACT
    assert facts.backing == "file" and facts.writes is False
    assert_no_paths(repr(attempt) + repr(facts), context)


async def test_prepare_reads_nothing_and_a_missing_file_fails_at_execute(context):
    attempt = prepare(Operation.READ, "work://missing.md", ReadOptions(), context)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.MISSING_TARGET
    assert caught.value.authored == "work://missing.md"


async def test_an_attempt_runs_once(context):
    write(context.session_dir / "local" / "a.md", "a")
    attempt = prepare(Operation.READ, "work://a.md", ReadOptions(), context)
    await execute(attempt)
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.INTERNAL


async def test_an_unused_shared_root_is_an_empty_discovery_that_creates_nothing(context):
    for operation, options in (
        (Operation.READ, ReadOptions()),
        (Operation.GLOB, GlobOptions()),
        (Operation.GREP, GrepOptions(pattern="x")),
    ):
        for spelling in ("work://shared", "work://shared/"):
            result = await run(operation, spelling, options, context)
            assert "ApplyPatch can create a file under work://shared/" in result.notice
    assert not (context.workspace_root / ".mevedel").exists()
    read_result = await read("work://shared/", context)
    assert read_result.kind == "empty" and read_result.canonical == "work://shared"


async def test_an_explicit_missing_directory_descendant_is_missing_target(context):
    with pytest.raises(AddressError) as caught:
        await read("work://shared/drafts", context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET
    with pytest.raises(AddressError) as caught:
        await run(Operation.GLOB, "work://plans", GlobOptions(), context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET


async def test_bare_work_lists_both_scopes_without_calling_the_union_empty(context):
    write(context.workspace_root / ".mevedel" / "shared" / "notes.md", "n")
    result = await read("work://", context)
    assert "work://shared/notes.md" in result.text
    assert result.kind == "listing"
    assert "session scope (work://) has no files yet" in result.notice
    assert "work://shared has no files yet" not in result.notice

    write(context.session_dir / "local" / "plans" / "p.md", "p")
    result = await read("work://", context)
    lines = [line.split("\t", 1)[1] for line in result.text.splitlines()]
    assert lines == ["work://plans/", "work://shared/notes.md"]
    assert result.notice is None


async def test_bare_work_when_both_scopes_are_unused_is_empty_and_says_so(context):
    result = await read("work://", context)
    assert result.kind == "empty"
    assert "session scope" in result.notice and "work://shared" in result.notice
    assert not (context.session_dir / "local").exists()


async def test_directory_read_lists_entries_as_addresses(context):
    write(context.session_dir / "local" / "plans" / "accepted-1.md", "a")
    write(context.session_dir / "local" / "plans" / "sub dir" / "x.md", "x")
    result = await read("work://plans/", context)
    assert result.kind == "directory" and result.canonical == "work://plans"
    assert [line.split("\t", 1)[1] for line in result.text.splitlines()] == [
        "work://plans/accepted-1.md",
        "work://plans/sub%20dir/",
    ]


async def test_no_session_is_owner_missing_for_session_scope_but_not_shared(context):
    lonely = context.with_session(None)
    for address in ("work://notes.md", "work://"):
        with pytest.raises(AddressError) as caught:
            await read(address, lonely)
        assert caught.value.kind is ErrorKind.OWNER_MISSING
    write(context.workspace_root / ".mevedel" / "shared" / "n.md", "n")
    assert (await read("work://shared/n.md", lonely)).text == "     1\tn"


async def test_a_symbolic_link_is_refused_when_it_runs_without_leaking_paths(context, tmp_path):
    secret = write(tmp_path / "secret" / "key.txt", "top secret")
    local = context.session_dir / "local"
    local.mkdir()
    (local / "leak").symlink_to(secret)
    (local / "dir").symlink_to(secret.parent)
    write(local / "inside.md", "inside")
    (local / "alias.md").symlink_to(local / "inside.md")  # stays inside: still not followed
    for address in ("work://leak", "work://dir/key.txt", "work://alias.md"):
        attempt = prepare(Operation.READ, address, ReadOptions(), context)  # a link is the world's, not the text's
        with pytest.raises(AddressError) as caught:
            await execute(attempt)
        assert caught.value.kind is ErrorKind.CONTAINMENT
        assert caught.value.reason == "is reached through a symbolic link, which mevedel does not follow"
        assert_no_paths(str(caught.value), context)
        assert str(secret.parent) not in str(caught.value)
    # Searches and listings leave links out instead of following them.
    write(local / "ok.md", "top secret too")
    listing = await read("work://", context)
    assert "leak" not in listing.text and "work://dir" not in listing.text and "alias" not in listing.text
    grep = await run(Operation.GREP, "work://", GrepOptions(pattern="secret"), context)
    assert [m.address for m in grep.matches] == ["work://ok.md"]


async def test_traversal_and_malformed_addresses_fail_at_prepare(context):
    for address, kind in (("work://../x", ErrorKind.MALFORMED_ADDRESS), ("work://a/%2e%2e/b", ErrorKind.MALFORMED_ADDRESS)):
        with pytest.raises(AddressError) as caught:
            prepare(Operation.READ, address, ReadOptions(), context)
        assert caught.value.kind is kind


async def test_out_of_range_read_uses_the_authored_address(context):
    write(context.session_dir / "local" / "notes.md", "".join(f"{n}\n" for n in range(42)))
    with pytest.raises(AddressError) as caught:
        await read("work://notes.md", context, offset=500)
    assert caught.value.kind is ErrorKind.OUT_OF_RANGE
    assert caught.value.reason == "offset 500 is past the last line (1-42); retry Read work://notes.md offset=1 limit=42"


async def test_empty_file_is_a_successful_empty_result(context):
    write(context.session_dir / "local" / "empty.md", "")
    result = await read("work://empty.md", context, offset=3)
    assert result.kind == "empty" and result.total_lines == 0 and result.text == ""


async def test_long_line_char_offset_paging_through_the_resolver(context):
    write(context.session_dir / "local" / "wide.txt", "short\n" + "ab" * 3000 + "\n")
    first = await read("work://wide.txt", context)
    assert first.truncated_lines == ((2, 2000),)
    assert "Read work://wide.txt offset=2 char_offset=2000" in first.notice
    middle = await read("work://wide.txt", context, offset=2, char_offset=2000)
    assert middle.text == "     2\t" + "ab" * 1000 and middle.truncated_lines == ((2, 4000),)
    last = await read("work://wide.txt", context, offset=2, char_offset=4000)
    assert last.truncated_lines == () and last.next_offset is None


async def test_binary_file_is_unreadable_and_names_the_address(context):
    (context.session_dir / "local").mkdir()
    (context.session_dir / "local" / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(AddressError) as caught:
        await read("work://img.png", context)
    assert caught.value.kind is ErrorKind.UNREADABLE and caught.value.authored == "work://img.png"


async def test_glob_returns_canonical_addresses_relative_to_the_operand(context):
    shared = context.workspace_root / ".mevedel" / "shared"
    write(shared / "a.md", "")
    write(shared / "deep" / "b.md", "")
    write(shared / "deep" / "c.txt", "")
    result = await run(Operation.GLOB, "work://shared", GlobOptions(pattern="**/*.md"), context)
    assert result.matches == ("work://shared/a.md", "work://shared/deep/b.md")
    result = await run(Operation.GLOB, "work://shared/deep", GlobOptions(pattern="*"), context)
    assert result.matches == ("work://shared/deep/b.md", "work://shared/deep/c.txt")
    limited = await run(Operation.GLOB, "work://shared", GlobOptions(limit=1), context)
    assert limited.truncated and len(limited.matches) == 1


async def test_grep_reports_read_line_numbers_and_columns(context):
    write(context.session_dir / "local" / "a.md", "zero\r\nthe needle\nnope\nneedle again\n")
    result = await run(Operation.GREP, "work://", GrepOptions(pattern="needle", context_lines=1), context)
    assert [(m.address, m.line, m.column, m.preview) for m in result.matches] == [
        ("work://a.md", 2, 5, "the needle"),
        ("work://a.md", 4, 1, "needle again"),
    ]
    assert result.matches[0].before == ((1, "zero"),) and result.matches[0].after == ((3, "nope"),)
    page = await read("work://a.md", context, offset=2, limit=1)
    assert page.text == "     2\tthe needle"


async def test_grep_options_glob_case_and_invalid_regex(context):
    write(context.session_dir / "local" / "x" / "a.py", "Needle\n")
    write(context.session_dir / "local" / "b.md", "needle\n")
    result = await run(Operation.GREP, "work://", GrepOptions(pattern="needle", glob="*.py", ignore_case=True), context)
    assert [m.address for m in result.matches] == ["work://x/a.py"]
    with pytest.raises(AddressError) as caught:
        prepare(Operation.GREP, "work://", GrepOptions(pattern="(unclosed"), context)
    assert caught.value.kind is ErrorKind.INVALID_OPTION
    assert "'(unclosed'" in caught.value.reason


async def test_grep_preview_of_a_long_line_leads_to_its_read_page(context):
    line = "a" * 4500 + "needle" + "b" * 10
    write(context.session_dir / "local" / "wide.txt", line + "\n")
    (match,) = (await run(Operation.GREP, "work://wide.txt", GrepOptions(pattern="needle"), context)).matches
    assert (match.line, match.column, match.char_offset) == (1, 4501, 4000)
    page = await read("work://wide.txt", context, offset=1, char_offset=match.char_offset)
    assert page.text.split("\t", 1)[1] == match.preview


async def test_bad_read_options_are_refused_at_prepare(context):
    with pytest.raises(AddressError) as caught:
        prepare(Operation.READ, "work://a", ReadOptions(offset=0), context)
    assert caught.value.kind is ErrorKind.INVALID_OPTION


async def test_unsupported_operation_is_not_called_malformed(context):
    with pytest.raises(AddressError) as caught:
        prepare(Operation.GLOB, "agent://root/x", GlobOptions(), context)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION


async def test_unknown_scheme_is_a_validation_error(context):
    with pytest.raises(AddressError) as caught:
        prepare(Operation.READ, "nope://x", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.UNKNOWN_SCHEME
