"""MCP server entries: ``{name: {command, args, env}}``, the shape of
``.mcp.json``'s ``mcpServers`` and of the ``mcpServers`` setting.

The setting (the LSP's settings, the CLI's ``config.json``) is the user's
own and trusted. The workspace's ``.mcp.json`` was written by whoever wrote
the repository: its entries run only once approved (:mod:`.approvals`),
and each approval holds for the exact command, arguments and environment
(:attr:`McpServerSpec.fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

#: The workspace file, at the workspace root.
WORKSPACE_FILE = ".mcp.json"
#: The most bytes of ``.mcp.json`` read.
MAX_WORKSPACE_FILE_BYTES = 1024 * 1024
#: The bounds of the ``mcpMaxMessageBytes`` setting (bytes of one message a
#: server may send before its connection is refused).
MAX_MESSAGE_BYTES_BOUNDS = (64 * 1024, 1024 * 1024 * 1024)
_NAME_LIMIT = 128

Origin = Literal["settings", "workspace"]


@dataclass(frozen=True)
class McpServerSpec:
    """How to start one stdio MCP server."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    origin: Origin = "settings"
    #: A workspace server's program as it resolves (``PATH``, or the
    #: workspace file its command names), and the sha256 of every
    #: workspace file its command line names (:func:`.access.pinned`):
    #: part of the fingerprint, so changing the script it runs asks again.
    program: str | None = None
    files: tuple[tuple[str, str], ...] = ()

    @property
    def fingerprint(self) -> str:
        """sha256 of exactly what runs: command, arguments, environment,
        and (a workspace server) the program it resolves to and the content
        of the workspace files its command line names."""
        fields: dict[str, Any] = {"command": self.command, "args": list(self.args), "env": dict(sorted(self.env.items()))}
        if self.program is not None or self.files:
            fields.update(program=self.program, files=[list(pair) for pair in self.files])
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    @property
    def runs(self) -> str:
        """What an approval covers, for the question and the record: the
        command line, the program it resolves to, the files it names."""
        text = self.command_line
        if self.program is not None and self.program != self.command:
            text += f" (program {self.program})"
        if self.files:
            text += " (workspace files " + ", ".join(f"{path} sha256:{digest[:12]}" for path, digest in self.files) + ")"
        return text

    @property
    def command_line(self) -> str:
        """The exact command, as a shell would spell it, with its environment."""
        words = [f"{k}={v}" for k, v in sorted(self.env.items())] + [self.command, *self.args]
        return shlex.join(words)


def _entry_problem(name: Any, entry: Any) -> str | None:
    if not isinstance(name, str) or not name.strip() or len(name) > _NAME_LIMIT or any(ord(c) < 32 for c in name):
        return f"server name {name!r} must be 1-{_NAME_LIMIT} printable characters"
    if not isinstance(entry, Mapping):
        return f"{name} must be an object {{command, args, env}}"
    if "command" not in entry and ("url" in entry or entry.get("type") in ("http", "sse", "streamable-http")):
        return f"{name}: only stdio servers (command, args, env) are supported, not a URL"
    command = entry.get("command")
    if not isinstance(command, str) or not command or "\x00" in command:
        return f"{name}.command must be a non-empty string (the program)"
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a for a in args):
        return f"{name}.args must be a list of strings"
    env = entry.get("env", {})
    if env is None:
        env = {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and k and "=" not in k and "\x00" not in k and isinstance(v, str) and "\x00" not in v
        for k, v in env.items()
    ):
        return f"{name}.env must map variable names to strings"
    return None


def servers_problem(servers: Any) -> str | None:
    """Why an ``mcpServers`` value is refused, or None. Names the entry."""
    if not isinstance(servers, Mapping):
        return "must be an object mapping server names to {command, args, env}"
    for name, entry in servers.items():
        problem = _entry_problem(name, _plain(entry))
        if problem is not None:
            return problem
    return None


def _plain(entry: Any) -> Any:
    """A settings object (attrs) or a JSON object, as a mapping."""
    if isinstance(entry, Mapping):
        return entry
    if hasattr(entry, "command"):
        return {"command": entry.command, "args": list(getattr(entry, "args", []) or []), "env": dict(getattr(entry, "env", {}) or {})}
    return entry


def _spec(name: str, entry: Mapping[str, Any], origin: Origin) -> McpServerSpec:
    return McpServerSpec(name, entry["command"], tuple(entry.get("args") or ()), dict(entry.get("env") or {}), origin)


def servers_from_setting(servers: Mapping[str, Any]) -> dict[str, McpServerSpec]:
    """Validated setting entries (raises ValueError naming the entry)."""
    problem = servers_problem(servers)
    if problem is not None:
        raise ValueError(problem)
    return {name: _spec(name, _plain(entry), "settings") for name, entry in servers.items()}


@dataclass(frozen=True)
class WorkspaceServers:
    """What a workspace's ``.mcp.json`` configures: usable entries, and
    one problem per entry (or for the whole file) that is not."""

    servers: dict[str, McpServerSpec]
    problems: dict[str, str]
    file_problem: str | None = None


class NotJson(ValueError):
    """A configuration file that cannot be read as JSON; its text is
    ``not valid JSON: <file>: <reason>``."""


def load_json(data: bytes | str, file: str) -> Any:
    """``data`` (a configuration file's bytes or text) as JSON, or
    :class:`NotJson` naming ``file`` and the reason: bad UTF-8, bad JSON,
    or nesting too deep for the parser (a hostile file of 100,000 ``[``
    would otherwise escape as a RecursionError)."""
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except UnicodeDecodeError as error:
        raise NotJson(f"not valid JSON: {file}: not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise NotJson(f"not valid JSON: {file}: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise NotJson(f"not valid JSON: {file}: nested too deeply") from None


def parse_workspace_file(data: bytes) -> WorkspaceServers:
    """The entries of a ``.mcp.json`` (``{"mcpServers": {...}}``)."""
    try:
        raw = load_json(data, WORKSPACE_FILE)
    except NotJson as error:
        return WorkspaceServers({}, {}, str(error))
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers", {}), dict):
        return WorkspaceServers({}, {}, f'{WORKSPACE_FILE} must be an object {{"mcpServers": {{NAME: {{command, args, env}}}}}}')
    servers: dict[str, McpServerSpec] = {}
    problems: dict[str, str] = {}
    for name, entry in raw.get("mcpServers", {}).items():
        problem = _entry_problem(name, entry)
        if problem is not None:
            problems[str(name)[:_NAME_LIMIT]] = problem
            continue
        servers[name] = _spec(name, entry, "workspace")
    return WorkspaceServers(servers, problems)


def load_cli_servers(path: Path) -> tuple[dict[str, McpServerSpec], float, float]:
    """The CLI's ``mcpServers``, ``mcpCallTimeoutSeconds`` and
    ``mcpStartTimeoutSeconds`` from its
    ``config.json`` (the LSP's setting names). A missing file configures
    nothing; a bad one raises ValueError naming the file and the key."""
    try:
        raw = load_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        return {}, 30.0, 60.0
    except OSError as error:
        raise ValueError(f"{path} cannot be read ({error.strerror or error})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold a JSON object")
    servers = raw.get("mcpServers", {}) or {}
    problem = servers_problem(servers)
    if problem is not None:
        raise ValueError(f"{path}: mcpServers: {problem}")
    limits = []
    for key, default in (("mcpCallTimeoutSeconds", 30), ("mcpStartTimeoutSeconds", 60)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise ValueError(f"{path}: {key} must be a number of seconds between 0 and 3600, got {value!r}")
        limits.append(float(value))
    return {name: _spec(name, entry, "settings") for name, entry in servers.items()}, limits[0], limits[1]


def load_cli_message_limit(path: Path) -> int | None:
    """The CLI's ``mcpMaxMessageBytes`` (None: the default), from the file
    :func:`load_cli_servers` already checked is readable."""
    try:
        raw = load_json(path.read_bytes(), str(path))
    except (OSError, NotJson):
        return None
    value = raw.get("mcpMaxMessageBytes") if isinstance(raw, dict) else None
    if value is None:
        return None
    low, high = MAX_MESSAGE_BYTES_BOUNDS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{path}: mcpMaxMessageBytes must be a whole number of bytes between {low} and {high}, got {value!r}")
    return value
