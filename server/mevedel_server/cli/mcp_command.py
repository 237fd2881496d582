"""``mevedel mcp``: the MCP tool server over standard input and output.

Two modes:

- relay -- when ``MEVEDEL_TOOL_SOCKET`` and ``MEVEDEL_TOOL_TOKEN`` are set
  (the LSP server launched the agent that starts this): the bytes are
  relayed to the tool host in the LSP server, which serves the session it
  bound to the token (:mod:`mevedel_server.tool_server.relay`). It starts
  with every agent, so ``cli/main.py`` runs it before building the parser,
  importing nothing else; :func:`run` does the same for a direct caller.
- standalone -- otherwise: this process binds ``--workspace`` (default:
  the current directory; ``ssh://[user@]host[:port]/path`` is served
  through its SSH target, reached once before anything is served, so an
  unreachable host, a refused host key or a missing directory stops the
  command naming it) and, with ``--session``, that session (resumed
  when free or already this CLI client's, else joined read-only), reads
  ``mcp://`` through the CLI's configured MCP servers, and serves the tools
  itself.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agents import cli_config_path
from ..mcp_client import (
    APPROVE_IN_A_TERMINAL,
    configured_access,
    default_approvals_path,
)
from ..resources import MemoryRoot, SkillRoot
from ..state_directory import client_state_directory, state_directory
from ..store import (
    PRODUCT_STORAGE,
    SessionService,
    error_kind,
    is_refusal,
    naming_session,
    workspace_spool,
)
from ..targets import LocalTarget, TargetError
from .root_flags import add_root_flags, roots_of
from .session_client import (
    IDENTITY_FILE,
    CommandError,
    cli_identity,
    stopped_turn_lookup,
    tell_kept_saves,
    workspace_location,
)

if TYPE_CHECKING:
    from ..mcp_client import McpAccess
    from ..targets import SshLocation, Target

SOCKET_ENV = "MEVEDEL_TOOL_SOCKET"
TOKEN_ENV = "MEVEDEL_TOOL_TOKEN"

DESCRIPTION = """\
Serve mevedel's tools to an MCP client over stdio: Read, Glob, Grep and
ApplyPatch, on ordinary workspace paths and mevedel resource addresses
(work://, work://shared/, artifact://, mevedel://, history://, memory://,
skill://, mcp://). The server's instructions list the address families
usable now.

Add it to an agent by hand:

  Claude Code:  claude mcp add mevedel -- mevedel mcp --workspace /path/to/project
                (or --workspace ssh://[user@]host[:port]/path: served over SSH)
  Codex:        in ~/.codex/config.toml
                  [mcp_servers.mevedel]
                  command = "mevedel"
                  args = ["mcp", "--workspace", "/path/to/project"]
  Any client:   {"mcpServers": {"mevedel": {"command": "mevedel",
                  "args": ["mcp", "--workspace", "/path/to/project"]}}}

Add --session ID (or NAME) to bind a session: its work:// files,
artifact:// output and history, and the right to change project files.
The session's writer is this user's CLI client, named by the identity in
$XDG_STATE_HOME/mevedel; an MCP client that starts servers without your
environment would make it another client (read-only): pass the directory
explicitly, e.g. --client-state ~/.local/state/mevedel. All of the
client's state follows that directory: the saves it keeps for an SSH host
and the workspace MCP servers approved.
Without a session, reads work and ApplyPatch changes only work://shared/
and memory files. Under the mevedel language server no flags are needed:
it passes MEVEDEL_TOOL_SOCKET and MEVEDEL_TOOL_TOKEN to the agents it
launches, and this command relays to it.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve Read/Glob/Grep/ApplyPatch with resource addresses to an MCP client (stdio)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workspace",
        metavar="DIR|ssh://[user@]host[:port]/path",
        default=None,
        help="workspace root, here or over SSH (default: current directory)",
    )
    parser.add_argument("--session", metavar="ID|NAME", default=None, help="the session to bind (default: none)")
    parser.add_argument(
        "--client-state",
        metavar="DIR",
        type=Path,
        default=None,
        help="the CLI's state directory, whose cli-client.json says which client this is, and where its kept saves "
        "and MCP approvals are (default: $XDG_STATE_HOME/mevedel; give it when the MCP client drops XDG_* variables)",
    )
    add_root_flags(parser)
    parser.set_defaults(run=run)


def _fail(message: str) -> int:
    print(f"mevedel mcp: {message}", file=sys.stderr)
    return 1


def run(arguments: argparse.Namespace) -> int:
    socket_path, token = os.environ.get(SOCKET_ENV), os.environ.get(TOKEN_ENV)
    if socket_path and token:
        from ..tool_server import relay_stdio

        return int(relay_stdio(socket_path, token) or 0)
    if arguments.workspace is not None and arguments.workspace.startswith("~"):
        # An MCP client starts this without a shell: no one else expands it.
        arguments.workspace = os.path.expanduser(arguments.workspace)
    try:
        location = workspace_location(arguments)
    except CommandError as error:
        return _fail(str(error))
    # An SSH workspace has no local root: its roots must be this machine's absolute paths.
    workspace = location if isinstance(location, Path) else None
    try:
        memory_roots, skill_roots = roots_of(arguments, workspace)
    except ValueError as error:
        print(f"mevedel: {error}", file=sys.stderr)
        return 2
    client_state = arguments.client_state.expanduser() if arguments.client_state is not None else None
    if client_state is not None and not (client_state / IDENTITY_FILE).is_file():
        return _fail(f"--client-state {client_state}: holds no CLI client identity ({IDENTITY_FILE}); "
                     "give the directory `mevedel session list` uses (`$XDG_STATE_HOME/mevedel`, by default ~/.local/state/mevedel)")
    try:
        return asyncio.run(_standalone(location, arguments.workspace, arguments.session, memory_roots, skill_roots, client_state))
    except CommandError as error:
        return _fail(str(error))


def _how_to_approve(client_state: Path | None) -> str:
    """How the refusal of an unapproved workspace server says to approve
    it: ``mevedel read --approve-mcp`` records the approval in the state
    directory of its own environment, which must be this client's."""
    state = os.path.abspath(client_state_directory(client_state))
    if state == os.path.abspath(state_directory()):
        return APPROVE_IN_A_TERMINAL
    parent, name = os.path.split(state)
    if name == "mevedel":  # ``$XDG_STATE_HOME/mevedel`` for that XDG_STATE_HOME
        where = shlex.quote(parent).replace("{", "{{").replace("}", "}}")
        return APPROVE_IN_A_TERMINAL.replace("mevedel read", f"XDG_STATE_HOME={where} mevedel read", 1)
    told = str(client_state).replace("{", "{{").replace("}", "}}")
    return f"{APPROVE_IN_A_TERMINAL} (it records the approval in $XDG_STATE_HOME/mevedel; this server reads those of --client-state {told})"


async def _reached(location: SshLocation, authored: str):
    """The SSH workspace's target, its root reached and pinned now: a
    client that starts this server learns at once, from its exit and
    standard error, that the host or directory cannot be used, rather than
    from every tool call failing."""
    from ..targets import workspace_target
    from .leaving import finish

    target = workspace_target(location)
    try:
        await target.stat(".")
    except TargetError as error:
        await finish(target)
        raise CommandError("unavailable", f"--workspace {authored}: {error.reason}") from None
    except BaseException:
        await finish(target)
        raise
    return target


async def _standalone(
    location: Path | SshLocation,
    authored: str | None,
    session: str | None,
    memory_roots: tuple[MemoryRoot, ...],
    skill_roots: tuple[SkillRoot, ...],
    client_state: Path | None = None,
) -> int:
    # (Path, not SshLocation: a local workspace never loads the SSH grammar.)
    if not isinstance(location, Path):
        target = await _reached(location, authored or location.uri)
    else:
        try:
            target = LocalTarget(location)
        except TargetError as error:
            raise CommandError("unavailable", f"workspace {location}: {error.reason}") from None
    return await _serve(target, location, session, memory_roots, skill_roots, client_state)


async def _serve(
    target: Target,
    location: Path | SshLocation,
    session: str | None,
    memory_roots: tuple[MemoryRoot, ...],
    skill_roots: tuple[SkillRoot, ...],
    client_state: Path | None,
) -> int:
    """Serve until the client ends the input, then end as every command
    does (:func:`.leaving.finish`): the calls still running answered, the
    MCP servers stopped, the session detached and the target closed -- on
    an SSH host that stopped answering, a wait said on standard error (the
    client's log; standard output is the MCP wire) that Ctrl-C stops."""
    from .leaving import finish

    # All of the client's state is in its one directory: who it is, the
    # servers it approved and the saves it keeps for a host (a workspace
    # here needs no spool), so --client-state takes them all along.
    state = client_state_directory(client_state)
    try:
        # This server has no one to ask: a workspace .mcp.json server runs
        # only once approved, and the refusal says how. An SSH workspace's
        # .mcp.json is read through its target; its servers run here.
        access = configured_access(location, cli_config_path(), how_to_approve=_how_to_approve(client_state), remote=target,
                                   approvals=Path(state) / default_approvals_path().name)
    except ValueError as error:
        await finish(target)
        raise CommandError("invalid-params", str(error)) from None
    service = SessionService(target, cli_identity(state), **PRODUCT_STORAGE, pending_spool=workspace_spool(location, state),
                             stopped_turn_changes=stopped_turn_lookup(target), leases_outlive_process=True)
    # A save this machine kept for the host reaches it when the session is resumed here.
    tell_kept_saves(service, location)
    input_ended = asyncio.Event()
    serving = asyncio.ensure_future(_serving(service, location, session, memory_roots, skill_roots, access, input_ended))
    waiting = asyncio.ensure_future(input_ended.wait())
    try:
        await asyncio.wait([serving, waiting], return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # Ctrl-C while serving: nothing more is answered
        serving.cancel()
        raise
    finally:
        waiting.cancel()
        await finish(target, functools.partial(_ended, serving, access, service))
    return 0


async def _serving(
    service: SessionService,
    location: Path | SshLocation,
    session: str | None,
    memory_roots: tuple[MemoryRoot, ...],
    skill_roots: tuple[SkillRoot, ...],
    access: McpAccess,
    input_ended: asyncio.Event,
) -> None:
    """The session bound, then the tools served over stdio until the input
    ends (``input_ended`` set then) and every call still running answered."""
    import anyio
    from mcp.server.stdio import stdio_server

    from ..tool_server import StandaloneContext, serve
    from .session_command import session_named

    remote = not isinstance(location, Path)
    sid = None
    if session is not None:
        try:
            sid = await session_named(service, session)
            opened = await service.sessions.open(sid, "auto")
        except TargetError as error:  # the host went away after it was reached
            raise CommandError("unavailable", naming_session(session, error)) from None
        except Exception as error:
            if not is_refusal(error):
                raise
            raise CommandError(error_kind(error), naming_session(session, error)) from None
        if opened.action == "join":
            print(
                f"mevedel mcp: session {sid} is held by another client; serving it read-only "
                "(work:// and project writes are refused)",
                file=sys.stderr,
            )
    context = StandaloneContext(
        None if remote else location, service, sid, memory_roots=memory_roots, skill_roots=skill_roots, mcp=access
    )
    try:
        async with stdio_server() as (read_stream, write_stream):
            relayed, received = anyio.create_memory_object_stream(0)
            async with anyio.create_task_group() as group:
                group.start_soon(_relay, read_stream, relayed, input_ended)
                await serve(context, received, write_stream)
    finally:
        await context.close()


async def _relay(source: Any, sink: Any, ended: asyncio.Event) -> None:
    """The client's messages passed on to the server, ``ended`` set once the
    client ended the input: the command's end begins then, while the calls
    still running are answered."""
    import anyio

    try:
        async with source, sink:
            async for message in source:
                await sink.send(message)
    except anyio.BrokenResourceError:  # the server stopped reading first
        pass
    finally:
        ended.set()


async def _ended(serving: asyncio.Future, access: McpAccess, service: SessionService) -> None:
    """The command's last work: the calls still running answered, the MCP
    servers stopped and the session service detached. Given up on (Ctrl-C
    while it waited for a silent host), it stops answering as well."""
    try:
        await asyncio.wait([serving])
    except asyncio.CancelledError:
        serving.cancel()
        raise
    try:
        if not serving.cancelled():  # (cancelled: Ctrl-C while serving)
            serving.result()  # the session's refusal, if it was not bound
    finally:
        try:
            await access.connections.close_all()
        finally:
            await service.sessions.detach()
