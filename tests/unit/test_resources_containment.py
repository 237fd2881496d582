"""Containment: symbolic links may not lead outside a family root, and no
error message carries a backing path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.containment import contain, contain_for_write


@pytest.fixture()
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "owner" / "root"
    outside = tmp_path / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "inside.txt").write_text("inside")
    return root, outside


def test_a_plain_descendant_is_contained(layout):
    root, _outside = layout
    assert contain(root, ("inside.txt",), "work://inside.txt").path == root / "inside.txt"


def test_a_link_that_stays_inside_is_allowed(layout):
    root, _outside = layout
    (root / "alias.txt").symlink_to(root / "inside.txt")
    contained = contain(root, ("alias.txt",), "work://alias.txt")
    assert contained.real_path == (root / "inside.txt").resolve()


@pytest.mark.parametrize("target", ["file", "directory", "dangling"])
def test_a_link_that_escapes_is_refused_without_naming_a_path(layout, target):
    root, outside = layout
    destination = {"file": outside / "secret.txt", "directory": outside, "dangling": outside / "nothing"}[target]
    (root / "escape").symlink_to(destination)
    parts = ("escape", "secret.txt") if target == "directory" else ("escape",)
    with pytest.raises(AddressError) as caught:
        contain(root, parts, "work://escape")
    error = caught.value
    assert error.kind is ErrorKind.CONTAINMENT
    assert error.authored == "work://escape"
    for text in (str(error), error.reason):
        assert str(outside) not in text and str(root) not in text and os.sep + "tmp" not in text


def test_writes_refuse_a_symlinked_root(tmp_path: Path):
    owner = tmp_path / "workspace"
    real = tmp_path / "elsewhere"
    (owner / ".mevedel").mkdir(parents=True)
    real.mkdir()
    (owner / ".mevedel" / "shared").symlink_to(real)
    # Reading through the linked root is fine ...
    contain(owner / ".mevedel" / "shared", ("n.md",), "work://shared/n.md")
    # ... writing through it is not.
    with pytest.raises(AddressError) as caught:
        contain_for_write(owner, owner / ".mevedel" / "shared", ("n.md",), "work://shared/n.md")
    assert caught.value.kind is ErrorKind.CONTAINMENT
    assert str(tmp_path) not in str(caught.value)


def test_writes_refuse_a_symlinked_intermediate_directory(tmp_path: Path):
    owner = tmp_path / "workspace"
    owner.mkdir()
    (tmp_path / "state").mkdir()
    (owner / ".mevedel").symlink_to(tmp_path / "state")
    with pytest.raises(AddressError):
        contain_for_write(owner, owner / ".mevedel" / "shared", ("n.md",), "work://shared/n.md")


def test_verify_notices_a_root_that_moved(layout, tmp_path: Path):
    root, outside = layout
    linked_root = tmp_path / "link"
    linked_root.symlink_to(root)
    contained = contain(linked_root, ("inside.txt",), "work://inside.txt")
    linked_root.unlink()
    linked_root.symlink_to(outside)
    with pytest.raises(AddressError) as caught:
        contained.verify("work://inside.txt")
    assert caught.value.kind is ErrorKind.CONFLICT


@pytest.mark.parametrize("bad", ["..", ".", "", "a/b"])
def test_an_undecoded_component_never_becomes_a_traversal(layout, bad):
    root, _outside = layout
    with pytest.raises(AddressError) as caught:
        contain(root, (bad,), "work://x")
    assert caught.value.kind is ErrorKind.INTERNAL
