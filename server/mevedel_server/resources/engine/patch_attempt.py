"""ApplyPatch through the resolver: parse the envelope, resolve every target
to a place and a path there, and apply them all or none at execution, as
one journalled transaction on that place's target (:mod:`.patch`).

Only explicit files below work:// (either scope), memory://ROOT-KEY/PATH
and plain project paths (:mod:`.project`; one patch may mix them with
work:// files, all on the workspace's target) are writable. Every other address, a traversal or a containment failure
stops ``prepare`` before anything is touched, and so does a patch whose
files live in two places (the workspace and a memory root of its own: one
transaction has one target). An absent owner (no session, no workspace, an
unconfigured memory key) and a session this client may not write
(:mod:`.authority`) are reported by ``execute``, still before any file is
read or written. A project file, like a session's work:// file, is written
only for a session this client holds open and writable.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

from ...addresses import (
    Address,
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
    parse_address,
)
from ..families import memory, project, work
from ..patch import (
    FileOperation,
    PatchResult,
    ResolvedOperation,
    apply_patch,
    parse_patch,
)
from .attempt import Attempt, AuthorityFacts
from .authority import require_writable_session
from .context import ResolverContext
from .options import PatchOptions
from .places import SHARED_DIR, Place, Places
from .runners import later

_log = logging.getLogger(__name__)

_OWNER_KINDS = (ErrorKind.OWNER_MISSING, ErrorKind.UNAVAILABLE)


@dataclass(frozen=True)
class _Target:
    #: None for a plain project path (``project_path`` names it).
    address: Address | None
    place: Place | None
    parts: tuple[str, ...] = ()
    deferred: AddressError | None = None
    authored: str = ""
    project_path: str | None = None

    @property
    def session_scope(self) -> bool:
        return self.address is not None and self.address.family is Family.WORK and self.address.scope == "session"

    @property
    def needs_session(self) -> bool:
        """Whether writing it needs a session this client holds writable."""
        return self.session_scope or self.project_path is not None


def _resolve(text: str, places: Places) -> _Target:
    if project.is_project_path(text):
        try:
            place, parts, relative = project.writable(text, places)
        except AddressError as error:
            if error.kind in _OWNER_KINDS:
                return _Target(None, None, deferred=error, authored=text, project_path=text)
            raise
        return _Target(None, place, parts, authored=text, project_path=relative)
    address = parse_address(text)
    address.require(Operation.APPLY_PATCH)
    if address.family is Family.WORK:
        writable = work.writable
    elif address.family is Family.MEMORY:
        writable = memory.writable
    else:  # the matrix allows ApplyPatch nowhere else; keep that true here too
        raise AddressError(ErrorKind.UNSUPPORTED_OPERATION, text, f"ApplyPatch is not supported for {address.canonical}")
    try:
        place, parts = writable(address, places)
    except AddressError as error:
        if error.kind in _OWNER_KINDS:
            return _Target(address, None, deferred=error, authored=text)
        raise
    return _Target(address, place, parts, authored=text)


def _facts(target: _Target) -> AuthorityFacts:
    address = target.address
    if address is None:
        return AuthorityFacts(
            operation=Operation.APPLY_PATCH,
            authored=target.authored,
            canonical=target.project_path or target.authored,
            family=None,
            locator_class=LocatorClass.EXACT,
            writes=True,
            backing="file",
            project_path=target.project_path,
        )
    return AuthorityFacts(
        operation=Operation.APPLY_PATCH,
        authored=address.authored,
        canonical=address.canonical,
        family=address.family,
        locator_class=address.locator_class,
        writes=True,
        backing="file",
    )


def _one_place(targets: list[_Target]) -> None:
    """Every resolved target writes through the same target (one transaction)."""
    first: _Target | None = None
    for target in targets:
        if target.place is None:
            continue
        where = target.place.writable()
        if where is None:
            continue
        if first is None:
            first = target
            continue
        there = first.place.writable()  # type: ignore[union-attr]
        if there is not None and there.target is not where.target:
            raise AddressError(
                ErrorKind.UNSUPPORTED_OPERATION,
                target.authored,
                f"is stored apart from {first.authored}: one patch changes the files of one place "
                "(the workspace, or one memory root outside it); apply this change in a patch of its own",
            )


def prepare_patch(patch_text: str, options: object, context: ResolverContext) -> Attempt:
    if options is not None and not isinstance(options, PatchOptions):
        raise AddressError(ErrorKind.INTERNAL, "ApplyPatch", f"ApplyPatch was called with {type(options).__name__}")
    patch = parse_patch(patch_text)
    places = Places(context)
    planned: list[tuple[FileOperation, _Target, _Target | None]] = []
    for operation in patch.operations:
        target = _resolve(operation.target, places)
        destination = None if operation.move_to is None else _resolve(operation.move_to, places)
        planned.append((operation, target, destination))
    targets = [target for _op, first, second in planned for target in (first, second) if target is not None]
    _one_place(targets)
    facts = tuple(_facts(target) for target in targets)
    return Attempt(Operation.APPLY_PATCH, facts, later(_run, planned, targets, context))


async def _run(planned: list[tuple[FileOperation, _Target, _Target | None]], targets: list[_Target], context: ResolverContext) -> PatchResult:
    # Every owner and the session's authority are checked before any I/O.
    for target in targets:
        if target.deferred is not None:
            raise target.deferred
    for target in targets:
        if target.needs_session:
            require_writable_session(context, target.authored, project=not target.session_scope)
            break
    where = _where(targets)
    resolved = [
        ResolvedOperation(
            operation=operation,
            path=_path(first, where),
            move_path=None if second is None else _path(second, where),
            display=first.authored,
            move_display=None if second is None else second.authored,
            name=_name(first),
            move_name=None if second is None else _name(second),
        )
        for operation, first, second in planned
    ]
    assert where.target is not None
    result = await apply_patch(where.target, where.journal, resolved)
    shared = next((target.place.writable() for target in targets if _shared(target) and target.place is not None), None)
    if shared is not None and shared.root == SHARED_DIR:  # below the workspace's own root
        await _shared_kept_out_of_git(shared.target)
    return result


def _shared(target: _Target) -> bool:
    return target.address is not None and target.address.canonical.startswith("work://shared/")


#: Targets whose ``.git/info/exclude`` this process has seen to: once each.
_EXCLUDES_SEEN: weakref.WeakSet = weakref.WeakSet()


async def _shared_kept_out_of_git(target) -> None:
    """``work://shared`` files are working material, never the project's
    (the spec: not tracked in Git): a write there with no session open --
    ``mevedel apply-patch``, ``mevedel mcp`` -- adds the generated excludes
    a session's start adds, once a process. Best effort: the write stands
    whatever this finds."""
    if target in _EXCLUDES_SEEN:
        return
    _EXCLUDES_SEEN.add(target)
    from ...store import ensure_generated_excludes

    try:
        await ensure_generated_excludes(target)
    except Exception as error:  # the exclude file is the user's: never fail the write for it
        _log.info("git excludes not updated after a work://shared write: %s", error)


def _where(targets: list[_Target]) -> Place:
    first = targets[0]
    assert first.place is not None
    first.place.require(first.authored)
    where = first.place.writable()
    if where is None:
        raise AddressError(ErrorKind.UNAVAILABLE, first.authored, "its root cannot be created here")
    return where


def _name(target: _Target) -> str:
    """What a result calls the file: its workspace-relative path, or its
    canonical address (one name for every spelling of it)."""
    if target.address is None:
        return target.project_path or target.authored
    return target.address.canonical


def _path(target: _Target, where: Place) -> str:
    assert target.place is not None
    target.place.require(target.authored)
    place = target.place.writable()
    assert place is not None and place.target is where.target
    return place.path(target.parts)
