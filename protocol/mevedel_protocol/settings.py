"""The server's settings: ``initializationOptions`` at ``initialize`` and
``workspace/didChangeConfiguration`` later, either bare or under the
``mevedel`` key. Each setting is validated on its own: an invalid one is
reported and keeps its previous value; the others still apply.
"""

from typing import Literal, Optional, Union

import attrs

from .converter import SessionChoice

UnknownSchemes = Literal["near-miss", "all", "off"]
PermissionPolicy = Literal["ask", "allow-reads", "allow-all"]


@attrs.define
class AgentSetting:
    """How to start one agent: ``command`` is its argv (no shell), ``env``
    is added to the server's environment for it. ``mode`` and ``options``
    are its defaults for every session (an ACP session mode id; config
    option ids mapped to a value id or true/false, e.g. ``{"model":
    "large"}``), applied when its process opens a session unless the
    session's own choice says otherwise."""

    command: list[str]
    env: dict[str, str] = attrs.Factory(dict)
    mode: Optional[str] = None
    options: dict[str, Union[str, bool]] = attrs.Factory(dict)


@attrs.define
class MemoryRootSetting:
    """A persistent-memory directory. ``location``/``kind`` give its readable
    key (``local-mevedel``...) when it is the only root of that kind. A
    relative ``path`` is relative to the workspace folder; ``~`` expands."""

    path: str
    location: Literal["local", "global"]
    kind: Literal["mevedel", "agents"]


@attrs.define
class SkillRootSetting:
    """A directory whose subdirectories holding ``SKILL.md`` are skills.
    ``origin`` is ``local-mevedel``, ``local-agents``, ``global-mevedel``,
    ``global-agents``, ``bundled``, ``managed`` or ``plugin/NAME``."""

    path: str
    origin: str


@attrs.define
class McpServerSetting:
    """How to start one stdio MCP server read through ``mcp://`` (the
    ``.mcp.json`` shape): ``command`` is the program, ``args`` its
    arguments (no shell), ``env`` added to a minimal environment."""

    command: str
    args: list[str] = attrs.Factory(list)
    env: dict[str, str] = attrs.Factory(dict)


@attrs.define
class DiagnosticsSettings:
    """``unknown_schemes``: which unknown ``scheme://`` prefixes get a
    diagnostic: ``near-miss`` (close to one of ours, like ``wrok://``),
    ``all``, or ``off``."""

    unknown_schemes: UnknownSchemes = "near-miss"


@attrs.define
class SessionWatchSettings:
    """How this server notices that a session's lease head or transfer
    mailbox changed. A local workspace is watched with filesystem
    notifications, grouped until ``debounce_ms`` of quiet; any other target
    is polled every ``idle_poll_seconds``, or every ``active_poll_seconds``
    while a control transfer is in flight."""

    idle_poll_seconds: float = 10.0
    active_poll_seconds: float = 2.0
    debounce_ms: int = 20
    #: False polls a local workspace too: on a network filesystem another
    #: machine's writes raise no local notification.
    notifications: bool = True


@attrs.define
class ControlTransferSettings:
    """Control transfer: an unanswered request for control is granted
    ``prompt_timeout_seconds`` after this server first saw it (target
    clock); a granted release stays reserved for the requester for
    ``fence_seconds``."""

    prompt_timeout_seconds: int = 30
    fence_seconds: int = 15


@attrs.define
class Settings:
    """``current_session`` is a session id for every workspace folder, or an
    object mapping workspace folder URIs to session ids; a session's
    directory is ``<workspace>/.mevedel/sessions/<ID>/``.

    ``remote_workspaces`` are workspace folders on other machines, each
    ``ssh://[user@]host[:port]/path`` (``/~/path``: under the remote home),
    served beside the client's own workspace folders; requests name one by
    that address as ``workspaceFolder``."""

    memory_roots: list[MemoryRootSetting] = attrs.Factory(list)
    skill_roots: list[SkillRootSetting] = attrs.Factory(list)
    completion_limit: int = 200
    current_session: SessionChoice = None
    diagnostics: DiagnosticsSettings = attrs.Factory(DiagnosticsSettings)
    #: Sessions open read-only here advance through the owner's committed
    #: publications (``mevedel/session/setFollow`` opts one session out).
    follow_published: bool = True
    session_watch: SessionWatchSettings = attrs.Factory(SessionWatchSettings)
    #: Whole seconds a session lease lasts unrenewed (renewed every third);
    #: applies to sessions opened after the change.
    lease_seconds: int = 60
    control_transfer: ControlTransferSettings = attrs.Factory(ControlTransferSettings)
    remote_workspaces: list[str] = attrs.Factory(list)
    #: ACP agents by name: how to start each (``mevedel/turn/prompt``).
    agents: dict[str, AgentSetting] = attrs.Factory(dict)
    #: The agent a prompt uses when it names none and its session has none.
    default_agent: Optional[str] = None
    #: The agent's permission questions: ``ask`` the owner's editor, answer
    #: reads (and other non-mutating calls) without asking
    #: (``allow-reads``), or allow everything (``allow-all``).
    permissions: PermissionPolicy = "ask"
    #: An unanswered permission question is a rejection after this long.
    permission_timeout_seconds: int = 120
    #: Starting an agent (``initialize`` and its session) may take this long.
    agent_start_timeout_seconds: int = 60
    #: After a cancel, the agent has this long to end its turn before its
    #: connection is closed and the turn settles as interrupted.
    cancel_timeout_seconds: int = 10
    #: A turn whose agent sends nothing (no update, no request) for this
    #: long, while no command runs and no question waits, has failed.
    agent_idle_timeout_seconds: int = 900
    #: The most output a terminal of an agent keeps, in bytes, whatever
    #: ``outputByteLimit`` the agent asks for (its terminal/create answer
    #: says so when it asked for more).
    terminal_output_max_bytes: int = 1024 * 1024
    #: Paths a turn's checkpoint leaves out (gitignore syntax, as a root
    #: ``.gitignore``), besides editors' own files (Emacs ``.#name``,
    #: ``name~``, ``#name#``; Vim ``.name.swp``, ``4913``): never recorded,
    #: restored or reported as capture gaps.
    checkpoint_exclude: list[str] = attrs.Factory(list)
    #: Each command's output is also kept as ``artifact://executions/NAME.log``
    #: of the session, at most this many bytes (past it, the first and last
    #: halves with a marker where the middle was cut).
    execution_log_max_bytes: int = 4 * 1024 * 1024
    #: How deep sub-agents started with the ``Agent`` tool nest (a root
    #: agent's sub-agent is depth 1); a deeper call is refused naming it.
    subagent_max_depth: int = 2
    #: How many sub-agent turns run at once in one session; one more is
    #: refused naming it.
    subagent_max_concurrent: int = 4
    #: A turn in flight is published every this many seconds, so a crash
    #: loses at most that much (0: only at settlement).
    checkpoint_interval_seconds: int = 30
    #: Sessions not updated for this many days are removed (0: never)...
    session_max_age_days: int = 30
    #: ...except the this-many most recently updated ones.
    session_keep_recent: int = 3
    #: The longest message body the server reads, in bytes; a longer frame
    #: is skipped and answered with a ``parse-error``.
    max_message_bytes: int = 64 * 1024 * 1024
    #: MCP servers ``mcp://`` reads, by name (trusted: they start on first
    #: use). A workspace's ``.mcp.json`` adds servers that start only once
    #: the user approves each exact command.
    mcp_servers: dict[str, McpServerSetting] = attrs.Factory(dict)
    #: An MCP server that takes longer than this to start or to answer one
    #: call fails that call.
    mcp_call_timeout_seconds: int = 30
    #: Starting an MCP server, up to its ``initialize`` answer, may take this long.
    mcp_start_timeout_seconds: int = 60
    #: The longest message read from an MCP server, in bytes; a longer one
    #: (a huge resource) is skipped as it arrives and its call answered
    #: ``unreadable: ... larger than N bytes``.
    mcp_max_message_bytes: int = 64 * 1024 * 1024
    #: Versions the artifact store keeps per item (the latest always stays).
    artifact_max_versions: int = 20
    #: Bytes of versions the artifact store keeps per item.
    artifact_max_version_bytes: int = 64 * 1024 * 1024
