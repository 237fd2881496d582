"""A scripted ACP agent for tests: a real program, spoken to over stdio, built
on the official SDK (``acp.run_agent``).

    python tests/agents/scripted_agent.py SCRIPT.json

The JSON script says what the agent advertises at ``initialize`` and what each
prompt does, step by step; see ``README.md`` beside this file for the format.
A bad script is refused before the agent speaks the protocol: one line on
stderr and exit status 2.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any, get_args

# The SDK's schema is loaded as mevedel loads it (agents/sdk_import.py: without
# pydantic's attribute-docstring pass, a third of the import's CPU): the
# suite starts this agent hundreds of times. The models are the same.
from mevedel_server.agents import sdk_import  # noqa: F401

# isort: split
from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.helpers import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AudioContentBlock,
    AuthenticateRequest,
    AuthenticateResponse,
    AuthMethodAgent,
    BlobResourceContents,
    CancelNotification,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    EmbeddedResourceContentBlock,
    EnvVariable,
    ImageContentBlock,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    NewSessionRequest,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptRequest,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionRequest,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfoUpdate,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallLocation,
    ToolCallUpdate,
)
from acp.stdio import stdio_streams
from pydantic import BaseModel

STOP_REASONS = frozenset(get_args(StopReason))

TOP_LEVEL_KEYS = frozenset(
    {
        "name",
        "title",
        "version",
        "protocol_version",
        "load_session",
        "resume_session",
        "images",
        "audio",
        "embedded_context",
        "auth_methods",
        "auth_required",
        "log",
        "turns",
        "on_initialize",
        "on_stdin_end",
        "modes",
        "config_options",
        "refuse",
        "ignore",
    }
)

STEP_KINDS = frozenset(
    {
        "say",
        "say_many",
        "think",
        "session_title",
        "tool_call",
        "tool_update",
        "plan",
        "read",
        "write",
        "terminal",
        "terminal_kill",
        "permission",
        "wait_cancel",
        "wait_file",
        "ignore_cancel",
        "sleep",
        "crash",
        "hang",
        "garbage",
        "stderr",
        "stderr_flood",
        "stop",
        "echo_prompt",
        "error",
        "mcp_call",
        "mcp_tools",
        "later",
        "together",
        "set_mode",
        "set_config",
        "echo_options",
    }
)

#: Steps that make sense before any session exists.
INITIALIZE_STEP_KINDS = frozenset({"crash", "hang", "garbage", "sleep", "stderr", "stderr_flood", "error", "wait_file"})
#: Steps that make sense once the client closed the connection.
STDIN_END_STEP_KINDS = frozenset({"stderr", "freeze_client"})


class ScriptError(ValueError):
    """The script is malformed."""


def load_script(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        script = json.load(handle)
    if not isinstance(script, dict):
        raise ScriptError("the script is not a JSON object")
    unknown = sorted(key for key in script if key not in TOP_LEVEL_KEYS and not key.startswith("_"))
    if unknown:
        raise ScriptError(f"unknown keys {unknown}")
    turns = script.get("turns", [])
    if not isinstance(turns, list):
        raise ScriptError("turns is not a list")
    for number, steps in enumerate(turns):
        _check_steps(steps, STEP_KINDS, f"turns[{number}]")
    _check_steps(script.get("on_initialize", []), INITIALIZE_STEP_KINDS, "on_initialize")
    _check_steps(script.get("on_stdin_end", []), STDIN_END_STEP_KINDS, "on_stdin_end")
    _check_options(script)
    for method in script.get("auth_methods", []):
        if not isinstance(method, dict) or "id" not in method or "name" not in method:
            raise ScriptError(f"auth method {method!r} needs an id and a name")
    return script


def _check_steps(steps: Any, kinds: frozenset[str], where: str) -> None:
    if not isinstance(steps, list):
        raise ScriptError(f"{where} is not a list of steps")
    for number, step in enumerate(steps):
        if not isinstance(step, dict) or len(step) != 1:
            raise ScriptError(f"{where}[{number}] is not an object with one key: {step!r}")
        (kind,) = step
        if kind not in kinds:
            raise ScriptError(f"{where}[{number}]: {kind!r} is not one of {sorted(kinds)}")
        if kind == "later":
            later = step[kind]
            if not isinstance(later, dict) or not isinstance(later.get("when_exists"), str):
                raise ScriptError(f"{where}[{number}]: later needs an object with when_exists (a path) and steps")
            _check_steps(later.get("steps", []), kinds - {"later"}, f"{where}[{number}].later.steps")
        if kind == "together":
            branches = step[kind]
            if not isinstance(branches, list) or len(branches) < 2:
                raise ScriptError(f"{where}[{number}]: together needs a list of at least two lists of steps")
            for branch, steps in enumerate(branches):
                _check_steps(steps, kinds, f"{where}[{number}].together[{branch}]")
        if kind == "mcp_call" and not (isinstance(step[kind], dict) and isinstance(step[kind].get("tool"), str)):
            raise ScriptError(f"{where}[{number}]: mcp_call needs an object with a tool name")
        if kind == "stop" and step[kind] not in STOP_REASONS:
            raise ScriptError(f"{where}[{number}]: stop reason {step[kind]!r} is not one of {sorted(STOP_REASONS)}")


def _check_options(script: dict[str, Any]) -> None:
    modes = script.get("modes")
    if modes is not None:
        if not isinstance(modes, dict) or not isinstance(modes.get("available"), list) or not modes["available"]:
            raise ScriptError("modes needs an object with available: [{id, name}, ...] and current")
        ids = [m.get("id") for m in modes["available"] if isinstance(m, dict)]
        if len(ids) != len(modes["available"]) or not all(isinstance(i, str) for i in ids):
            raise ScriptError("every mode needs an id")
        if modes.get("current", ids[0]) not in ids:
            raise ScriptError(f"modes.current {modes.get('current')!r} is not one of {ids}")
    for option in script.get("config_options", []) or []:
        if not isinstance(option, dict) or not isinstance(option.get("id"), str) or option.get("type", "select") not in ("select", "boolean"):
            raise ScriptError(f"config option {option!r} needs an id and a type (select or boolean)")
        if option.get("type", "select") == "select":
            values = [v.get("value") for v in option.get("options", []) if isinstance(v, dict)]
            if not values or option.get("current", values[0]) not in values:
                raise ScriptError(f"config option {option['id']!r} needs options [{{value, name}}] holding its current value")
    for key in ("refuse", "ignore"):
        listed = script.get(key, [])
        if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
            raise ScriptError(f"{key} is a list of mode ids and ID=VALUE config choices")


def _plain(model: BaseModel) -> dict[str, Any]:
    """A request model as the JSON the client sent (wire names, nothing added)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _error_record(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RequestError):
        return {"code": exc.code, "message": str(exc), "data": exc.data}
    return {"type": type(exc).__name__, "message": _error_text(exc)}


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)


def _exit_text(exit_code: int | None, signal: str | None) -> str:
    if exit_code is not None:
        return f"exit {exit_code}"
    if signal is not None:
        return f"signal {signal}"
    return "no exit status"


def _write_stderr(text: str) -> None:
    # The SDK puts stdout (and stdin) in non-blocking mode; stderr may share
    # the open file, so a full pipe must not lose the line.
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")
    while data:
        try:
            written = os.write(2, data)
        except BlockingIOError:
            continue
        except OSError:
            return
        data = data[written:]


class _Turn:
    """One prompt being answered."""

    def __init__(self, session_id: str, cwd: str, prompt: list[Any]) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.prompt = prompt
        self.cancelled = asyncio.Event()
        self.ignore_cancel = False

    def absolute(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.cwd, path))


class ScriptedAgent:
    """An ``acp.Agent`` that plays a script."""

    def __init__(self, script: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        self._script = script
        self._writer = writer
        self._client: Any = None
        self._log_path: str | None = script.get("log")
        self._auth_required = bool(script.get("auth_required", False))
        self._sessions: dict[str, str] = {}  # session id -> cwd
        self._mcp_servers: dict[str, list[Any]] = {}  # session id -> mcpServers it was given
        self._background: set[asyncio.Task] = set()  # "later" steps waiting or running
        self._turns: dict[str, set[_Turn]] = {}  # session id -> prompts running
        self._created = 0
        self._prompts = 0
        #: session id -> {"mode": id, "config": {id: value}}: the session's
        #: current mode and config values (the script's, until set).
        self._chosen: dict[str, dict[str, Any]] = {}
        self._log("start", argv=sys.argv)

    def on_connect(self, conn: Any) -> None:
        self._client = conn

    # The log ------------------------------------------------------------

    def _log(self, event: str, **fields: Any) -> None:
        if not self._log_path:
            return
        record = {"event": event, "pid": os.getpid(), **fields}
        line = json.dumps(record, default=str) + "\n"
        # Opened per event so a crash (os._exit) never loses a buffered line.
        with open(self._log_path, "a", encoding="utf-8") as handle:
            handle.write(line)

    async def _ask(self, method: str, params: dict[str, Any], call: Awaitable[Any]) -> Any:
        """A request to the client; its answer (or error) goes to the log."""
        try:
            result = await call
        except Exception as exc:
            self._log("client_response", method=method, params=params, error=_error_record(exc))
            raise
        plain = result
        if isinstance(result, BaseModel):
            plain = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._log("client_response", method=method, params=params, result=plain)
        return result

    # Agent methods ------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        request = InitializeRequest(
            protocol_version=protocol_version,
            client_capabilities=client_capabilities,
            client_info=client_info,
            field_meta=kwargs or None,
        )
        self._log("initialize", params=_plain(request))
        await self._run_steps(self._script.get("on_initialize", []), None)
        script = self._script
        auth_methods: list[Any] = [
            AuthMethodAgent(id=method["id"], name=method["name"], description=method.get("description"))
            if "type" not in method
            else method
            for method in script.get("auth_methods", [])
        ]
        return InitializeResponse(
            protocol_version=script.get("protocol_version", PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=bool(script.get("load_session", False)),
                prompt_capabilities=PromptCapabilities(
                    image=bool(script.get("images", False)),
                    audio=bool(script.get("audio", False)),
                    embedded_context=bool(script.get("embedded_context", True)),
                ),
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities() if script.get("resume_session") else None
                ),
            ),
            auth_methods=auth_methods,
            agent_info=Implementation(
                name=script.get("name", "scripted"),
                title=script.get("title"),
                version=script.get("version", "0.0.0"),
            ),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse:
        self._log("authenticate", params=_plain(AuthenticateRequest(method_id=method_id, field_meta=kwargs or None)))
        known = [method["id"] for method in self._script.get("auth_methods", [])]
        if method_id not in known:
            raise RequestError.invalid_params({"methodId": method_id, "known": known})
        self._auth_required = False
        return AuthenticateResponse()

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        request = NewSessionRequest(
            cwd=cwd,
            additional_directories=additional_directories,
            mcp_servers=mcp_servers,
            field_meta=kwargs or None,
        )
        self._log("new_session", params=_plain(request))
        if self._auth_required:
            raise RequestError.auth_required()
        self._created += 1
        session_id = f"scripted-{self._created}"
        while session_id in self._sessions:  # a loaded session took the name
            self._created += 1
            session_id = f"scripted-{self._created}"
        self._sessions[session_id] = cwd
        self._mcp_servers[session_id] = list(mcp_servers or [])
        return NewSessionResponse(session_id=session_id, **self._offer(session_id))

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        opened = self._reopened("load_session", "session/load", LoadSessionRequest, cwd, session_id, mcp_servers, additional_directories, kwargs)
        return LoadSessionResponse(**opened)

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        opened = self._reopened("resume_session", "session/resume", ResumeSessionRequest, cwd, session_id, mcp_servers, additional_directories, kwargs)
        return ResumeSessionResponse(**opened)

    def _reopened(
        self,
        event: str,
        method: str,
        request_type: type,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None,
        additional_directories: list[str] | None,
        meta: dict[str, Any],
    ) -> dict[str, Any]:
        """A session the client opens again (``event`` is the script's switch
        for ``method``, a request of ``request_type``): logged, refused
        unless the script offers it, then served like a new one."""
        request = request_type(
            cwd=cwd,
            session_id=session_id,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            field_meta=meta or None,
        )
        self._log(event, params=_plain(request))
        if not self._script.get(event, False):
            raise RequestError.method_not_found(method)
        if self._auth_required:
            raise RequestError.auth_required()
        self._sessions[session_id] = cwd
        self._mcp_servers[session_id] = list(mcp_servers or [])
        return self._offer(session_id)

    # Modes and config options --------------------------------------------

    def _state(self, session_id: str) -> dict[str, Any]:
        """The session's current mode and config values (a session this
        process has not seen starts at the script's)."""
        state = self._chosen.get(session_id)
        if state is None:
            modes = self._script.get("modes")
            state = {
                "mode": modes.get("current", modes["available"][0]["id"]) if modes else None,
                "config": {
                    option["id"]: option.get("current", False if option.get("type") == "boolean" else option["options"][0]["value"])
                    for option in self._script.get("config_options", []) or []
                },
            }
            self._chosen[session_id] = state
        return state

    def _modes(self, session_id: str) -> SessionModeState | None:
        modes = self._script.get("modes")
        if not modes:
            return None
        available = [SessionMode(id=m["id"], name=m.get("name", m["id"]), description=m.get("description")) for m in modes["available"]]
        return SessionModeState(current_mode_id=self._state(session_id)["mode"], available_modes=available)

    def _config(self, session_id: str) -> list[Any]:
        current = self._state(session_id)["config"]
        options: list[Any] = []
        for option in self._script.get("config_options", []) or []:
            common = {"id": option["id"], "name": option.get("name", option["id"]), "description": option.get("description"),
                      "category": option.get("category")}
            if option.get("type") == "boolean":
                options.append(SessionConfigOptionBoolean(type="boolean", current_value=current[option["id"]], **common))
            else:
                values = [SessionConfigSelectOption(value=v["value"], name=v.get("name", v["value"]), description=v.get("description"))
                          for v in option["options"]]
                options.append(SessionConfigOptionSelect(type="select", current_value=current[option["id"]], options=values, **common))
        return options

    def _offer(self, session_id: str) -> dict[str, Any]:
        """The ``modes`` and ``configOptions`` of a session/new, load or resume answer."""
        return {"modes": self._modes(session_id), "config_options": self._config(session_id) or None}

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        self._log("set_mode", params={"sessionId": session_id, "modeId": mode_id})
        if session_id not in self._sessions:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "no such session"})
        modes = self._script.get("modes")
        known = [m["id"] for m in modes["available"]] if modes else []
        if mode_id not in known:
            raise RequestError.invalid_params({"modeId": mode_id, "reason": f"unknown mode (known: {', '.join(known) or 'none'})"})
        if mode_id in self._script.get("refuse", []):
            raise RequestError(-32603, f"mode {mode_id} is not available now", {"modeId": mode_id})
        self._state(session_id)["mode"] = mode_id
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool, **kwargs: Any) -> SetSessionConfigOptionResponse:
        self._log("set_config_option", params={"sessionId": session_id, "configId": config_id, "value": value})
        if session_id not in self._sessions:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "no such session"})
        option = next((o for o in self._script.get("config_options", []) or [] if o["id"] == config_id), None)
        if option is None:
            raise RequestError.invalid_params({"configId": config_id, "reason": "unknown config option"})
        if option.get("type") == "boolean" and not isinstance(value, bool):
            raise RequestError.invalid_params({"configId": config_id, "reason": "a boolean option takes true or false"})
        if option.get("type", "select") == "select" and value not in [v["value"] for v in option["options"]]:
            raise RequestError.invalid_params({"configId": config_id, "reason": f"unknown value {value!r}"})
        choice = f"{config_id}={json.dumps(value) if isinstance(value, bool) else value}"
        if choice in self._script.get("refuse", []):
            raise RequestError(-32603, f"{config_id} {value} is not available now", {"configId": config_id})
        if choice in self._script.get("ignore", []):  # answers, but keeps its value
            return SetSessionConfigOptionResponse(config_options=self._config(session_id))
        self._state(session_id)["config"][config_id] = value
        return SetSessionConfigOptionResponse(config_options=self._config(session_id))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        request = PromptRequest(session_id=session_id, prompt=prompt, field_meta=kwargs or None)
        cwd = self._sessions.get(session_id)
        if cwd is None:
            self._log("prompt", params=_plain(request), turn=None)
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "no such session"})
        number = self._prompts
        self._prompts += 1
        self._log("prompt", params=_plain(request), turn=number)
        turns = self._script.get("turns", [])
        steps = turns[min(number, len(turns) - 1)] if turns else []
        turn = _Turn(session_id, cwd, prompt)
        running = self._turns.setdefault(session_id, set())
        running.add(turn)
        try:
            stop_reason = await self._run_steps(steps, turn)
        finally:
            running.discard(turn)
            if not running:
                self._turns.pop(session_id, None)
        return PromptResponse(stop_reason=stop_reason)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._log("cancel", params=_plain(CancelNotification(session_id=session_id, field_meta=kwargs or None)))
        for turn in self._turns.get(session_id, ()):
            turn.cancelled.set()

    # Steps --------------------------------------------------------------

    async def _run_steps(self, steps: list[dict[str, Any]], turn: _Turn | None) -> Any:
        for step in steps:
            ((kind, argument),) = step.items()
            handler: Callable[[Any, Any], Awaitable[str | None]] = getattr(self, f"_step_{kind}")
            stop_reason = await handler(argument, turn)
            if stop_reason is not None:
                return stop_reason
        return "end_turn"

    async def _say(self, turn: _Turn, text: str) -> None:
        await self._client.session_update(session_id=turn.session_id, update=update_agent_message_text(text))

    async def stdin_ended(self) -> None:
        """The client closed the connection: ``on_stdin_end``'s steps run
        before the agent exits."""
        await self._run_steps(self._script.get("on_stdin_end", []), None)

    async def _step_say(self, text: str, turn: _Turn) -> None:
        await self._say(turn, text)

    async def _step_say_many(self, argument: dict[str, Any], turn: _Turn) -> None:
        text = argument.get("text", "x")
        for _ in range(int(argument.get("count", 1))):
            await self._say(turn, text)

    async def _step_think(self, text: str, turn: _Turn) -> None:
        await self._client.session_update(session_id=turn.session_id, update=update_agent_thought_text(text))

    async def _step_session_title(self, title: str, turn: _Turn) -> None:
        update = SessionInfoUpdate(session_update="session_info_update", title=title)
        await self._client.session_update(session_id=turn.session_id, update=update)

    @staticmethod
    def _tool_content(argument: dict[str, Any], turn: _Turn) -> list[Any] | None:
        content: list[Any] = []
        if argument.get("text") is not None:
            content.append(tool_content(text_block(argument["text"])))
        diff = argument.get("diff")
        if diff is not None:
            content.append(tool_diff_content(turn.absolute(diff["path"]), diff.get("new", ""), diff.get("old")))
        return content or None

    @staticmethod
    def _locations(argument: dict[str, Any], turn: _Turn) -> list[ToolCallLocation] | None:
        locations = argument.get("locations")
        if locations is None:
            return None
        return [
            ToolCallLocation(path=turn.absolute(item))
            if isinstance(item, str)
            else ToolCallLocation(path=turn.absolute(item["path"]), line=item.get("line"))
            for item in locations
        ]

    async def _step_tool_call(self, argument: dict[str, Any], turn: _Turn) -> None:
        update = start_tool_call(
            argument["id"],
            argument.get("title", argument["id"]),
            kind=argument.get("kind"),
            status=argument.get("status"),
            content=self._tool_content(argument, turn),
            locations=self._locations(argument, turn),
            raw_input=argument.get("raw_input"),
            raw_output=argument.get("raw_output"),
        )
        await self._client.session_update(session_id=turn.session_id, update=update)

    async def _step_tool_update(self, argument: dict[str, Any], turn: _Turn) -> None:
        update = update_tool_call(
            argument["id"],
            title=argument.get("title"),
            kind=argument.get("kind"),
            status=argument.get("status"),
            content=self._tool_content(argument, turn),
            locations=self._locations(argument, turn),
            raw_input=argument.get("raw_input"),
            raw_output=argument.get("raw_output"),
        )
        await self._client.session_update(session_id=turn.session_id, update=update)

    async def _step_plan(self, entries: list[dict[str, Any]], turn: _Turn) -> None:
        update = update_plan(
            plan_entry(
                entry["content"],
                priority=entry.get("priority", "medium"),
                status=entry.get("status", "pending"),
            )
            for entry in entries
        )
        await self._client.session_update(session_id=turn.session_id, update=update)

    async def _step_read(self, argument: dict[str, Any], turn: _Turn) -> None:
        path = argument["path"]
        params = {
            "session_id": turn.session_id,
            "path": turn.absolute(path),
            "line": argument.get("line"),
            "limit": argument.get("limit"),
        }
        try:
            response = await self._ask("fs/read_text_file", params, self._client.read_text_file(**params))
        except Exception as exc:
            await self._say(turn, f"read {path} failed: {_error_text(exc)}")
        else:
            await self._say(turn, f"read {path}: {response.content}")

    async def _step_write(self, argument: dict[str, Any], turn: _Turn) -> None:
        path = argument["path"]
        content = argument.get("content", "") * int(argument.get("repeat", 1))
        params = {"session_id": turn.session_id, "path": turn.absolute(path), "content": content}
        logged = {**params, "content": content if len(content) <= 4096 else f"[{len(content)} characters]"}
        try:
            await self._ask("fs/write_text_file", logged, self._client.write_text_file(**params))
        except Exception as exc:
            await self._say(turn, f"write {path} failed: {_error_text(exc)}")
        else:
            await self._say(turn, f"wrote {path}")

    async def _create_terminal(self, argument: dict[str, Any], turn: _Turn) -> str:
        cwd = argument.get("cwd")
        env = argument.get("env") or {}
        params = {
            "session_id": turn.session_id,
            "command": argument["command"],
            "args": argument.get("args"),
            "env": [EnvVariable(name=name, value=value) for name, value in env.items()] or None,
            "cwd": turn.absolute(cwd) if cwd is not None else None,
            "output_byte_limit": argument.get("output_byte_limit"),
        }
        logged = {**params, "env": env or None}
        created = await self._ask("terminal/create", logged, self._client.create_terminal(**params))
        return created.terminal_id

    async def _terminal_call(self, method: str, name: str, turn: _Turn, terminal_id: str) -> Any:
        params = {"session_id": turn.session_id, "terminal_id": terminal_id}
        return await self._ask(method, params, getattr(self._client, name)(**params))

    async def _wait_for_exit(self, turn: _Turn, terminal_id: str) -> Any:
        return await self._terminal_call("terminal/wait_for_exit", "wait_for_terminal_exit", turn, terminal_id)

    async def _release(self, turn: _Turn, terminal_id: str) -> None:
        await self._terminal_call("terminal/release", "release_terminal", turn, terminal_id)

    async def _step_terminal(self, argument: dict[str, Any], turn: _Turn) -> None:
        try:
            terminal_id = await self._create_terminal(argument, turn)
            try:
                exited = await self._wait_for_exit(turn, terminal_id)
                output = await self._terminal_call("terminal/output", "terminal_output", turn, terminal_id)
            finally:
                await self._release(turn, terminal_id)
        except Exception as exc:
            await self._say(turn, f"terminal failed: {_error_text(exc)}")
        else:
            await self._say(turn, f"ran: {_exit_text(exited.exit_code, exited.signal)}\n{output.output}")

    async def _step_terminal_kill(self, argument: dict[str, Any], turn: _Turn) -> None:
        try:
            terminal_id = await self._create_terminal(argument, turn)
            try:
                await asyncio.sleep(float(argument.get("after", 0)))
                await self._terminal_call("terminal/kill", "kill_terminal", turn, terminal_id)
                exited = await self._wait_for_exit(turn, terminal_id)
                output = await self._terminal_call("terminal/output", "terminal_output", turn, terminal_id)
            finally:
                await self._release(turn, terminal_id)
        except Exception as exc:
            await self._say(turn, f"terminal failed: {_error_text(exc)}")
        else:
            await self._say(turn, f"killed: {_exit_text(exited.exit_code, exited.signal)}\n{output.output}")

    async def _step_permission(self, argument: dict[str, Any], turn: _Turn) -> None:
        tool_call = ToolCallUpdate(
            tool_call_id=argument.get("tool_call_id", "permission"),
            title=argument.get("title"),
            kind=argument.get("kind"),
            status=argument.get("status"),
        )
        options = [
            PermissionOption(option_id=option["id"], name=option.get("name", option["id"]), kind=option["kind"])
            for option in argument.get("options", [])
        ]
        params = {"session_id": turn.session_id, "tool_call": tool_call, "options": options}
        logged = {
            "session_id": turn.session_id,
            "tool_call": _plain(tool_call),
            "options": [_plain(option) for option in options],
        }
        try:
            response = await self._ask("session/request_permission", logged, self._client.request_permission(**params))
        except Exception as exc:
            await self._say(turn, f"permission failed: {_error_text(exc)}")
            return
        outcome = response.outcome
        if isinstance(outcome, AllowedOutcome):
            await self._say(turn, f"permission: selected {outcome.option_id}")
        else:
            await self._say(turn, "permission: cancelled")

    async def _step_wait_cancel(self, seconds: float, turn: _Turn) -> str | None:
        if turn.ignore_cancel:
            await asyncio.sleep(float(seconds))
            return None
        try:
            await asyncio.wait_for(turn.cancelled.wait(), timeout=float(seconds))
        except asyncio.TimeoutError:
            return None
        return "cancelled"

    async def _step_wait_file(self, path: str, turn: _Turn | None) -> str | None:
        """Wait until the file ``path`` exists (the test makes it when the
        turn may end: a turn that runs as long as the test needs; at
        ``initialize``, an agent that starts as slowly as the test needs);
        a cancel meanwhile ends the prompt ``cancelled``."""
        path = turn.absolute(path) if turn is not None else path
        while not os.path.exists(path):
            if turn is not None and turn.cancelled.is_set() and not turn.ignore_cancel:
                return "cancelled"
            await asyncio.sleep(0.02)
        return None

    async def _step_ignore_cancel(self, flag: bool, turn: _Turn) -> None:
        turn.ignore_cancel = bool(flag)

    async def _step_sleep(self, seconds: float, turn: _Turn | None) -> None:
        await asyncio.sleep(float(seconds))

    async def _step_crash(self, code: int, turn: _Turn | None) -> None:
        _write_stderr("scripted agent crashing")
        os._exit(int(code))

    async def _step_hang(self, flag: Any, turn: _Turn | None) -> None:
        await asyncio.get_running_loop().create_future()  # never done

    async def _step_garbage(self, text: str, turn: _Turn | None) -> None:
        # Through the SDK's own writer, so the line never splits a message.
        self._writer.write((text if text.endswith("\n") else text + "\n").encode("utf-8"))
        await self._writer.drain()

    async def _step_stderr(self, text: str, turn: _Turn | None) -> None:
        _write_stderr(text)

    async def _step_stderr_flood(self, size: int, turn: _Turn | None) -> None:
        line = "flood " * 15 + "\n"  # 91 bytes a line
        block = line * (1024 * 1024 // len(line))
        left = int(size)
        while left > 0:
            _write_stderr(block[:left])
            left -= len(block)

    async def _step_freeze_client(self, flag: Any, turn: _Turn | None) -> None:
        """SIGSTOP to the process that started this agent (the client),
        which stays frozen where it stands until the test kills or continues
        it: at stdin's end, a client stopping its agent after its turns
        settled (a point no output of the client marks)."""
        self._log("freeze_client", client=os.getppid())
        os.kill(os.getppid(), signal.SIGSTOP)

    async def _step_stop(self, reason: str, turn: _Turn) -> str:
        return reason

    async def _step_error(self, argument: dict[str, Any], turn: _Turn | None) -> None:
        code = int(argument.get("code", -32603))
        raise RequestError(code, argument.get("message", "scripted error"), argument.get("data"))

    async def _step_later(self, argument: dict[str, Any], turn: _Turn) -> None:
        """Run ``steps`` in the background, once ``when_exists`` exists
        (the test makes it after the turn ended): work an agent does
        outside any prompt turn."""

        async def run() -> None:
            trigger = argument["when_exists"]
            while not os.path.exists(trigger):
                await asyncio.sleep(0.05)
            self._log("later", steps=len(argument.get("steps", [])))
            try:
                await self._run_steps(argument.get("steps", []), turn)
            except Exception as exc:
                self._log("later_failed", error=_error_text(exc))

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _step_together(self, branches: list[list[dict[str, Any]]], turn: _Turn) -> str | None:
        """Run each list of steps at once, as an agent makes tool calls in
        parallel; the turn goes on when all are done (ended by the first
        branch, in script order, that ends it)."""
        ended = await asyncio.gather(*(self._run_steps(steps, turn) for steps in branches))
        return next((reason for reason in ended if reason != "end_turn"), None)

    async def _step_set_mode(self, mode_id: str, turn: _Turn) -> None:
        """The agent switches its own mode (``current_mode_update``)."""
        self._state(turn.session_id)["mode"] = mode_id
        await self._client.session_update(session_id=turn.session_id, update=CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id))

    async def _step_set_config(self, argument: dict[str, Any], turn: _Turn) -> None:
        """The agent changes a config value itself (``config_option_update``)."""
        self._state(turn.session_id)["config"][argument["id"]] = argument["value"]
        update = ConfigOptionUpdate(session_update="config_option_update", config_options=self._config(turn.session_id))
        await self._client.session_update(session_id=turn.session_id, update=update)

    async def _step_echo_options(self, flag: Any, turn: _Turn) -> None:
        """Says ``options: mode=ID ID=VALUE ...``: what this turn runs with."""
        state = self._state(turn.session_id)
        parts = ([f"mode={state['mode']}"] if state["mode"] is not None else []) + [
            f"{key}={json.dumps(value) if isinstance(value, bool) else value}" for key, value in state["config"].items()
        ]
        await self._say(turn, "options: " + " ".join(parts))

    async def _step_echo_prompt(self, flag: Any, turn: _Turn) -> None:
        await self._say(turn, "\n".join(_describe_block(block) for block in turn.prompt))

    # MCP ----------------------------------------------------------------

    def _mcp_server(self, argument: dict[str, Any], turn: _Turn) -> Any:
        """The stdio server the step names (default: the first one given)."""
        from mcp import StdioServerParameters

        servers = self._mcp_servers.get(turn.session_id, [])
        name = argument.get("server")
        chosen = next((s for s in servers if name is None or getattr(s, "name", None) == name), None)
        if chosen is None:
            given = [getattr(s, "name", "?") for s in servers]
            raise LookupError(f"no MCP server {name or ''} was given in the session (given: {given})".replace("  ", " "))
        if getattr(chosen, "command", None) is None:
            raise LookupError(f"MCP server {chosen.name!r} is not a stdio server")
        env = {variable.name: variable.value for variable in chosen.env or ()}
        env.update(argument.get("env") or {})
        return StdioServerParameters(command=chosen.command, args=list(chosen.args or []), env=env)

    async def _mcp(self, argument: dict[str, Any], turn: _Turn, use: Callable[[Any, Any], Awaitable[str]]) -> str:
        """Start the server, initialize, ``use`` the session, stop; what
        the server wrote on stderr is appended to a failure."""
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        server = self._mcp_server(argument, turn)
        with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
            try:
                async with stdio_client(server, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as session:
                        initialized = await session.initialize()
                        return await use(session, initialized)
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    raise
                errlog.seek(0)
                said = " | ".join(line.strip() for line in errlog.read().splitlines() if line.strip())[-500:]
                raise RuntimeError(_mcp_error_text(exc) + (f" ({said})" if said else "")) from None

    async def _step_mcp_call(self, argument: dict[str, Any], turn: _Turn) -> None:
        tool = argument["tool"]
        call_id = argument.get("id")
        self._log("mcp_call", tool=tool, arguments=argument.get("arguments"), env=argument.get("env"))
        if call_id is not None:
            update = start_tool_call(call_id, f"mcp {tool}", kind=argument.get("kind"), status="in_progress", raw_input=argument.get("arguments"))
            await self._client.session_update(session_id=turn.session_id, update=update)

        async def call(session: Any, initialized: Any) -> str:
            result = await session.call_tool(tool, argument.get("arguments") or {})
            text = "\n".join(getattr(block, "text", f"[{getattr(block, 'type', '?')}]") for block in result.content)
            return f"mcp {tool} error: {text}" if result.isError else f"mcp {tool}: {text}"

        failed = False
        try:
            said = await self._mcp(argument, turn, call)
        except Exception as exc:
            said, failed = f"mcp {tool} failed: {_error_text(exc)}", True
        failed = failed or said.startswith(f"mcp {tool} error:")
        self._log("mcp_result", tool=tool, text=said)
        if call_id is not None:
            update = update_tool_call(call_id, status="failed" if failed else "completed", content=[tool_content(text_block(said))])
            await self._client.session_update(session_id=turn.session_id, update=update)
        await self._say(turn, said)

    async def _step_mcp_tools(self, argument: dict[str, Any], turn: _Turn) -> None:
        async def listing(session: Any, initialized: Any) -> str:
            tools = await session.list_tools()
            names = ", ".join(t.name for t in tools.tools)
            return f"mcp tools: {names}\n{initialized.instructions or ''}"

        try:
            said = await self._mcp(argument if isinstance(argument, dict) else {}, turn, listing)
        except Exception as exc:
            said = f"mcp tools failed: {_error_text(exc)}"
        await self._say(turn, said)


def _mcp_error_text(exc: BaseException) -> str:
    """An exception group (anyio's) read as its first real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return _error_text(exc)


def _describe_block(block: Any) -> str:
    if isinstance(block, TextContentBlock):
        return block.text
    if isinstance(block, EmbeddedResourceContentBlock):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        if isinstance(resource, BlobResourceContents):
            return f"[resource {resource.uri}]\n[blob {_decoded_size(resource.blob)} bytes]"
        return f"[resource {getattr(resource, 'uri', '?')}]"
    if isinstance(block, ResourceContentBlock):
        return f"[link {block.uri}]"
    if isinstance(block, ImageContentBlock):
        return f"[image {block.mime_type} {_decoded_size(block.data)} bytes]"
    if isinstance(block, AudioContentBlock):
        return f"[audio {block.mime_type} {_decoded_size(block.data)} bytes]"
    return f"[{getattr(block, 'type', type(block).__name__)}]"


async def _serve(script: dict[str, Any]) -> None:
    # The streams are made here, not inside run_agent, so the garbage step
    # can write through the very writer the SDK uses.
    reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent = ScriptedAgent(script, writer)
    # Unstable routes on, so session/resume reaches the agent; the agent
    # itself refuses it unless the script advertises it.
    await run_agent(agent, writer, reader, use_unstable_protocol=True)
    await agent.stdin_ended()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        _write_stderr("usage: scripted_agent.py SCRIPT.json")
        return 2
    try:
        script = load_script(args[0])
    except (OSError, ValueError) as exc:
        _write_stderr(f"scripted agent: bad script {args[0]}: {exc}")
        return 2
    asyncio.run(_serve(script))
    return 0


if __name__ == "__main__":
    sys.exit(main())
