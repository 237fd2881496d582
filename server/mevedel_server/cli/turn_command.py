"""``mevedel turn begin|capture|append|settle|abort``: drive one turn of a
session from a script.

``begin`` reserves the turn and records its prompt; ``capture`` records a
tracked file's content before the turn first changes it (or ``--gap`` when it
may change without a capture); ``append`` adds a response, reasoning, tool
call, tool result or mail record; ``settle`` ends the turn (completed,
errored or interrupted) and saves it; ``abort`` settles it as interrupted.
Between commands the unfinished turn is saved as a checkpoint, so the next
command continues it. Options as for ``mevedel session``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..store import EVIDENCE_KINDS, EvidenceInput, Outcome, SaveResult, SessionService
from .beside_held import add_beside_held_option, new_session
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    emit,
    held_session,
    run_command,
    workspace_root,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("turn", help="begin, record and settle a turn of a session")
    commands = parser.add_subparsers(title="turn commands", metavar="SUBCOMMAND", required=True)

    begin = commands.add_parser("begin", help="begin a turn with the user's prompt")
    begin.add_argument("prompt", metavar="PROMPT", help="the prompt ('-' reads it from stdin)")
    begin.add_argument("--new", action="store_true", help="in a new session (created by this command)")
    begin.add_argument("--name", help="with --new: the new session's display name")
    add_beside_held_option(begin)
    add_session_option(begin)
    add_common(begin)
    begin.set_defaults(run=run_begin)

    capture = commands.add_parser("capture", help="record tracked files before the turn changes them")
    capture.add_argument("paths", metavar="PATH", nargs="+", help="files inside the workspace")
    capture.add_argument("--gap", metavar="REASON", help="record a capture gap instead (the file may change uncaptured)")
    add_session_option(capture)
    add_common(capture)
    capture.set_defaults(run=run_capture)

    append = commands.add_parser("append", help="add a record to the turn in flight")
    append.add_argument("kind", choices=EVIDENCE_KINDS)
    append.add_argument("--text", help="response, reasoning or mail text ('-' reads stdin)")
    append.add_argument("--call-id", help="tool call / result identity")
    append.add_argument("--tool", dest="tool_name", help="tool call: the tool's name")
    append.add_argument("--arguments", help="tool call: its arguments (JSON text; '-' reads stdin)")
    append.add_argument("--output", help="tool result: its output ('-' reads stdin)")
    append.add_argument("--error", action="store_true", help="tool result: the call failed")
    append.add_argument("--mail-id", help="mail: its identity")
    append.add_argument("--sender", help="mail: who sent it")
    add_session_option(append)
    add_common(append)
    append.set_defaults(run=run_append)

    settle = commands.add_parser("settle", help="end the turn in flight and save it")
    settle.add_argument("--outcome", choices=[o.value for o in Outcome], default=Outcome.COMPLETED.value)
    settle.add_argument("--reason", help="why the turn errored or was interrupted")
    add_session_option(settle)
    add_common(settle)
    settle.set_defaults(run=run_settle)

    abort = commands.add_parser("abort", help="settle the turn in flight as interrupted and save it")
    abort.add_argument("--reason", help="why it was aborted")
    add_session_option(abort)
    add_common(abort)
    abort.set_defaults(run=run_abort)


def _text(value: str | None) -> str | None:
    if value == "-":
        return sys.stdin.read()
    return value


def save_data(result: SaveResult) -> dict[str, Any]:
    return {"session_id": result.session_id, "committed": result.committed, "materialized": result.materialized}


async def _writable(service: SessionService, given: str | None) -> str:
    sid = await held_session(service, given)
    await service.sessions.open(sid, "resume")
    return sid


def run_begin(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        prompt = _text(arguments.prompt)
        if arguments.new:
            if arguments.session is not None:
                raise CommandError("invalid-params", "give either --new or --session, not both")
            sid = (await new_session(service, arguments, arguments.name)).session_id
        else:
            if arguments.name is not None:
                raise CommandError("invalid-params", "--name names a new session: use it with --new")
            sid = await _writable(service, arguments.session)
        started = await service.turns.begin_turn(sid, prompt)
        await service.turns.checkpoint(sid)
        emit(
            arguments,
            {"session_id": sid, "turn": started.turn, "turn_id": started.turn_id, "reminder": started.reminder},
            [f"{sid}: turn {started.turn} begun" + (" (carries the reconciliation reminder)" if started.reminder else "")],
        )

    return run_command(arguments, body)


def _workspace_relative(root: Path | None, given: str) -> str:
    if root is None:
        # An SSH workspace: the path is already workspace-relative (the
        # target refuses anything that leaves the workspace).
        if given.startswith("/"):
            raise CommandError("invalid-params", f"{given}: give a path relative to the SSH workspace")
        return given
    path = Path(given)
    absolute = Path(os.path.abspath(path if path.is_absolute() else Path.cwd() / path))
    # The workspace root is resolved; so is the file's directory (the file
    # itself is not: a symlinked file is refused by the target, not followed).
    absolute = Path(os.path.realpath(absolute.parent)) / absolute.name
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        raise CommandError("invalid-params", f"{given}: is outside the workspace") from None
    return relative.as_posix()


def run_capture(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        root = workspace_root(arguments)
        sid = await _writable(service, arguments.session)
        results = []
        for given in arguments.paths:
            results.append(await service.turns.capture_file(sid, _workspace_relative(root, given), gap=arguments.gap))
        await service.turns.checkpoint(sid)
        lines = [f"{r.path}: {r.state}" + (f" ({r.gap_reason})" if r.gap_reason else "") for r in results]
        data = {
            "session_id": sid,
            "captures": [{"path": r.path, "state": r.state, "size": r.size, "gap_reason": r.gap_reason} for r in results],
        }
        emit(arguments, data, lines)

    return run_command(arguments, body)


def run_append(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await _writable(service, arguments.session)
        item = EvidenceInput(
            kind=arguments.kind,
            text=_text(arguments.text),
            call_id=arguments.call_id,
            name=arguments.tool_name,
            arguments=_text(arguments.arguments),
            output=_text(arguments.output),
            is_error=arguments.error,
            mail_id=arguments.mail_id,
            sender=arguments.sender,
        )
        await service.turns.append(sid, item)
        await service.turns.checkpoint(sid)
        emit(arguments, {"session_id": sid, "appended": arguments.kind}, [f"{sid}: {arguments.kind} appended"])

    return run_command(arguments, body)


def run_settle(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await _writable(service, arguments.session)
        turn = service.info(sid).open_turn
        result = await service.turns.settle(sid, arguments.outcome, reason=arguments.reason)
        emit(arguments, save_data(result) | {"turn": turn, "outcome": arguments.outcome}, [f"{sid}: turn {turn} {arguments.outcome} and saved"])

    return run_command(arguments, body)


def run_abort(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await _writable(service, arguments.session)
        turn = service.info(sid).open_turn
        # No turn runs in this process: what an agent's (a killed `mevedel
        # prompt`'s) changed since its last checkpoint is recorded first.
        result = await service.turns.abort(sid, arguments.reason, stopped=True)
        emit(arguments, save_data(result) | {"turn": turn, "outcome": "interrupted"}, [f"{sid}: turn {turn} aborted and saved"])

    return run_command(arguments, body)
