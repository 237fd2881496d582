"""Control programs as values: what an operation may name and ask for is
checked when it is built, before any target sees it. (What programs do on a
target is the contract of test_target_ssh_contract.py, run against both
targets.)"""

from __future__ import annotations

import pytest

from mevedel_server.targets import (
    Barrier,
    Clock,
    ControlProgram,
    CreateExclusive,
    InvalidTargetPath,
    ListDir,
    MakeDirs,
    Read,
    Remove,
    Replace,
    Stat,
    Verify,
)
from mevedel_server.targets.program import ChainHop, NewestIs, ReadChain, ReadNewest


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a//b", "a/./b", "a/..", "x\x00y"])
def test_paths_must_be_plain_relative_paths(bad):
    with pytest.raises(InvalidTargetPath):
        Read(bad)


def test_write_operations_need_an_entry_not_the_root():
    with pytest.raises(InvalidTargetPath):
        CreateExclusive(".", b"")


@pytest.mark.parametrize("op", [Read, Stat, ListDir, Verify])
def test_only_writes_can_be_deferred(op):
    args = (None,) if op is Verify else ()
    with pytest.raises(ValueError, match="cannot be deferred"):
        op("f", *args, deferred=True)


def test_every_write_can_be_deferred():
    ops = [CreateExclusive("f", b"", deferred=True), Replace("f", b"", deferred=True), Remove("f", deferred=True)]
    ops += [MakeDirs("d", deferred=True), Clock(".", deferred=True)]
    assert all(op.deferred for op in ops)


def test_a_barrier_names_the_root_only():
    assert Barrier().path == "."
    with pytest.raises(InvalidTargetPath, match="names the target root"):
        Barrier("sub")


_CHAIN = ReadChain(".", "g-", 2, ".json", (ChainHop(("next",), "."),))


@pytest.mark.parametrize(
    ("op", "value"),
    [
        (Read("f"), 5),  # bytes(5) would be five zero bytes
        (Read("f"), "text"),
        (ReadNewest(".", "g-", 2, ".json"), ("g-01.json", 3)),
        (ReadNewest(".", "g-", 2, ".json"), (7, b"x")),
        # More of the newest member than the read asked for.
        (ReadNewest(".", "g-", 2, ".json", max_bytes=2), ("g-01.json", b"abc")),
        # A proof of the newest member that names another, or no member.
        (NewestIs(".", "g-", 2, ".json", "g-01.json"), "g-02.json"),
        (NewestIs(".", "g-", 2, ".json", "g-01.json"), None),
        (ListDir("."), ["a", 3]),
        # A chain's links: an ok link after a failed one, an ok link with
        # text or a path that is no name, a link of no known status.
        (_CHAIN, (["g-01.json"], [["g-01.json", "failed", "denied", False], ["m.json", "ok", b"{}", False]])),
        (_CHAIN, (["g-01.json"], [["g-01.json", "ok", "text", False]])),
        (_CHAIN, (["g-01.json"], [[7, "ok", b"{}", False]])),
        (_CHAIN, (["g-01.json"], [["g-01.json", "fine", b"{}", False]])),
    ],
)
def test_an_answer_of_the_wrong_type_is_refused_not_converted(op, value):
    from mevedel_server.targets.plain_form import program_result

    with pytest.raises(ValueError):
        program_result(ControlProgram([op]), [["ok", value, None, False]], None)


@pytest.mark.parametrize("value", ["g-01.json", "g-1.json", "../g-02.json", 7, b"g-02.json"])
def test_a_newest_mismatch_answers_another_member_or_none(value):
    """The name a mismatch carries is read back as a member of the family
    other than the one expected: anything else is a malformed answer."""
    from mevedel_server.targets.plain_form import program_result

    op = NewestIs(".", "g-", 2, ".json", "g-01.json")
    with pytest.raises(ValueError):
        program_result(ControlProgram([op]), [["mismatch", value, "'.' holds another", False]], 0)
    for fine in ("g-02.json", None):
        assert program_result(ControlProgram([op]), [["mismatch", fine, "'.'", False]], 0)[0].value == fine
