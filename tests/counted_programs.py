"""A target that counts the programs run through it: each is one round trip
to an SSH host, so a count is what a change must not add to (or what it
saves), the same on every machine and at any load."""

from __future__ import annotations

from mevedel_server.targets import ControlProgram, ProgramResult, ProgramTarget


class CountedPrograms(ProgramTarget):
    """``inner``, counting its programs and, by kind, their operations."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs = 0
        self.kinds: list[str] = []

    @property
    def operations(self) -> int:
        return len(self.kinds)

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs += 1
        self.kinds.extend(type(op).__name__ for op in program.operations)
        return await self.inner.run(program)
