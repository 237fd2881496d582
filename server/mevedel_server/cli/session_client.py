"""What the ``session`` and ``turn`` commands share: the CLI's client
identity, the workspace's session service, and how results and refusals are
printed.

The client model
----------------
All ``mevedel`` invocations of one user on one machine are *one client* of
the session store: the identity (an opaque client id and the host name) is
created once and kept in ``$XDG_STATE_HOME/mevedel/cli-client.json``
(``~/.local/state/...`` by default). A command that writes a session takes
its lease (resuming it; a foreign live lease is refused, an expired foreign
one needs ``session open --mode takeover --confirm-takeover``), does its
work, saves (a turn in flight is checkpointed) and leaves the lease held,
so the next command continues the same session unchanged; ``session close``
saves and releases it. ``--workspace`` is a directory or
``ssh://[user@]host[:port]/path`` (reached with the user's SSH
configuration); either spelling of one directory reaches the same sessions. A CLI process cannot renew a lease in the background:
between commands it may expire, and the next command by this client reclaims
it without asking (the session was not touched by anyone else meanwhile).

The client remembers its last session per workspace
(``$XDG_STATE_HOME/mevedel/cli-last-sessions.json``, written by ``prompt``,
``session open`` and ``fork``; :func:`remember_session`): a prompt with no
held session continues it when free and refuses, naming the holder, when
another client holds it; ``fork`` releases the source and makes the child
current.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import msgspec

from ..state_directory import state_directory
from ..targets import LocalTarget, TargetError

if TYPE_CHECKING:
    from pathlib import Path

    from ..store import ClientIdentity, SessionService
    from ..targets import SshLocation

# The session store is imported by the functions that use it: a command
# that takes only this module's printing and identity (``read``) does not
# load it.

REFUSED = 1
IDENTITY_FILE = "cli-client.json"


class CommandError(Exception):
    """A refusal the command reports itself (kind + message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# The identity and the default workspace are found with os.path: pathlib
# (with urllib.parse, which it imports) is a tenth of a quick command's
# own start, and a listing of this directory has no other use for it.


def cli_identity(directory: str | os.PathLike[str] | None = None) -> ClientIdentity:
    """This user's CLI client identity, created on first use, in
    ``directory`` (default: :func:`state_directory`)."""
    from ..store import ClientIdentity

    parent = os.fspath(directory or state_directory())
    path = os.path.join(parent, IDENTITY_FILE)
    try:
        with open(path, encoding="utf-8") as file:
            data = json.loads(file.read())
        return ClientIdentity(str(data["client_id"]), str(data["host"]))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CommandError("unavailable", f"the CLI client identity in {path} is unreadable ({error}); remove it to start afresh") from None
    identity = ClientIdentity(f"cli-{os.urandom(12).hex()}", socket.gethostname()[:255])
    os.makedirs(parent, exist_ok=True)
    temporary = os.path.join(parent, f".{IDENTITY_FILE}.{os.urandom(4).hex()}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(json.dumps({"client_id": identity.client_id, "host": identity.host}) + "\n")
    try:
        os.link(temporary, path)  # the first writer wins; a racing one adopts it
    except FileExistsError:
        os.unlink(temporary)
        return cli_identity(directory)
    os.unlink(temporary)
    return identity


LAST_SESSIONS_FILE = "cli-last-sessions.json"


def _last_sessions_path() -> Path:
    from pathlib import Path

    return Path(state_directory()) / LAST_SESSIONS_FILE


def _last_sessions() -> dict[str, str]:
    try:
        data = json.loads(_last_sessions_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: nothing is remembered
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def last_session(arguments: argparse.Namespace) -> str | None:
    """The session this CLI client last prompted (or forked into) in the
    workspace, even when it holds it no more."""
    return _last_sessions().get(str(workspace_location(arguments)))


def remember_session(arguments: argparse.Namespace, session_id: str) -> None:
    """Make ``session_id`` this client's last session of the workspace
    (written whole: a reader sees the old map or the new one)."""
    remembered = _last_sessions()
    key = str(workspace_location(arguments))
    if remembered.get(key) == session_id:
        return
    remembered[key] = session_id
    path = _last_sessions_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{LAST_SESSIONS_FILE}.{os.urandom(4).hex()}.tmp")
    temporary.write_text(json.dumps(remembered, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--workspace",
        metavar="DIR|ssh://[user@]host[:port]/path",
        default=None,
        help="the workspace root, here or over SSH (default: the current directory)",
    )


def add_session_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session",
        metavar="ID",
        default=None,
        help="the session (default: the one session this CLI client holds in the workspace)",
    )


def current_directory() -> str:
    """The workspace when none is given: this directory, resolved."""
    return os.path.realpath(os.getcwd())


def workspace_location(arguments: argparse.Namespace) -> Path | SshLocation:
    """The ``--workspace`` given: a resolved local directory or an SSH location."""
    from pathlib import Path

    if arguments.workspace is None:
        return Path(current_directory())
    # The location grammar (and SSH's) loads only for a --workspace given.
    from ..targets import WorkspaceLocationError, parse_workspace_location

    try:
        location = parse_workspace_location(arguments.workspace)
    except WorkspaceLocationError as error:
        raise CommandError("invalid-params", f"--workspace {error}") from None
    if not isinstance(location, Path):
        return location  # an SSH location
    if not location.is_dir():
        why = "is not a directory" if location.exists() else "does not exist"
        raise CommandError("missing-target", f"--workspace {arguments.workspace}: {why}")
    return location.resolve()


def workspace_root(arguments: argparse.Namespace) -> Path | None:
    """The local workspace root; ``None`` for an SSH workspace."""
    location = workspace_location(arguments)
    return location if isinstance(location, os.PathLike) else None


def open_service(arguments: argparse.Namespace, *, inline: bool = False) -> SessionService:
    """The workspace's session service as this CLI client; ``inline``: the
    command does one thing at a time, so a local workspace's programs run on
    the event loop's own thread (see :class:`~..targets.LocalTarget`)."""
    from ..artifacts import session_artifacts
    from ..store import PRODUCT_STORAGE, SessionService, workspace_spool

    location = current_directory() if arguments.workspace is None else workspace_location(arguments)
    try:
        if isinstance(location, (str, os.PathLike)):
            target = LocalTarget(location, inline=inline)
        else:
            from ..targets import workspace_target

            target = workspace_target(location)
    except TargetError as error:
        raise CommandError("unavailable", f"workspace {arguments.workspace or '.'}: {error.reason}") from None
    # One command per process: what it publishes is collected once, at exit.
    # The identity makes the state directory, which keeps a save the host
    # could not record (the command ends; the next resume moves it there).
    identity = cli_identity()
    service = SessionService(target, identity, **PRODUCT_STORAGE, one_command=True, pending_spool=workspace_spool(location),
                             stopped_turn_changes=stopped_turn_lookup(target), leases_outlive_process=True)
    tell_kept_saves(service, location)
    # The artifact store's items keep their own conversations from expiring
    # (the service sweeps expired sessions when it lists them).
    # Named to people told it holds an item (with its host), as an editor is.
    session_artifacts(service).store.leases.label = f"mevedel CLI (pid {os.getpid()})"
    return service


def tell_kept_saves(service: SessionService, location) -> None:
    """Say on standard error, as each command does, when a save this
    machine kept for an SSH workspace's host reaches it (its keeping is
    told by the refusal of the command that failed to save). A workspace
    here has no spool: nothing to tell."""
    if not isinstance(location, (str, os.PathLike)):
        service.on_spool.append(functools.partial(_tell_kept_save, location.display_host))


def _tell_kept_save(host: str, notice) -> None:
    from ..store import describe_target_time

    since = f"the save this machine kept since {describe_target_time(notice.failed_at)}"
    if notice.event == "recorded":
        line = f"{since} is recorded on {host} now, pending: mevedel session retry-publication publishes it (abandon-publication drops it)"
    elif notice.event == "published":
        line = f"{since} is published on {host}; this machine keeps it no more"
    else:
        return
    print(f"mevedel: session {notice.session_id}: {line}", file=sys.stderr, flush=True)


def stopped_turn_lookup(target) -> Callable:
    """The CLI's ``SessionService(stopped_turn_changes=...)`` for ``target``."""
    return functools.partial(_stopped_turn_changes, target)


async def _stopped_turn_changes(target, session_id: str, turn_id: str, working: str, max_file_bytes: int):
    """What a turn a killed ``mevedel prompt`` (or server) left in flight
    changed, under this user's ``checkpointExclude``; the agent engine is
    loaded only when a turn was in flight."""
    from ..agents import AgentError, load_cli_config, stopped_turn_changes

    try:
        exclude = load_cli_config().checkpoint_exclude
    except AgentError:
        exclude = ()  # a broken configuration excludes nothing: more is recorded, never less
    return await stopped_turn_changes(target, session_id, turn_id, working, max_file_bytes=max_file_bytes, checkpoint_exclude=exclude)


def control_request_line(arguments: argparse.Namespace, row) -> str | None:
    """What a holder is told of a request for control waiting for its
    answer (a CLI owner polls nothing between commands, so the listing and
    the prompt say it): who asks, since when, until when, and the commands
    that answer."""
    ask = row.control_request
    if ask is None or not row.holder_is_self:
        return None
    import shlex

    from ..store import describe_target_time

    where = f" --workspace {shlex.quote(arguments.workspace)}" if arguments.workspace else ""
    until = (
        f"until you answer, or until your lease runs out at {describe_target_time(row.lease_expires_at)} "
        "(then they can take the session over)"
        if row.lease_expires_at
        else "until you answer"
    )
    return (
        f"{ask.requester_host or 'another client'} asks for control of session {row.session_id} "
        f"(since {describe_target_time(ask.requested_at)}; it waits {until}): "
        f"`mevedel session grant-control --session {row.session_id}{where}` hands it over, "
        f"`mevedel session keep-control --session {row.session_id}{where}` refuses"
    )


def agent_task_line(label: str, outcome: str | None, reason: str | None) -> str:
    """How a sub-agent's settled task is said (``label``: ``reviewer
    (helper)``), with why it was interrupted or failed when its task
    recorded it: the same line live (``mevedel prompt``) and read back
    (``mevedel session turn``)."""
    why = f": {reason}" if reason and outcome != "completed" else ""
    return f"[agent {label}: {outcome}{why}]"


async def held_session(service: SessionService, given: str | None, *, announce: argparse.Namespace | None = None,
                       rows: list | None = None) -> str:
    """``given``, or the single session whose lease this client holds. With
    ``announce`` (the command's arguments), a request for control waiting
    for this client's answer is printed on standard error from the same
    listing (see :func:`control_request_line`); with ``given`` too, from a
    listing made for it (of ``given``'s request alone): a CLI owner polls
    nothing between commands, so naming the session must not hide it.
    ``rows``: the command's listing, when it made one already."""
    from ..store import LeaseState

    if given is not None and announce is None:
        return given
    if rows is None:
        rows = (await service.sessions.list()).rows
    if announce is not None:
        for row in rows:
            line = control_request_line(announce, row) if given in (None, row.session_id) else None
            if line is not None:
                print(f"mevedel: {line}", file=sys.stderr, flush=True)
    if given is not None:
        return given
    held = [
        row.session_id
        for row in rows
        if row.holder_is_self and row.lease_state in (LeaseState.ACTIVE, LeaseState.PUBLISHING)
    ]
    if len(held) == 1:
        return held[0]
    if not held:
        raise CommandError("owner-missing", "no session is open for this CLI client in this workspace; name one with --session")
    raise CommandError("invalid-params", f"{len(held)} sessions are open for this CLI client ({', '.join(held)}); name one with --session")


def plain(value: Any) -> Any:
    """JSON-ready data of results (msgspec structs, dataclasses, enums, tuples)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    # No value is a dataclass unless their module is loaded: a listing's
    # values are all structs, and it need not load it (nor ``copy``).
    dataclasses = sys.modules.get("dataclasses")
    if dataclasses is not None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: plain(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def emit(arguments: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if arguments.json:
        print(json.dumps(plain(data), ensure_ascii=False))
    else:
        for line in lines:
            print(line)
    sys.stdout.flush()


def refuse(arguments: argparse.Namespace, kind: str, message: str) -> int:
    if getattr(arguments, "json", False):
        print(json.dumps({"error": {"kind": kind, "message": message}}, ensure_ascii=False))
        sys.stdout.flush()
    else:
        print(f"mevedel: {message}", file=sys.stderr)
    return REFUSED


#: The command that resolves an outcome its host could not tell (an
#: error's ``follow_up``: ``OutcomeUnknown``, ``PublicationUnknown``) once
#: the host answers.
_FOLLOW_UP_COMMANDS = {
    "retry-recovery": "mevedel rewind --retry-recovery",
    "retry-publication": "mevedel session retry-publication",
    "list": "mevedel session list",
}


def run_command(
    arguments: argparse.Namespace, body: Callable[[SessionService], Awaitable[None]], *, inline: bool = False
) -> int:
    """Run ``body`` with the workspace's service; refusals become exit 1
    with their kind. The service is detached afterwards: leases ``body``
    took stay held (``session close`` releases its own). ``inline``: see
    :func:`open_service`."""

    async def main() -> int:
        from .leaving import leave

        service = open_service(arguments, inline=inline)
        try:
            await body(service)
        finally:
            await leave(service)
        return 0

    try:
        return asyncio.run(main())
    except CommandError as error:
        return refuse(arguments, error.kind, str(error))
    except Exception as error:
        from ..store import (
            LeaseHeld,
            TakeoverNeedsConfirmation,
            TransferReserved,
            error_kind,
            is_refusal,
        )

        if is_refusal(error):
            message = str(error)
            if getattr(error, "kind", None) == "recovery-pending":
                message += "; mevedel rewind --retry-recovery finishes it (--abandon-recovery drops it)"
            follow_up = getattr(error, "follow_up", None)  # an outcome the host could not tell
            if getattr(error, "spooled", False):
                message += (
                    f"; the host could not record it, so this machine keeps it (in {state_directory()}): once the "
                    "host answers, mevedel session retry-publication records it there and publishes it unless the "
                    "host already holds it (any command or editor on this machine that resumes the session records it too)"
                )
            elif follow_up == "retry-publication" and not error.recorded:
                # Only this process held it, and it ends here.
                message += (
                    "; the host could not record it and this command ends, so once the host answers "
                    "mevedel session turns shows whether it was published: repeat the command if it was not"
                )
            elif follow_up is not None:
                message += f" (run: {_FOLLOW_UP_COMMANDS[follow_up]})"
            if isinstance(error, TakeoverNeedsConfirmation):
                sid = error.session_id or "ID"
                message += f"; take it over with: mevedel session take-control {sid} --confirm-takeover"
            elif isinstance(error, LeaseHeld) and not isinstance(error, TransferReserved):
                # The spec's joined view offers Request control; a command has no
                # view, so the refusal names the two things the person can do.
                sid = error.session_id or "ID"
                message += (
                    f"; ask its holder for control with: mevedel session take-control {sid}"
                    f" (or join it read-only: mevedel session open {sid})"
                )
            return refuse(arguments, error_kind(error), message)
        raise
