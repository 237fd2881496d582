"""A session's agent modes and config options (model, reasoning effort...):
what the agent offers, what the person chose, and applying the choice.

ACP agents advertise session modes (``modes`` in the ``session/new``,
``load`` and ``resume`` answers; ``session/set_mode``;
``current_mode_update``) and config options (``configOptions``;
``session/set_config_option``; ``config_option_update``). The person's
choice is remembered per agent in the session's sidecar
(:class:`~..store.content.sidecar.AgentChoice`) and applied again whenever
a process of that agent opens the session: on resume, after a restart, on
another machine. What is applied, in order of precedence: the choice made
for this prompt (``mevedel prompt --mode/--set``), the session's choice,
the agent's defaults in the settings (``agents.NAME.mode`` and
``.options``). A choice the agent does not offer or refuses is never
dropped silently: the prompt fails before anything is sent, naming the
choice, where it came from and the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from acp import schema

from ..store import MAX_CONFIG_CHOICES, AgentChoice
from .config import AgentSpec
from .errors import FAILED, OPTION_REFUSED, AgentError

if TYPE_CHECKING:
    from .engine import AgentEngine, RunningAgent

_log = logging.getLogger(__name__)

#: How many modes, options and values of an agent are shown (a hostile
#: agent cannot make the picker or the sidecar unbounded).
MAX_OFFERED = 200
_TEXT_LIMIT = 1024


def _text(value: Any, limit: int = _TEXT_LIMIT) -> str:
    return " ".join(str(value).split())[:limit] if value is not None else ""


def _id(value: Any, limit: int = 256) -> bool:
    """An id the agent sent that can be chosen and kept in the sidecar
    (others are not offered: an agent's text is untrusted)."""
    return isinstance(value, str) and 0 < len(value) <= limit and "\n" not in value and "\x00" not in value


@dataclass(frozen=True)
class ModeOffer:
    id: str
    name: str
    description: str | None = None


@dataclass(frozen=True)
class ValueOffer:
    value: str
    name: str
    description: str | None = None
    #: The group's name when the agent grouped its values.
    group: str | None = None


@dataclass(frozen=True)
class ConfigOffer:
    id: str
    name: str
    #: ``select`` (one of ``values``) or ``boolean``.
    kind: str
    current: str | bool
    values: tuple[ValueOffer, ...] = ()
    description: str | None = None
    #: The agent's semantic hint: ``mode``, ``model``, ``model_config``,
    #: ``thought_level`` (or another text).
    category: str | None = None

    def value(self, value: str) -> ValueOffer | None:
        return next((v for v in self.values if v.value == value), None)


@dataclass(frozen=True)
class Offered:
    """What one agent offers for one of its sessions, with its current
    values (as the agent last said)."""

    current_mode: str | None = None
    modes: tuple[ModeOffer, ...] = ()
    config: tuple[ConfigOffer, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.modes and not self.config

    @classmethod
    def of(cls, response: Any) -> Offered:
        """From a ``session/new``, ``load`` or ``resume`` answer."""
        state = getattr(response, "modes", None)
        modes: tuple[ModeOffer, ...] = ()
        current = None
        if isinstance(state, schema.SessionModeState):
            modes = tuple(
                ModeOffer(m.id, _text(m.name) or m.id, _text(m.description) or None) for m in state.available_modes[:MAX_OFFERED] if _id(m.id)
            )
            current = state.current_mode_id if _id(state.current_mode_id) else None
        return cls(current, modes, _config(getattr(response, "config_options", None)))

    def with_mode(self, mode_id: str) -> Offered:
        return replace(self, current_mode=mode_id if _id(mode_id) else None)

    def with_config(self, options: Any) -> Offered:
        return replace(self, config=_config(options))

    def mode(self, mode_id: str) -> ModeOffer | None:
        return next((m for m in self.modes if m.id == mode_id), None)

    def option(self, config_id: str) -> ConfigOffer | None:
        return next((c for c in self.config if c.id == config_id), None)


def _config(options: Any) -> tuple[ConfigOffer, ...]:
    offers = []
    for option in list(options or [])[:MAX_OFFERED]:
        if not _id(option.id):
            continue
        common = dict(id=option.id, name=_text(option.name) or option.id, description=_text(option.description) or None,
                      category=option.category if isinstance(option.category, str) else None)
        if isinstance(option, schema.SessionConfigOptionBoolean):
            offers.append(ConfigOffer(kind="boolean", current=bool(option.current_value), **common))
            continue
        values: list[ValueOffer] = []
        for item in option.options[:MAX_OFFERED]:
            if isinstance(item, schema.SessionConfigSelectGroup):
                group = _text(item.name) or item.group
                values.extend(ValueOffer(v.value, _text(v.name) or v.value, _text(v.description) or None, group)
                              for v in item.options[:MAX_OFFERED] if _id(v.value, 1024))
            elif _id(item.value, 1024):
                values.append(ValueOffer(item.value, _text(item.name) or item.value, _text(item.description) or None))
        offers.append(ConfigOffer(kind="select", current=option.current_value, values=tuple(values[:MAX_OFFERED]), **common))
    return tuple(offers)


@dataclass(frozen=True)
class Want:
    """One choice to apply: a mode (``config_id`` None) or a config value,
    and where it came from (for the message when it is refused)."""

    config_id: str | None
    value: str | bool
    source: str

    @property
    def named(self) -> str:
        what = f"mode {self.value!r}" if self.config_id is None else f"{self.config_id}={_shown(self.value)}"
        return f"{what} ({self.source})"


def _shown(value: str | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def parse_assignment(text: str) -> tuple[str, str]:
    """``ID=VALUE`` of ``mevedel prompt --set`` (ValueError naming it)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ValueError(f"--set {text!r}: write ID=VALUE (a config option id and the value to choose, e.g. model=large)")
    return key.strip(), value.strip()


def wanted(spec: AgentSpec, choice: AgentChoice | None, pending: AgentChoice | None = None) -> list[Want]:
    """What to apply when ``spec``'s process opens the session: this
    prompt's choice over the session's over the settings' defaults."""
    layers = [
        (pending, "this prompt's choice"),
        (choice, "the session's choice"),
        (AgentChoice(mode=spec.mode, config=dict(spec.options)) if spec.mode or spec.options else None, f"the default in agents.{spec.name}"),
    ]
    mode: Want | None = None
    config: dict[str, Want] = {}
    for layer, source in layers:
        if layer is None:
            continue
        if mode is None and layer.mode is not None:
            mode = Want(None, layer.mode, source + (".mode" if source.startswith("the default") else ""))
        for key, value in layer.config.items():
            config.setdefault(key, Want(key, value, source + (f".options.{key}" if source.startswith("the default") else "")))
    return ([mode] if mode else []) + list(config.values())


def check(want: Want, offered: Offered) -> tuple[str | bool | None, str | None]:
    """The value to send for ``want`` (booleans read from text) and None,
    or None and why the agent cannot take it."""
    if want.config_id is None:
        if not offered.modes:
            return None, "it offers no modes"
        if offered.mode(str(want.value)) is None:
            return None, f"it does not offer it (its modes: {', '.join(m.id for m in offered.modes)})"
        return want.value, None
    option = offered.option(want.config_id)
    if option is None:
        known = ", ".join(c.id for c in offered.config)
        return None, f"it has no option {want.config_id!r} ({'its options: ' + known if known else 'it offers none'})"
    if option.kind == "boolean":
        value = want.value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            return None, f"{want.config_id} takes true or false"
        return value, None
    if not isinstance(want.value, str) or option.value(want.value) is None:
        return None, f"it does not offer it (values of {want.config_id}: {', '.join(v.value for v in option.values)})"
    return want.value, None


@dataclass
class _Session:
    """What is known of one session's options here."""

    #: The choice of the next prompt (CLI flags), applied and remembered
    #: once the agent takes it.
    pending: AgentChoice | None = None
    pending_agent: str | None = None


@dataclass(frozen=True)
class OptionsView:
    """What a chat shows: the session's agent, what it offers (``offered``:
    as its running process said, else as a process of it last said in
    this server, else None), the person's choice and the agent's defaults
    from the settings. ``running``: an agent process has the session now,
    so a choice is applied at once."""

    session_id: str
    agent: str
    running: bool
    offered: Offered | None
    chosen: AgentChoice | None
    defaults: AgentChoice | None


@dataclass
class SessionOptions:
    """The engine's side of modes and config options (one per engine)."""

    engine: AgentEngine
    #: The last offer a process of each agent made here (shown for a
    #: session whose agent is not running).
    known: dict[str, Offered] = field(default_factory=dict)
    _sessions: dict[str, _Session] = field(default_factory=dict)
    #: Told whenever a session's view changes (the LSP's notification).
    listeners: list[Callable[[OptionsView], None]] = field(default_factory=list)

    # Views ----------------------------------------------------------------------

    def view(self, session_id: str, agent: str | None = None) -> OptionsView | None:
        """The session's view; None when no agent can be named for it."""
        spec = self._spec(session_id, agent)
        if spec is None:
            return None
        running = self.engine.running_agent(session_id)
        live = running is not None and running.spec.name == spec.name and running.process.native_session_id is not None and running.offered is not None
        offered = running.offered if live else self.known.get(spec.name)
        chosen = self._chosen(session_id, spec.name)
        defaults = AgentChoice(mode=spec.mode, config=dict(spec.options)) if spec.mode or spec.options else None
        return OptionsView(session_id, spec.name, live, offered, chosen, defaults)

    def _spec(self, session_id: str, agent: str | None) -> AgentSpec | None:
        running = self.engine.running_agent(session_id)
        if agent is None and running is not None:
            return running.spec
        try:
            recorded = self.engine.service.agents.engine(session_id)
            return self.engine.config().choose(agent, recorded.agent if recorded else None)
        except AgentError:
            if agent is not None:
                raise
            return None

    def _chosen(self, session_id: str, agent: str) -> AgentChoice | None:
        state = self._sessions.get(session_id)
        remembered = self.engine.service.agents.agent_choice(session_id, agent)
        if state is None or state.pending is None or state.pending_agent != agent:
            return remembered
        return _merged(state.pending, remembered)

    def _tell(self, session_id: str) -> None:
        try:
            view = self.view(session_id)
        except Exception as error:  # a closed session: nothing to show
            _log.debug("session %s: no options view: %s", session_id, error)
            return
        if view is None:
            return
        for listener in list(self.listeners):
            try:
                listener(view)
            except Exception:
                _log.exception("an options listener failed")

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    # Choosing -------------------------------------------------------------------

    async def choose(self, session_id: str, *, agent: str | None = None, mode: str | None = None,
                     config: Mapping[str, str | bool] | None = None, timeout: float | None = None) -> OptionsView:
        """The person chooses a mode and/or config values for the session.

        With the agent running, each is sent at once and remembered when
        the agent takes it; refused (an AgentError naming the choice and
        the agent) it is not remembered. Without, a choice a process of the
        agent offered before is remembered now; one nothing is known of
        waits for the next prompt, which applies it first and remembers it
        once taken (or fails, naming it)."""
        config = dict(config or {})
        if mode is None and not config:
            raise AgentError(FAILED, "the choice", "names no mode and no option", "choose a mode or ID=VALUE")
        if len(config) > MAX_CONFIG_CHOICES:
            raise AgentError(FAILED, "the choice", f"names more than {MAX_CONFIG_CHOICES} options")
        for key, value in config.items():
            if not isinstance(key, str) or not key or not (isinstance(value, bool) or (isinstance(value, str) and value)):
                raise AgentError(FAILED, f"option {key!r}", "takes a value id (text) or true/false")
        self.engine.service.session(session_id).require_writable()
        spec = self._spec(session_id, agent)
        if spec is None:
            raise AgentError(FAILED, f"session {session_id}", "has no agent to choose for", "configure one (docs/agents.md)")
        wants = ([Want(None, mode, "your choice")] if mode is not None else []) + [Want(k, v, "your choice") for k, v in config.items()]
        running = self.engine.running_agent(session_id)
        if running is not None and running.spec.name == spec.name and running.process.native_session_id is not None and running.offered is not None:
            await self._apply(running, wants, remember=True, timeout=timeout)
        else:
            offered = self.known.get(spec.name)
            if offered is not None:
                refused = [f"{w.named}: {why}" for w in wants if (why := check(w, offered)[1])]
                if refused:
                    raise _refusal(spec.name, refused)
                await self._remember(session_id, spec.name, [(w, check(w, offered)[0]) for w in wants])
            else:
                state = self._sessions.setdefault(session_id, _Session())
                if state.pending_agent != spec.name:
                    state.pending = None
                state.pending = _merged(AgentChoice(mode=mode, config=config), state.pending)
                state.pending_agent = spec.name
        self._tell(session_id)
        view = self.view(session_id, spec.name)
        assert view is not None
        return view

    # Applying -------------------------------------------------------------------

    async def opened(self, running: RunningAgent, response: Any, timeout: float) -> None:
        """The agent's process opened the session (``response``: its
        answer): learn what it offers and apply what is wanted. Raises an
        AgentError naming every choice it did not take."""
        running.offered = Offered.of(response)
        if not running.offered.empty:
            self.known[running.spec.name] = running.offered
        session_id = running.session_id
        state = self._sessions.get(session_id)
        pending = state.pending if state is not None and state.pending_agent == running.spec.name else None
        wants = wanted(running.spec, self.engine.service.agents.agent_choice(session_id, running.spec.name), pending)
        try:
            await self._apply(running, wants, remember=False, timeout=timeout, pending=pending)
        finally:
            self._tell(session_id)

    async def _apply(self, running: RunningAgent, wants: Iterable[Want], *, remember: bool, timeout: float | None,
                     pending: AgentChoice | None = None) -> None:
        agent = running.spec.name
        timeout = timeout if timeout is not None else self.engine.config().start_timeout_seconds
        refused: list[str] = []
        taken: list[tuple[Want, str | bool]] = []
        for want in wants:
            value, why = check(want, running.offered)
            if why is None:
                current = running.offered.current_mode if want.config_id is None else running.offered.option(want.config_id).current
                if current != value:
                    why = await self._send(running, want, value, timeout)
            if why is not None:
                refused.append(f"{want.named}: {why}")
            elif remember or want.source == "this prompt's choice":
                taken.append((want, value))
        if taken:
            await self._remember(running.session_id, agent, taken)
        if pending is not None:
            state = self._sessions.get(running.session_id)
            if state is not None:
                state.pending = state.pending_agent = None
        if refused:
            raise _refusal(agent, refused)

    async def _send(self, running: RunningAgent, want: Want, value: str | bool, timeout: float) -> str | None:
        """Send one choice; why the agent refused it, or None."""
        process = running.process
        session = process.native_session_id
        try:
            if want.config_id is None:
                await process.until_gone(process.conn.set_session_mode(session_id=session, mode_id=value), timeout, "session/set_mode")
                running.offered = running.offered.with_mode(str(value))
            else:
                answer = await process.until_gone(
                    process.conn.set_config_option(config_id=want.config_id, session_id=session, value=value), timeout, "session/set_config_option"
                )
                options = getattr(answer, "config_options", None)
                if options is not None:
                    running.offered = running.offered.with_config(options)
                    now = running.offered.option(want.config_id)
                    if now is not None and now.current != value:
                        # It answered, but with another value in effect: not taken.
                        return f"the agent kept {want.config_id}={_shown(now.current)}"
                else:  # an answer without the options: the value as set
                    running.offered = replace(running.offered, config=tuple(
                        replace(c, current=value) if c.id == want.config_id else c for c in running.offered.config))
        except AgentError as error:
            if not process.alive:
                raise
            return error.reason
        if not running.offered.empty:
            self.known[running.spec.name] = running.offered
        return None

    async def _remember(self, session_id: str, agent: str, taken: list[tuple[Want, str | bool]]) -> None:
        choice = self.engine.service.agents.agent_choice(session_id, agent) or AgentChoice()
        config = dict(choice.config)
        mode = choice.mode
        for want, value in taken:
            if want.config_id is None:
                mode = str(value)
            else:
                config[want.config_id] = value
        await self.engine.service.agents.set_agent_choice(session_id, agent, AgentChoice(mode=mode, config=config))

    # The agent's own changes ----------------------------------------------------

    async def agent_changed(self, running: RunningAgent, update: Any) -> None:
        """``current_mode_update`` or ``config_option_update``: the agent
        changed a value itself (it left plan mode, say). The session's
        choice follows for what the person had chosen, so a resume does not
        undo the agent's change."""
        if running.offered is None:
            return
        if isinstance(update, schema.CurrentModeUpdate):
            running.offered = running.offered.with_mode(update.current_mode_id)
        else:
            running.offered = running.offered.with_config(update.config_options)
        if not running.offered.empty:
            self.known[running.spec.name] = running.offered
        session_id, agent = running.session_id, running.spec.name
        try:
            choice = self.engine.service.agents.agent_choice(session_id, agent)
            if choice is not None:
                mode = running.offered.current_mode if choice.mode is not None else None
                config = {key: option.current for key in choice.config if (option := running.offered.option(key)) is not None}
                config = {key: config.get(key, value) for key, value in choice.config.items()}
                follows = AgentChoice(mode=mode or choice.mode, config=config)
                if follows != choice:
                    await self.engine.service.agents.set_agent_choice(session_id, agent, follows)
        except Exception as error:  # never fails the agent's stream
            _log.info("session %s: the agent's own option change is not remembered: %s", session_id, getattr(error, "reason", error))
        self._tell(session_id)


def _merged(top: AgentChoice, under: AgentChoice | None) -> AgentChoice:
    if under is None:
        return top
    return AgentChoice(mode=top.mode if top.mode is not None else under.mode, config={**under.config, **top.config})


def _refusal(agent: str, refused: list[str]) -> AgentError:
    return AgentError(
        OPTION_REFUSED,
        f"agent {agent!r}",
        "did not take " + "; ".join(refused),
        "choose another (the chat's mode and model picker, or mevedel prompt --mode ID / --set ID=VALUE)"
        f" or fix the default in agents.{agent}",
    )
