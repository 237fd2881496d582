"""Applying patches to real files through a target: add/update/delete/move,
multi-hunk updates, tolerant matching, conflicts that leave everything
untouched, and the file's own newline convention, final newline and mode."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.patch import (
    FileChange,
    PatchResult,
    ResolvedOperation,
    apply_patch,
    parse_patch,
)
from mevedel_server.targets import LocalTarget

JOURNAL = ".mevedel-patches"


def backing(address: str) -> str:
    return address.split("://", 1)[1]


def resolve(text: str) -> list[ResolvedOperation]:
    """What the resolver does: map each authored address to a target path."""
    resolved = []
    for operation in parse_patch(text).operations:
        move = backing(operation.move_to) if operation.move_to else None
        resolved.append(ResolvedOperation(operation, backing(operation.target), move, operation.target, operation.move_to))
    return resolved


def apply_resolved(root: Path, operations: list[ResolvedOperation]) -> PatchResult:
    return asyncio.run(apply_patch(LocalTarget(root), JOURNAL, operations))


def apply(root: Path, *body: str) -> PatchResult:
    return apply_resolved(root, resolve("\n".join(["*** Begin Patch", *body, "*** End Patch"])))


def failure(root: Path, *body: str) -> AddressError:
    with pytest.raises(AddressError) as caught:
        apply(root, *body)
    assert str(root) not in str(caught.value) and str(root) not in caught.value.reason
    return caught.value


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(path.relative_to(root)): (path.read_bytes() if path.is_file() else None) for path in sorted(root.rglob("*"))
    }


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_add_creates_the_file_and_its_directories(tmp_path):
    result = apply(tmp_path, "*** Add File: work://notes/deep/todo.md", "+line one", "+line two")
    assert (tmp_path / "notes/deep/todo.md").read_text() == "line one\nline two\n"
    assert result.changes == (FileChange("work://notes/deep/todo.md", "add", None, 2, 0, "work://notes/deep/todo.md"),)
    assert result.summary() == "A work://notes/deep/todo.md"


def test_add_without_lines_creates_an_empty_file(tmp_path):
    apply(tmp_path, "*** Add File: work://empty.txt")
    assert (tmp_path / "empty.txt").read_bytes() == b""


def test_update_replaces_lines_and_counts_them(tmp_path):
    write(tmp_path / "a.py", "def greet():\n    return 'hi'\n\nprint(greet())\n")
    result = apply(
        tmp_path,
        "*** Update File: work://a.py",
        "@@ def greet():",
        "-    return 'hi'",
        "+    name = 'you'",
        "+    return f'hi {name}'",
    )
    assert (tmp_path / "a.py").read_text() == (
        "def greet():\n    name = 'you'\n    return f'hi {name}'\n\nprint(greet())\n"
    )
    assert result.changes == (FileChange("work://a.py", "update", None, 2, 1, "work://a.py"),)
    assert result.summary() == "M work://a.py"


def test_multiple_hunks_apply_in_order_and_search_forward(tmp_path):
    # "x = 1" appears twice: the second hunk must land after the first one.
    write(tmp_path / "m.py", "def a():\n    x = 1\n\ndef b():\n    x = 1\n")
    apply(
        tmp_path,
        "*** Update File: work://m.py",
        "@@",
        " def a():",
        "-    x = 1",
        "+    x = 10",
        "@@",
        "-    x = 1",
        "+    x = 20",
    )
    assert (tmp_path / "m.py").read_text() == "def a():\n    x = 10\n\ndef b():\n    x = 20\n"


def test_a_header_anchors_the_hunk_after_its_line(tmp_path):
    write(tmp_path / "m.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")
    apply(tmp_path, "*** Update File: work://m.py", "@@ def b():", "-    return 1", "+    return 2")
    assert (tmp_path / "m.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


def test_end_of_file_hunks_match_only_at_the_end(tmp_path):
    write(tmp_path / "f.txt", "end\nmiddle\nend\n")
    apply(tmp_path, "*** Update File: work://f.txt", "@@", "-end", "+END", "*** End of File")
    assert (tmp_path / "f.txt").read_text() == "end\nmiddle\nEND\n"


def test_a_pure_insertion_appends_at_the_end_or_after_its_anchor(tmp_path):
    write(tmp_path / "f.txt", "[a]\nx\n[b]\ny\n")
    apply(tmp_path, "*** Update File: work://f.txt", "@@ [a]", "+inserted", "@@", "+appended")
    assert (tmp_path / "f.txt").read_text() == "[a]\ninserted\nx\n[b]\ny\nappended\n"


def test_matching_tolerates_trailing_then_surrounding_whitespace(tmp_path):
    write(tmp_path / "w.txt", "alpha   \n\tbeta\ngamma\n")
    apply(tmp_path, "*** Update File: work://w.txt", "@@", " alpha", "-beta", "+BETA", " gamma")
    # The tolerated context keeps the file's own spelling.
    assert (tmp_path / "w.txt").read_text() == "alpha   \nBETA\ngamma\n"


def test_an_exact_match_wins_over_an_earlier_tolerant_one(tmp_path):
    write(tmp_path / "w.txt", "value \nvalue\n")
    apply(tmp_path, "*** Update File: work://w.txt", "@@", "-value", "+changed")
    assert (tmp_path / "w.txt").read_text() == "value \nchanged\n"


def test_delete_removes_the_file(tmp_path):
    write(tmp_path / "shared/old.md", "one\ntwo\n")
    result = apply(tmp_path, "*** Delete File: work://shared/old.md")
    assert not (tmp_path / "shared/old.md").exists()
    assert result.changes == (FileChange("work://shared/old.md", "delete", None, 0, 2, "work://shared/old.md"),)
    assert result.summary() == "D work://shared/old.md"


def test_move_renames_and_edits_in_one_step(tmp_path):
    write(tmp_path / "topics/python.md", "# Python\nold\n")
    result = apply(
        tmp_path,
        "*** Update File: memory://topics/python.md",
        "*** Move to: memory://archive/py.md",
        "@@",
        "-old",
        "+new",
    )
    assert not (tmp_path / "topics/python.md").exists()
    assert (tmp_path / "archive/py.md").read_text() == "# Python\nnew\n"
    assert result.summary() == "R memory://topics/python.md -> memory://archive/py.md"
    assert result.changes[0] == FileChange(
        "memory://topics/python.md", "update", "memory://archive/py.md", 1, 1, "memory://topics/python.md", "memory://archive/py.md"
    )


def test_a_pure_move_keeps_the_content_and_mode(tmp_path):
    source = write(tmp_path / "run.sh", "#!/bin/sh\necho hi\n")
    source.chmod(0o750)
    apply(tmp_path, "*** Update File: work://run.sh", "*** Move to: work://bin/run.sh")
    moved = tmp_path / "bin/run.sh"
    assert moved.read_text() == "#!/bin/sh\necho hi\n"
    assert not source.exists()
    assert stat.S_IMODE(moved.stat().st_mode) == 0o750


def test_an_edited_move_keeps_the_moved_files_mode(tmp_path):
    source = write(tmp_path / "run.sh", "#!/bin/sh\necho hi\n")
    source.chmod(0o750)
    private = write(tmp_path / "key.txt", "secret\n")
    private.chmod(0o600)
    apply(
        tmp_path,
        "*** Update File: work://run.sh", "*** Move to: work://bin/run.sh", "-echo hi", "+echo ho",
        "*** Update File: work://key.txt", "*** Move to: work://keys/key.txt", "-secret", "+still secret",
    )
    moved = tmp_path / "bin/run.sh"
    assert moved.read_text() == "#!/bin/sh\necho ho\n" and not source.exists()
    # The script moved and edited is still executable; the private file still private.
    assert stat.S_IMODE(moved.stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "keys/key.txt").stat().st_mode) == 0o600


def test_summary_lists_every_change_in_patch_order(tmp_path):
    write(tmp_path / "m.txt", "x\n")
    write(tmp_path / "d.txt", "y\n")
    write(tmp_path / "r.txt", "z\n")
    result = apply(
        tmp_path,
        "*** Add File: work://a.txt",
        "+a",
        "*** Update File: work://m.txt",
        "-x",
        "+X",
        "*** Delete File: work://d.txt",
        "*** Update File: work://r.txt",
        "*** Move to: work://s.txt",
    )
    assert result.summary() == "A work://a.txt\nM work://m.txt\nD work://d.txt\nR work://r.txt -> work://s.txt"


def test_a_conflicting_hunk_names_the_hunk_and_leaves_every_file_untouched(tmp_path):
    write(tmp_path / "one.txt", "a\nb\n")
    write(tmp_path / "two.py", "def f():\n    return 1\n")
    write(tmp_path / "gone.txt", "bye\n")
    before = snapshot(tmp_path)
    error = failure(
        tmp_path,
        "*** Add File: work://new/file.txt",
        "+fresh",
        "*** Update File: work://one.txt",
        "-a",
        "+A",
        "*** Delete File: work://gone.txt",
        "*** Update File: work://two.py",
        "@@",
        "-def f():",
        "+def g():",
        "@@ def f():",
        "-    return 2",
        "+    return 3",
    )
    assert error.kind is ErrorKind.CONFLICT
    assert error.authored == "work://two.py"
    assert error.reason == "hunk 2 (@@ def f():) does not match the current content; reread and retry"
    assert snapshot(tmp_path) == before


def test_a_hunk_without_header_is_numbered_in_its_conflict(tmp_path):
    write(tmp_path / "one.txt", "a\n")
    error = failure(tmp_path, "*** Update File: work://one.txt", "-zzz", "+y")
    assert error.reason == "hunk 1 does not match the current content; reread and retry"


def test_end_of_file_hunk_conflicts_when_the_lines_are_not_last(tmp_path):
    write(tmp_path / "f.txt", "end\nmore\n")
    error = failure(tmp_path, "*** Update File: work://f.txt", "@@", "-end", "+END", "*** End of File")
    assert error.kind is ErrorKind.CONFLICT


@pytest.mark.parametrize(
    ("setup", "body", "kind", "authored", "reason"),
    [
        (
            {"a.txt": "x\n"},
            ["*** Add File: work://a.txt", "+y"],
            ErrorKind.CONFLICT,
            "work://a.txt",
            "already exists; use '*** Update File:' to change it",
        ),
        (
            {},
            ["*** Update File: work://nope.txt", "-x"],
            ErrorKind.MISSING_TARGET,
            "work://nope.txt",
            "does not exist; use '*** Add File:' to create it",
        ),
        (
            {},
            ["*** Delete File: work://nope.txt"],
            ErrorKind.MISSING_TARGET,
            "work://nope.txt",
            "does not exist; use '*** Add File:' to create it",
        ),
        (
            {"a.txt": "x\n", "b.txt": "y\n"},
            ["*** Update File: work://a.txt", "*** Move to: work://b.txt"],
            ErrorKind.CONFLICT,
            "work://b.txt",
            "already exists; a move may not replace a file",
        ),
        (
            {"plain": "x\n"},
            ["*** Add File: work://plain/child.txt", "+y"],
            ErrorKind.CONFLICT,
            "work://plain/child.txt",
            "cannot be created: a parent is a file, not a directory",
        ),
        (
            {"dir/inner.txt": "x\n"},
            ["*** Delete File: work://dir"],
            ErrorKind.UNREADABLE,
            "work://dir",
            "is a directory, not a file",
        ),
        (
            {"bin.dat": b"\xff\xfe\x00\x01"},
            ["*** Update File: work://bin.dat", "-x"],
            ErrorKind.UNREADABLE,
            "work://bin.dat",
            "is binary content; ApplyPatch edits text files",
        ),
        (
            {"latin.txt": "caf\xe9\n".encode("latin-1")},
            ["*** Update File: work://latin.txt", "-x"],
            ErrorKind.UNREADABLE,
            "work://latin.txt",
            "is not UTF-8 text; ApplyPatch edits text files",
        ),
    ],
)
def test_preconditions_fail_before_anything_is_written(tmp_path, setup, body, kind, authored, reason):
    for name, data in setup.items():
        write(tmp_path / name, data)
    write(tmp_path / "other.txt", "keep\n")
    before = snapshot(tmp_path)
    # An earlier, valid operation proves nothing was written.
    error = failure(tmp_path, "*** Update File: work://other.txt", "-keep", "+changed", *body)
    assert (error.kind, error.authored, error.reason) == (kind, authored, reason)
    assert snapshot(tmp_path) == before


def test_two_addresses_naming_one_file_are_refused(tmp_path):
    write(tmp_path / "topics/python.md", "x\n")
    text = "\n".join(
        [
            "*** Begin Patch",
            "*** Update File: memory://local-mevedel/topics/python.md",
            "-x",
            "+y",
            "*** Delete File: memory://" + "a" * 64 + "/topics/python.md",
            "*** End Patch",
        ]
    )
    operations = [
        ResolvedOperation(operation, "topics/python.md", None, operation.target)
        for operation in parse_patch(text).operations
    ]
    with pytest.raises(AddressError) as caught:
        apply_resolved(tmp_path, operations)
    assert caught.value.kind is ErrorKind.INVALID_PATCH
    assert caught.value.authored == "memory://" + "a" * 64 + "/topics/python.md"
    assert caught.value.reason == (
        "names the same file as memory://local-mevedel/topics/python.md; one patch may touch each file once"
    )
    assert (tmp_path / "topics/python.md").read_text() == "x\n"


def test_crlf_files_stay_crlf_and_new_lines_follow_them(tmp_path):
    write(tmp_path / "win.txt", b"one\r\ntwo\r\nthree\r\n")
    apply(tmp_path, "*** Update File: work://win.txt", " one", "-two", "+TWO", "+two and a half", " three")
    assert (tmp_path / "win.txt").read_bytes() == b"one\r\nTWO\r\ntwo and a half\r\nthree\r\n"


def test_a_crlf_patch_edits_an_lf_file_without_changing_its_endings(tmp_path):
    write(tmp_path / "unix.txt", b"a\nb\n")
    text = "*** Begin Patch\r\n*** Update File: work://unix.txt\r\n-b\r\n+B\r\n*** End Patch\r\n"
    apply_resolved(tmp_path, resolve(text))
    assert (tmp_path / "unix.txt").read_bytes() == b"a\nB\n"


def test_untouched_lines_of_a_mixed_file_keep_their_own_endings(tmp_path):
    write(tmp_path / "mixed.txt", b"a\r\nb\nc\r\nd\r\n")
    apply(tmp_path, "*** Update File: work://mixed.txt", " b", "-c", "+C")
    assert (tmp_path / "mixed.txt").read_bytes() == b"a\r\nb\nC\r\nd\r\n"


def test_a_missing_final_newline_stays_missing(tmp_path):
    write(tmp_path / "f.txt", b"a\nb")
    apply(tmp_path, "*** Update File: work://f.txt", " a", "-b", "+B", "+C")
    assert (tmp_path / "f.txt").read_bytes() == b"a\nB\nC"


def test_appending_after_a_last_line_without_newline_separates_them(tmp_path):
    write(tmp_path / "f.txt", b"a\nb")
    apply(tmp_path, "*** Update File: work://f.txt", "@@", " b", "+c", "*** End of File")
    assert (tmp_path / "f.txt").read_bytes() == b"a\nb\nc"


def test_a_present_final_newline_stays_present(tmp_path):
    write(tmp_path / "f.txt", b"a\nb\n")
    apply(tmp_path, "*** Update File: work://f.txt", " a", "-b")
    assert (tmp_path / "f.txt").read_bytes() == b"a\n"


def test_a_byte_order_mark_survives_an_edit_of_the_first_line(tmp_path):
    write(tmp_path / "bom.txt", "\ufefffirst\nsecond\n".encode())
    apply(tmp_path, "*** Update File: work://bom.txt", "-first", "+FIRST")
    assert (tmp_path / "bom.txt").read_bytes() == "\ufeffFIRST\nsecond\n".encode()


def test_update_preserves_the_file_mode(tmp_path):
    script = write(tmp_path / "tool.sh", "#!/bin/sh\necho a\n")
    script.chmod(0o741)
    apply(tmp_path, "*** Update File: work://tool.sh", " #!/bin/sh", "-echo a", "+echo b")
    assert stat.S_IMODE(script.stat().st_mode) == 0o741
    assert script.read_text() == "#!/bin/sh\necho b\n"


def test_update_through_a_symbolic_link_is_refused_and_changes_nothing(tmp_path):
    target = write(tmp_path / "real.txt", "a\n")
    (tmp_path / "link.txt").symlink_to("real.txt")
    error = failure(tmp_path, "*** Update File: work://link.txt", "-a", "+b")
    assert (error.kind, error.reason) == (ErrorKind.CONTAINMENT, "is reached through a symbolic link, which mevedel does not follow")
    assert (tmp_path / "link.txt").is_symlink()
    assert target.read_text() == "a\n"


def test_a_new_file_gets_mode_0644(tmp_path):
    apply(tmp_path, "*** Add File: work://n/new.txt", "+x")
    assert stat.S_IMODE((tmp_path / "n/new.txt").stat().st_mode) == 0o644


def test_no_temporary_files_are_left_behind(tmp_path):
    write(tmp_path / "a.txt", "a\n")
    apply(tmp_path, "*** Update File: work://a.txt", "-a", "+b", "*** Add File: work://n/b.txt", "+b")
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "n"]
    assert os.listdir(tmp_path / "n") == ["b.txt"]


def test_ignoring_trailing_whitespace_is_tried_before_ignoring_all_of_it(tmp_path):
    write(tmp_path / "w.txt", "  v\nv  \n")
    apply(tmp_path, "*** Update File: work://w.txt", "-v", "+w")
    assert (tmp_path / "w.txt").read_text() == "  v\nw\n"


def test_an_anchor_repeated_as_the_first_context_line_still_applies(tmp_path):
    write(tmp_path / "m.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")
    apply(tmp_path, "*** Update File: work://m.py", "@@ def b():", " def b():", "-    return 1", "+    return 2")
    assert (tmp_path / "m.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


def test_a_unified_range_header_is_not_sought_as_a_line(tmp_path):
    write(tmp_path / "f.txt", "a\nb\n")
    apply(tmp_path, "*** Update File: work://f.txt", "@@ -1,2 +1,2 @@", " a", "-b", "+B")
    assert (tmp_path / "f.txt").read_text() == "a\nB\n"


def test_a_missing_anchor_is_a_conflict(tmp_path):
    write(tmp_path / "f.txt", "a\nb\n")
    error = failure(tmp_path, "*** Update File: work://f.txt", "@@ def gone():", "-b", "+B")
    assert (error.kind, error.reason) == (
        ErrorKind.CONFLICT,
        "hunk 1 (@@ def gone():) does not match the current content; reread and retry",
    )
