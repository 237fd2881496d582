"""Containment: a backing path is the address's components joined below a
family root's place, so it cannot leave the root lexically; a symbolic link
met on the way is refused when the operation runs, never followed; and no
error message carries a backing path."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.engine.containment import contain
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.places import LINKED_ROOT, Place, Places
from mevedel_server.targets import LocalTarget


def test_components_are_joined_below_the_root(tmp_path: Path):
    place = Place(LocalTarget(tmp_path), ".mevedel/shared")
    assert contain(place, ("notes", "a.md"), "work://shared/notes/a.md") == ".mevedel/shared/notes/a.md"
    assert contain(Place(LocalTarget(tmp_path)), ("a.md",), "memory://k/a.md") == "a.md"
    assert contain(place, (), "work://shared") == ".mevedel/shared"


@pytest.mark.parametrize("bad", ["..", ".", "", "a/b", "a\0b"])
def test_an_undecoded_component_never_becomes_a_traversal(tmp_path: Path, bad):
    with pytest.raises(AddressError) as caught:
        contain(Place(LocalTarget(tmp_path)), (bad,), "work://x")
    assert caught.value.kind is ErrorKind.INTERNAL


def test_a_root_that_is_a_symbolic_link_is_containment_without_naming_a_path(tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    places = Places(ResolverContext(docs_root=tmp_path))
    place = places.local(tmp_path / "linked")
    assert place.linked and place.target is None
    with pytest.raises(AddressError) as caught:
        contain(place, ("n.md",), "memory://global-mevedel/n.md")
    assert (caught.value.kind, caught.value.reason) == (ErrorKind.CONTAINMENT, LINKED_ROOT)
    assert str(tmp_path) not in str(caught.value)


def test_roots_inside_the_workspace_are_paths_on_its_target(tmp_path: Path):
    workspace = tmp_path / "ws"
    (workspace / ".mevedel" / "memory").mkdir(parents=True)
    places = Places(ResolverContext(workspace_root=workspace, session_dir=workspace / ".mevedel" / "sessions" / "s1", docs_root=tmp_path))
    assert places.workspace is not None and places.workspace.root == ""
    assert places.session is not None and places.session.target is places.workspace.target
    assert places.session.root == ".mevedel/sessions/s1"
    memory = places.local(workspace / ".mevedel" / "memory")
    assert (memory.target, memory.root) == (places.workspace.target, ".mevedel/memory")
    outside = places.local(tmp_path)
    assert outside.target is not places.workspace.target and outside.root == ""


def test_an_absent_root_outside_the_workspace_is_created_below_its_nearest_ancestor(tmp_path: Path):
    places = Places(ResolverContext(docs_root=tmp_path))
    place = places.local(tmp_path / "a" / "b")
    assert place.target is None and not place.linked
    holder = place.writable()
    assert holder is not None and holder.root == "a/b" and isinstance(holder.target, LocalTarget)
