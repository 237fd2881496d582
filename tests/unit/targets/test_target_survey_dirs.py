"""SurveyDirs: every entry of a directory, each stated, listed and its
chains read from one descriptor of that directory -- on LocalTarget and on
SshTarget over a real OpenSSH server (one executor, so one behaviour). Each
entry answers exactly what a Stat, a ListDir and a ReadChain of its path
answer; symbolic links and files fail closed as they do there."""

from __future__ import annotations

import json

import pytest

from mevedel_server.targets import (
    ChainHop,
    ChainSpec,
    ControlProgram,
    InvalidTargetPath,
    ListDir,
    ReadChain,
    Stat,
    Status,
    SurveyDirs,
)

#: A head naming a manifest naming a data file, below each entry.
HOPS = (ChainHop(("head",), ""), ChainHop(("entries", "data.txt", "at"), ""))
CHAINS = (ChainSpec("heads", "gen-", 4, ".rec", HOPS), ChainSpec("heads/asks", "ask-", 2, ".json"))


def entry(root, name: str, *, data: bytes = b"the data", ask: bool = False) -> None:
    """Entry ``name`` of ``root/all``: two head generations, a manifest, the data."""
    base = root / "all" / name
    (base / "heads").mkdir(parents=True)
    (base / "pub").mkdir()
    (base / "heads" / "gen-0001.rec").write_text(json.dumps({"head": "pub/old.json"}))
    (base / "heads" / "gen-0002.rec").write_text(json.dumps({"head": "pub/m.json"}))
    (base / "pub" / "m.json").write_text(json.dumps({"entries": {"data.txt": {"at": "pub/data"}}}))
    (base / "pub" / "data").write_bytes(data)
    if ask:
        (base / "heads" / "asks").mkdir()
        (base / "heads" / "asks" / "ask-07.json").write_text("{}")


async def survey(target, **options):
    [result] = (await target.run(ControlProgram([SurveyDirs("all", CHAINS, **options)]))).results
    assert result.status is Status.OK, result
    return result.value


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "all").mkdir(parents=True)
    return r


async def test_each_entry_answers_what_its_own_operations_answer(root, open_target):
    entry(root, "b", ask=True)
    entry(root, "a")
    (root / "all" / "a" / "heads" / "gen-0003.rec").write_text("not json: the chain stops here")
    (root / "all" / "c").mkdir()  # nothing in it
    (root / "all" / "f").write_bytes(b"a file where a directory should be")
    (root / "all" / ".staging").mkdir()  # dot-named: a temporary, not surveyed
    target = await open_target(root)
    found = await survey(target)
    assert found.complete and [e.name for e in found.entries] == ["a", "b", "c", "f"]
    for surveyed in found.entries:
        path = f"all/{surveyed.name}"
        hops = [tuple(ChainHop(hop.keys, path) for hop in spec.hops) for spec in CHAINS]
        expected = (
            await target.run(
                ControlProgram(
                    [
                        Stat(path, optional=True),
                        ListDir(path, optional=True),
                        *(ReadChain(f"{path}/{spec.directory}", spec.prefix, spec.digits, spec.suffix, h, optional=True) for spec, h in zip(CHAINS, hops)),
                    ]
                )
            )
        ).results
        answered = (surveyed.stat, surveyed.listing, *surveyed.chains)
        # Reasons and values alike; only an absent result's reason may name
        # the first component found missing rather than the whole path.
        for got, want in zip(answered, expected):
            assert (got.status, got.value, got.unsafe) == (want.status, want.value, want.unsafe), surveyed.name
            if got.status is not Status.ABSENT:
                assert got.reason == want.reason
    a, b = found.entries[0], found.entries[1]
    assert [link.path for link in b.chains[0].value.links] == ["all/b/heads/gen-0002.rec", "all/b/pub/m.json", "all/b/pub/data"]
    assert b.chains[1].value.links[0].path == "all/b/heads/asks/ask-07.json"
    assert [link.path for link in a.chains[0].value.links] == ["all/a/heads/gen-0003.rec"]
    assert found.entries[3].stat.value.kind == "file" and "not a directory" in (found.entries[3].chains[0].reason or "")


async def test_symbolic_links_fail_closed(root, tmp_path, open_target):
    entry(root, "a")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "all" / "linked").symlink_to(outside)
    (root / "all" / "a" / "pub" / "data").unlink()
    (root / "all" / "a" / "pub" / "data").symlink_to(outside / "secret")
    (outside / "secret").write_bytes(b"not to be read")
    found = await survey(await open_target(root))
    a, linked = found.entries
    assert a.chains[0].value.links[-1].status is Status.FAILED and a.chains[0].value.links[-1].unsafe
    assert linked.stat.status is Status.FAILED and linked.stat.unsafe
    assert linked.listing.unsafe and all(chain.unsafe for chain in linked.chains)
    assert "symbolic link" in (linked.stat.reason or "")


async def test_a_survey_stops_at_its_limit_or_budget_and_resumes_after_its_last_entry(root, open_target):
    for name in "abcde":
        entry(root, name, data=b"x" * 1000)
    target = await open_target(root)
    first = await survey(target, limit=2)
    assert [e.name for e in first.entries] == ["a", "b"] and not first.complete
    rest = await survey(target, after="b")
    assert [e.name for e in rest.entries] == ["c", "d", "e"] and rest.complete
    # At least one entry, then no more once the bytes read reach the budget.
    spent = await survey(target, budget=1)
    assert [e.name for e in spent.entries] == ["a"] and not spent.complete


async def test_named_entries_are_surveyed_in_order_and_a_missing_one_is_absent(root, open_target):
    entry(root, "a")
    entry(root, "b")
    found = await survey(await open_target(root), names=("b", "gone", "a"))
    assert [e.name for e in found.entries] == ["b", "gone", "a"] and found.complete
    gone = found.entries[1]
    assert gone.stat.status is Status.ABSENT and all(chain.status is Status.ABSENT for chain in gone.chains)


def test_a_named_entry_is_one_component():
    with pytest.raises(InvalidTargetPath):
        SurveyDirs("all", CHAINS, names=("a/b",))
    with pytest.raises(ValueError):
        SurveyDirs("all", CHAINS, limit=0)
