"""ReadChain: the newest member of a numbered family, then the files its JSON
names, hop by hop, in one operation -- on LocalTarget and on SshTarget over a
real OpenSSH server (one executor, so one behaviour). Every dereferenced path
passes the checks of any other operation path; the chain ends quietly where
there is nothing to follow."""

from __future__ import annotations

import json

import pytest

from mevedel_server.targets import (
    Chain,
    ChainHop,
    ChainLink,
    ControlProgram,
    InvalidTargetPath,
    LocalTarget,
    Read,
    ReadChain,
    Status,
    executor,
)
from mevedel_server.targets.executor import Executor, pin_root
from mevedel_server.targets.plain_form import plain_operation, program_result

HOPS = (ChainHop(("head",), "s"), ChainHop(("entries", "data.txt", "at"), "s"))



@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "s" / "heads").mkdir(parents=True)
    (r / "s" / "pub").mkdir()
    return r


def write_json(path, value) -> bytes:
    data = json.dumps(value).encode()
    path.write_bytes(data)
    return data


def chain_of(root, *, head=None, manifest=None, data=b"the data") -> dict[str, bytes]:
    """A head naming a manifest naming a data file; returns what was written."""
    written = {}
    for name, record in [("gen-0002.rec", {"head": "pub/stale.json"}), ("gen-0010.rec", head or {"head": "pub/m.json"})]:
        written[f"s/heads/{name}"] = write_json(root / "s" / "heads" / name, record)
    (root / "s" / "heads" / "gen-99999.rec").write_bytes(b"five digits: not a member")
    (root / "s" / "heads" / ".gen-0011.rec.1a2b.tmp").write_bytes(b"a temporary file")
    written["s/pub/m.json"] = write_json(root / "s" / "pub" / "m.json", manifest or {"entries": {"data.txt": {"at": "pub/data"}}})
    (root / "s" / "pub" / "data").write_bytes(data)
    written["s/pub/data"] = data
    return written


async def read_chain(target, hops=HOPS, path="s/heads") -> Chain:
    [result] = (await target.run(ControlProgram([ReadChain(path, "gen-", 4, ".rec", hops)]))).results
    assert result.status is Status.OK, result
    return result.value


async def test_a_chain_reads_the_newest_member_and_every_file_it_names(root, open_target):
    written = chain_of(root)
    chain = await read_chain(await open_target(root))
    assert chain.names == ("gen-0002.rec", "gen-0010.rec")
    assert chain.links == (
        ChainLink("s/heads/gen-0010.rec", Status.OK, written["s/heads/gen-0010.rec"]),
        ChainLink("s/pub/m.json", Status.OK, written["s/pub/m.json"]),
        ChainLink("s/pub/data", Status.OK, b"the data"),
    )


async def test_a_family_without_members_or_a_missing_directory_reads_nothing(root, open_target):
    target = await open_target(root)
    (root / "s" / "heads" / "unrelated").write_bytes(b"")
    assert await read_chain(target) == Chain((), ())
    [missing] = (await target.run(ControlProgram([ReadChain("s/gone", "gen-", 4, ".rec", HOPS, optional=True)]))).results
    assert missing.status is Status.ABSENT and missing.value is None


@pytest.mark.parametrize(
    "head",
    [
        {"other": "pub/m.json"},  # the key is absent
        {"head": None},
        {"head": 7},
        {"head": ["pub/m.json"]},
        {"head": {"at": "pub/m.json"}},
        "pub/m.json",  # not an object
    ],
)
async def test_a_chain_ends_quietly_where_the_key_path_holds_no_string(root, open_target, head):
    chain_of(root, head=head)
    chain = await read_chain(await open_target(root))
    assert [link.path for link in chain.links] == ["s/heads/gen-0010.rec"]


@pytest.mark.parametrize("raw", [b'{"head": "pub/m.json"', b"not json", b'{"head": "pub/m.json"} trailing', b"\xff\xfe", b'{"head": NaN}'])
async def test_a_chain_ends_quietly_at_bytes_that_are_not_json(root, open_target, raw):
    chain_of(root)
    (root / "s" / "heads" / "gen-0010.rec").write_bytes(raw)
    chain = await read_chain(await open_target(root))
    assert chain.links == (ChainLink("s/heads/gen-0010.rec", Status.OK, raw),)


async def test_a_chain_ends_at_a_named_file_that_is_absent(root, open_target):
    chain_of(root, head={"head": "pub/missing.json"})
    chain = await read_chain(await open_target(root))
    assert [(link.path, link.status) for link in chain.links] == [
        ("s/heads/gen-0010.rec", Status.OK),
        ("s/pub/missing.json", Status.ABSENT),
    ]
    assert chain.links[1].data is None and "does not exist" in chain.links[1].reason


@pytest.mark.parametrize("named", ["../../outside", "/etc/hostname", "pub/../pub/m.json", "pub//m.json", "./pub/m.json", "", "pub/a\u0000b"])
async def test_a_named_path_that_is_not_plain_and_relative_is_refused(root, tmp_path, open_target, named):
    (tmp_path / "outside").write_bytes(b"outside bytes")
    chain_of(root, head={"head": named})
    chain = await read_chain(await open_target(root))
    assert [link.status for link in chain.links] == [Status.OK, Status.FAILED]
    refused = chain.links[1]
    assert refused.data is None and "not a plain relative path" in refused.reason


async def test_symbolic_links_are_never_followed(root, tmp_path, open_target):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "m.json").write_bytes(b'{"entries": {}}')
    chain_of(root)
    (root / "s" / "pub" / "m.json").unlink()
    (root / "s" / "pub" / "m.json").symlink_to(tmp_path / "outside" / "m.json")
    (root / "s" / "via").symlink_to(tmp_path / "outside")
    target = await open_target(root)
    leaf = await read_chain(target)
    assert [(link.status, link.unsafe) for link in leaf.links] == [(Status.OK, False), (Status.FAILED, True)]
    assert "symbolic link" in leaf.links[1].reason and leaf.links[1].data is None
    write_json(root / "s" / "heads" / "gen-0010.rec", {"head": "via/m.json"})
    parent = await read_chain(target)
    assert [(link.status, link.unsafe) for link in parent.links] == [(Status.OK, False), (Status.FAILED, True)]
    assert str(tmp_path) not in leaf.links[1].reason + parent.links[1].reason


async def test_a_symlinked_or_odd_newest_member_is_a_failed_link(root, tmp_path, open_target):
    chain_of(root)
    (tmp_path / "outside").write_bytes(b'{"head": "pub/m.json"}')
    (root / "s" / "heads" / "gen-0011.rec").symlink_to(tmp_path / "outside")
    target = await open_target(root)
    chain = await read_chain(target)
    assert chain.names[-1] == "gen-0011.rec"
    assert [(link.path, link.status, link.unsafe) for link in chain.links] == [("s/heads/gen-0011.rec", Status.FAILED, True)]
    (root / "s" / "heads" / "gen-0011.rec").unlink()
    (root / "s" / "heads" / "gen-0011.rec").mkdir()
    chain = await read_chain(target)
    [read] = (await target.run(ControlProgram([Read("s/heads/gen-0011.rec", optional=True)]))).results
    assert [(link.status, link.unsafe, link.reason) for link in chain.links] == [(Status.FAILED, False, read.reason)]


async def test_a_symlinked_family_directory_is_refused(root, open_target):
    chain_of(root)
    (root / "linked").symlink_to(root / "s" / "heads")
    target = await open_target(root)
    [result] = (await target.run(ControlProgram([ReadChain("linked", "gen-", 4, ".rec", HOPS, optional=True)]))).results
    assert result.status is Status.FAILED and result.unsafe and result.value is None


async def test_a_chain_follows_the_json_the_files_hold_not_the_callers_idea_of_it(root, open_target):
    # A hop's base directory is where the named path starts, and a hop with
    # nothing to follow ends the chain even when hops are left.
    chain_of(root, manifest={"entries": {"data.txt": {"at": "data"}}})
    hops = (ChainHop(("head",), "s"), ChainHop(("entries", "data.txt", "at"), "s/pub"), ChainHop(("x",), "s"))
    chain = await read_chain(await open_target(root), hops)
    assert [link.path for link in chain.links] == ["s/heads/gen-0010.rec", "s/pub/m.json", "s/pub/data"]
    assert chain.links[-1].data == b"the data"


async def test_a_chain_with_no_hops_reads_the_newest_member_only(root, open_target):
    written = chain_of(root)
    chain = await read_chain(await open_target(root), ())
    assert chain.links == (ChainLink("s/heads/gen-0010.rec", Status.OK, written["s/heads/gen-0010.rec"]),)


# -- races and a missing scanner (the executor in this process) ---------------


def _racing_family(monkeypatch, heads, times: int) -> list[str]:
    """After each of the first ``times`` listings, a successor writes the
    next member and prunes the newest one listed."""
    pruned: list[str] = []
    members = executor._family_members

    def racing(names, prefix, digits, suffix):
        found = sorted(members(names, prefix, digits, suffix))
        if found and len(pruned) < times:
            newest = found[-1]
            number = int(newest[len(prefix) : len(prefix) + digits])
            write_json(heads / f"{prefix}{number + 1:0{digits}d}{suffix}", {"head": "pub/m.json"})
            (heads / newest).unlink()
            pruned.append(newest)
        return iter(found)

    monkeypatch.setattr(executor, "_family_members", racing)
    return pruned


async def test_a_newest_member_pruned_between_listing_and_read_is_listed_again(root, monkeypatch):
    chain_of(root)
    pruned = _racing_family(monkeypatch, root / "s" / "heads", 1)
    chain = await read_chain(LocalTarget(root))
    assert pruned == ["gen-0010.rec"]
    assert chain.names == ("gen-0002.rec", "gen-0011.rec")
    assert [(link.path, link.status) for link in chain.links] == [
        ("s/heads/gen-0011.rec", Status.OK),
        ("s/pub/m.json", Status.OK),
        ("s/pub/data", Status.OK),
    ]


async def test_a_newest_member_that_keeps_vanishing_ends_the_chain_absent(root, monkeypatch):
    chain_of(root)
    pruned = _racing_family(monkeypatch, root / "s" / "heads", 1000)
    chain = await read_chain(LocalTarget(root))
    assert len(pruned) == executor._NEWEST_ATTEMPTS
    [link] = chain.links
    assert link.status is Status.ABSENT and "kept vanishing" in link.reason
    assert link.path == f"s/heads/{pruned[-1]}" and chain.names[-1] == pruned[-1]


async def test_without_a_json_scanner_the_chain_stops_at_its_first_file(root, monkeypatch):
    written = chain_of(root)
    target = LocalTarget(root)
    # The executor's own JSON reader, as a remote program has it (the local
    # target reads with msgspec).
    monkeypatch.setattr(target._executor, "parse_json", executor._parse_json)
    monkeypatch.setattr(executor, "_json_scanner", None)
    chain = await read_chain(target)
    assert chain.links == (ChainLink("s/heads/gen-0010.rec", Status.OK, written["s/heads/gen-0010.rec"]),)


# -- the operation and its plain form ----------------------------------------


def test_a_chain_names_a_family_and_hops_of_key_paths_and_directories():
    with pytest.raises(ValueError):
        ReadChain("d", "p", 0, ".s")
    with pytest.raises(ValueError):
        ReadChain("d", "p/q", 3, ".s")
    with pytest.raises(TypeError):
        ReadChain("d", "p", 3, ".s", (("head",), "s"))
    with pytest.raises(ValueError):
        ChainHop((), "s")
    with pytest.raises(ValueError):
        ChainHop(("a", 1), "s")
    with pytest.raises(InvalidTargetPath):
        ChainHop(("a",), "../s")
    assert ChainHop(["a", "b"], "").keys == ("a", "b")
    op = ReadChain("d", "p", 3, ".s", [ChainHop(("a",), "s")])
    assert plain_operation(op) == ("ReadChain", "d", False, ["p", 3, ".s", [[["a"], "s"]]], False)


@pytest.mark.parametrize(
    "argument",
    [None, ["p", 3, ".s"], ["p", 3, ".s", "hops"], ["p", 3, ".s", [["a", "s"]]], ["p", 3, ".s", [[[], "s"]]], ["p", 3, ".s", [[["a"], "../s"]]]],
)
def test_the_executor_refuses_a_malformed_chain(tmp_path, argument):
    runner = Executor(str(tmp_path), pin_root(str(tmp_path)))
    status, value, reason, _unsafe = runner.perform("ReadChain", ".", argument)
    assert status == "failed" and value is None and reason


def _answer(*links, names=("gen-0001.rec",)):
    return [["ok", [list(names), [list(link) for link in links]], None, False]]


@pytest.mark.parametrize(
    "answer",
    [
        # more links than hops
        _answer(["a", "ok", b"", False], ["b", "ok", b"", False], ["c", "ok", b"", False]),
        # a link after one that failed
        _answer(["a", "absent", "gone", False], ["b", "ok", b"", False]),
        # bytes where a reason belongs and the other way round
        _answer(["a", "absent", b"gone", False]),
        _answer(["a", "ok", "text", False]),
        _answer(["a", "ok", 5, False]),
        _answer(["a", "skipped", None, False]),
        _answer(["a", "lost", "why", False]),
        _answer([7, "ok", b"", False]),
        _answer(["a", "ok", b"", False], names=[7]),
    ],
)
def test_an_answer_that_does_not_fit_the_chain_is_refused(answer):
    program = ControlProgram([ReadChain("d", "gen-", 4, ".rec", (ChainHop(("a",), "s"),))])
    with pytest.raises((ValueError, TypeError)):
        program_result(program, answer, None)


def test_a_fitting_answer_becomes_a_chain():
    program = ControlProgram([ReadChain("d", "gen-", 4, ".rec", (ChainHop(("a",), "s"),))])
    result = program_result(program, _answer(["a", "ok", b"x", False], ["s/b", "failed", "'s/b' is a symbolic link", True]), None)
    assert result[0].value == Chain(
        ("gen-0001.rec",),
        (ChainLink("a", Status.OK, b"x"), ChainLink("s/b", Status.FAILED, None, "'s/b' is a symbolic link", True)),
    )
    assert result[0].value.links[1].result().unsafe
