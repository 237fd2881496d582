"""What turns did to the tree, from their checkpoints alone: kinds of
change, line diffs, renames, gaps named, ranges composed."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from mevedel_server.store.content.diff import (
    ADDED,
    DELETED,
    DIRECTORY_CREATED,
    DIRECTORY_REMOVED,
    LINK_CREATED,
    LINK_RETARGETED,
    MODE_CHANGED,
    MODIFIED,
    RENAMED,
    UNKNOWN,
    describe,
    stat_lines,
    tree_diff,
)
from mevedel_server.store.content.sidecar import (
    Absent,
    Directory,
    FileSnapshot,
    Present,
    Symlink,
    TurnFiles,
)

BLOBS: dict[str, bytes] = {}


def file(data: bytes, mode: int | None = 0o644) -> Present:
    digest = hashlib.sha256(data).hexdigest()
    BLOBS[digest] = data
    return Present(sha256=digest, size=len(data), mode=mode)


def turn(number: int, **files: tuple) -> TurnFiles:
    snapshots = {}
    for name, (pre, post, *gap) in files.items():
        snapshots[name.replace("__", "/").replace("_dot_", ".")] = FileSnapshot(pre=pre, post=post, gap=gap[0] if gap else None)
    return TurnFiles(turn=number, turn_id=f"t{number:04d}" + "0" * 28, files=snapshots)


def by_path(diff):
    return {f.path: f for f in diff.files}


def test_every_kind_of_change_in_one_turn():
    record = turn(
        1,
        app_dot_py=(file(b"a\nb\nc\n"), file(b"a\nB\nc\nd\n")),
        run_dot_sh=(file(b"#!/bin/sh\n", 0o644), file(b"#!/bin/sh\n", 0o755)),
        new_dot_txt=(Absent(), file(b"fresh\n")),
        old_dot_txt=(file(b"gone\n"), Absent()),
        newdir=(Absent(), Directory(mode=0o755)),
        olddir=(Directory(mode=0o700), Absent()),
        link=(Absent(), Symlink(target="target.txt")),
        moved=(Symlink(target="a"), Symlink(target="b")),
        same=(file(b"x\n"), file(b"x\n")),
    )
    diff = by_path(tree_diff([record], 1, 1, BLOBS.get))
    assert {p: f.change for p, f in diff.items()} == {
        "app.py": MODIFIED,
        "run.sh": MODE_CHANGED,
        "new.txt": ADDED,
        "old.txt": DELETED,
        "newdir": DIRECTORY_CREATED,
        "olddir": DIRECTORY_REMOVED,
        "link": LINK_CREATED,
        "moved": LINK_RETARGETED,
    }  # "same" was written and put back: nothing to review
    app = diff["app.py"]
    assert app.text.startswith("--- a/app.py\n+++ b/app.py\n") and "-b\n+B\n" in app.text and "+d\n" in app.text
    assert (app.insertions, app.deletions) == (2, 1)
    assert describe(diff["run.sh"]) == "run.sh: mode changed (644 -> 755)"
    assert describe(diff["link"]) == "link: link created -> target.txt"
    assert diff["new.txt"].text.startswith("--- /dev/null\n+++ b/new.txt\n")
    assert diff["old.txt"].text.startswith("--- a/old.txt\n+++ /dev/null\n")


def test_the_same_bytes_moving_are_one_rename():
    record = turn(1, a_dot_txt=(file(b"moving bytes\n"), Absent()), b_dot_txt=(Absent(), file(b"moving bytes\n", 0o600)))
    [moved] = tree_diff([record], 1, 1, BLOBS.get).files
    assert (moved.change, moved.path, moved.renamed_from, moved.text) == (RENAMED, "b.txt", "a.txt", "")
    assert describe(moved) == "a.txt -> b.txt: renamed, mode 644 -> 600"
    # The new name sorting before the old one.
    record = turn(1, z_dot_txt=(file(b"moving bytes\n"), Absent()), b_dot_txt=(Absent(), file(b"moving bytes\n")))
    [moved] = tree_diff([record], 1, 1, BLOBS.get).files
    assert (moved.path, moved.renamed_from) == ("b.txt", "z.txt")


def test_binary_large_and_unkept_files_are_named_not_diffed():
    big = Present(sha256="e" * 64, size=50 * 1024 * 1024, mode=0o644)
    record = turn(
        1,
        image_dot_png=(Absent(), file(b"\x89PNG\x00\x01")),
        big_dot_bin=(Absent(), big),
        lost_dot_txt=(Present(sha256="f" * 64, size=3, mode=0o644), file(b"now\n")),
    )
    diff = by_path(tree_diff([record], 1, 1, BLOBS.get))
    assert diff["image.png"].binary and not diff["image.png"].text
    assert "larger than" in diff["big.bin"].no_text and diff["big.bin"].change == ADDED
    assert "no longer kept" in diff["lost.txt"].no_text


def test_gaps_and_unsettled_turns_are_named():
    record = turn(
        1,
        huge=(None, Absent(), "the file is larger than the 1048576-byte snapshot limit"),
        pending=(file(b"x\n"), None),
    )
    diff = by_path(tree_diff([record], 1, 1, BLOBS.get))
    assert diff["huge"].change == UNKNOWN and "snapshot limit" in describe(diff["huge"])
    assert diff["pending"].change == UNKNOWN and "has not settled" in describe(diff["pending"])


def test_a_range_compares_the_earliest_before_with_the_latest_after():
    one = turn(1, notes=(Absent(), file(b"one\n")), keep=(file(b"k\n"), file(b"k2\n")))
    two = turn(2, notes=(file(b"one\n"), file(b"one\ntwo\n")))
    three = turn(3, keep=(file(b"k2\n"), file(b"k\n")), other=(Absent(), file(b"o\n")))
    every = by_path(tree_diff([three, one, two], 1, 3, BLOBS.get))
    assert every["notes"].change == ADDED and every["notes"].text.endswith("+one\n+two\n")
    assert (every["notes"].first_turn, every["notes"].last_turn) == (1, 2)
    assert "keep" not in every  # changed in turn 1, changed back in turn 3
    middle = by_path(tree_diff([one, two, three], 2, 2, BLOBS.get))
    assert list(middle) == ["notes"] and middle["notes"].change == MODIFIED
    stat = stat_lines(tree_diff([one, two, three], 1, 3, BLOBS.get))
    assert stat[-1] == " 2 paths changed, 3 insertions(+), 0 deletions(-)"


def _apply(old: list[str], patch: list[str]) -> list[str]:
    out: list[str] = []
    at = 0
    for line in patch[2:]:
        if line.startswith("@@"):
            start, _, count = line.split()[1][1:].partition(",")
            begin = int(start) - 1 if count != "0" else int(start)
            out += old[at:begin]
            at = begin
        elif line[0] == " ":
            out.append(old[at])
            at += 1
        elif line[0] == "-":
            at += 1
        else:
            out.append(line[1:])
    return out + old[at:]


@given(
    st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n"]), max_size=30),
    st.lists(st.sampled_from(["a\n", "b\n", "c\n", "x\n"]), max_size=30),
)
def test_the_unified_diff_is_a_patch_that_turns_before_into_after(before, after):
    from mevedel_server.store.content.diff import _unified

    patch = _unified(before, after, "a/f", "b/f")
    assert (patch == []) == (before == after)
    assert _apply(before, patch) == after
