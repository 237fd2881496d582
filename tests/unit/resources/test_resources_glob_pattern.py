"""Glob patterns over logical relative paths."""

from __future__ import annotations

import pytest

from mevedel_server.resources.engine.glob_pattern import compile_glob


def matches(pattern: str, path: str, *, anywhere: bool = False) -> bool:
    return compile_glob(pattern, anywhere=anywhere).matches(tuple(path.split("/")))


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.md", "a.md", True),
        ("*.md", "docs/a.md", False),
        ("**/*.md", "a.md", True),
        ("**/*.md", "docs/deep/a.md", True),
        ("docs/**", "docs/x/y", True),
        ("docs/**", "docs", False),
        ("a/**/b.txt", "a/b.txt", True),
        ("a/**/b.txt", "a/x/y/b.txt", True),
        ("?.log", "1.log", True),
        ("?.log", "12.log", False),
        ("[ab].txt", "a.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("*.{md,txt}", "x.txt", True),
        ("*.{md,txt}", "x.py", False),
        ("[unclosed", "[unclosed", True),
        ("executions/*.log", "executions/run.log", True),
    ],
)
def test_pattern_matching(pattern: str, path: str, expected: bool):
    assert matches(pattern, path) is expected


def test_a_grep_glob_without_a_slash_matches_the_name_at_any_depth():
    assert matches("*.py", "pkg/mod/x.py", anywhere=True)
    assert not matches("pkg/*.py", "pkg/mod/x.py", anywhere=True)


@pytest.mark.parametrize("pattern", ["", "/abs/*", "../x", "a/../b", "a//b"])
def test_patterns_that_leave_the_operand_are_refused(pattern: str):
    with pytest.raises(ValueError):
        compile_glob(pattern)
