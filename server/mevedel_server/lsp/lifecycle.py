"""The lifecycle requests: Rewind, Redo, Fork, Worktree Fork, Save As and
recovery (``mevedel/rewind/*`` ... ``mevedel/session/retryRecovery``), with
their commits also as ``workspace/executeCommand`` commands. Thin: decode,
call the folder's session service, encode. A commit's change reaches the
client as ``mevedel/session/didChange`` (the service reports it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mevedel_protocol import methods

from ..loading import OnFirstUse
from .handlers import (
    folder as _folder,
)
from .handlers import (
    register_handlers,
)
from .handlers import (
    registry as _registry,
)
from .handlers import (
    session_id as _session_id,
)
from .handlers import (
    state as _state,
)
from .workspaces import Folder

if TYPE_CHECKING:
    from mevedel_protocol.session import SessionParams

    from ..store import (
        ChildSession,
        ExternalChange,
        FileRestore,
        GitCheck,
        KnownGap,
        RecoveryOutcome,
        SessionService,
        TurnLabel,
    )
    from .server import MevedelLanguageServer

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.lifecycle")


def _target(ls: MevedelLanguageServer, params: Any, method: str) -> tuple[Folder, SessionService, str]:
    folder = _folder(ls, params.workspace_folder, method)
    return folder, _registry(ls).service(folder), _session_id(ls, folder, params.session_id, method)


def _label(label: TurnLabel) -> wire.TurnLabel:
    return wire.TurnLabel(label.turn, label.segment, label.turn_id, label.preview)


def _restore(row: FileRestore) -> wire.FileRestore:
    return wire.FileRestore(
        row.path, row.state, row.checkpoint, row.turn, row.changes, row.sha256, row.size, mode=row.mode, link_target=row.link_target,
        action=row.action, agents=list(row.agents),
    )


def _gap(gap: KnownGap) -> wire.KnownGap:
    return wire.KnownGap(gap.path, gap.turn, gap.reason)


def _external(change: ExternalChange) -> wire.ExternalChange:
    return wire.ExternalChange(change.path, change.recorded_turn)


def _git(check: GitCheck) -> wire.GitCheck:
    return wire.GitCheck(check.status, [d.path for d in check.divergent], check.detail)


def _in_place(service: SessionService, sid: str, result) -> wire.InPlaceResult:
    return wire.InPlaceResult(sid, result.committed, service.info(sid).settled_turns, list(result.written), result.warning)


def _child(ls: MevedelLanguageServer, folder: Folder, service: SessionService, source: str, child: ChildSession) -> wire.ChildResult:
    _registry(ls).make_current(folder, child.session_id)
    return wire.ChildResult(_state(ls, folder, service.info(child.session_id)), source, child.warning)


def _place(place) -> wire.WorktreePlace:
    return wire.WorktreePlace(place.name, place.branch, place.directory, place.base_commit, place.source_checkout)


# Rewind and Redo ----------------------------------------------------------------


async def prepare_rewind(ls: MevedelLanguageServer, params: wire.RewindPrepareParams) -> wire.RewindImpact:
    _, service, sid = _target(ls, params, methods.REWIND_PREPARE)
    impact = await service.history.prepare_rewind(sid, params.boundary, params.turn)
    return wire.RewindImpact(
        session_id=sid,
        boundary=impact.boundary.side.value,
        turn=impact.boundary.turn,
        kept_turns=impact.kept_turns,
        discarded=[_label(label) for label in impact.discarded],
        transcript_changes=impact.transcript_changes,
        restores=[_restore(row) for row in impact.restores],
        gaps=[_gap(gap) for gap in impact.gaps],
        externally_modified=[_external(change) for change in impact.externally_modified],
        git=_git(impact.git),
        empty=impact.empty,
        token=impact.token.text,
        agent_history=impact.agent_history,
    )


async def commit_rewind(ls: MevedelLanguageServer, params: wire.CommitParams) -> wire.InPlaceResult:
    _, service, sid = _target(ls, params, methods.REWIND_COMMIT)
    return _in_place(service, sid, await service.history.commit_rewind(sid, params.token))


async def list_redo(ls: MevedelLanguageServer, params: SessionParams) -> wire.RedoListResult:
    _, service, sid = _target(ls, params, methods.REDO_LIST)
    states = await service.history.redo_states(sid)
    return wire.RedoListResult(
        session_id=sid,
        states=[
            wire.RedoState(s.publication_id, s.turn_count, s.updated_at, _label(s.last_turn) if s.last_turn else None)
            for s in states.states
        ],
        skipped=[wire.SkippedHead(s.publication_id, s.reason) for s in states.skipped],
        current_head=states.current_head,
    )


async def prepare_redo(ls: MevedelLanguageServer, params: wire.RedoPrepareParams) -> wire.RedoImpact:
    _, service, sid = _target(ls, params, methods.REDO_PREPARE)
    impact = await service.history.prepare_redo(sid, params.publication_id)
    return wire.RedoImpact(
        session_id=sid,
        publication_id=impact.state.publication_id,
        common_turns=impact.common_turns,
        restored=[_label(label) for label in impact.restored],
        discarded=[_label(label) for label in impact.discarded],
        restores=[_restore(row) for row in impact.restores],
        gaps=[_gap(gap) for gap in impact.gaps],
        externally_modified=[_external(change) for change in impact.externally_modified],
        git=_git(impact.git),
        token=impact.token.text,
        agent_history=impact.agent_history,
    )


async def commit_redo(ls: MevedelLanguageServer, params: wire.CommitParams) -> wire.InPlaceResult:
    _, service, sid = _target(ls, params, methods.REDO_COMMIT)
    return _in_place(service, sid, await service.history.commit_redo(sid, params.token))


# Fork and Save As -------------------------------------------------------------------


async def prepare_fork(ls: MevedelLanguageServer, params: wire.ForkPrepareParams) -> wire.ForkImpact:
    _, service, sid = _target(ls, params, methods.FORK_PREPARE)
    impact = await service.history.prepare_fork(sid, params.turn)
    return wire.ForkImpact(
        session_id=sid,
        response=_label(impact.response),
        fork_point_id=impact.fork_point_id,
        turns=impact.turns,
        attached_artifacts=list(impact.attached_artifacts),
        local_files=list(impact.local_files),
        plans_note=impact.plans_note,
        token=impact.token.text,
        agent_history=impact.agent_history,
    )


async def commit_fork(ls: MevedelLanguageServer, params: wire.CommitParams) -> wire.ChildResult:
    folder, service, sid = _target(ls, params, methods.FORK_COMMIT)
    result = await service.history.commit_fork(sid, params.token)
    return _child(ls, folder, service, result.source_id, result.child)


def _variant(v) -> wire.ForkVariant:
    return wire.ForkVariant(
        v.session_id, v.role, v.display_name, v.created_at, v.is_current, v.latest_preview, v.worktree_branch, v.worktree_directory
    )


async def fork_variants(ls: MevedelLanguageServer, params: wire.ForkPrepareParams) -> wire.ForkVariantsResult:
    _, service, sid = _target(ls, params, methods.FORK_VARIANTS)
    group = await service.history.fork_variants(sid, params.turn)
    return wire.ForkVariantsResult(
        source_id=group.point.source_id,
        fork_point_id=group.point.fork_point_id,
        turn=group.point.turn,
        forks=[_variant(v) for v in group.forks],
        source=_variant(group.source) if group.source is not None else None,
    )


async def prepare_worktree_fork(ls: MevedelLanguageServer, params: wire.WorktreeForkPrepareParams) -> wire.WorktreeForkImpact:
    _, service, sid = _target(ls, params, methods.WORKTREE_FORK_PREPARE)
    impact = await service.history.prepare_worktree_fork(sid, params.turn, name=params.name, branch=params.branch)
    return wire.WorktreeForkImpact(
        session_id=sid,
        response=_label(impact.response),
        fork_point_id=impact.fork_point_id,
        turns=impact.turns,
        worktree=_place(impact.worktree),
        restores=list(impact.restores),
        unrestored=[wire.UnrestoredFile(p, r) for p, r in impact.unrestored],
        shared=list(impact.shared),
        local_files=list(impact.local_files),
        plans_note=impact.plans_note,
        token=impact.token.text,
        agent_history=impact.agent_history,
    )


async def commit_worktree_fork(ls: MevedelLanguageServer, params: wire.CommitParams) -> wire.WorktreeForkResult:
    folder, service, sid = _target(ls, params, methods.WORKTREE_FORK_COMMIT)
    result = await service.history.commit_worktree_fork(sid, params.token)
    child = result.child
    _registry(ls).make_current(folder, child.session_id)
    return wire.WorktreeForkResult(
        session=_state(ls, folder, service.info(child.session_id)),
        source_id=sid,
        worktree=_place(result.worktree),
        restored=list(result.restored),
        unrestored=[wire.UnrestoredFile(p, r) for p, r in result.unrestored],
        warning=child.warning,
    )


async def prepare_save_as(ls: MevedelLanguageServer, params: wire.SaveAsPrepareParams) -> wire.SaveAsImpact:
    _, service, sid = _target(ls, params, methods.SAVE_AS_PREPARE)
    impact = await service.history.prepare_save_as(sid, params.name)
    return wire.SaveAsImpact(
        sid, impact.name, impact.turns, impact.segments, impact.chats, impact.artifacts, impact.size, impact.token.text,
        impact.agent_history,
    )


async def commit_save_as(ls: MevedelLanguageServer, params: wire.CommitParams) -> wire.ChildResult:
    folder, service, sid = _target(ls, params, methods.SAVE_AS_COMMIT)
    return _child(ls, folder, service, sid, await service.history.commit_save_as(sid, params.token))


# Recovery -----------------------------------------------------------------------------


def _recovery(sid: str, outcome: RecoveryOutcome) -> wire.RecoveryResult:
    return wire.RecoveryResult(sid, outcome.recovery_id, outcome.resolution, list(outcome.written), list(outcome.left),
                               outcome.left_note)


async def retry_recovery(ls: MevedelLanguageServer, params: SessionParams) -> wire.RecoveryResult:
    _, service, sid = _target(ls, params, methods.SESSION_RETRY_RECOVERY)
    outcome = await service.history.retry_recovery(sid)
    return _recovery(sid, outcome)


async def abandon_recovery(ls: MevedelLanguageServer, params: SessionParams) -> wire.RecoveryResult:
    _, service, sid = _target(ls, params, methods.SESSION_ABANDON_RECOVERY)
    outcome = await service.history.abandon_recovery(sid)
    return _recovery(sid, outcome)


#: request -> (handler, command name or None); its params class is the catalog's.
HANDLERS: dict[str, tuple[Callable[..., Awaitable[Any]], str | None]] = {
    methods.REWIND_PREPARE: (prepare_rewind, None),
    methods.REWIND_COMMIT: (commit_rewind, methods.COMMAND_REWIND_COMMIT),
    methods.REDO_LIST: (list_redo, None),
    methods.REDO_PREPARE: (prepare_redo, None),
    methods.REDO_COMMIT: (commit_redo, methods.COMMAND_REDO_COMMIT),
    methods.FORK_PREPARE: (prepare_fork, None),
    methods.FORK_COMMIT: (commit_fork, methods.COMMAND_FORK_COMMIT),
    methods.FORK_VARIANTS: (fork_variants, None),
    methods.WORKTREE_FORK_PREPARE: (prepare_worktree_fork, None),
    methods.WORKTREE_FORK_COMMIT: (commit_worktree_fork, methods.COMMAND_WORKTREE_FORK_COMMIT),
    methods.SAVE_AS_PREPARE: (prepare_save_as, None),
    methods.SAVE_AS_COMMIT: (commit_save_as, methods.COMMAND_SAVE_AS_COMMIT),
    methods.SESSION_RETRY_RECOVERY: (retry_recovery, methods.COMMAND_SESSION_RETRY_RECOVERY),
    methods.SESSION_ABANDON_RECOVERY: (abandon_recovery, methods.COMMAND_SESSION_ABANDON_RECOVERY),
}


def register(ls: MevedelLanguageServer) -> None:
    register_handlers(ls, HANDLERS)
