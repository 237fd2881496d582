"""ApplyPatch through the resolver: parse the envelope, resolve every target
to a contained backing file, and apply them all or none at execution.

Only explicit files below work:// (either scope) and memory://ROOT-KEY/PATH
are writable. Every other address, a traversal or a containment failure
stops ``prepare`` before anything is touched; an absent owner (no session,
no workspace, an unconfigured memory key) is reported by ``execute``, still
before any file is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..addresses import parse_address
from ..addresses.model import Address, AddressError, ErrorKind, Family, Operation
from . import memory, work
from .attempt import Attempt, AuthorityFacts
from .containment import Contained
from .context import ResolverContext
from .options import PatchOptions
from .patch import FileOperation, PatchResult, ResolvedOperation, apply_file_operations, parse_patch

_OWNER_KINDS = (ErrorKind.OWNER_MISSING, ErrorKind.UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class _Target:
    address: Address
    contained: Contained | None
    deferred: AddressError | None


def _resolve(text: str, context: ResolverContext) -> _Target:
    address = parse_address(text)
    address.require(Operation.APPLY_PATCH)
    writable: Callable[[Address, ResolverContext], Contained]
    if address.family is Family.WORK:
        writable = work.writable
    elif address.family is Family.MEMORY:
        writable = memory.writable
    else:  # the matrix allows ApplyPatch nowhere else; keep that true here too
        raise AddressError(ErrorKind.UNSUPPORTED_OPERATION, text, f"ApplyPatch is not supported for {address.canonical}")
    try:
        return _Target(address, writable(address, context), None)
    except AddressError as error:
        if error.kind in _OWNER_KINDS:
            return _Target(address, None, error)
        raise


def _facts(target: _Target) -> AuthorityFacts:
    address = target.address
    return AuthorityFacts(
        operation=Operation.APPLY_PATCH,
        authored=address.authored,
        canonical=address.canonical,
        family=address.family,
        locator_class=address.locator_class,
        writes=True,
        backing="file",
    )


def _checked(target: _Target) -> Path:
    """The backing path, once its owner exists and its root has not moved."""
    if target.deferred is not None:
        raise target.deferred
    assert target.contained is not None
    target.contained.verify(target.address.authored)
    return target.contained.path


def prepare_patch(patch_text: str, options: object, context: ResolverContext) -> Attempt:
    if options is not None and not isinstance(options, PatchOptions):
        raise AddressError(ErrorKind.INTERNAL, "ApplyPatch", f"ApplyPatch was called with {type(options).__name__}")
    patch = parse_patch(patch_text)
    if context.remote_workspace and context.store_target is not None:
        from . import remote_patch

        if remote_patch.names_remote_files(patch.operations):
            return _prepare_remote(patch.operations, context)
    planned: list[tuple[FileOperation, _Target, _Target | None]] = []
    for operation in patch.operations:
        target = _resolve(operation.target, context)
        destination = None if operation.move_to is None else _resolve(operation.move_to, context)
        planned.append((operation, target, destination))
    facts = tuple(
        _facts(target) for _op, first, second in planned for target in (first, second) if target is not None
    )

    def run() -> PatchResult:
        # Every target is checked before the applier touches any file.
        resolved = [
            ResolvedOperation(
                operation=operation,
                backing=_checked(target),
                move_backing=None if destination is None else _checked(destination),
                display=target.address.authored,
                move_display=None if destination is None else destination.address.authored,
            )
            for operation, target, destination in planned
        ]
        return apply_file_operations(resolved)

    return Attempt(Operation.APPLY_PATCH, facts, run)


def _prepare_remote(operations: tuple[FileOperation, ...], context: ResolverContext) -> Attempt:
    """A patch of work:// files on an SSH workspace (see :mod:`.remote_patch`)."""
    from . import remote_patch

    assert context.store_target is not None
    planned = []
    for operation in operations:
        first = remote_patch.resolve(operation.target, context)
        second = None if operation.move_to is None else remote_patch.resolve(operation.move_to, context)
        planned.append((operation, first, second))
    facts = tuple(
        _facts(_Target(target.address, None, None)) for _op, first, second in planned for target in (first, second) if target is not None
    )
    return Attempt(Operation.APPLY_PATCH, facts, remote_patch.runner(planned, context.store_target))
