"""Fault injection for crash and failure tests.

``FaultInjectingTarget`` wraps another target and counts every *fault point*
it executes -- each write-like operation (creates, replaces, removes,
directory creations and clock probes) and each durability
:class:`~.program.Barrier` -- whether sent alone or inside a program. At the
``fail_at``-th one it either raises :class:`InjectedFault` (``mode="error"``:
the operation failed and the caller is told, like a dropped connection) or
:class:`SimulatedCrash` (``mode="crash"``: the process died). In both cases the
operations before it in the same program have run and it has not.

``SimulatedCrash`` derives from ``BaseException`` so that no ``except
Exception`` in the code under test can swallow it: nothing after the crash
runs, no cleanup happens. After a crash the wrapper stays dead (every later
call crashes again); after an injected error it passes operations through, so
a retry on the same target can succeed. A crash at a create or replace leaves
the half-written temporary file a real crash could leave (``debris``) -- for
an in-place create (``CreateInPlace``, ``StampedCreateInPlace``) the half
under its real name, as a process dying mid-write leaves it; a
``WriteProject`` is a replace here too, and a ``StampedCreateInPlace``'s
debris is stamped with a clock reading taken in its directory then.

``power_loss=True`` makes a crash a power loss as well: every deferred create
or replace of the crashed program that no barrier had flushed yet (an
in-place create's too, stamped or not) is left torn -- cut to its first half
under its real name, the worst a filesystem may show of bytes it never
flushed. (A lost deferred removal or directory creation is not simulated:
the entry merely stays or goes as before.)
"""

from __future__ import annotations

from typing import Literal

from .clock import Clock
from .errors import TargetError
from .paths import parent_and_name
from .program import (
    SKIPPED,
    Barrier,
    ControlProgram,
    CreateExclusive,
    CreateInPlace,
    Operation,
    OpResult,
    ProgramResult,
    Replace,
    StampedCreateInPlace,
    Status,
    WriteProject,
)
from .target import ProgramTarget, Target

FaultMode = Literal["error", "crash"]


class SimulatedCrash(BaseException):
    """The process "died" before the named write. Tests treat it as death."""

    def __init__(self, index: int, op: Operation) -> None:
        super().__init__(f"simulated crash before write #{index}: {type(op).__name__} {op.path}")
        self.index = index
        self.operation = op


class InjectedFault(TargetError):
    def __init__(self, index: int, op: Operation) -> None:
        super().__init__(op.path, f"injected failure at write #{index} ({type(op).__name__})")
        self.index = index
        self.operation = op


def _is_fault_point(op: Operation) -> bool:
    return op.writes or isinstance(op, Barrier)


def _executed_points(ops: tuple[Operation, ...], result: ProgramResult) -> int:
    return sum(1 for op, r in zip(ops, result.results) if _is_fault_point(op) and r.status is not Status.SKIPPED)


#: The writes a crash leaves debris of, and a power loss tears.
_TEARABLE = (CreateExclusive, Replace, WriteProject, StampedCreateInPlace)


def _written(op: CreateExclusive | Replace | WriteProject | StampedCreateInPlace, result: OpResult) -> bytes:
    """The bytes a create or replace that ran wrote."""
    return op.content(result.value) if isinstance(op, StampedCreateInPlace) else op.data


def _unflushed(ops: tuple[Operation, ...], result: ProgramResult) -> list[tuple[Operation, bytes]]:
    """The deferred creates and replaces that ran after the last barrier
    that ran, each with the bytes it wrote."""
    lost: list[tuple[Operation, bytes]] = []
    for op, r in zip(ops, result.results):
        if isinstance(op, Barrier) and r.ok:
            lost = []
        elif isinstance(op, _TEARABLE) and op.deferred and r.ok:
            lost.append((op, _written(op, r)))
    return lost


class FaultInjectingTarget(ProgramTarget):
    def __init__(
        self,
        inner: Target,
        fail_at: int | None = None,
        mode: FaultMode = "error",
        debris: bool = True,
        power_loss: bool = False,
    ) -> None:
        self.inner = inner
        self.debris = debris
        self.power_loss = power_loss
        self.writes = 0
        self.fired = False
        self._crash: SimulatedCrash | None = None
        self._fail_at: int | None = None
        self._mode: FaultMode = mode
        self.arm(fail_at, mode)

    @property
    def crashed(self) -> bool:
        return self._crash is not None

    def arm(self, fail_at: int | None, mode: FaultMode | None = None) -> None:
        """(Re)start counting from zero; ``None`` disarms."""
        if fail_at is not None and fail_at < 1:
            raise ValueError("fail_at counts fault points from 1")
        if mode is not None:
            if mode not in ("error", "crash"):
                raise ValueError(f"unknown fault mode {mode!r}")
            self._mode = mode
        self._fail_at = fail_at
        self.writes = 0
        self.fired = False

    async def run(self, program: ControlProgram) -> ProgramResult:
        if self._crash is not None:
            raise SimulatedCrash(self._crash.index, self._crash.operation)
        ops = program.operations
        fault_index = self._fault_index(ops)
        if fault_index is None:
            result = await self.inner.run(program)
            self.writes += _executed_points(ops, result)
            return result
        prefix = ops[:fault_index]
        if prefix:
            head = await self.inner.run(ControlProgram(prefix, lock=program.lock))
        else:
            head = ProgramResult(())
        self.writes += _executed_points(prefix, head)
        if not head.completed:
            # The program stopped before reaching the faulty write.
            return ProgramResult(head.results + (SKIPPED,) * (len(ops) - fault_index), head.stopped_at)
        op = ops[fault_index]
        self.fired = True
        self.writes += 1
        if self._mode == "error":
            self._fail_at = None
            raise InjectedFault(self.writes, op)
        self._crash = SimulatedCrash(self.writes, op)
        if self.debris:
            await self._leave_debris(op)
        if self.power_loss:
            await self._tear(_unflushed(prefix, head))
        raise self._crash

    def _fault_index(self, ops: tuple[Operation, ...]) -> int | None:
        if self._fail_at is None or self.fired:
            return None
        remaining = self._fail_at - self.writes
        for index, op in enumerate(ops):
            if _is_fault_point(op):
                remaining -= 1
                if remaining == 0:
                    return index
        return None

    async def _tear(self, lost: list[tuple[Operation, bytes]]) -> None:
        if lost:
            torn = [(WriteProject if isinstance(op, WriteProject) else Replace)(op.path, data[: len(data) // 2], optional=True) for op, data in lost]
            await self.inner.run(ControlProgram(torn))

    async def _leave_debris(self, op: Operation) -> None:
        if not isinstance(op, _TEARABLE):
            return
        parent, name = parent_and_name(op.path)
        if isinstance(op, StampedCreateInPlace):
            # It never ran, so no reading was taken: take one where it would have.
            clock = (await self.inner.run(ControlProgram([Clock(parent or ".", optional=True)])))[0]
            if not clock.ok:
                return  # no directory for it to have written in
            data = op.content(clock.value)
        else:
            data = op.data
        if isinstance(op, (CreateInPlace, StampedCreateInPlace)):
            # Written under its own name: a process dying mid-write leaves
            # the half it wrote there (the failed write's removal never ran).
            torn = op.path
        else:
            torn = f"{parent}/.{name[:80]}.crash.tmp" if parent else f".{name[:80]}.crash.tmp"
        await self.inner.run(ControlProgram([CreateExclusive(torn, data[: len(data) // 2], optional=True)]))
