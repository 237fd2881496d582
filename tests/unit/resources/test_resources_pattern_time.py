"""A Grep pattern or a glob that backtracks without end (an agent's, a
careless user's) is stopped and named, and never freezes the server while it
runs; a pattern that cannot match a line break is searched over the whole
text and finds exactly what line-by-line searching finds."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.addresses.model import AddressError, ErrorKind, Operation
from mevedel_server.resources.engine import pattern_clock
from mevedel_server.resources.engine.context import ResolverContext
from mevedel_server.resources.engine.line_search import compile_line_pattern
from mevedel_server.resources.engine.options import (
    GlobOptions,
    GrepOptions,
    validate_glob,
)
from mevedel_server.resources.engine.pattern_clock import PatternClock
from mevedel_server.resources.engine.resolver import execute, prepare


@pytest.fixture()
def context(tmp_path: Path) -> ResolverContext:
    workspace = tmp_path / "workspace"
    session = tmp_path / "sessions" / "s1"
    (workspace / ".mevedel" / "shared").mkdir(parents=True)
    session.mkdir(parents=True)
    return ResolverContext(workspace_root=workspace, session_dir=session, docs_root=tmp_path / "docs")


@pytest.fixture()
def short_budget(monkeypatch):
    monkeypatch.setattr(pattern_clock, "PATTERN_SECONDS", 1.0)


async def _while_ticking(work):
    """Run ``work`` and count how often a 10 ms ticker ran meanwhile: a
    search that held the event loop would leave it at zero or one."""
    ticks = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        try:
            return await work, ticks
        except AddressError as error:
            return error, ticks
    finally:
        done.set()
        await task


async def test_a_grep_pattern_that_backtracks_without_end_is_stopped_and_named(context, short_budget):
    shared = context.workspace_root / ".mevedel" / "shared"
    (shared / "bait.txt").write_text("a" * 48 + "!\n")
    work = execute(prepare(Operation.GREP, "work://shared/", GrepOptions(pattern="(a|aa)+$"), context))
    error, ticks = await _while_ticking(work)
    assert isinstance(error, AddressError)
    assert error.kind is ErrorKind.INVALID_OPTION and error.authored == "work://shared/"
    assert "Grep pattern '(a|aa)+$' took more than 1 s to match and was stopped" in error.reason
    assert ticks >= 20  # the loop ran all along


async def test_a_pattern_that_is_not_line_local_is_stopped_too(context, short_budget):
    # A lookahead is searched line by line, each line under the clock.
    (context.workspace_root / ".mevedel" / "shared" / "bait.txt").write_text("short\n" + "a" * 48 + "!\n")
    work = execute(prepare(Operation.GREP, "work://shared/", GrepOptions(pattern="(?=a)(a|aa)+$"), context))
    error, ticks = await _while_ticking(work)
    assert isinstance(error, AddressError) and error.kind is ErrorKind.INVALID_OPTION
    assert ticks >= 20


async def test_a_glob_with_many_stars_in_one_name_answers_and_leaves_the_loop_free(context):
    # Python's re backtracks on this pair for longer than any test runs.
    (context.workspace_root / ".mevedel" / "shared" / ("a" * 60)).write_text("x")
    pattern = "*a" * 15 + "b"
    work = execute(prepare(Operation.GLOB, "work://shared/", GlobOptions(pattern=pattern), context))
    result, ticks = await _while_ticking(work)
    assert result.matches == ()


def test_a_glob_out_of_time_names_itself_and_the_address():
    glob = validate_glob(GlobOptions(pattern="*a*b"), "work://shared/")
    spent = PatternClock(glob.label, glob.text, glob.authored, spent=10.0)
    with pytest.raises(AddressError) as caught:
        glob.matches(("xaxb",), spent)
    assert caught.value.kind is ErrorKind.INVALID_OPTION and caught.value.authored == "work://shared/"
    assert caught.value.reason.startswith("Glob pattern '*a*b' took more than")


async def test_ordinary_patterns_still_find_what_they_did(context):
    shared = context.workspace_root / ".mevedel" / "shared"
    (shared / "notes.md").write_text("alpha beta\n\nBeta gamma\nend\n")
    (shared / "a1b2c.txt").write_text("beta\n")
    grep = await execute(prepare(Operation.GREP, "work://shared/", GrepOptions(pattern=r"^beta|a$", ignore_case=True), context))
    assert [(m.address, m.line, m.column) for m in grep.matches] == [
        ("work://shared/a1b2c.txt", 1, 1),
        ("work://shared/notes.md", 1, 10),
        ("work://shared/notes.md", 3, 1),
    ]
    glob = await execute(prepare(Operation.GLOB, "work://shared/", GlobOptions(pattern="a*b*c.txt"), context))
    assert glob.matches == ("work://shared/a1b2c.txt",)


PIECES = ["a", "b", ".", r"\s", r"\S", r"\w", r"\W", r"\d", "[^a]", "[a-c]", r"\b", "^", "$", "(a|b)", "(?:ab)", "x?"]
QUANTIFIERS = ["", "*", "+", "?", "{2}", "*?"]
SPECIAL = [r"(?=b)", r"(?<=a)", r"\A", r"\Z", r"(a)\1", "(?s).", "(?m)^a", "\n", "[\n]", r"(?-i:a)"]


@st.composite
def patterns(draw):
    count = draw(st.integers(min_value=1, max_value=4))
    parts = [draw(st.sampled_from(PIECES)) + draw(st.sampled_from(QUANTIFIERS)) for _ in range(count)]
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(SPECIAL)))
    return "".join(parts)


@settings(max_examples=400, deadline=None)
@given(
    pattern=patterns(),
    lines=st.lists(st.text(alphabet="ab c1\t\r.", max_size=12), max_size=6),
    ignore_case=st.booleans(),
)
def test_the_whole_text_search_finds_what_line_by_line_search_finds(pattern, lines, ignore_case):
    try:
        expected_regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error:
        return
    expected = []
    for index, line in enumerate(lines):
        hit = expected_regex.search(line)
        if hit is not None:
            expected.append((index, hit.start()))
    compiled = compile_line_pattern(pattern, ignore_case)
    clock = PatternClock("Grep pattern", pattern, "work://")
    assert [(i, c) for _f, i, c in compiled.first_matches([lines], clock)] == expected
    # Several files searched together find each file's own matches.
    together = list(compiled.first_matches([lines, [], lines], clock))
    assert together == [(0, i, c) for i, c in expected] + [(2, i, c) for i, c in expected]


def test_only_time_spent_matching_counts_against_the_budget():
    """A Grep over a slow workspace spends most of its time reading between
    batches: that time never makes its pattern 'too slow'."""
    import time

    clock = PatternClock("Grep pattern", "x", "work://", budget=0.2)
    time.sleep(0.3)  # reading, walking: not matching
    assert clock.remaining() > 0
    clock.begin()
    spin = time.thread_time()
    while time.thread_time() - spin < 0.3:  # matching
        pass
    clock.settle()
    with pytest.raises(AddressError) as caught:
        clock.remaining()
    assert caught.value.reason.startswith("Grep pattern 'x' took more than 0.2 s to match")


@pytest.mark.parametrize("pattern", ["needle", "(?<=needle )0"], ids=["whole-text", "line-by-line"])
def test_time_the_matching_thread_does_not_run_is_not_matching(pattern):
    """A Grep with many matches on a busy server waits: for a core, and for
    the GIL after every match it released it for. On the CI machine those
    waits once added up to the whole budget and a plain ``needle`` was
    refused as a runaway pattern. Here the search runs while another thread
    keeps the interpreter busy, and the caller pauses 10 ms after each
    match (time the matching thread does not run, as when it waits for a
    core): 1 s of waiting against a 0.5 s budget, and nothing is refused."""
    import sys
    import threading
    import time

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.02)  # the busy thread keeps the GIL 20 ms at a time
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            pass

    lines = [f"needle {index:05d}" for index in range(100)]
    compiled = compile_line_pattern(pattern, False)
    assert (compiled.whole is not None) == (pattern == "needle")
    clock = PatternClock("Grep pattern", pattern, "work://", budget=0.5)
    hog = threading.Thread(target=busy)
    hog.start()
    found = []
    try:
        for match in compiled.first_matches([lines], clock):
            found.append(match)
            time.sleep(0.01)
    finally:
        stop.set()
        hog.join()
        sys.setswitchinterval(interval)
    assert len(found) == 100
    assert clock.spent < 0.5
