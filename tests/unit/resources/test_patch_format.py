"""The apply_patch envelope parser: every header kind, hunks, End of File,
CRLF, and each malformed patch reported with its line and expectation."""

from __future__ import annotations

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.patch import FileOperation, Hunk, parse_patch


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


def invalid(text: str) -> AddressError:
    with pytest.raises(AddressError) as caught:
        parse_patch(text)
    assert caught.value.kind is ErrorKind.INVALID_PATCH
    return caught.value


def test_every_header_kind_keeps_the_authored_targets():
    parsed = parse_patch(
        patch(
            "*** Add File: work://notes/todo.md",
            "+line one",
            "+line two",
            "*** Update File: memory://local-mevedel/topics/python.md",
            "*** Move to: memory://local-mevedel/topics/py.md",
            "@@ def greet():",
            " context line",
            "-removed line",
            "+added line",
            "*** Delete File: work://shared/old.md",
        )
    )
    add, update, delete = parsed.operations
    assert add == FileOperation("add", "work://notes/todo.md", added_lines=("line one", "line two"), line=2)
    assert update.kind == "update"
    assert update.target == "memory://local-mevedel/topics/python.md"
    assert update.move_to == "memory://local-mevedel/topics/py.md"
    assert update.hunks == (
        Hunk("def greet():", ((" ", "context line"), ("-", "removed line"), ("+", "added line"))),
    )
    assert update.line == 5
    assert delete == FileOperation("delete", "work://shared/old.md", line=11)
    assert parsed.addresses == (
        "work://notes/todo.md",
        "memory://local-mevedel/topics/python.md",
        "memory://local-mevedel/topics/py.md",
        "work://shared/old.md",
    )


def test_targets_are_not_canonicalised():
    parsed = parse_patch(patch("*** Delete File: work://shared/%7euser/a%2Fb.md  "))
    assert parsed.operations[0].target == "work://shared/%7euser/a%2Fb.md"


def test_hunks_split_on_at_signs_and_report_old_and_new_lines():
    parsed = parse_patch(
        patch(
            "*** Update File: src/app.py",
            "@@",
            " a",
            "-b",
            "+B",
            "@@ class Greeter:",
            "-c",
            "+C",
            "+D",
        )
    )
    first, second = parsed.operations[0].hunks
    assert first.header is None and first.old_lines == ("a", "b") and first.new_lines == ("a", "B")
    assert second.header == "class Greeter:" and second.anchor == "class Greeter:"
    assert (second.removed, second.added) == (1, 2)


def test_the_first_hunk_may_omit_its_at_signs():
    parsed = parse_patch(patch("*** Update File: a.txt", " keep", "-old", "+new"))
    (hunk,) = parsed.operations[0].hunks
    assert hunk.header is None and hunk.lines == ((" ", "keep"), ("-", "old"), ("+", "new"))


def test_end_of_file_marks_the_hunk_and_ends_it():
    parsed = parse_patch(
        patch("*** Update File: a.txt", "@@", " last", "+appended", "*** End of File", "@@ top", "-x")
    )
    first, second = parsed.operations[0].hunks
    assert first.end_of_file and not second.end_of_file
    assert second.lines == (("-", "x"),)


def test_unified_range_headers_name_no_anchor_but_keep_their_function_context():
    parsed = parse_patch(
        patch("*** Update File: a.c", "@@ -1,3 +1,4 @@", "-x", "@@ -10,2 +11,2 @@ int main(void)", "-y")
    )
    first, second = parsed.operations[0].hunks
    assert first.header == "-1,3 +1,4 @@" and first.anchor is None
    assert second.anchor == "int main(void)"


def test_crlf_input_and_a_missing_trailing_newline_are_tolerated():
    text = patch("*** Update File: a.txt", "@@", " keep ", "-old", "+new").replace("\n", "\r\n").rstrip("\r\n")
    (hunk,) = parse_patch(text).operations[0].hunks
    # Trailing spaces are content; only the CR of CRLF is stripped.
    assert hunk.lines == ((" ", "keep "), ("-", "old"), ("+", "new"))


def test_surrounding_blank_lines_and_blank_separators_between_sections():
    text = "\n\n" + patch(
        "*** Add File: a.txt",
        "+a",
        "",
        "*** Update File: b.txt",
        "@@",
        "-x",
        "",
        "",
        "@@",
        "-y",
        "",
        "*** Delete File: c.txt",
    ) + "\n\n"
    add, update, delete = parse_patch(text).operations
    assert add.added_lines == ("a",)
    assert [hunk.lines for hunk in update.hunks] == [(("-", "x"),), (("-", "y"),)]
    assert delete.target == "c.txt"


def test_a_blank_line_inside_a_hunk_is_an_empty_context_line():
    (hunk,) = parse_patch(patch("*** Update File: a.txt", "@@", " a", "", "-b")).operations[0].hunks
    assert hunk.lines == ((" ", "a"), (" ", ""), ("-", "b"))


def test_a_hunk_line_that_looks_like_a_marker_is_content():
    (hunk,) = parse_patch(patch("*** Update File: a.txt", "@@", " *** End Patch", "-*** Add File: x")).operations[
        0
    ].hunks
    assert hunk.lines == ((" ", "*** End Patch"), ("-", "*** Add File: x"))


def test_add_with_no_lines_creates_an_empty_file_and_move_alone_is_a_rename():
    text = patch("*** Add File: empty.txt", "*** Update File: a.txt", "*** Move to: b.txt")
    add, update = parse_patch(text).operations
    assert add.added_lines == ()
    assert update.move_to == "b.txt" and update.hunks == ()


@pytest.mark.parametrize(
    ("text", "authored", "reason"),
    [
        ("", "patch", "the patch is empty; expected '*** Begin Patch'"),
        ("*** Add File: a\n+x\n*** End Patch\n", "patch", "line 1: expected '*** Begin Patch', got '*** Add File: a'"),
        (
            "*** Begin Patch\n*** Add File: a\n+x\n",
            "patch",
            "line 3: expected '*** End Patch' as the last line, got '+x'",
        ),
        ("*** Begin Patch\n", "patch", "line 1: expected '*** End Patch' as the last line, got '*** Begin Patch'"),
        (
            patch(),
            "patch",
            "line 2: the patch changes no file; expected '*** Add File: ', '*** Update File: ', "
            "'*** Delete File: ' or '*** End Patch'",
        ),
        (
            patch("*** Add File: a.txt", "+x", "*** Frobnicate File: b"),
            "patch",
            "line 4: expected a file header ('*** Add File: ', '*** Update File: ', '*** Delete File: ' "
            "or '*** End Patch'), got '*** Frobnicate File: b'",
        ),
        (
            patch("*** Update File: a.txt", "@@", " a", "foo"),
            "a.txt",
            "line 5: expected a hunk line starting with ' ', '-' or '+', got 'foo'",
        ),
        (
            patch("*** Add File: a.txt", "+x", "y"),
            "a.txt",
            "line 4: expected an added line starting with '+' or the next file header, got 'y'",
        ),
        (
            patch("*** Update File: a.txt", "*** Delete File: b.txt"),
            "a.txt",
            "line 3: a.txt has no hunks; expected a line starting with '@@', got '*** Delete File: b.txt'",
        ),
        (
            patch("*** Update File: a.txt", "nonsense"),
            "a.txt",
            "line 3: expected a hunk starting with '@@', got 'nonsense'",
        ),
        (patch("*** Update File: a.txt", "@@", "@@", "-x"), "a.txt", "line 3: hunk 1 of a.txt has no lines"),
        (patch("*** Add File:   "), "patch", "line 2: '*** Add File:' needs a path"),
        (
            patch("*** Delete File: a", "*** Move to: b"),
            "patch",
            "line 3: '*** Move to:' must directly follow an '*** Update File:' header",
        ),
        (
            patch("*** Update File: a.txt", "@@", "-x", "*** End of File please"),
            "a.txt",
            "line 5: expected '*** End of File', got '*** End of File please'",
        ),
        (
            patch("*** Delete File: a", "*** End Patch", "*** Delete File: b"),
            "patch",
            "line 3: '*** End Patch' must be the last line; one envelope per patch",
        ),
        (
            patch("*** Delete File: work://a.md", "*** Add File: work://a.md", "+x"),
            "work://a.md",
            "line 3: work://a.md is already changed at line 2; one patch may touch each file once",
        ),
        (
            patch("*** Update File: a", "*** Move to: b", "*** Add File: b"),
            "b",
            "line 4: b is already changed at line 2; one patch may touch each file once",
        ),
    ],
)
def test_malformed_patches_name_the_line_and_the_expectation(text, authored, reason):
    error = invalid(text)
    assert (error.authored, error.reason) == (authored, reason)


def test_line_numbers_count_leading_blank_lines_and_crlf_lines():
    error = invalid(("\n" + patch("*** Update File: a.txt", "@@", "bad")).replace("\n", "\r\n"))
    assert error.reason.startswith("line 5: ")


def test_a_lone_surrogate_in_a_path_or_a_line_is_refused_naming_its_line():
    # An agent's JSON can carry "\udcff"; no file name or text holds it.
    named = invalid(patch("*** Add File: bad\udcff.txt", "+x"))
    assert named.reason.startswith("line 2:") and "\\udcff" in named.reason and "not valid Unicode" in named.reason
    text = invalid(patch("*** Add File: ok.txt", "+fine", "+bad \ud800 text"))
    assert text.reason.startswith("line 4:") and "\\ud800" in text.reason
    assert str(text).encode("utf-8")  # the refusal itself travels as UTF-8
