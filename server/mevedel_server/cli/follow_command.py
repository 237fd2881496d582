"""``mevedel session follow ID``: stream a session's committed publications.

The session is opened read-only (no lease is taken, whoever holds it) and
followed until the command is interrupted (Ctrl-C: exit status 130). The
first line is the state found at the start, every settled turn as ``new``;
each later line is one publication with something to tell: new or replaced
settled turns, removed turns, a new name, another lease holder. A mid-turn
checkpoint prints nothing; its turn appears once it settles. With
``--json`` each line is one JSON object with the fields of the LSP
notification ``mevedel/session/didPublish``, spelled as every ``--json``
output of this command is (``session_id``, ``removed_turns``...). A local workspace is watched with filesystem notifications
(nothing is read while nothing changes); another is polled every
``--poll-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

from ..resources import counted
from ..store import SessionWatcher, StoreError, WatchCadence
from ..targets import TargetError
from .session_client import add_common, emit, run_command, workspace_root

if TYPE_CHECKING:
    from ..store import FollowUpdate, SessionService


def register(subparsers: Any) -> None:
    commands = subparsers.choices["session"].session_commands
    follow = commands.add_parser(
        "follow",
        help="print the session's committed publications as they land, until interrupted",
        description=(
            "Open the session read-only (no lease is taken) and print its committed publications until "
            "interrupted (Ctrl-C, exit status 130). The first line is the state at the start, every settled "
            "turn as new; each later line is a publication with something to tell: new, replaced or removed "
            "settled turns, a new name, another lease holder. A mid-turn checkpoint prints nothing. With "
            "--json, one JSON object per line with the fields of the LSP notification mevedel/session/didPublish."
        ),
    )
    follow.add_argument("session_id", metavar="ID", help="the session to follow")
    add_common(follow)
    follow.add_argument(
        "--poll-seconds",
        type=_seconds,
        default=WatchCadence().idle_seconds,
        metavar="SECONDS",
        help="how often a workspace that is not local is polled (default %(default)s)",
    )
    follow.set_defaults(run=run_follow)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--poll-seconds {text!r}: not a number") from None
    if not 0.1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"--poll-seconds {text!r}: must be at least 0.1")
    return value


def run_follow(arguments: argparse.Namespace) -> int:
    # Imported here: every 'session' command builds this parser.
    from ..store import diff_conversations

    workspace = arguments.workspace if _remote(arguments) else workspace_root(arguments).as_uri()

    async def body(service: SessionService) -> None:
        sid = arguments.session_id
        await service.sessions.open(sid, "join")
        service.following.set_follow(sid, True)
        failed: asyncio.Future = asyncio.get_running_loop().create_future()

        def tell(update: FollowUpdate) -> None:
            _print(arguments, workspace, update)

        async def step(_wake) -> None:
            try:
                await service.following.follow(sid)
            except (StoreError, TargetError) as error:
                if not failed.done():
                    failed.set_result(error)

        # The starting state: every committed settled turn, as news.
        start = await service.following.follow(sid)
        initial = diff_conversations(None, service.session(sid).conversation)
        tell(msgspec.structs.replace(start, change=initial))
        service.following.on_follow.append(tell)
        cadence = WatchCadence(idle_seconds=arguments.poll_seconds, active_seconds=arguments.poll_seconds)
        watcher = SessionWatcher(service.target, sid, cadence=cadence)
        watcher.subscribe(step)
        watcher.start()
        try:
            error = await failed  # only a failure ends the stream; Ctrl-C ends the process
            raise error
        finally:
            await watcher.stop()

    return run_command(arguments, body)


def _remote(arguments: argparse.Namespace) -> bool:
    return bool(arguments.workspace) and "://" in arguments.workspace


def _print(arguments: argparse.Namespace, workspace: str, update: FollowUpdate) -> None:
    emit(arguments, _record(workspace, update), _lines(update))


def _record(workspace: str, update: FollowUpdate) -> dict[str, Any]:
    change = update.change
    turns = [
        {"turn": t.turn, "turn_id": t.turn_id, "segment": t.segment, "change": t.change, "state": t.state, "prompt": t.preview}
        for t in (change.turns if change else ())
    ]
    return {
        "workspace_folder": workspace,
        "session_id": update.session_id,
        "generation": update.generation,
        "display_name": update.display_name,
        "named": update.named,
        "settled_turns": update.settled_turns,
        "turns": turns,
        "removed_turns": list(change.removed) if change else [],
        "renamed": bool(change and change.renamed),
        "holder_changed": update.holder_changed,
        "holder_host": update.holder_host,
        "lease_state": update.lease_state,
        "held_back": update.held_back,
    }


def _lines(update: FollowUpdate) -> list[str]:
    lines: list[str] = []
    head = f"{update.session_id} ({update.display_name}), lease generation {update.generation}"
    if update.held_back is not None:
        return [f"{head}: not advanced: {update.held_back}"]
    change = update.change
    if change is not None:
        for turn in change.turns:
            lines.append(f"{head}: turn {turn.turn} {turn.change}, {turn.state}: {turn.preview}")
        if change.removed:
            lines.append(f"{head}: turns {', '.join(map(str, change.removed))} removed")
        if change.renamed:
            lines.append(f"{head}: renamed to {change.display_name}")
    if update.holder_changed or not lines:
        holder = f"held by {update.holder_host}" if update.holder_host else f"not held ({update.lease_state or 'never claimed'})"
        lines.append(f"{head}: {holder}, {counted(update.settled_turns, 'settled turn')}")
    return lines

