"""mevedel://: packaged Markdown only, no session needed, contained."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.docs_root import find_docs_root
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.resources.engine.resolver import execute, prepare


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "architecture.md").write_text("# Architecture\nneedle here\n")
    (docs / "guides" / "setup.md").write_text("setup needle\n")
    (docs / "guides" / "notes.txt").write_text("needle in a text file\n")
    (docs / "logo.svg").write_text("<svg>needle</svg>")
    return ResolverContext(docs_root=docs)


async def run(operation, address, options, context):
    return await execute(prepare(operation, address, options, context))


async def test_bare_listing_is_a_sorted_recursive_list_of_markdown_addresses(context):
    result = await run(Operation.READ, "mevedel://", ReadOptions(), context)
    assert [line.split("\t", 1)[1] for line in result.text.splitlines()] == [
        "mevedel://architecture.md",
        "mevedel://guides/setup.md",
    ]


async def test_grep_searches_only_markdown_even_with_a_broader_glob(context):
    result = await run(Operation.GREP, "mevedel://", GrepOptions(pattern="needle", glob="*"), context)
    assert [m.address for m in result.matches] == ["mevedel://architecture.md", "mevedel://guides/setup.md"]
    result = await run(Operation.GREP, "mevedel://guides", GrepOptions(pattern="needle", glob="*.txt"), context)
    assert result.matches == ()


async def test_glob_never_shows_other_files(context):
    result = await run(Operation.GLOB, "mevedel://", GlobOptions(pattern="**/*"), context)
    assert result.matches == ("mevedel://architecture.md", "mevedel://guides/setup.md")


async def test_a_non_markdown_file_is_not_a_document(context):
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "mevedel://logo.svg", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.MISSING_TARGET


async def test_docs_read_needs_no_session_or_workspace(context):
    assert context.session_dir is None and context.workspace_root is None
    result = await run(Operation.READ, "mevedel://guides/setup.md", ReadOptions(), context)
    assert result.text == "     1\tsetup needle"


async def test_missing_documentation_root_is_unavailable(tmp_path):
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "mevedel://", ReadOptions(), ResolverContext(docs_root=tmp_path / "none"))
    assert caught.value.kind is ErrorKind.UNAVAILABLE


def test_the_checkout_documentation_root_is_found():
    root = find_docs_root()
    assert (root / "architecture.md").is_file()
