"""The Read projection: line numbering, paging, out-of-range retries and
char_offset paging of long lines."""

from __future__ import annotations

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.engine.options import ReadOptions
from mevedel_server.resources.engine.projection import page_lines, split_lines

ADDRESS = "work://notes.md"


def page(lines: list[str], **options: int):
    return page_lines(lines, ReadOptions(**options), ADDRESS, ADDRESS, "file")


def test_split_lines_uses_newlines_only_and_drops_carriage_returns():
    assert split_lines("a\r\nb\x0cc\nlast\n") == ["a", "b\x0cc", "last"]
    assert split_lines("no newline") == ["no newline"]
    assert split_lines("") == []
    assert split_lines("\n") == [""]


def test_lines_are_numbered_right_aligned_with_a_tab():
    result = page(["alpha", "beta"])
    assert result.text == "     1\talpha\n     2\tbeta"
    assert (result.start_line, result.end_line, result.total_lines) == (1, 2, 2)
    assert result.next_offset is None
    assert result.notice is None


def test_a_page_reports_the_next_offset():
    result = page([f"line {n}" for n in range(1, 11)], offset=3, limit=4)
    assert result.text.splitlines()[0] == "     3\tline 3"
    assert (result.start_line, result.end_line, result.next_offset) == (3, 6, 7)
    assert "Read work://notes.md offset=7" in (result.notice or "")


def test_offset_past_the_end_names_bounds_and_an_exact_retry():
    with pytest.raises(AddressError) as caught:
        page([f"{n}" for n in range(42)], offset=500)
    assert caught.value.kind is ErrorKind.OUT_OF_RANGE
    assert caught.value.reason == (
        "offset 500 is past the last line (1-42); retry Read work://notes.md offset=1 limit=42"
    )


def test_the_retry_is_capped_at_the_requested_page_width():
    with pytest.raises(AddressError) as caught:
        page([f"{n}" for n in range(100)], offset=101, limit=30)
    assert caught.value.reason.endswith("retry Read work://notes.md offset=71 limit=30")
    # And the suggested retry really is the last page.
    last = page([f"{n}" for n in range(100)], offset=71, limit=30)
    assert last.end_line == 100 and last.next_offset is None


def test_empty_text_is_a_successful_empty_result_at_any_offset():
    result = page([], offset=9)
    assert result.kind == "empty"
    assert result.text == "" and result.total_lines == 0 and result.next_offset is None


def test_long_lines_are_cut_and_report_their_continuation():
    long_line = "x" * 25
    result = page(["short", long_line], max_line_chars=10)
    assert result.text.splitlines()[1] == "     2\t" + "x" * 10
    assert result.truncated_lines == ((2, 10),)
    assert "Read work://notes.md offset=2 char_offset=10" in (result.notice or "")


def test_char_offset_selects_exactly_one_line_and_counts_characters():
    line = "é" * 7 + "ü" * 7  # multibyte: offsets count decoded characters
    first = page(["before", line, "after"], offset=2, char_offset=5, max_line_chars=4)
    assert first.text == "     2\t" + "éé" + "üü"
    assert (first.start_line, first.end_line) == (2, 2)
    assert first.truncated_lines == ((2, 9),)
    assert first.next_offset == 3
    rest = page(["before", line, "after"], offset=2, char_offset=9, max_line_chars=4)
    assert rest.text == "     2\t" + "ü" * 4
    final = page(["before", line, "after"], offset=2, char_offset=13, max_line_chars=4)
    assert final.text == "     2\tü" and final.truncated_lines == ()


def test_char_offset_past_the_line_end_is_out_of_range_with_a_retry():
    with pytest.raises(AddressError) as caught:
        page(["a" * 30], offset=1, char_offset=30, max_line_chars=10)
    assert caught.value.kind is ErrorKind.OUT_OF_RANGE
    assert caught.value.reason.endswith("retry Read work://notes.md offset=1 char_offset=20")


def test_plain_text_drops_only_the_number_prefix():
    result = page(["a\tb", "", "c"])
    assert result.plain_text == "a\tb\n\nc"
    assert page([]).plain_text == ""
