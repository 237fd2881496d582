"""All-or-nothing writes on a target: a step the storage refuses in the
middle of a multi-file patch rolls back what already ran (the journal's
restore program), a file changed between the read and the write refuses the
whole patch, and a file that cannot be restored is named -- and restored by
the next patch on the target."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.patch import (
    ResolvedOperation,
    apply_patch,
    parse_patch,
    recover,
)
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    Operation,
    OpResult,
    ProgramResult,
    ProgramTarget,
    Remove,
    Status,
    WriteProject,
)
from mevedel_server.targets.program import SKIPPED

JOURNAL = ".mevedel-patches"
PATCH = "\n".join(
    [
        "*** Begin Patch",
        "*** Update File: work://a.txt",
        "-a",
        "+A",
        "*** Add File: work://new/dir/b.txt",
        "+b",
        "*** Update File: work://c.txt",
        "-c",
        "+C",
        "*** Delete File: work://d.txt",
        "*** End Patch",
    ]
)


class Refusing(ProgramTarget):
    """The real target, except that the storage refuses the operations
    ``refuse`` names (with the reason it returns): the program runs up to
    the refused one, which fails, and stops there."""

    def __init__(self, inner: LocalTarget, refuse: Callable[[Operation], str | None]) -> None:
        self.inner, self.refuse, self.programs = inner, refuse, 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs += 1
        ops = program.operations
        for index, op in enumerate(ops):
            reason = self.refuse(op)
            if reason is not None and not op.optional:
                head = await self.inner.run(ControlProgram(ops[:index], lock=program.lock)) if index else ProgramResult(())
                if not head.completed:
                    return ProgramResult(head.results + (SKIPPED,) * (len(ops) - index), head.stopped_at)
                failed = OpResult(Status.FAILED, None, reason)
                return ProgramResult(head.results + (failed,) + (SKIPPED,) * (len(ops) - index - 1), index)
        return await self.inner.run(program)


def writing(name: str, reason: str = "No space left on device", kind: type = WriteProject) -> Callable[[Operation], str | None]:
    return lambda op: reason if isinstance(op, kind) and op.path.endswith(name) else None


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    for name in "acd":
        (tmp_path / f"{name}.txt").write_text(f"{name}\n")
    (tmp_path / "a.txt").chmod(0o640)
    return tmp_path


def resolved(text: str = PATCH) -> list[ResolvedOperation]:
    out = []
    for op in parse_patch(text).operations:
        move = op.move_to.removeprefix("work://") if op.move_to else None
        out.append(ResolvedOperation(op, op.target.removeprefix("work://"), move, op.target, op.move_to))
    return out


def state(root: Path) -> dict[str, tuple[bytes, int] | None]:
    return {
        str(path.relative_to(root)): ((path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) if path.is_file() else None)
        for path in sorted(root.rglob("*"))
    }


def failing(target, text: str = PATCH) -> AddressError:
    with pytest.raises(AddressError) as caught:
        asyncio.run(apply_patch(target, JOURNAL, resolved(text)))
    return caught.value


def test_a_write_failing_on_the_second_file_restores_the_first_and_removes_created_dirs(tree):
    before = state(tree)
    error = failing(Refusing(LocalTarget(tree), writing("b.txt")))
    assert (error.kind, error.authored) == (ErrorKind.UNAVAILABLE, "work://new/dir/b.txt")
    assert error.reason == "could not be written (no space left on device); no file was changed"
    assert state(tree) == before  # the journal and the new directories are gone too


def test_a_failure_at_the_last_write_undoes_every_earlier_write(tree):
    before = state(tree)
    error = failing(Refusing(LocalTarget(tree), writing("c.txt")))
    assert error.authored == "work://c.txt"
    assert state(tree) == before


def test_a_failing_delete_restores_all_the_writes(tree):
    before = state(tree)
    error = failing(Refusing(LocalTarget(tree), writing("d.txt", "Permission denied", Remove)))
    assert (error.kind, error.authored) == (ErrorKind.UNAVAILABLE, "work://d.txt")
    assert error.reason == "could not be deleted (permission denied); no file was changed"
    assert state(tree) == before


def cannot_restore_a(op: Operation) -> str | None:
    """b.txt cannot be written; then the rollback cannot rewrite a.txt either."""
    if isinstance(op, WriteProject) and op.path == "new/dir/b.txt":
        return "Input/output error"
    if isinstance(op, WriteProject) and op.path == "a.txt" and op.data == b"a\n":
        return "Input/output error"
    return None


def test_a_file_that_cannot_be_restored_is_named_and_the_next_patch_restores_it(tree):
    error = failing(Refusing(LocalTarget(tree), cannot_restore_a))
    assert error.authored == "work://new/dir/b.txt"
    assert error.reason == (
        "could not be written (input/output error); restoring work://a.txt also failed, "
        "so they may hold the patch's content"
    )
    assert (tree / "a.txt").read_text() == "A\n" and (tree / "c.txt").read_text() == "c\n"
    assert (tree / JOURNAL).is_dir()  # kept: the rollback is not finished
    # The storage works again: the next patch here first finishes the rollback.
    text = "*** Begin Patch\n*** Update File: work://c.txt\n-c\n+see\n*** End Patch\n"
    result = asyncio.run(apply_patch(LocalTarget(tree), JOURNAL, resolved(text)))
    assert result.summary() == "M work://c.txt"
    assert (tree / "a.txt").read_text() == "a\n" and stat.S_IMODE((tree / "a.txt").stat().st_mode) == 0o640
    assert not (tree / JOURNAL).exists() and not (tree / "new").exists()


class ChangesAfterTheRead(ProgramTarget):
    """The real target, with somebody else's change made just after the
    patch's first program (its read) and before its second (the write)."""

    def __init__(self, inner: LocalTarget, change: Callable[[], None]) -> None:
        self.inner, self.change, self.programs = inner, change, 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        result = await self.inner.run(program)
        self.programs += 1
        if self.programs == 1:
            self.change()
        return result


def test_a_file_changed_by_someone_else_between_read_and_write_is_a_conflict_and_is_kept(tree):
    before = state(tree)
    target = ChangesAfterTheRead(LocalTarget(tree), lambda: (tree / "c.txt").write_text("edited elsewhere\n"))
    error = failing(target)
    assert target.programs == 2
    assert (error.kind, error.authored) == (ErrorKind.CONFLICT, "work://c.txt")
    assert error.reason == "changed while the patch was being applied; reread and retry; no file was changed"
    before["c.txt"] = (b"edited elsewhere\n", before["c.txt"][1])  # type: ignore[index]
    assert state(tree) == before


def test_a_new_file_that_appears_between_read_and_write_is_not_overwritten(tree):
    def theirs() -> None:
        (tree / "new" / "dir").mkdir(parents=True)
        (tree / "new" / "dir" / "b.txt").write_text("theirs\n")

    error = failing(ChangesAfterTheRead(LocalTarget(tree), theirs))
    assert (error.kind, error.authored) == (ErrorKind.CONFLICT, "work://new/dir/b.txt")
    assert error.reason == "was created while the patch was being applied; no file was changed"
    assert (tree / "new" / "dir" / "b.txt").read_text() == "theirs\n"
    assert (tree / "a.txt").read_text() == "a\n"


def test_a_failed_move_keeps_the_source_and_removes_the_destination(tmp_path):
    (tmp_path / "old.md").write_text("keep\n")
    text = "*** Begin Patch\n*** Update File: work://old.md\n*** Move to: work://sub/new.md\n*** End Patch\n"
    error = failing(Refusing(LocalTarget(tmp_path), writing("old.md", "Read-only file system", Remove)), text)
    assert (error.authored, error.reason) == ("work://old.md", "could not be deleted (read-only file system); no file was changed")
    assert (tmp_path / "old.md").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md"]


def test_recovery_leaves_a_file_someone_changed_since(tree):
    failing(Refusing(LocalTarget(tree), cannot_restore_a))
    (tree / "a.txt").write_text("a person's edit\n")
    (outcome,) = asyncio.run(recover(LocalTarget(tree), JOURNAL))
    assert outcome.left == ["a.txt"] and not outcome.failed
    assert (tree / "a.txt").read_text() == "a person's edit\n"
    assert not (tree / JOURNAL).exists() and not (tree / "new").exists()
