"""What a shell command wrote among the artifact store's authored files
(:mod:`mevedel_server.artifacts.authored_scan`), on both targets alike:
created, rewritten and deleted files are named; the bookkeeping and the
library never are; a linked store is refused, never followed."""

from __future__ import annotations

import pytest

from mevedel_server.artifacts.authored_scan import AuthoredFacts
from mevedel_server.targets import TargetError

STORE = ".mevedel/artifacts"


async def test_changes_name_the_authored_files_only(root, open_target):
    facts = AuthoredFacts(await open_target(root), racy_ns=0)  # no same-tick doubt here
    assert await facts.changes() == []  # no look yet: nothing to compare
    await facts.look()  # no store at all
    (root / STORE / "a1").mkdir(parents=True)
    (root / STORE / "a1" / "notes.md").write_text("one\n")
    (root / STORE / ".state" / "a1").mkdir(parents=True)
    (root / STORE / ".state" / "a1" / "meta.json").write_text("{}\n")
    (root / STORE / ".library").mkdir()
    (root / STORE / ".library" / "style.md").write_text("x\n")
    assert await facts.changes() == [f"{STORE}/a1/notes.md"]

    keep = root / STORE / "a1" / "keep.png"
    keep.write_bytes(b"png")
    await facts.look()
    assert await facts.changes() == []
    (root / STORE / "a1" / "notes.md").write_text("two, longer\n")
    keep.unlink()
    (root / STORE / ".state" / "a1" / "meta.json").write_text('{"changed": true}\n')
    assert await facts.changes() == [f"{STORE}/a1/keep.png", f"{STORE}/a1/notes.md"]


async def test_a_file_written_in_the_looks_own_tick_counts_as_changed(root, open_target):
    facts = AuthoredFacts(await open_target(root))
    (root / STORE / "a1").mkdir(parents=True)
    (root / STORE / "a1" / "notes.md").write_text("one\n")
    await facts.look()
    assert await facts.changes() == [f"{STORE}/a1/notes.md"]


async def test_a_linked_store_is_refused_and_not_followed(root, open_target, tmp_path):
    outside = tmp_path / "outside"
    (outside / "a1").mkdir(parents=True)
    (outside / "a1" / "secret.md").write_text("x\n")
    (root / ".mevedel").mkdir()
    (root / STORE).symlink_to(outside)
    facts = AuthoredFacts(await open_target(root))
    with pytest.raises(TargetError):
        await facts.look()


async def test_riding_the_file_records_walk_costs_no_program_of_its_own(root, open_target):
    """As the engine sets it up: the authored scan runs in the workspace
    file record's walk program, and what it finds is the same."""
    from mevedel_server.agents.file_state import FileStateRecord
    from mevedel_server.targets import ControlProgram, ProgramResult, ProgramTarget

    class Counting(ProgramTarget):
        def __init__(self, inner) -> None:
            self.inner, self.programs = inner, 0

        async def run(self, program: ControlProgram) -> ProgramResult:
            self.programs += 1
            return await self.inner.run(program)

    target = Counting(await open_target(root))
    record = FileStateRecord(target, watch=False)
    facts = AuthoredFacts(target, racy_ns=0)
    record.riders.append(facts)
    await record.refresh()
    before = target.programs
    await facts.look()
    assert target.programs == before  # it rode the refresh's walk
    (root / STORE / "a2").mkdir(parents=True)
    (root / STORE / "a2" / "plan.md").write_text("plan\n")
    (root / "project.txt").write_text("p\n")
    walked = target.programs
    assert [c.path for c in await record.changes()] == ["project.txt"]
    assert target.programs - walked == 2  # the walk (with the scan), the new file's snapshot
    assert await facts.changes() == [f"{STORE}/a2/plan.md"]
    assert target.programs - walked == 2
    # Without a walk before it, a look scans on its own.
    (root / STORE / "a2" / "plan.md").write_text("plan, longer\n")
    assert await facts.changes() == [f"{STORE}/a2/plan.md"]
    assert target.programs - walked == 3
