"""Settings from ``initializationOptions`` and
``workspace/didChangeConfiguration``.

Settings may come bare or under the ``mevedel`` key. A present key replaces
that setting (``null`` restores its default); absent keys keep their value.
Each setting is validated on its own: an invalid one is reported with
``window/showMessage`` naming it, and keeps its previous valid value.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from lsprotocol import types

from mevedel_protocol import Settings, converter, describe_structure_error, wire_name
from mevedel_protocol.methods import CONFIGURATION_SECTION

from .. import agents, mcp_client, resources, targets
from .workspaces import session_id_problem

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

_FIELDS = {wire_name(field.name): field for field in attrs.fields(Settings)}
_DEFAULTS = Settings()

_AGENT_SECONDS = ("permissionTimeoutSeconds", "agentStartTimeoutSeconds", "cancelTimeoutSeconds", "agentIdleTimeoutSeconds")

#: Completion never lists more than this, whatever the setting says.
MAX_COMPLETION_LIMIT = 10_000


def _check(name: str, value: Any) -> str | None:
    """Rules the types alone do not express."""
    if name == "completionLimit" and not 1 <= value <= MAX_COMPLETION_LIMIT:
        return f"must be between 1 and {MAX_COMPLETION_LIMIT}, got {value}"
    if name == "currentSession" and value is not None:
        ids = [value] if isinstance(value, str) else list(value.values())
        for session_id in ids:
            if (problem := session_id_problem(session_id)) is not None:
                return problem
    if name == "sessionWatch":
        return _session_watch_problem(value)
    if name == "leaseSeconds" and not MIN_LEASE_SECONDS <= value <= MAX_LEASE_SECONDS:
        return f"must be between {MIN_LEASE_SECONDS} and {MAX_LEASE_SECONDS}, got {value}"
    if name == "controlTransfer":
        return _control_transfer_problem(value)
    if name in ("memoryRoots", "skillRoots"):
        for index, root in enumerate(value):
            if not root.path:
                return f"[{index}].path is empty"
    if name == "remoteWorkspaces":
        for index, location in enumerate(value):
            try:
                if not location.startswith("ssh://"):
                    raise targets.SshLocationError(location, "a remote workspace is written ssh://[user@]host[:port]/path")
                targets.parse_ssh_location(location)
            except targets.SshLocationError as error:
                return f"[{index}] {error}"
    if name == "agents":
        return agents.agents_problem(value)
    if name == "checkpointExclude":
        for index, pattern in enumerate(value):
            if "\n" in pattern or "\x00" in pattern:
                return f"[{index}] is not one gitignore pattern (it holds a newline or NUL)"
    if name == "mcpServers":
        return mcp_client.servers_problem(value)
    if name in ("mcpCallTimeoutSeconds", "mcpStartTimeoutSeconds") and not 1 <= value <= 3_600:
        return f"must be between 1 and 3600 seconds, got {value}"
    if name in _BOUNDED_ELSEWHERE:
        package, bounds, unit = _BOUNDED_ELSEWHERE[name]
        low, high = getattr(package, bounds)
        if not low <= value <= high:
            return f"must be between {low} and {high}{unit}, got {value}"
    if name == "artifactMaxVersions" and not 1 <= value <= 1_000:
        return f"must be between 1 and 1000, got {value}"
    if name == "artifactMaxVersionBytes" and not 1 <= value <= 2**40:
        return f"must be between 1 and {2**40} bytes, got {value}"
    if name == "checkpointIntervalSeconds" and not 0 <= value <= 86_400:
        return f"must be between 1 and 86400 seconds (or 0: only at settlement), got {value}"
    if name == "sessionMaxAgeDays" and not 0 <= value <= 36_500:
        return f"must be between 1 and 36500 days (or 0: never remove sessions), got {value}"
    if name == "sessionKeepRecent" and not 0 <= value <= 10_000:
        return f"must be between 0 and 10000, got {value}"
    if name == "maxMessageBytes" and not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES:
        return f"must be between {MIN_MESSAGE_BYTES} and {MAX_MESSAGE_BYTES} bytes, got {value}"
    if name in _AGENT_SECONDS and not 1 <= value <= 86_400:
        return f"must be between 1 and 86400 seconds, got {value}"
    if name == "skillRoots":
        for index, root in enumerate(value):
            try:
                resources.SkillRoot(Path(root.path), root.origin)
            except ValueError as error:
                return f"[{index}].origin: {error}"
    return None


#: Settings whose bounds the package that applies them holds: package,
#: name, unit. Read from there when such a setting is given: neither the
#: agent engine's configuration nor the MCP client's load before anything
#: uses them.
_BOUNDED_ELSEWHERE = {
    "mcpMaxMessageBytes": (mcp_client, "MAX_MESSAGE_BYTES_BOUNDS", " bytes"),
    "terminalOutputMaxBytes": (agents, "TERMINAL_OUTPUT_BOUNDS", " bytes"),
    "executionLogMaxBytes": (agents, "EXECUTION_LOG_BOUNDS", " bytes"),
    "subagentMaxDepth": (agents, "DEPTH_BOUNDS", ""),
    "subagentMaxConcurrent": (agents, "CONCURRENT_BOUNDS", ""),
}


#: Bounds of ``sessionWatch``: a poll faster than this floods the one
#: connection to a remote target; a debounce longer delays every follower.
MIN_POLL_SECONDS = 0.1
MAX_DEBOUNCE_MS = 1000


#: Bounds of ``maxMessageBytes``: an initialize must fit; a body is held
#: whole in memory (and decoded), so not beyond a few GiB.
MIN_MESSAGE_BYTES = 64 * 1024
MAX_MESSAGE_BYTES = 2**31


#: Bounds of ``leaseSeconds`` (renewal runs every third of it).
MIN_LEASE_SECONDS = 3
MAX_LEASE_SECONDS = 86_400


def _control_transfer_problem(value: Any) -> str | None:
    for field, most in (("prompt_timeout_seconds", 86_400), ("fence_seconds", 3_600)):
        seconds = getattr(value, field)
        if not 1 <= seconds <= most:
            return f"{wire_name(field)} must be between 1 and {most} seconds, got {seconds}"
    return None


def _session_watch_problem(value: Any) -> str | None:
    for field in ("idle_poll_seconds", "active_poll_seconds"):
        seconds = getattr(value, field)
        if not math.isfinite(seconds) or seconds < MIN_POLL_SECONDS:
            return f"{wire_name(field)} must be at least {MIN_POLL_SECONDS} seconds, got {seconds}"
    if not 1 <= value.debounce_ms <= MAX_DEBOUNCE_MS:
        return f"debounceMs must be between 1 and {MAX_DEBOUNCE_MS}, got {value.debounce_ms}"
    return None


@dataclass(frozen=True, slots=True)
class Problem:
    """A refused setting (an error) or an ignored unknown key (a warning)."""

    message: str
    is_error: bool = True


def merge_settings(current: Settings, raw: Any) -> tuple[Settings, list[Problem]]:
    """``current`` updated by the keys of ``raw``, and one problem per
    setting that was refused or ignored (each naming the setting)."""
    if raw is None:
        return current, []
    if isinstance(raw, dict) and isinstance(raw.get(CONFIGURATION_SECTION), dict):
        raw = raw[CONFIGURATION_SECTION]
    if not isinstance(raw, dict):
        return current, [Problem(f"mevedel settings must be an object, got {type(raw).__name__}; keeping every setting")]
    changes: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in raw.items():
        field = _FIELDS.get(name)
        if field is None:
            known = ", ".join(sorted(_FIELDS))
            problems.append(Problem(f"unknown mevedel setting {name!r} is ignored (known: {known})", is_error=False))
            continue
        if value is None:
            changes[field.name] = getattr(_DEFAULTS, field.name)
            continue
        try:
            structured = converter.structure(value, field.type)
        except Exception as error:
            problems.append(Problem(f"mevedel setting {describe_structure_error(error, name)}; keeping its previous value"))
            continue
        if (problem := _check(name, structured)) is not None:
            problems.append(Problem(f"mevedel setting {name}: {problem}; keeping its previous value"))
            continue
        changes[field.name] = structured
    return attrs.evolve(current, **changes), problems


def apply_settings(ls: MevedelLanguageServer, raw: Any) -> None:
    ls.settings, problems = merge_settings(ls.settings, raw)
    for problem in problems:
        _log.warning("%s", problem.message)
        kind = types.MessageType.Error if problem.is_error else types.MessageType.Warning
        ls.window_show_message(types.ShowMessageParams(type=kind, message=problem.message))


async def _pull_settings(ls: MevedelLanguageServer) -> Any:
    """A client that sends ``settings: null`` expects us to ask."""
    workspace = ls.client_capabilities.workspace
    if workspace is None or not workspace.configuration:
        return None
    answer = await ls.workspace_configuration_async(
        types.ConfigurationParams(items=[types.ConfigurationItem(section=CONFIGURATION_SECTION)])
    )
    return answer[0] if answer else None


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.INITIALIZE)
    def initialize(ls: MevedelLanguageServer, params: types.InitializeParams) -> None:
        # Who this server serves, for people told who holds an item here.
        info = params.client_info
        ls.client_label = " ".join(filter(None, (info.name, info.version))) if info is not None else None  # type: ignore[attr-defined]
        apply_settings(ls, params.initialization_options)

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: MevedelLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        raw = params.settings
        if raw is None:
            raw = await _pull_settings(ls)
        apply_settings(ls, raw)
        ls.settings_changed()
