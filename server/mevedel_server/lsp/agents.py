"""``mevedel/turn/prompt``, ``mevedel/turn/cancel`` and ``mevedel/agent/list``,
and the engine's front end in the editor: ``mevedel/turn/didUpdate`` for the
owner's live view, and the agent's permission questions asked through
``window/showMessageRequest`` with the agent's own options.

One :class:`~mevedel_server.agents.AgentEngine` per workspace folder, made
with the folder's session service; its agents stop when their session
closes or is lost, and all of them when the server exits.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from mevedel_protocol import converter, methods

from .. import resources as core
from ..addresses import Operation, parse_address
from ..agents import AgentError
from ..loading import OnFirstUse
from .errors import failure
from .handlers import folder as _folder
from .handlers import register_handlers, start_session
from .handlers import registry as _registry
from .input_history import tell_recorded
from .resources import writable_context
from .workspaces import Folder, request_scope, scope

if TYPE_CHECKING:
    from ..agents import (
        AgentConfig,
        AgentEngine,
        PermissionQuestion,
        PromptOutcome,
        TurnUpdate,
    )
    from ..store import SessionChange, SessionService
    from ..tool_server import ToolHost
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.agent")


def agent_config(ls: MevedelLanguageServer) -> AgentConfig:
    from ..agents import AgentConfig, specs_from

    s = ls.settings
    return AgentConfig(
        agents=specs_from(s.agents),
        default_agent=s.default_agent,
        permissions=s.permissions,
        permission_timeout_seconds=float(s.permission_timeout_seconds),
        start_timeout_seconds=float(s.agent_start_timeout_seconds),
        cancel_timeout_seconds=float(s.cancel_timeout_seconds),
        idle_timeout_seconds=float(s.agent_idle_timeout_seconds),
        terminal_output_max_bytes=s.terminal_output_max_bytes,
        checkpoint_exclude=tuple(s.checkpoint_exclude),
        execution_log_max_bytes=s.execution_log_max_bytes,
        subagent_max_depth=s.subagent_max_depth,
        subagent_max_concurrent=s.subagent_max_concurrent,
    )


def _turn_error(error: AgentError | None) -> wire.TurnError | None:
    if error is None:
        return None
    return wire.TurnError(kind=error.kind, message=f"{error.authored}: {error.reason}", action=error.action)


def _event(event: Any) -> wire.TurnEvent:
    diffs = None if event.diffs is None else [wire.ToolDiff(d.path, d.new_text, d.old_text) for d in event.diffs]
    return wire.TurnEvent(
        kind=event.kind, text=event.text, call_id=event.call_id, title=event.title, tool_kind=event.tool_kind,
        status=event.status, output=event.output, diffs=diffs, decision=event.decision, allowed=event.allowed,
    )


class EditorFront:
    """The engine's front end in one workspace folder of the editor."""

    def __init__(self, ls: MevedelLanguageServer, folder: Folder) -> None:
        self.ls = ls
        self.folder = folder

    def turn_update(self, update: TurnUpdate) -> None:
        params = wire.TurnDidUpdateParams(
            workspace_folder=self.folder.uri,
            session_id=update.session_id,
            agent=update.agent,
            phase=update.phase,
            turn=update.turn,
            turn_id=update.turn_id,
            events=[_event(e) for e in update.events],
            outcome=update.outcome,
            stop_reason=update.stop_reason,
            error=_turn_error(update.error),
            agent_path=update.agent_path,
            parent_call_id=update.parent_call_id,
            reason=update.reason,
        )
        try:
            self.ls.protocol.notify(methods.TURN_DID_UPDATE, converter.unstructure(params))
        except Exception:  # a lost notification must not fail the turn
            _log.exception("could not send %s", methods.TURN_DID_UPDATE)

    def queue_changed(self, state: Any) -> None:
        from .prompt_queue import notify

        notify(self.ls, self.folder, state)

    async def ask_permission(self, question: PermissionQuestion, timeout: float) -> str | None:
        titles = {}
        for option_id, name, _kind in question.options:
            title = name if name not in titles else f"{name} ({option_id})"
            titles[title] = option_id
        request = types.ShowMessageRequestParams(
            type=types.MessageType.Warning,
            message=f"{question.agent} asks permission: {question.title}",
            actions=[types.MessageActionItem(title=title) for title in titles],
        )
        answer = await asyncio.wait_for(self.ls.window_show_message_request_async(request), timeout)
        title = answer.get("title") if isinstance(answer, dict) else getattr(answer, "title", None)
        return titles.get(title) if isinstance(title, str) else None


class AgentEngines:
    """One engine per folder service, made on first use."""

    def __init__(self, ls: MevedelLanguageServer) -> None:
        self.ls = ls
        self._engines: dict[str, AgentEngine] = {}
        self._tool_host: ToolHost | None = None

    @property
    def tool_host(self) -> ToolHost:
        """The tool server every agent of this server reaches (``mevedel
        mcp`` relays to it); made with the first engine, and it listens from
        the first agent's start."""
        if self._tool_host is None:
            from ..tool_server import ToolHost

            self._tool_host = ToolHost()
        return self._tool_host

    def runs_turn(self, folder: Folder, session_id: str) -> bool:
        """Whether an agent of this server runs ``session_id``'s turn now
        (loads no engine: none made means none runs)."""
        known = self._engines.get(folder.key)
        return known is not None and known.running_turn(session_id)

    def engine(self, folder: Folder) -> AgentEngine:
        known = self._engines.get(folder.key)
        if known is not None:
            return known
        # The engine (and the ACP SDK under it) loads with the first agent:
        # an editor's idle server does not carry it.
        from ..agents import AgentEngine, log_dir

        service = _registry(self.ls).service(folder)
        remote = folder.remote is not None
        root = getattr(service.target, "root", None) if remote else str(folder.root)
        engine = AgentEngine(
            service,
            root=str(root),
            config=lambda: agent_config(self.ls),
            front=EditorFront(self.ls, folder),
            log_dir=log_dir(),
            open_document=None if remote else self._open_document(folder),
            read_address=self._address_reader(folder),
            is_address=_is_address,
            tool_host=self.tool_host,
            tool_context=self._tool_context(folder),
            local_cwd=None if remote else str(folder.root),
        )
        self._engines[folder.key] = engine
        from .agent_options import attach

        attach(self.ls, folder, engine)  # the chats' mode and model pickers follow the engine
        return engine

    def attach(self, folder: Folder, service: SessionService) -> None:
        """Stop a session's agent when the session closes or its lease is lost."""

        def changed(change: SessionChange) -> None:
            engine = self._engines.get(folder.key)
            if engine is None:
                return
            if change.reason == "closed" or change.access.value != "writable":
                asyncio.ensure_future(engine.stop(change.session_id))

        service.on_change.append(changed)

    def _open_document(self, folder: Folder):
        def text(relative: str) -> str | None:
            uri = (folder.root / relative).as_uri()
            document = self.ls.workspace.text_documents.get(uri)
            return document.source if document is not None else None

        return text

    def _tool_context(self, folder: Folder):
        """The resolver context of a tool call by a session's agent: this
        server's scope of the folder and that session, writable only while
        this server holds the session open and writable."""

        def context(session_id: str):
            return writable_context(self.ls, scope(self.ls, folder, session_id))

        # The folder's artifact store learns of authored files the agent's
        # ApplyPatch writes (agents/tool_context.py).
        context.artifacts = lambda: self.ls.artifacts.of(folder)  # type: ignore[attr-defined]
        return context

    def _address_reader(self, folder: Folder):
        async def read(authored: str) -> str:
            session = _registry(self.ls).current(folder)
            scope = request_scope(self.ls, folder.uri, session)
            found = await core.execute(core.prepare(Operation.READ, authored, core.ReadOptions(), scope.context))
            return found.text if hasattr(found, "text") else str(found)

        return read

    async def stop_all(self) -> None:
        try:
            for engine in list(self._engines.values()):
                await engine.stop_all()
        finally:
            if self._tool_host is not None:
                await self._tool_host.close()


def _is_address(text: str) -> bool:
    try:
        parse_address(text)
    except Exception:
        return False
    return True


def _engines(ls: MevedelLanguageServer) -> AgentEngines:
    return ls.agents  # type: ignore[attr-defined]


def _agent_failure(error: AgentError) -> Any:
    reason = error.reason + (f"; {error.action}" if error.action else "")
    return failure(error.kind, error.authored, reason)


async def prompt(ls: MevedelLanguageServer, params: wire.TurnPromptParams) -> wire.TurnPromptResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_PROMPT)
    registry = _registry(ls)
    service = registry.service(folder)
    session_id = params.session_id or registry.current(folder)
    if session_id is None:
        info = await start_session(ls, service, methods.TURN_PROMPT)
        session_id = info.session_id
        registry.make_current(folder, session_id)
    elif not service.is_open(session_id):
        raise failure("owner-missing", session_id, "is not open here; open it (mevedel/session/open) before prompting")
    tell_recorded(ls, await service.sessions.record_input(session_id, params.text))
    try:
        outcome: PromptOutcome = await _engines(ls).engine(folder).prompt(
            session_id, params.text, agent=params.agent, attachments=params.attachments
        )
    except AgentError as error:
        raise _agent_failure(error) from None
    return wire.TurnPromptResult(
        session_id=outcome.session_id,
        turn=outcome.turn,
        turn_id=outcome.turn_id,
        agent=outcome.agent,
        outcome=outcome.outcome,
        stop_reason=outcome.stop_reason,
        error=_turn_error(outcome.error),
    )


async def cancel(ls: MevedelLanguageServer, params: wire.TurnCancelParams) -> wire.TurnCancelResult:
    folder = _folder(ls, params.workspace_folder, methods.TURN_CANCEL)
    session_id = params.session_id or _registry(ls).current(folder)
    if session_id is None:
        return wire.TurnCancelResult(False)
    return wire.TurnCancelResult(await _engines(ls).engine(folder).cancel(session_id))


async def list_agents(ls: MevedelLanguageServer, params: wire.AgentListParams) -> wire.AgentListResult:
    config = agent_config(ls)
    try:
        default = config.choose(None).name if config.agents else None
    except AgentError:
        default = None
    entries = [
        wire.AgentEntry(name=spec.name, command=list(spec.command), found=spec.program_found(), default=spec.name == default)
        for spec in sorted(config.agents.values(), key=lambda s: s.name)
    ]
    return wire.AgentListResult(entries, config.default_agent)


HANDLERS = {
    methods.TURN_PROMPT: (prompt, methods.COMMAND_TURN_PROMPT),
    methods.TURN_CANCEL: (cancel, methods.COMMAND_TURN_CANCEL),
    methods.AGENT_LIST: (list_agents, None),
}


def register(ls: MevedelLanguageServer) -> None:
    ls.agents = AgentEngines(ls)  # type: ignore[attr-defined]
    registry = _registry(ls)
    registry.on_service.append(ls.agents.attach)  # type: ignore[attr-defined]
    ls.on_exit.append(ls.agents.stop_all)  # type: ignore[attr-defined]
    register_handlers(ls, HANDLERS)
