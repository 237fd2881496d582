"""The directory index completion reads: a changed directory is read again
and built on the entries it had, and the result is exactly a fresh
listing's (names added, removed, a file turned into a directory)."""

from __future__ import annotations

import os

from mevedel_server.resources.navigation.directory_index import DirectoryIndex, _scan


def listed(index: DirectoryIndex, path) -> list[tuple[str, str, bool]]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return [(e.label, e.name, e.is_dir) for e in index.listing(fd).entries]
    finally:
        os.close(fd)


def fresh(path) -> list[tuple[str, str, bool]]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return [(e.label, e.name, e.is_dir) for e in _scan(fd).entries]
    finally:
        os.close(fd)


def test_a_changed_directory_lists_exactly_what_a_fresh_scan_does(tmp_path):
    for n in range(50):
        (tmp_path / f"file-{n:03d}.md").write_text("x")
    (tmp_path / "a dir").mkdir()
    (tmp_path / "turns-into-dir").write_text("x")
    (tmp_path / "link").symlink_to("file-001.md")
    index = DirectoryIndex()
    assert listed(index, tmp_path) == fresh(tmp_path)
    watched = bool(index._watched)  # inotify where the system has it
    for n in range(0, 50, 7):
        (tmp_path / f"file-{n:03d}.md").unlink()
    (tmp_path / "new one.md").write_text("x")
    (tmp_path / "%weird").write_text("x")
    (tmp_path / "turns-into-dir").unlink()
    (tmp_path / "turns-into-dir").mkdir()
    (tmp_path / "zz-dir").mkdir()
    after = listed(index, tmp_path)
    assert after == fresh(tmp_path)
    assert ("turns-into-dir", "turns-into-dir", True) in after and not any(name == "link" for _, name, _ in after)
    assert [label for label, _, _ in after] == sorted(label for label, _, _ in after)
    assert bool(index._watched) == watched
    # More changes than are worth patching one by one: scanned again.
    for n in range(300):
        (tmp_path / f"bulk-{n}").write_text("x")
    assert listed(index, tmp_path) == fresh(tmp_path)
    # A change right after a listing, within the same timestamp tick.
    (tmp_path / "racy").write_text("x")
    assert ("racy", "racy", False) in listed(index, tmp_path)
    os.remove(tmp_path / "racy")
    assert ("racy", "racy", False) not in listed(index, tmp_path)
