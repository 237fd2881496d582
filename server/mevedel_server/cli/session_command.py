"""``mevedel session list|create|open|close|rename|save|retry-publication|abandon-publication|acknowledge-mutation|compact|clear|turns|turn``.

Every subcommand takes ``--json`` (one JSON object on stdout; a refusal is
``{"error": {"kind", "message"}}`` with exit status 1) and ``--workspace
DIR``. See :mod:`.session_client` for the client model (one CLI client per
user, leases kept between commands until ``session close``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from ..artifacts import session_artifacts
from ..resources import counted
from ..store import (
    SESSION_ID_PATTERN,
    IdentityNeedsConfirmation,
    OpenMode,
    SessionInfo,
    SessionService,
    TakeoverNeedsConfirmation,
    describe_target_time,
)
from .beside_held import add_beside_held_option, new_session
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    agent_task_line,
    control_request_line,
    emit,
    held_session,
    plain,
    remember_session,
    run_command,
)

if TYPE_CHECKING:
    # Annotations only: the turn views import the diff, which a listing
    # does not need.
    from ..store import SegmentRotation, TurnDetail, TurnSummary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("session", help="list, create, open and manage durable sessions")
    commands = parser.add_subparsers(title="session commands", metavar="SUBCOMMAND", required=True)
    # Other modules add session subcommands too (control_command).
    parser.session_commands = commands  # type: ignore[attr-defined]

    listing = commands.add_parser("list", help="every session of the workspace and what opening it does")
    add_common(listing)
    listing.set_defaults(run=run_list)

    create = commands.add_parser(
        "create",
        help="start a new session",
        description="Start a new session. Nothing is written until its first turn: without --prompt "
        "only the ID is reserved, so give --prompt to begin the first turn right away.",
    )
    create.add_argument("--name", help="an explicit display name")
    create.add_argument("--prompt", help="begin the first turn with this prompt (saved as a checkpoint)")
    add_beside_held_option(create)
    add_common(create)
    create.set_defaults(run=run_create)

    opening = commands.add_parser("open", help="resume, join (read-only) or take over a saved session")
    opening.add_argument("session_id", metavar="ID|NAME", help="the session id, or its display name when one session has it")
    opening.add_argument("--mode", choices=[m.value for m in OpenMode], default=OpenMode.AUTO.value)
    opening.add_argument(
        "--confirm-takeover", action="store_true", help="take over a lease whose holder let it expire"
    )
    opening.add_argument(
        "--confirm-identity",
        action="store_true",
        help="bind a session made in another workspace (a copied session directory) to this one",
    )
    add_common(opening)
    opening.set_defaults(run=run_open)

    close = commands.add_parser("close", help="save the session and release its lease")
    add_session_option(close)
    add_common(close)
    close.set_defaults(run=run_close)

    rename = commands.add_parser("rename", help="give the session an explicit display name")
    rename.add_argument("name", metavar="NAME")
    add_session_option(rename)
    add_common(rename)
    rename.set_defaults(run=run_rename)

    save = commands.add_parser("save", help="publish a snapshot now, even if nothing changed")
    add_session_option(save)
    add_common(save)
    save.set_defaults(run=run_save)

    retry = commands.add_parser(
        "retry-publication",
        help="publish again a save that failed (kept across restarts until retried or abandoned)",
    )
    add_session_option(retry)
    add_common(retry)
    retry.set_defaults(run=run_retry_publication)

    abandon = commands.add_parser(
        "abandon-publication",
        help="drop a save that failed; the committed state stays as it is",
    )
    add_session_option(abandon)
    add_common(abandon)
    abandon.set_defaults(run=run_abandon_publication)

    acknowledge = commands.add_parser(
        "acknowledge-mutation",
        help="confirm that no command of a previous owner still runs, clearing the unsettled-mutation latch",
        description="A prompt is refused while a command an earlier owner of the session started may still run "
        "and cannot be proven gone (it ran on another machine, or its owner stopped before recording it). "
        "Check that nothing it started still changes the workspace, then acknowledge it here.",
    )
    add_session_option(acknowledge)
    add_common(acknowledge)
    acknowledge.set_defaults(run=run_acknowledge_mutation)

    compact = commands.add_parser(
        "compact",
        help="close the live transcript segment and continue in a new one that starts with a summary",
        description="Compaction: the live segment is closed and the next one starts with SUMMARY "
        "(your summary of the closed segment; mevedel runs no model). Refused while a turn is in flight.",
    )
    compact.add_argument("--summary", required=True, help="the summary of the closed segment ('-' reads stdin)")
    add_session_option(compact)
    add_common(compact)
    compact.set_defaults(run=run_compact)

    clear = commands.add_parser(
        "clear",
        help="/clear: close the current chat as a chapter and start a new segment",
        description="/clear: the current chat is closed as a chapter and a new segment starts. "
        "Refused while a turn is in flight.",
    )
    add_session_option(clear)
    add_common(clear)
    clear.set_defaults(run=run_clear)

    turns = commands.add_parser("turns", help="list the turns of a session")
    add_session_option(turns)
    add_common(turns)
    turns.set_defaults(run=run_turns)

    turn = commands.add_parser("turn", help="show one turn of a session")
    turn.add_argument("number", metavar="N", type=int)
    add_session_option(turn)
    add_common(turn)
    turn.set_defaults(run=run_turn)


def info_data(info: SessionInfo) -> dict[str, Any]:
    return {
        "session_id": info.session_id,
        "display_name": info.display_name,
        "named": info.named,
        "access": info.access.value,
        "read_only_reason": info.read_only_reason,
        "holder_host": info.holder_host,
        "materialized": info.materialized,
        "settled_turns": info.settled_turns,
        "open_turn": info.open_turn,
        "reconciliation_pending": info.reconciliation_pending,
        "recovery_pending": info.recovery_pending,
        "pending_publication": info.pending_publication,
    }


def info_line(info: SessionInfo) -> str:
    access = "writable" if info.read_only_reason is None else f"read-only ({info.read_only_reason})"
    turn = f", turn {info.open_turn} in flight" if info.open_turn else ""
    saved = "" if info.materialized else ", not saved yet"
    line = f"{info.session_id}  {info.display_name}  [{access}; {counted(info.settled_turns, 'settled turn')}{turn}{saved}]"
    if info.recovery_pending:
        line += "\n" + recovery_line(info.recovery_pending)
    if info.pending_publication:
        line += (
            f"\n  publication pending: {info.pending_publication}; "
            "mevedel session retry-publication publishes it, abandon-publication drops it"
        )
    return line


def recovery_line(recovery: str) -> str:
    return (
        f"  recovery {recovery} pending: an interrupted Rewind or Redo left project files to repair; "
        "mevedel rewind --retry-recovery finishes it, --abandon-recovery drops it"
    )


def run_list(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        listing = await service.sessions.list()
        hidden = await session_artifacts(service).hidden_sessions(listing.rows)
        shown = [row for row in listing.rows if row.session_id not in hidden]
        rows = [
            {
                "session_id": row.session_id,
                "display_name": row.display_name,
                "action": row.action.value,
                "turns": row.turn_count,
                "latest_prompt": row.latest_preview,
                "updated_at": row.updated_at,
                "holder_host": row.holder_host,
                "lease": row.standing.value,
                "holder_ended": row.holder_ended,
                "published": row.published,
                "recovery_pending": row.recovery_pending,
                "control_request": plain(row.control_request) if row.holder_is_self else None,
            }
            for row in shown
        ]
        inspect = [
            {"name": row.name, "subject": row.subject.value, "kind": row.kind.value if row.kind else None, "reason": row.reason}
            for row in listing.inspect_rows
        ]
        lines = [line for row in shown for line in _row_lines(arguments, row)] or ["no sessions in this workspace"]
        lines += [f"{row['name']}  Inspect  ({row['reason']})" for row in inspect]
        emit(arguments, {"sessions": rows, "inspect": inspect}, lines)

    # Reads (and the sweep of expired sessions), one after another.
    return run_command(arguments, body, inline=True)


def _row_lines(arguments: argparse.Namespace, row) -> list[str]:
    """A row, then what waits on it: a recovery, a request for control."""
    lines = [_row_line(row)]
    if row.recovery_pending:
        lines.append(recovery_line(row.recovery_pending))
    asked = control_request_line(arguments, row)
    if asked is not None:
        lines.append(f"  {asked}")
    return lines


def _row_line(row) -> str:
    where = ""
    if row.holder_host and row.action.value in ("Join", "Take over"):
        where = f"  held by {row.holder_host}" if row.action.value == "Join" else (f"  process ended, was {row.holder_host}" if row.holder_ended else f"  lease expired, was {row.holder_host}")
    when = describe_target_time(row.updated_at) if row.updated_at else "never"
    turns = "turn " if row.turn_count == 1 else "turns"  # the column keeps its width
    return f"{row.session_id}  {row.action.value:<9}  {row.turn_count:>4} {turns}  {when}  {row.display_name}{where}"


def run_create(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        info = await new_session(service, arguments, arguments.name)
        started = None
        if arguments.prompt is not None:
            started = await service.turns.begin_turn(info.session_id, arguments.prompt)
            await service.turns.checkpoint(info.session_id)
            info = service.info(info.session_id)
        data = info_data(info) | {"turn": started.turn if started else None}
        lines = [info_line(info)]
        if started is None:
            # The reservation lives in this process only (a session is written by
            # its first turn), so the ID cannot be named by a later command.
            named = f" --name {shlex.quote(arguments.name)}" if arguments.name is not None else ""
            lines.append(
                "nothing is saved, and this ID is not kept once this command ends (a session is written by its first turn);"
                f" start one with: mevedel turn begin --new{named} PROMPT"
            )
        emit(arguments, data, lines)

    return run_command(arguments, body)


async def session_named(service: SessionService, given: str) -> str:
    """``given`` when it is a session id, else the one listed session whose
    display name it is (refused, naming the candidates, when it is not
    exactly one)."""
    if SESSION_ID_PATTERN.match(given):
        return given  # an id (a malformed one is refused by open, naming why)
    rows = (await service.sessions.list()).rows
    named = [row.session_id for row in rows if row.display_name == given]
    if len(named) == 1:
        return named[0]
    if not named:
        raise CommandError("missing-target", f"{given!r}: no session has that name or id (mevedel session list shows them)")
    raise CommandError("invalid-params", f"{given!r}: {len(named)} sessions have that name ({', '.join(named)}); give one id")


def run_open(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await session_named(service, arguments.session_id)
        try:
            opened = await service.sessions.open(
                sid, arguments.mode, confirm_takeover=arguments.confirm_takeover, confirm_identity=arguments.confirm_identity
            )
        except TakeoverNeedsConfirmation as asked:
            advice = "take it over with" if asked.holder_ended else "if that client has stopped, take it over with"
            raise CommandError(
                "takeover-needs-confirmation", f"{asked}; {advice}: mevedel session open {sid} --confirm-takeover"
            ) from None
        except IdentityNeedsConfirmation as asked:
            raise CommandError(
                "identity-needs-confirmation",
                f"{asked}; if it was copied here on purpose, bind it with: mevedel session open {sid} --confirm-identity",
            ) from None
        if opened.info.read_only_reason is None:
            remember_session(arguments, sid)  # `mevedel prompt` continues it later
        data = info_data(opened.info) | {"action": opened.action, "interrupted_turn": opened.interrupted_turn}
        lines = [f"{opened.action}: {info_line(opened.info)}"]
        if opened.interrupted_turn:
            lines.append(f"turn {opened.interrupted_turn} was in flight and is now interrupted")
        emit(arguments, data, lines)

    return run_command(arguments, body)


def run_close(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        result = await service.sessions.close(sid)
        emit(arguments, {"session_id": sid, "closed": True, "saved": bool(result and result.committed)}, [f"{sid} closed"])

    return run_command(arguments, body)


def run_rename(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        info = await service.sessions.rename(sid, arguments.name)
        emit(arguments, info_data(info), [info_line(info)])

    return run_command(arguments, body)


def run_save(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        result = await service.sessions.save(sid)
        emit(
            arguments,
            {"session_id": sid, "committed": result.committed, "note": result.note},
            [f"{sid} saved" if result.committed else f"{sid}: {result.note}"],
        )

    return run_command(arguments, body)


def _on_held(arguments: argparse.Namespace, act) -> int:
    """Resume the session this CLI client holds (or ``--session``), run
    ``act(service, sid)`` -> (data, line) and report it."""

    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        data, line = await act(service, sid)
        emit(arguments, {"session_id": sid, **data}, [f"{sid}: {line}"])

    return run_command(arguments, body)


def run_retry_publication(arguments: argparse.Namespace) -> int:
    async def act(service: SessionService, sid: str):
        result = await service.sessions.retry_publication(sid)
        line = "the pending publication is published" if result.committed else result.note or "nothing to publish"
        return {"committed": result.committed, "note": result.note}, line

    return _on_held(arguments, act)


def run_abandon_publication(arguments: argparse.Namespace) -> int:
    async def act(service: SessionService, sid: str):
        abandoned = await service.sessions.abandon_publication(sid)
        return {"abandoned": abandoned}, "the pending publication is dropped" if abandoned else "no publication was pending"

    return _on_held(arguments, act)


def run_acknowledge_mutation(arguments: argparse.Namespace) -> int:
    async def act(service: SessionService, sid: str):
        cleared = await service.turns.acknowledge_unsettled_mutation(sid)
        return {"cleared": cleared}, "the unsettled-mutation latch is cleared" if cleared else "no unsettled mutation was recorded"

    return _on_held(arguments, act)


def rotation_data(rotation: SegmentRotation) -> dict[str, Any]:
    return {
        "session_id": rotation.session_id,
        "segment": rotation.segment,
        "previous_segment": rotation.previous_segment,
        "chapter": rotation.chapter,
        "committed": rotation.save.committed,
    }


def run_compact(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        summary = sys.stdin.read() if arguments.summary == "-" else arguments.summary
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        rotation = await service.turns.compact(sid, summary)
        line = f"{sid}: segment {rotation.previous_segment} compacted; segment {rotation.segment} starts with the summary"
        emit(arguments, rotation_data(rotation), [line])

    return run_command(arguments, body)


def run_clear(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        rotation = await service.turns.clear(sid)
        line = f"{sid}: chapter {rotation.chapter} closed (segment {rotation.previous_segment}); segment {rotation.segment} starts a new chat"
        emit(arguments, rotation_data(rotation), [line])

    return run_command(arguments, body)


def summary_data(summary: TurnSummary) -> dict[str, Any]:
    return {
        "turn": summary.turn,
        "turn_id": summary.turn_id,
        "segment": summary.segment,
        "prompt": summary.preview,
        "state": summary.state,
        "began_at": summary.began_at,
        "settled_at": summary.settled_at,
        "reason": summary.reason,
        "tool_calls": summary.tool_calls,
        "reminder": summary.reminder,
        "agent": summary.agent,
        "stop_reason": summary.stop_reason,
    }


def run_turns(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        summaries = await service.turns.summaries(sid)
        recovery = await service.history.recovery_pending(sid)
        lines = [f"{t.turn:>4}  {t.state:<11}  {t.preview}" for t in summaries] or [f"{sid} has no turns yet"]
        if recovery:
            lines.append(recovery_line(recovery))
        data = {"session_id": sid, "turns": [summary_data(t) for t in summaries], "recovery_pending": recovery}
        emit(arguments, data, lines)

    return run_command(arguments, body)


def detail_data(detail: TurnDetail) -> dict[str, Any]:
    items = [{k: v for k, v in vars(item).items() if v not in (None, False)} for item in detail.items]
    return summary_data(detail.summary) | {"prompt": detail.prompt, "items": items, "markdown": detail.markdown}


def turn_lines(detail: TurnDetail, *, dim: bool) -> list[str]:
    """A turn as a person reads it: its labels from the record (agent,
    tool kinds, stop reason) and everything the agent did in order, its
    reasoning dimmed on a terminal (marked elsewhere)."""
    summary = detail.summary
    state = summary.state + (f" ({summary.stop_reason})" if summary.stop_reason else "")
    lines = [f"── Turn {summary.turn} · {summary.agent or 'by hand'} · {state} ──", "", "You: " + detail.prompt, ""]
    # A sub-agent's task goes under the Agent call that asked for it (two
    # calls in parallel record both calls before either task).
    calls = {item.call_id for item in detail.items if item.kind == "tool_call" and item.call_id}
    nested: dict[str, list] = {}
    for item in detail.items:
        if item.kind == "agent_task" and item.parent_call_id in calls:
            nested.setdefault(item.parent_call_id, []).append(item)

    def task_lines(item) -> list[str]:
        said = [agent_task_line(f"{item.name} ({item.sender})", item.outcome, item.reason)]
        said += ["    " + line if line else "" for line in (item.output or "").split("\n")] + [""]
        if item.paths:
            said += [f"    changed by {item.name}: {', '.join(item.paths)}", ""]
        return said

    for item in detail.items:
        if item.kind == "response":
            lines += [item.text or "", ""]
        elif item.kind == "reasoning":
            text = (item.text or "").rstrip("\n")
            lines += [f"\x1b[2mReasoning: {text}\x1b[0m" if dim else "Reasoning: " + text.replace("\n", "\n  "), ""]
        elif item.kind == "tool_call":
            lines.append(f"[tool {item.name}" + (f" · {item.tool_kind}" if item.tool_kind else "") + "]")
            for task in nested.get(item.call_id, ()):
                lines += ["  " + line if line else "" for line in task_lines(task)]
        elif item.kind == "tool_result":
            lines += [("  error: " if item.is_error else "  ") + (item.output or "").rstrip("\n").replace("\n", "\n  "), ""]
        elif item.kind == "permission":
            lines += [f"[permission {item.text}: {item.output}]", ""]
        elif item.kind == "plan":
            lines += ["Plan:", item.text or "", ""]
        elif item.kind == "mail":
            lines += [f"Mail from {item.sender}: {item.text}", ""]
        elif item.kind == "agent_task" and item.parent_call_id not in calls:
            # Recorded before tasks named their call: where it settled.
            lines += task_lines(item)
    if summary.reason:
        lines.append(f"({summary.state}: {summary.reason})")
    return lines


def changes_hint(number: int) -> str:
    return f"mevedel diff {number} shows them line by line"


def run_turn(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        sid = await held_session(service, arguments.session)
        detail = await service.turns.detail(sid, arguments.number)
        # The turn ends with what it did to the tree (mevedel diff N --stat);
        # the diff's rendering is this command's alone.
        from ..store import describe, stat_lines

        changes = await service.turns.diff(sid, arguments.number, arguments.number)
        lines = turn_lines(detail, dim=sys.stdout.isatty())
        if changes.files:
            lines += ["", f"Changes ({changes_hint(arguments.number)}):", *stat_lines(changes)]
        data = {"session_id": sid} | detail_data(detail) | {"changes": [describe(f) for f in changes.files]}
        emit(arguments, data, lines)

    return run_command(arguments, body)
