"""The ``Target`` seam: where durable bytes live.

Every durable operation of the store goes through a ``Target``. A target's one
primitive is :meth:`Target.run`, which carries a whole control program in one
round trip; the single-operation methods are one-operation programs, so a
backend (local, SSH, fault-injecting) only implements ``run``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .errors import (
    ROOT_REPLACED,
    PathAbsentError,
    PathConflictError,
    RootReplacedError,
    TargetError,
    TargetOperationError,
    UnsafePathError,
)
from .program import (
    ControlProgram,
    CreateExclusive,
    FileStat,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    ProgramResult,
    Read,
    Remove,
    Replace,
    Stat,
    Status,
)


@runtime_checkable
class Target(Protocol):
    async def run(self, program: ControlProgram) -> ProgramResult: ...

    async def read(self, path: str) -> bytes: ...

    async def create_exclusive(self, path: str, data: bytes) -> None: ...

    async def replace_atomic(self, path: str, data: bytes) -> None: ...

    async def list_dir(self, path: str) -> list[str]: ...

    async def stat(self, path: str) -> FileStat: ...

    async def remove(self, path: str) -> None: ...

    async def make_dirs(self, path: str, exist_ok: bool = True) -> None: ...


def raise_for_result(op: Operation, result: OpResult) -> None:
    """Turn a non-ok single-operation result into the matching exception."""
    if result.status is Status.OK:
        return
    if result.status is Status.ABSENT:
        raise PathAbsentError(op.path, "does not exist")
    if result.status is Status.CONFLICT:
        raise PathConflictError(op.path, "already exists")
    if result.status is Status.FAILED and result.unsafe:
        if (result.reason or "").startswith(ROOT_REPLACED):
            raise RootReplacedError(op.path, result.reason or ROOT_REPLACED)
        raise UnsafePathError(op.path, result.reason or "unsafe path")
    if result.status is Status.FAILED:
        raise TargetOperationError(op.path, result.reason or "operation failed")
    raise TargetError(op.path, f"{type(op).__name__} reported {result.status.value}")


class ProgramTarget:
    """The single-operation methods of :class:`Target`, built on ``run``."""

    async def run(self, program: ControlProgram) -> ProgramResult:  # pragma: no cover
        raise NotImplementedError

    async def _one(self, op: Operation) -> OpResult:
        return (await self.run(ControlProgram([op])))[0]

    async def read(self, path: str) -> bytes:
        op = Read(path)
        result = await self._one(op)
        raise_for_result(op, result)
        return result.value

    async def create_exclusive(self, path: str, data: bytes) -> None:
        op = CreateExclusive(path, bytes(data))
        raise_for_result(op, await self._one(op))

    async def replace_atomic(self, path: str, data: bytes) -> None:
        op = Replace(path, bytes(data))
        raise_for_result(op, await self._one(op))

    async def list_dir(self, path: str) -> list[str]:
        op = ListDir(path)
        result = await self._one(op)
        raise_for_result(op, result)
        return list(result.value)

    async def stat(self, path: str) -> FileStat:
        op = Stat(path)
        result = await self._one(op)
        raise_for_result(op, result)
        return result.value

    async def remove(self, path: str) -> None:
        op = Remove(path)
        raise_for_result(op, await self._one(op))

    async def make_dirs(self, path: str, exist_ok: bool = True) -> None:
        op = MakeDirs(path)
        result = await self._one(op)
        if exist_ok and result.status is Status.CONFLICT:
            return
        raise_for_result(op, result)
