"""skill://: aliases resolve to the exact current source, exact addresses
are verified by digest, ambiguity never falls back."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine.context import ResolverContext, SkillRoot
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
)
from mevedel_server.resources.engine.resolver import execute, prepare


def make_skill(root: Path, name: str, body: str = "# Skill\n") -> Path:
    directory = root / name
    (directory / "refs").mkdir(parents=True)
    (directory / "SKILL.md").write_text(body)
    (directory / "refs" / "guide.md").write_text(f"guide for {name}\n")
    return directory


def digest(origin: str, directory: Path) -> str:
    return hashlib.sha256(f"{origin}:{os.path.realpath(directory)}".encode()).hexdigest()


@pytest.fixture()
def setup(tmp_path: Path):
    local = tmp_path / "local-skills"
    plugin = tmp_path / "plugin-skills"
    review = make_skill(local, "review", "# Review\nneedle\n")
    make_skill(plugin, "lint")
    (local / "not-a-skill").mkdir()
    context = ResolverContext(
        docs_root=tmp_path / "docs",
        skill_roots=(SkillRoot(local, "local-mevedel"), SkillRoot(plugin, "plugin/tools")),
    )
    return context, review


async def run(operation, address, options, context):
    return await execute(prepare(operation, address, options, context))


async def test_alias_and_exact_read_the_same_source(setup):
    context, review = setup
    exact = f"skill://review@{digest('local-mevedel', review)}/SKILL.md"
    by_alias = await run(Operation.READ, "skill://local-mevedel/review/SKILL.md", ReadOptions(), context)
    by_exact = await run(Operation.READ, exact, ReadOptions(), context)
    assert by_alias.text == by_exact.text == "     1\t# Review\n     2\tneedle"
    assert by_alias.address == "skill://local-mevedel/review/SKILL.md"


async def test_results_keep_the_alias_spelling(setup):
    context, _review = setup
    result = await run(Operation.GLOB, "skill://local-mevedel/review", GlobOptions(pattern="**/*.md"), context)
    assert result.matches == ("skill://local-mevedel/review/SKILL.md", "skill://local-mevedel/review/refs/guide.md")


async def test_bare_listing_shows_aliases_and_exact_addresses(setup):
    context, review = setup
    result = await run(Operation.READ, "skill://", ReadOptions(), context)
    lines = [line.split("\t", 1)[1] for line in result.text.splitlines()]
    assert lines[0] == f"skill://local-mevedel/review = skill://review@{digest('local-mevedel', review)}"
    assert lines[1].startswith("skill://plugin/tools/lint = skill://lint@")


async def test_an_unknown_digest_is_unavailable(setup):
    context, _review = setup
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "skill://review@" + "0" * 64, ReadOptions(), context)
    assert caught.value.kind is ErrorKind.UNAVAILABLE


async def test_a_digest_with_the_wrong_name_is_unavailable(setup):
    context, review = setup
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, f"skill://other@{digest('local-mevedel', review)}", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.UNAVAILABLE


async def test_an_ambiguous_alias_is_unavailable_without_fallback(setup, tmp_path):
    context, _review = setup
    second = tmp_path / "second-local"
    make_skill(second, "review")
    doubled = ResolverContext(
        docs_root=context.docs_root, skill_roots=context.skill_roots + (SkillRoot(second, "local-mevedel"),)
    )
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "skill://local-mevedel/review/SKILL.md", ReadOptions(), doubled)
    assert caught.value.kind is ErrorKind.UNAVAILABLE and "ambiguous" in caught.value.reason
    assert str(tmp_path) not in str(caught.value)
    listing = await run(Operation.READ, "skill://", ReadOptions(), doubled)
    assert "skill://local-mevedel/review is ambiguous" in listing.text


async def test_a_skill_that_disappears_after_prepare_is_unavailable(setup):
    context, review = setup
    attempt = prepare(Operation.READ, "skill://local-mevedel/review/refs/guide.md", ReadOptions(), context)
    (review / "SKILL.md").unlink()
    with pytest.raises(AddressError) as caught:
        await execute(attempt)
    assert caught.value.kind is ErrorKind.UNAVAILABLE


async def test_package_descendants_stay_contained(setup, tmp_path):
    context, review = setup
    (tmp_path / "outside.md").write_text("secret\n")
    (review / "leak.md").symlink_to(tmp_path / "outside.md")
    with pytest.raises(AddressError) as caught:
        await run(Operation.READ, "skill://local-mevedel/review/leak.md", ReadOptions(), context)
    assert caught.value.kind is ErrorKind.CONTAINMENT
    grep = await run(Operation.GREP, "skill://local-mevedel/review", GrepOptions(pattern="secret"), context)
    assert grep.matches == ()


async def test_a_symlinked_skill_directory_is_served_from_its_real_path(setup, tmp_path):
    context, _review = setup
    real = make_skill(tmp_path / "elsewhere", "linked", "# Linked\n")
    (context.skill_roots[0].path / "linked").symlink_to(real)
    found = await run(Operation.READ, "skill://local-mevedel/linked/SKILL.md", ReadOptions(), context)
    assert found.text == "     1\t# Linked"
    exact = f"skill://linked@{digest('local-mevedel', real)}/refs/guide.md"
    assert (await run(Operation.READ, exact, ReadOptions(), context)).text == "     1\tguide for linked"
