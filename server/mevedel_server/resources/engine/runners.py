"""What every runner shares: a runner for ``Prepared`` (``later``,
``fail``), running a program on a target with its failures turned into
address errors (``run_program``), and the error of a probe or read that did
not succeed (``refusal``) -- never naming the backing path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...addresses import AddressError, ErrorKind
from ...targets import (
    ControlProgram,
    FileRead,
    OpResult,
    ProgramResult,
    Status,
    Target,
    TargetError,
    TargetUnavailable,
)
from .containment import through_link
from .text_source import too_large

ROOT_CHANGED = "its owning root changed after the operation was prepared; prepare it again"


def later(function: Callable[..., Awaitable[object]], *args: object) -> Callable[[], Awaitable[object]]:
    """A runner for ``Prepared``: the resolver awaits a coroutine function."""

    async def run() -> object:
        return await function(*args)

    return run


def fail(error: AddressError) -> Callable[[], Awaitable[object]]:
    """A runner that reports a target problem at execution time."""

    async def run() -> object:
        raise error

    return run


async def run_program(target: Target, program: ControlProgram, authored: str) -> ProgramResult:
    """Run ``program``; a target that cannot run it is an error naming
    ``authored``."""
    try:
        return await target.run(program)
    except TargetUnavailable as error:
        raise AddressError(ErrorKind.UNAVAILABLE, authored, f"its workspace could not be reached ({error.reason})") from None
    except TargetError:
        raise AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED) from None


def root_refused(result: OpResult | FileRead) -> bool:
    """Whether the target refused its pinned root (replaced, gone, a link)."""
    return result.status is Status.FAILED and (result.reason or "").startswith("the target root ")


def refusal(result: OpResult | FileRead, authored: str, *, missing: str = "does not exist") -> AddressError:
    """The error of a probe or read of an explicit address that did not
    succeed, without the target's reason (which names the backing path)."""
    if result.status is Status.ABSENT:
        return AddressError(ErrorKind.MISSING_TARGET, authored, missing)
    if root_refused(result):
        return AddressError(ErrorKind.CONFLICT, authored, ROOT_CHANGED)
    if result.unsafe:
        return through_link(authored)
    reason = result.reason or ""
    if reason.endswith("is not a directory"):
        return AddressError(ErrorKind.MISSING_TARGET, authored, missing)
    if reason.endswith("is not a regular file"):
        return AddressError(ErrorKind.UNREADABLE, authored, "is not a regular file")
    if "Permission denied" in reason:
        return AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: permission denied")
    return AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: the storage refused it")


def bytes_of(read: FileRead, authored: str) -> bytes:
    if not read.ok:
        raise refusal(read, authored)
    if read.data is None:
        raise too_large(authored)
    return read.data
