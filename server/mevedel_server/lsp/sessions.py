"""The session and turn requests (``mevedel/session/*``, ``mevedel/turn/*``)
and their ``workspace/executeCommand`` commands. Each is thin: decode params,
find the folder's session service, call it, encode the result. Store
refusals become ResponseErrors whose ``data.kind`` is the service's stable
kind; a takeover of an expired foreign lease, and binding a session made in
another workspace, are asked through ``window/showMessageRequest``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from mevedel_protocol import methods

from .. import store
from ..loading import OnFirstUse
from .errors import failure
from .handlers import (
    CANCEL,
    TAKE_OVER,
    TRANSCRIPT,
    confirm_identity,
    confirm_takeover,
    register_handlers,
    start_session,
    transcript_uri,
)
from .handlers import (
    folder as _folder,
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
from .session_registry import SessionRegistry

if TYPE_CHECKING:
    from ..store import (
        DiffSide,
        PathDiff,
        SaveResult,
        SegmentRotation,
        SessionService,
        TurnDetail,
        TurnSummary,
    )
    from .server import MevedelLanguageServer
    from .workspaces import Folder

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.session")

__all__ = ["CANCEL", "HANDLERS", "TAKE_OVER", "TRANSCRIPT", "register", "transcript_uri"]


#: ``mevedel/turn/abort``'s note when the prompt it stopped had no turn yet.
PROMPT_ABORTED_NOTE = "the prompt was aborted while its agent started: no turn began and nothing reached the agent"


def _saved(result: SaveResult, turn: int | None = None) -> wire.SaveResult:
    return wire.SaveResult(result.session_id, result.committed, result.materialized, turn, result.note)


def _summary(summary: TurnSummary) -> wire.TurnSummary:
    return wire.TurnSummary(
        turn=summary.turn,
        turn_id=summary.turn_id,
        segment=summary.segment,
        prompt=summary.preview,
        state=summary.state,
        began_at=summary.began_at,
        tool_calls=summary.tool_calls,
        reminder=summary.reminder,
        settled_at=summary.settled_at,
        reason=summary.reason,
        agent=summary.agent,
        stop_reason=summary.stop_reason,
    )


def _detail(session_id: str, detail: TurnDetail) -> wire.TurnShowResult:
    items = [
        wire.TurnItem(
            kind=item.kind,
            text=item.text,
            call_id=item.call_id,
            name=item.name,
            arguments=item.arguments,
            output=item.output,
            is_error=item.is_error,
            mail_id=item.mail_id,
            sender=item.sender,
            tool_kind=item.tool_kind,
            outcome=item.outcome,
            reason=item.reason,
            parent_call_id=item.parent_call_id,
        )
        for item in detail.items
    ]
    return wire.TurnShowResult(session_id, _summary(detail.summary), detail.prompt, items, detail.markdown)


# Handlers (params already decoded) -------------------------------------------------


async def list_sessions(ls: MevedelLanguageServer, params: wire.SessionListParams) -> wire.SessionListResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_LIST)
    listing = await _registry(ls).service(folder).sessions.list()
    hidden = await ls.artifacts.of(folder).hidden_sessions(listing.rows)  # type: ignore[attr-defined]
    current = ls.current_session(folder)
    sessions = [
        wire.SessionListEntry(
            session_id=row.session_id,
            display_name=row.display_name,
            action=row.action.value,
            turns=row.turn_count,
            updated_at=row.updated_at,
            lease=row.standing.value,
            published=row.published,
            current=row.session_id == current,
            latest_prompt=row.latest_preview,
            holder_host=row.holder_host,
            recovery_pending=row.recovery_pending,
        )
        for row in listing.rows
        if row.session_id not in hidden
    ]
    inspect = [
        wire.InspectEntry(row.name, row.subject.value, row.reason, row.kind.value if row.kind else None)
        for row in listing.inspect_rows
    ]
    continuable = next(
        (entry.session_id for entry in sessions
         if entry.action in (store.SessionAction.RESUME.value, store.SessionAction.SWITCH.value) and entry.turns > 0 and not entry.recovery_pending),
        None,
    )
    return wire.SessionListResult(sessions, inspect, continuable)


async def create_session(ls: MevedelLanguageServer, params: wire.SessionCreateParams) -> wire.SessionState:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CREATE)
    info = await start_session(ls, _registry(ls).service(folder), methods.SESSION_CREATE, params.name)
    _registry(ls).make_current(folder, info.session_id)
    return _state(ls, folder, info)


async def open_session(ls: MevedelLanguageServer, params: wire.SessionOpenParams) -> wire.SessionOpenResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_OPEN)
    service = _registry(ls).service(folder)
    mode, takeover, identity = params.mode, params.confirm_takeover, params.confirm_identity
    while True:  # each question at most once: takeover, then identity
        try:
            opened = await service.sessions.open(params.session_id, mode, confirm_takeover=takeover, confirm_identity=identity)
            break
        except store.TakeoverNeedsConfirmation as asked:
            if takeover or not await confirm_takeover(ls, asked):
                raise failure("takeover-declined", asked.session_id, f"{asked.said}; the takeover was not confirmed") from None
            mode, takeover = "takeover", True
        except store.IdentityNeedsConfirmation as asked:
            if identity or not await confirm_identity(ls, asked):
                raise failure("identity-declined", asked.session_id, f"{asked.said}; binding it was not confirmed") from None
            identity = True
    _registry(ls).make_current(folder, opened.info.session_id)
    return wire.SessionOpenResult(_state(ls, folder, opened.info), opened.action, opened.interrupted_turn)


async def close_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SessionCloseResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CLOSE)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_CLOSE)
    result = await _registry(ls).service(folder).sessions.close(sid)
    _registry(ls).forget(folder, sid)
    return wire.SessionCloseResult(sid, bool(result and result.committed))


async def rename_session(ls: MevedelLanguageServer, params: wire.SessionRenameParams) -> wire.SessionState:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_RENAME)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_RENAME)
    return _state(ls, folder, await _registry(ls).service(folder).sessions.rename(sid, params.name))


async def save_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_SAVE)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_SAVE)
    return _saved(await _registry(ls).service(folder).sessions.save(sid))


async def retry_publication(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_RETRY_PUBLICATION)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_RETRY_PUBLICATION)
    return _saved(await _registry(ls).service(folder).sessions.retry_publication(sid))


async def abandon_publication(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.AbandonResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_ABANDON_PUBLICATION)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_ABANDON_PUBLICATION)
    return wire.AbandonResult(sid, await _registry(ls).service(folder).sessions.abandon_publication(sid))


async def acknowledge_mutation(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.AcknowledgeMutationResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_ACKNOWLEDGE_MUTATION)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_ACKNOWLEDGE_MUTATION)
    return wire.AcknowledgeMutationResult(sid, await _registry(ls).service(folder).turns.acknowledge_unsettled_mutation(sid))


def _rotation(rotation: SegmentRotation) -> wire.SegmentRotationResult:
    return wire.SegmentRotationResult(
        rotation.session_id, rotation.segment, rotation.previous_segment, rotation.save.committed, rotation.chapter
    )


async def compact_session(ls: MevedelLanguageServer, params: wire.SessionCompactParams) -> wire.SegmentRotationResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_COMPACT)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_COMPACT)
    return _rotation(await _registry(ls).service(folder).turns.compact(sid, params.summary))


async def clear_session(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.SegmentRotationResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_CLEAR)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_CLEAR)
    return _rotation(await _registry(ls).service(folder).turns.clear(sid))


def _turn_target(ls: MevedelLanguageServer, params: Any, method: str) -> tuple[SessionService, str]:
    folder = _folder(ls, params.workspace_folder, method)
    return _registry(ls).service(folder), _session_id(ls, folder, params.session_id, method)


async def begin_turn(ls: MevedelLanguageServer, params: wire.TurnBeginParams) -> wire.TurnBeginResult:
    service, sid = _turn_target(ls, params, methods.TURN_BEGIN)
    started = await service.turns.begin_turn(sid, params.prompt)
    return wire.TurnBeginResult(sid, started.turn, started.turn_id, started.reminder)


async def capture_file(ls: MevedelLanguageServer, params: wire.TurnCaptureParams) -> wire.TurnCaptureResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_CAPTURE)
    service, sid = _registry(ls).service(folder), _session_id(ls, folder, params.session_id, methods.TURN_CAPTURE)
    # A path's first capture in a turn is its pre-turn state, and the agent's
    # own are exact (its baseline, before each write): one read by hand now
    # may read what the agent already changed, and would win over them.
    _refuse_agent_turn(ls, folder, sid)
    captured = await service.turns.capture_file(sid, params.path, gap=params.gap)
    return wire.TurnCaptureResult(captured.path, captured.state, captured.size, captured.gap_reason)


async def append_record(ls: MevedelLanguageServer, params: wire.TurnAppendParams) -> wire.TurnAppendResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_APPEND)
    service, sid = _registry(ls).service(folder), _session_id(ls, folder, params.session_id, methods.TURN_APPEND)
    # The agent's records are the turn's: one interleaved by hand would make
    # its transcript say what the agent never did (or answer its calls).
    _refuse_agent_turn(ls, folder, sid)
    item = store.EvidenceInput(
        kind=params.kind,
        text=params.text,
        call_id=params.call_id,
        name=params.name,
        arguments=params.arguments,
        output=params.output,
        is_error=params.is_error,
        mail_id=params.mail_id,
        sender=params.sender,
    )
    await service.turns.append(sid, item)
    turn = service.info(sid).open_turn
    assert turn is not None
    return wire.TurnAppendResult(sid, turn, params.kind)


def _agent_runs(ls: MevedelLanguageServer, folder: Folder, session_id: str) -> bool:
    """Whether an agent of this server runs ``session_id``'s turn now (a
    server without agents runs none)."""
    engines = getattr(ls, "agents", None)
    return engines is not None and engines.runs_turn(folder, session_id)


def _refuse_agent_turn(ls: MevedelLanguageServer, folder: Folder, session_id: str) -> None:
    """Refuse writing by hand to a turn an agent of this server runs: only
    the agent's own records and settlement are the turn's."""
    if _agent_runs(ls, folder, session_id):
        raise failure("conflict", session_id, "has its turn run by an agent of this server; cancel it (mevedel/turn/cancel) "
                      "or abort it (mevedel/turn/abort), which stop the agent before the turn settles")


async def settle_turn(ls: MevedelLanguageServer, params: wire.TurnSettleParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_SETTLE)
    service, sid = _registry(ls).service(folder), _session_id(ls, folder, params.session_id, methods.TURN_SETTLE)
    # Settled underneath it, the agent would go on writing outside every turn.
    _refuse_agent_turn(ls, folder, sid)
    turn = service.info(sid).open_turn
    return _saved(await service.turns.settle(sid, params.outcome, reason=params.reason), turn)


async def abort_turn(ls: MevedelLanguageServer, params: wire.TurnAbortParams) -> wire.SaveResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_ABORT)
    service, sid = _registry(ls).service(folder), _session_id(ls, folder, params.session_id, methods.TURN_ABORT)
    turn = service.info(sid).open_turn
    if _agent_runs(ls, folder, sid):
        # Its agent is stopped first, and the turn settles once it has:
        # nothing it does lands after the settlement, outside every turn.
        aborted = await ls.agents.engine(folder).abort(sid, params.reason)  # type: ignore[attr-defined]
        if aborted is not None and aborted.turn is None:
            # Its agent was still starting: the prompt never reached it.
            return wire.SaveResult(sid, False, False, None, PROMPT_ABORTED_NOTE)
        if aborted is not None and aborted.saved is not None:
            return _saved(aborted.saved, aborted.turn)
    # A turn no agent of this server runs (any more) was left by the one
    # that ran it, which could not record its settlement: what that changed
    # since its last checkpoint is recorded first, as `mevedel turn abort`
    # does.
    return _saved(await service.turns.abort(sid, params.reason, stopped=True), turn)


async def list_turns(ls: MevedelLanguageServer, params: wire.SessionParams) -> wire.TurnListResult:
    service, sid = _turn_target(ls, params, methods.TURN_LIST)
    turns = [_summary(t) for t in await service.turns.summaries(sid)]
    return wire.TurnListResult(sid, turns, await service.history.recovery_pending(sid))


async def show_turn(ls: MevedelLanguageServer, params: wire.TurnShowParams) -> wire.TurnShowResult:
    service, sid = _turn_target(ls, params, methods.TURN_SHOW)
    return _detail(sid, await service.turns.detail(sid, params.turn))


def _side(side: DiffSide, text: str | None) -> wire.DiffSide:
    return wire.DiffSide(side.kind, side.mode, side.size, side.sha256, side.target, side.why, text)


async def diff_turns(ls: MevedelLanguageServer, params: wire.TurnDiffParams) -> wire.TurnDiffResult:
    service, sid = _turn_target(ls, params, methods.TURN_DIFF)
    diff = await service.turns.diff(sid, params.first, params.last, contents=params.contents)
    files = [_path_change(item) for item in diff.files]
    return wire.TurnDiffResult(sid, diff.first, diff.last, files, diff.insertions, diff.deletions, store.stat_lines(diff))


def _path_change(item: PathDiff) -> wire.PathChange:
    return wire.PathChange(
        path=item.path,
        change=item.change,
        description=store.describe(item),
        before=_side(item.before, item.before_text),
        after=_side(item.after, item.after_text),
        first_turn=item.first_turn,
        last_turn=item.last_turn,
        insertions=item.insertions,
        deletions=item.deletions,
        binary=item.binary,
        renamed_from=item.renamed_from,
        no_text=item.no_text,
        diff=item.text,
    )


async def restore_file(ls: MevedelLanguageServer, params: wire.RestoreFileParams) -> wire.RestoreFileResult:
    service, sid = _turn_target(ls, params, methods.TURN_RESTORE_FILE)
    done = await service.turns.restore_file(sid, params.path, params.before_turn, commit=params.commit)
    change = _path_change(done.change) if done.needed else None
    back = _path_change(done.moved_back) if done.moved_back else None
    return wire.RestoreFileResult(sid, done.path, done.before_turn, change, done.turn, back)


#: request -> (handler, command name or None); its params class is the catalog's.
HANDLERS: dict[str, tuple[Callable[..., Awaitable[Any]], str | None]] = {
    methods.SESSION_LIST: (list_sessions, None),
    methods.SESSION_CREATE: (create_session, methods.COMMAND_SESSION_CREATE),
    methods.SESSION_OPEN: (open_session, methods.COMMAND_SESSION_OPEN),
    methods.SESSION_CLOSE: (close_session, methods.COMMAND_SESSION_CLOSE),
    methods.SESSION_RENAME: (rename_session, methods.COMMAND_SESSION_RENAME),
    methods.SESSION_SAVE: (save_session, methods.COMMAND_SESSION_SAVE),
    methods.SESSION_RETRY_PUBLICATION: (retry_publication,
        methods.COMMAND_SESSION_RETRY_PUBLICATION,
    ),
    methods.SESSION_ABANDON_PUBLICATION: (abandon_publication,
        methods.COMMAND_SESSION_ABANDON_PUBLICATION,
    ),
    methods.SESSION_ACKNOWLEDGE_MUTATION: (acknowledge_mutation,
        methods.COMMAND_SESSION_ACKNOWLEDGE_MUTATION,
    ),
    methods.SESSION_COMPACT: (compact_session, methods.COMMAND_SESSION_COMPACT),
    methods.SESSION_CLEAR: (clear_session, methods.COMMAND_SESSION_CLEAR),
    methods.TURN_BEGIN: (begin_turn, methods.COMMAND_TURN_BEGIN),
    methods.TURN_CAPTURE: (capture_file, methods.COMMAND_TURN_CAPTURE),
    methods.TURN_APPEND: (append_record, methods.COMMAND_TURN_APPEND),
    methods.TURN_SETTLE: (settle_turn, methods.COMMAND_TURN_SETTLE),
    methods.TURN_ABORT: (abort_turn, methods.COMMAND_TURN_ABORT),
    methods.TURN_LIST: (list_turns, None),
    methods.TURN_SHOW: (show_turn, None),
    methods.TURN_DIFF: (diff_turns, None),
    methods.TURN_RESTORE_FILE: (restore_file, None),
}


def register(ls: MevedelLanguageServer) -> None:
    ls.sessions = SessionRegistry(ls)
    register_handlers(ls, HANDLERS)

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: MevedelLanguageServer, *_args: Any) -> None:
        try:
            await _registry(ls).close_all()
        except Exception:  # shutting down must not fail on one session
            _log.exception("closing sessions at shutdown")
