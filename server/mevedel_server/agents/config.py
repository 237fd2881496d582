"""Which agents the server can start, and the policies of a prompt.

The LSP reads these from its settings (``agents``, ``defaultAgent``,
``permissions``, ...); the CLI reads the same keys from
``$XDG_CONFIG_HOME/mevedel/config.json``. Both build one
:class:`AgentConfig`, so an agent is chosen and validated one way.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mcp_client import NotJson, load_json
from ..state_directory import state_directory
from .delegation.names import (
    CONCURRENT_BOUNDS,
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_MAX_DEPTH,
    DEPTH_BOUNDS,
)
from .errors import NOT_CONFIGURED, AgentError

PERMISSION_POLICIES = ("ask", "allow-reads", "allow-all")
_NAME_LIMIT = 128


@dataclass(frozen=True)
class AgentSpec:
    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    #: Defaults for every session of this agent (``mode``, ``options``):
    #: applied when its process opens a session, unless the session's own
    #: choice says otherwise. Not part of what the process is: a changed
    #: default does not restart a running agent.
    mode: str | None = field(default=None, compare=False)
    options: Mapping[str, str | bool] = field(default_factory=dict, compare=False)

    @property
    def fingerprint(self) -> str:
        """sha256 of the argv: a changed command is another installation,
        which is never asked to resume a conversation it did not have."""
        return hashlib.sha256(json.dumps(list(self.command)).encode()).hexdigest()

    def program_found(self) -> bool:
        program = self.command[0]
        return shutil.which(program) is not None if "/" not in program else os.access(program, os.X_OK)


#: ``terminalOutputMaxBytes`` unless set, and its bounds.
DEFAULT_TERMINAL_OUTPUT_MAX_BYTES = 1024 * 1024
TERMINAL_OUTPUT_BOUNDS = (1024, 1024 * 1024 * 1024)
#: ``executionLogMaxBytes`` unless set, and its bounds.
DEFAULT_EXECUTION_LOG_MAX_BYTES = 4 * 1024 * 1024
EXECUTION_LOG_BOUNDS = (1024, 1024 * 1024 * 1024)


@dataclass(frozen=True)
class AgentConfig:
    agents: Mapping[str, AgentSpec] = field(default_factory=dict)
    default_agent: str | None = None
    permissions: str = "ask"
    permission_timeout_seconds: float = 120.0
    start_timeout_seconds: float = 60.0
    cancel_timeout_seconds: float = 10.0
    #: A turn whose agent sends nothing at all for this long has failed.
    idle_timeout_seconds: float = 900.0
    #: The most output a terminal keeps, whatever the agent asks for.
    terminal_output_max_bytes: int = DEFAULT_TERMINAL_OUTPUT_MAX_BYTES
    #: ``checkpointExclude``: patterns (gitignore syntax) a turn's
    #: checkpoint leaves out, besides editors' own files.
    checkpoint_exclude: tuple[str, ...] = ()
    #: The most of one command's output its execution log keeps.
    execution_log_max_bytes: int = DEFAULT_EXECUTION_LOG_MAX_BYTES
    #: How deep sub-agents nest (``Agent`` tool; a root agent's is depth 1).
    subagent_max_depth: int = DEFAULT_MAX_DEPTH
    #: How many sub-agent turns run at once in one session.
    subagent_max_concurrent: int = DEFAULT_MAX_CONCURRENT

    def choose(self, requested: str | None, remembered: str | None = None) -> AgentSpec:
        """The agent for a prompt: the one asked for, else the session's,
        else ``defaultAgent``, else the only one configured."""
        if requested is not None:
            spec = self.agents.get(requested)
            if spec is None:
                raise AgentError(NOT_CONFIGURED, f"agent {requested!r}", self._unknown(), self._how_to_configure())
            return spec
        for name in (remembered, self.default_agent):
            if name is not None and name in self.agents:
                return self.agents[name]
        if len(self.agents) == 1:
            return next(iter(self.agents.values()))
        if not self.agents:
            raise AgentError(NOT_CONFIGURED, "the prompt", "no agent is configured", self._how_to_configure())
        raise AgentError(
            NOT_CONFIGURED,
            "the prompt",
            f"names no agent and none is the default ({self._names()})",
            "pick one, or set defaultAgent",
        )

    def _unknown(self) -> str:
        return f"is not configured ({self._names()})" if self.agents else "is not configured (no agent is)"

    def _names(self) -> str:
        return "configured: " + ", ".join(sorted(self.agents)) if self.agents else "none configured"

    @staticmethod
    def _how_to_configure() -> str:
        return 'add it to the "agents" setting: {"NAME": {"command": ["program", "arg", ...]}}; docs/agents.md has ready entries'


def agents_problem(agents: Any) -> str | None:
    """Why an ``agents`` value is refused, or None. Names the entry."""
    if not isinstance(agents, Mapping):
        return "must be an object mapping agent names to {command, env}"
    for name, entry in agents.items():
        if not isinstance(name, str) or not name.strip() or len(name) > _NAME_LIMIT or any(c in name for c in "\n\x00"):
            return f"agent name {name!r} must be 1-{_NAME_LIMIT} printable characters"
        command = entry.get("command") if isinstance(entry, Mapping) else getattr(entry, "command", None)
        env = entry.get("env", {}) if isinstance(entry, Mapping) else getattr(entry, "env", {})
        if not isinstance(command, (list, tuple)) or not command or not all(isinstance(w, str) and w for w in command):
            return f"{name}.command must be a non-empty list of non-empty strings (the program and its arguments)"
        if any("\x00" in w for w in command):
            return f"{name}.command contains a NUL character"
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items()):
            return f"{name}.env must map variable names to strings"
        mode = entry.get("mode") if isinstance(entry, Mapping) else getattr(entry, "mode", None)
        options = entry.get("options", {}) if isinstance(entry, Mapping) else getattr(entry, "options", {})
        if mode is not None and not _choice_text(mode):
            return f"{name}.mode must be a mode id (text of 1-256 characters, one line), got {mode!r}"
        if not isinstance(options, Mapping) or not all(
            _choice_text(k, 256) and (isinstance(v, bool) or _choice_text(v)) for k, v in (options or {}).items()
        ):
            return f"{name}.options must map config option ids to a value id (text) or true/false"
        if len(options or {}) > 64:
            return f"{name}.options holds more than 64 options"
    return None


def _choice_text(value: Any, limit: int = 1024) -> bool:
    """A mode id, config option id or value id: one line of text."""
    return isinstance(value, str) and 0 < len(value) <= limit and "\n" not in value and "\x00" not in value


def specs_from(agents: Mapping[str, Any]) -> dict[str, AgentSpec]:
    """Validated ``agents`` entries (dicts or objects with command/env)."""
    specs = {}
    for name, entry in agents.items():
        command = entry.get("command") if isinstance(entry, Mapping) else entry.command
        env = entry.get("env", {}) if isinstance(entry, Mapping) else entry.env
        mode = entry.get("mode") if isinstance(entry, Mapping) else getattr(entry, "mode", None)
        options = entry.get("options", {}) if isinstance(entry, Mapping) else getattr(entry, "options", {})
        specs[name] = AgentSpec(name, tuple(command), dict(env or {}), mode, dict(options or {}))
    return specs


def log_dir() -> Path:
    """Where agents' standard error is logged (``agent-NAME.log``), for the
    server and the CLI alike."""
    return Path(state_directory()) / "logs"


def cli_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mevedel" / "config.json"


_CLI_KEYS = {
    "agents",
    "defaultAgent",
    "permissions",
    "permissionTimeoutSeconds",
    "agentStartTimeoutSeconds",
    "cancelTimeoutSeconds",
    "agentIdleTimeoutSeconds",
    "terminalOutputMaxBytes",
    "checkpointExclude",
    "executionLogMaxBytes",
    "subagentMaxDepth",
    "subagentMaxConcurrent",
}


def load_cli_config(path: Path | None = None) -> AgentConfig:
    """The CLI's agent configuration (the LSP's setting names, in a JSON
    file). A missing file is an empty configuration; a bad one is an
    :class:`AgentError` naming the file and the key."""
    path = path or cli_config_path()
    try:
        raw = load_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return AgentConfig()
    except OSError as error:
        raise AgentError(NOT_CONFIGURED, str(path), f"cannot be read ({error.strerror or error})", "fix or remove the file") from None
    except NotJson as error:
        raise AgentError(NOT_CONFIGURED, str(path), str(error), "fix or remove the file") from None
    if not isinstance(raw, dict):
        raise AgentError(NOT_CONFIGURED, str(path), "must hold a JSON object", "fix the file")
    return config_from_settings(raw, where=str(path))


def config_from_settings(raw: Mapping[str, Any], *, where: str) -> AgentConfig:
    """An :class:`AgentConfig` from camelCase setting keys (unknown keys
    are left to the caller)."""
    agents = raw.get("agents", {}) or {}
    problem = agents_problem(agents)
    if problem is not None:
        raise AgentError(NOT_CONFIGURED, f"{where}: agents", problem, "fix the setting")
    policy = raw.get("permissions", "ask")
    if policy not in PERMISSION_POLICIES:
        raise AgentError(NOT_CONFIGURED, f"{where}: permissions", f"must be one of {', '.join(PERMISSION_POLICIES)}, got {policy!r}")
    default = raw.get("defaultAgent")
    if default is not None and not isinstance(default, str):
        raise AgentError(NOT_CONFIGURED, f"{where}: defaultAgent", "must be an agent name")

    def seconds(key: str, fallback: float) -> float:
        value = raw.get(key, fallback)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
            raise AgentError(NOT_CONFIGURED, f"{where}: {key}", f"must be a number of seconds between 0 and 86400, got {value!r}")
        return float(value)

    def output_bytes(key: str = "terminalOutputMaxBytes", fallback: int = DEFAULT_TERMINAL_OUTPUT_MAX_BYTES,
                     bounds: tuple[int, int] = TERMINAL_OUTPUT_BOUNDS) -> int:
        value = raw.get(key, fallback)
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise AgentError(NOT_CONFIGURED, f"{where}: {key}", f"must be a whole number of bytes between {low} and {high}, got {value!r}")
        return value

    def count(key: str, fallback: int, bounds: tuple[int, int]) -> int:
        value = raw.get(key, fallback)
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise AgentError(NOT_CONFIGURED, f"{where}: {key}", f"must be a whole number between {low} and {high}, got {value!r}")
        return value

    exclude = raw.get("checkpointExclude", [])
    if not isinstance(exclude, list) or not all(isinstance(p, str) and "\n" not in p for p in exclude):
        raise AgentError(NOT_CONFIGURED, f"{where}: checkpointExclude", "must be a list of gitignore patterns (strings)", "fix the setting")
    return AgentConfig(
        checkpoint_exclude=tuple(exclude),
        agents=specs_from(agents),
        default_agent=default,
        permissions=policy,
        permission_timeout_seconds=seconds("permissionTimeoutSeconds", 120),
        start_timeout_seconds=seconds("agentStartTimeoutSeconds", 60),
        cancel_timeout_seconds=seconds("cancelTimeoutSeconds", 10),
        idle_timeout_seconds=seconds("agentIdleTimeoutSeconds", 900),
        terminal_output_max_bytes=output_bytes(),
        execution_log_max_bytes=output_bytes("executionLogMaxBytes", DEFAULT_EXECUTION_LOG_MAX_BYTES, EXECUTION_LOG_BOUNDS),
        subagent_max_depth=count("subagentMaxDepth", DEFAULT_MAX_DEPTH, DEPTH_BOUNDS),
        subagent_max_concurrent=count("subagentMaxConcurrent", DEFAULT_MAX_CONCURRENT, CONCURRENT_BOUNDS),
    )
