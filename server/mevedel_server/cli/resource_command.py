"""``mevedel read|glob|grep|apply-patch``: run a resource operation through the
same two-stage resolver the language server uses.

The owners come from flags: ``--workspace`` (default: the current
directory; ``ssh://[user@]host[:port]/path`` reaches one over SSH, read and
written through its target as the LSP's remote folders are), ``--session
ID`` (the session scope of ``work://`` and ``artifact://``, and the session
``history://root`` and ``agent://`` read: its committed records, as it is
not open in this process), ``--memory-root LOCATION:KIND:PATH`` and
``--skill-root ORIGIN:PATH`` (repeatable; a relative path is the local
workspace's). Output is the projection as text,
or one JSON object with ``--json``; a failure prints the authored address, the
error kind, the reason and the command that finds the right name (the
resolver's ``next_step``), and exits 1.

``apply-patch --session ID`` writes that session's ``work://`` files only
under this CLI client's own lease: it resumes the session first (as every
``mevedel session``/``turn`` command that writes does, and leaves the lease
held), so a session another client holds, or an unknown id, is refused
with its session error and nothing is written or created.

``read mcp://...`` reaches the MCP servers of the config file's
``mcpServers`` (``$XDG_CONFIG_HOME/mevedel/config.json``, the LSP's setting
names, with ``mcpCallTimeoutSeconds`` and ``mcpStartTimeoutSeconds``) and of the workspace's
``.mcp.json``. A workspace server runs only once approved for its exact
command: ``--approve-mcp NAME`` approves it (remembered under
``$XDG_STATE_HOME/mevedel/``); without an approval the read is refused
naming that flag. Every server started is stopped before the command exits.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..addresses import AddressError, Operation
from ..resources import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
    ResolverContext,
    execute,
    prepare,
    reaches_mcp,
    reads_session,
)
from ..targets import (
    LocalTarget,
    SshLocation,
    TargetError,
    WorkspaceLocationError,
    parse_workspace_location,
    workspace_target,
)
from .authored import shown
from .root_flags import add_root_flags, roots_of
from .session_client import CommandError, cli_identity, refuse, stopped_turn_lookup

if TYPE_CHECKING:
    from ..mcp_client import McpAccess
    from ..targets import Target

FAILED = 1


def register(subparsers: Any) -> None:
    read = _parser(subparsers, "read", "print the Read projection of an address")
    read.add_argument("address", metavar="ADDRESS")
    read.add_argument("--offset", type=int, default=1, help="first line, from 1 (default 1)")
    read.add_argument("--limit", type=int, default=2000, help="lines per page (default 2000)")
    read.add_argument("--char-offset", type=int, default=0, help="continue one long line from this character")
    read.add_argument(
        "--approve-mcp",
        action="append",
        default=[],
        metavar="NAME",
        help="approve the workspace .mcp.json server NAME to run (its exact command; remembered; repeatable)",
    )
    read.set_defaults(run=_run, operation=Operation.READ)

    glob = _parser(subparsers, "glob", "list the files under an address that match a pattern")
    glob.add_argument("address", metavar="ADDRESS")
    glob.add_argument("pattern", nargs="?", default="**/*", help="glob over relative paths (default **/*)")
    glob.add_argument("--limit", type=int, default=1000)
    glob.set_defaults(run=_run, operation=Operation.GLOB)

    grep = _parser(subparsers, "grep", "search the Read projection under an address")
    grep.add_argument("pattern", help="a Python regular expression")
    grep.add_argument("address", metavar="ADDRESS")
    grep.add_argument("--glob", help="only files whose name (or relative path, with '/') matches")
    grep.add_argument("-i", "--ignore-case", action="store_true")
    grep.add_argument("--limit", type=int, default=500)
    grep.set_defaults(run=_run, operation=Operation.GREP)

    patch = _parser(subparsers, "apply-patch", "apply a '*** Begin Patch' envelope to workspace files, work:// and memory:// files")
    patch.add_argument("patch_file", metavar="FILE", help="the patch, or - for standard input")
    patch.set_defaults(run=_run, operation=Operation.APPLY_PATCH)


def _parser(subparsers: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help_text, description=help_text + ".")
    parser.add_argument(
        "--workspace",
        metavar="DIR|ssh://[user@]host[:port]/path",
        default=None,
        help="workspace root, here or over SSH (default: current directory)",
    )
    parser.add_argument(
        "--session",
        metavar="ID",
        help="session whose work://, artifact://, history://root and agent:// to use "
        "(default: the one session this CLI client holds here)",
    )
    add_root_flags(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser


def _location(arguments: argparse.Namespace) -> Path | SshLocation:
    """The ``--workspace`` given: a resolved local directory or an SSH location."""
    if arguments.workspace is None:
        return Path.cwd().resolve()
    try:
        location = parse_workspace_location(arguments.workspace)
    except WorkspaceLocationError as error:
        raise _UsageError(f"--workspace {error}") from None
    return location if isinstance(location, SshLocation) else location.resolve()


def _context(arguments: argparse.Namespace, location: Path | SshLocation, *, mcp: bool) -> ResolverContext:
    """The owners the operation reads; the MCP servers' (configuration
    files, the MCP client) only with ``mcp``."""
    # An SSH workspace has no local root: everything in it (the session
    # too, committed, by its id) is read through its target; memory and
    # skill roots are local directories, as for the LSP's remote folders.
    workspace = location if isinstance(location, Path) else None
    try:
        memory_roots, skill_roots = roots_of(arguments, workspace)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    session = _session_name(arguments)
    if workspace is None:
        target = workspace_target(location)
        return ResolverContext(
            memory_roots=memory_roots,
            skill_roots=skill_roots,
            store_target=target,
            remote_workspace=True,
            remote_session=session,
            mcp=_mcp_access(arguments, location, target) if mcp else None,
        )
    return ResolverContext(
        workspace_root=workspace,
        session_dir=workspace / ".mevedel" / "sessions" / session if session else None,
        memory_roots=memory_roots,
        skill_roots=skill_roots,
        mcp=_mcp_access(arguments, workspace) if mcp else None,
    )


def _session_name(arguments: argparse.Namespace) -> str | None:
    if arguments.session and ("/" in arguments.session or arguments.session in (".", "..")):
        raise _UsageError(f"--session {arguments.session!r}: a session id is one name")
    return arguments.session or None


def _mcp_access(arguments: argparse.Namespace, workspace: Path | SshLocation, target: Target | None = None) -> McpAccess:
    from ..agents import cli_config_path
    from ..mcp_client import configured_access

    try:
        return configured_access(workspace, cli_config_path(), approving=getattr(arguments, "approve_mcp", ()) or (), remote=target)
    except ValueError as error:
        raise _UsageError(str(error)) from None


async def _answer(arguments: argparse.Namespace, attempt: Any, context: ResolverContext) -> int:
    """Run the attempt and print its answer, then end the command
    (:func:`_end`): the person has the answer while that waits for a host."""
    try:
        try:
            result = await execute(attempt)
        except AddressError as error:
            return _failed(arguments, error)
        return _printed(arguments, result)
    finally:
        await _end(context)


async def _end(context: ResolverContext) -> None:
    """Every MCP server the command started stopped, and an SSH workspace's
    connection closed, as every command ends (:func:`.leaving.finish`)."""
    from .leaving import finish

    mcp = context.mcp
    await finish(context.store_target if context.remote_workspace else None,
                 mcp.connections.close_all if mcp is not None else None)


class _UsageError(Exception):
    pass


def _operand_and_options(arguments: argparse.Namespace) -> tuple[str, object]:
    operation = arguments.operation
    if operation is Operation.READ:
        return arguments.address, ReadOptions(
            offset=arguments.offset, limit=arguments.limit, char_offset=arguments.char_offset
        )
    if operation is Operation.GLOB:
        return arguments.address, GlobOptions(pattern=arguments.pattern, limit=arguments.limit)
    if operation is Operation.GREP:
        return arguments.address, GrepOptions(
            pattern=arguments.pattern, glob=arguments.glob, ignore_case=arguments.ignore_case, limit=arguments.limit
        )
    # ApplyPatch's machinery is loaded for apply-patch alone.
    from ..resources import PatchOptions

    given = arguments.patch_file
    source = sys.stdin if given == "-" else None
    try:
        text = source.read() if source else Path(given).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _UsageError(_unreadable_patch(given, error)) from None
    return text, PatchOptions()


def _unreadable_patch(given: str, error: BaseException) -> str:
    """Why the patch ``given`` cannot be read, and what to give instead."""
    if given.lstrip().startswith("*** Begin Patch"):
        return ("the patch is read from a file, not given as an argument: put it in a file, or give - and the patch "
                "on standard input (mevedel apply-patch - < change.patch)")
    if given == "-":
        subject = "the patch on standard input"
    else:
        subject = f"patch file {given if given.isprintable() and len(given) <= 200 else repr(given[:200])}"
    if isinstance(error, UnicodeDecodeError):
        return f"{subject}: is not UTF-8 text"
    if isinstance(error, FileNotFoundError):
        return f"{subject}: no such file"
    if isinstance(error, IsADirectoryError):
        return f"{subject}: is a directory"
    if isinstance(error, PermissionError):
        return f"{subject}: permission denied"
    return f"{subject}: {error.strerror or error.__class__.__name__}" if isinstance(error, OSError) else f"{subject}: cannot be read"


async def _held_session(target: Target) -> str | None:
    """The one session this CLI client holds in the workspace, the default
    of ``--session`` as for ``mevedel turn`` (None when it holds none or
    several)."""
    from ..store import LeaseState, SessionService
    from .leaving import leave

    service = SessionService(target, cli_identity(), leases_outlive_process=True)
    try:
        rows = (await service.sessions.list()).rows
    finally:
        await leave(service)  # and its target closed: the command reaches the workspace again for its answer
    held = [r.session_id for r in rows if r.holder_is_self and r.lease_state in (LeaseState.ACTIVE, LeaseState.PUBLISHING)]
    return held[0] if len(held) == 1 else None


def _run(arguments: argparse.Namespace) -> int:
    try:
        location = _location(arguments)
        operand, options = _operand_and_options(arguments)
        # The session store is listed for the held session, and the MCP
        # configuration read, only for an operand that reads them.
        if arguments.session is None and reads_session(arguments.operation, operand):
            arguments.session = asyncio.run(_default_session(location))
        context = _context(arguments, location, mcp=reaches_mcp(arguments.operation, operand))
    except _UsageError as error:
        print(f"mevedel: {error}", file=sys.stderr)
        return 2
    try:
        try:
            attempt = prepare(arguments.operation, operand, options, context)
        except BaseException:
            asyncio.run(_end(context))
            raise
        if arguments.operation is Operation.APPLY_PATCH and arguments.session:
            # Validated first: a patch refused as written claims no lease.
            return asyncio.run(_patch_under_lease(operand, arguments, context))
        return asyncio.run(_answer(arguments, attempt, context))
    except AddressError as error:
        return _failed(arguments, error)
    except CommandError as error:
        return refuse(arguments, error.kind, str(error))


def _printed(arguments: argparse.Namespace, result: Any) -> int:
    if arguments.json:
        print(json.dumps(_jsonable(arguments.operation, result)))
    else:
        print(_text(arguments.operation, result))
    sys.stdout.flush()
    return 0


def _failed(arguments: argparse.Namespace, error: AddressError) -> int:
    if arguments.json:
        print(json.dumps({"error": error.to_json()}))
        sys.stdout.flush()
    else:
        print(f"{shown(error.authored)}: {error.kind.value}: {error.reason}{_next_step(error)}", file=sys.stderr)
    return FAILED


async def _default_session(location: Path | SshLocation) -> str | None:
    """The session this CLI client holds in the workspace, when it holds
    exactly one (an unusable store leaves it unset)."""
    if isinstance(location, Path) and not location.joinpath(".mevedel", "sessions").is_dir():
        return None
    try:
        target = workspace_target(location)
    except TargetError:
        return None
    try:
        return await _held_session(target)  # which closes the target
    except TargetError:
        return None


async def _patch_under_lease(patch: str, arguments: argparse.Namespace, context: ResolverContext) -> int:
    """Run an ApplyPatch with ``--session`` as this CLI client and print its
    answer: the session is resumed under its lease first (refused when
    another client holds it or it does not exist), and stays held
    afterwards."""
    from ..resources import PatchOptions, writable_sessions
    from ..store import SessionService, error_kind, is_refusal

    try:
        target = context.store_target or LocalTarget(context.workspace_root)  # type: ignore[arg-type]
    except TargetError as error:
        raise CommandError("unavailable", f"workspace {arguments.workspace or '.'}: {error.reason}") from None
    service = SessionService(target, cli_identity(), stopped_turn_changes=stopped_turn_lookup(target), leases_outlive_process=True)
    try:
        try:
            await service.sessions.open(arguments.session, "resume")
        except Exception as error:  # the session's own refusal, with its kind
            if not is_refusal(error):
                raise
            raise CommandError(error_kind(error), str(error)) from None
        held = dataclasses.replace(context, store_target=target, session_writable=writable_sessions(service))
        try:
            result = await execute(prepare(Operation.APPLY_PATCH, patch, PatchOptions(), held))
        except AddressError as error:
            return _failed(arguments, error)
        return _printed(arguments, result)
    finally:
        from .leaving import leave

        await leave(service)  # closes its target, which is the context's


def _jsonable(operation: Operation, result: Any) -> dict[str, Any]:
    if operation is Operation.APPLY_PATCH:
        return {"changes": [_patch_change(change) for change in result.changes], "summary": result.summary()}
    return dataclasses.asdict(result)


def _patch_change(change: Any) -> dict[str, Any]:
    """One file change as ``mevedel/resource/applyPatch`` answers it
    (``PatchFileChange``, docs/protocol.md), spelled out field by field:
    what the resolver keeps inside a change is not the CLI's output."""
    shown: dict[str, Any] = {"address": change.display, "kind": change.kind, "added": change.added, "removed": change.removed}
    if change.move_display is not None:
        shown["moveTo"] = change.move_display
    return shown


def _text(operation: Operation, result: Any) -> str:
    if operation is Operation.READ:
        body = result.text
    elif operation is Operation.GLOB:
        body = "\n".join(result.matches)
    elif operation is Operation.GREP:
        body = "\n".join(f"{m.address}:{m.line}:{m.column}: {m.preview}" for m in result.matches)
    else:
        return result.summary()
    notice = getattr(result, "notice", None)
    return body + (f"\n-- {notice}" if notice else "")


def _next_step(error: AddressError) -> str:
    """The resolver's next step for the error, as a command to type."""
    from ..resources import next_step

    step = next_step(error)
    if step is None:
        return ""
    what, operand = step
    if what == "glob":
        return "; find the right path with: mevedel glob '**/NAME*'"
    if what == "list":
        return f"; see what exists with: mevedel read {operand}"
    return f"; the address documentation: mevedel read {operand}"
