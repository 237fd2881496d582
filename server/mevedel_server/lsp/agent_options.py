"""``mevedel/agent/options`` and ``mevedel/agent/setOption`` (also the
command ``mevedel.agent.setOption``), and ``mevedel/agent/didChangeOptions``:
a session's agent modes and config options for a chat's picker
(:mod:`..agents.session_options` does the work)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mevedel_protocol import converter, methods

from ..agents import AgentError
from ..loading import OnFirstUse
from .errors import failure
from .handlers import folder as _folder
from .handlers import register_handlers
from .handlers import registry as _registry
from .workspaces import Folder

if TYPE_CHECKING:
    from ..agents import AgentEngine, OptionsView
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.agent_options")


def to_wire(folder: Folder, view: OptionsView) -> wire.AgentOptions:
    """The picker's view. With the agent running, ``current`` values are
    the agent's; otherwise what the next prompt applies: the session's
    choice, else the settings' default, else what the agent last said."""
    offered = view.offered
    chosen = view.chosen
    defaults = view.defaults
    mode_chosen = chosen is not None and chosen.mode is not None
    current_mode = offered.current_mode if offered is not None else None
    if not view.running:
        current_mode = (chosen.mode if mode_chosen else None) or (defaults.mode if defaults else None) or current_mode
    options = []
    for option in offered.config if offered is not None else ():
        current = option.current
        picked = chosen is not None and option.id in chosen.config
        if not view.running:
            if picked:
                current = chosen.config[option.id]
            elif defaults is not None and option.id in defaults.config:
                current = defaults.config[option.id]
        options.append(wire.AgentConfigOption(
            id=option.id, name=option.name, kind=option.kind, current=current, chosen=picked,
            values=[wire.AgentOptionValue(v.value, v.name, v.description, v.group) for v in option.values],
            description=option.description, category=option.category,
        ))
    return wire.AgentOptions(
        workspace_folder=folder.uri, session_id=view.session_id, agent=view.agent, running=view.running,
        known=offered is not None, current_mode=current_mode, mode_chosen=mode_chosen,
        modes=[wire.AgentMode(m.id, m.name, m.description) for m in (offered.modes if offered is not None else ())],
        config_options=options,
    )


def attach(ls: MevedelLanguageServer, folder: Folder, engine: AgentEngine) -> None:
    """Tell the editor whenever a session's options change (the agent
    started, a choice was applied, the agent changed a value itself)."""

    def changed(view: OptionsView) -> None:
        try:
            ls.protocol.notify(methods.AGENT_DID_CHANGE_OPTIONS, converter.unstructure(to_wire(folder, view)))
        except Exception:  # a lost notification must not fail the agent's work
            _log.exception("could not send %s", methods.AGENT_DID_CHANGE_OPTIONS)

    engine.options.listeners.append(changed)


def _refused(error: AgentError) -> Any:
    return failure(error.kind, error.authored, error.reason + (f"; {error.action}" if error.action else ""))


def _engine(ls: MevedelLanguageServer, folder: Folder) -> AgentEngine:
    return ls.agents.engine(folder)  # type: ignore[attr-defined]


def _session(ls: MevedelLanguageServer, folder: Folder, given: str | None, method: str) -> str:
    session_id = given or _registry(ls).current(folder)
    if session_id is None:
        raise failure("owner-missing", method, "no session is current; open or create one first")
    return session_id


async def options(ls: MevedelLanguageServer, params: wire.AgentOptionsParams) -> wire.AgentOptions:
    folder = _folder(ls, params.workspace_folder, methods.AGENT_OPTIONS)
    session_id = _session(ls, folder, params.session_id, methods.AGENT_OPTIONS)
    engine = _engine(ls, folder)
    try:
        view = engine.options.view(session_id, params.agent)
    except AgentError as error:
        raise _refused(error) from None
    if view is None:
        raise _refused(AgentError("agent-not-configured", f"session {session_id}", "has no agent (none is configured or the default)",
                                        'add one to the "agents" setting, or set defaultAgent'))
    return to_wire(folder, view)


async def set_option(ls: MevedelLanguageServer, params: wire.AgentSetOptionParams) -> wire.AgentOptions:
    folder = _folder(ls, params.workspace_folder, methods.AGENT_SET_OPTION)
    session_id = _session(ls, folder, params.session_id, methods.AGENT_SET_OPTION)
    if (params.config_id is None) != (params.value is None):
        raise failure("invalid-params", methods.AGENT_SET_OPTION, "configId and value go together")
    config: dict[str, Any] = {} if params.config_id is None else {params.config_id: params.value}
    engine = _engine(ls, folder)
    try:
        view = await engine.options.choose(session_id, agent=params.agent, mode=params.mode, config=config)
    except AgentError as error:
        raise _refused(error) from None
    return to_wire(folder, view)


HANDLERS = {
    methods.AGENT_OPTIONS: (options, None),
    methods.AGENT_SET_OPTION: (set_option, methods.COMMAND_AGENT_SET_OPTION),
}


def register(ls: MevedelLanguageServer) -> None:
    register_handlers(ls, HANDLERS)
