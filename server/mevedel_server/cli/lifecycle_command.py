"""``mevedel rewind|redo|fork|save-as``: the lifecycle transactions from a
script, two-phase like the LSP requests.

Without ``--yes`` a command prepares: it prints the impact and the token
and changes nothing. ``mevedel <command> commit TOKEN`` commits a prepared
token (the token names its session; a state that moved since the prepare
is refused with ``stale-head``); ``--yes`` prepares and commits in one go.

    mevedel rewind TURN [--before]        rewind after (or before) a turn
    mevedel redo                          list the restorable states
    mevedel redo PUBLICATION_ID           return to one of them
    mevedel fork TURN [--worktree [--name N] [--branch B]]
    mevedel fork --variants TURN          the source and direct forks at a turn
    mevedel save-as NAME

An interrupted Rewind or Redo leaves a recovery that blocks the session;
``mevedel rewind --retry-recovery`` finishes it and ``--abandon-recovery``
drops it. Options as for ``mevedel session``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..resources import counted
from ..store import LifecycleRefused, SessionService, StateToken, parse_token
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    emit,
    held_session,
    remember_session,
    run_command,
)

COMMIT = "commit"


def register(subparsers: Any) -> None:
    rewind = subparsers.add_parser("rewind", help="rewind a session to after (or before) a turn")
    rewind.add_argument("subject", metavar="TURN | commit TOKEN", nargs="*", help="the turn to keep (or `commit TOKEN`)")
    rewind.add_argument("--before", action="store_true", help="discard the turn itself too (rewind to before its prompt)")
    rewind.add_argument("--retry-recovery", action="store_true", help="finish an interrupted Rewind or Redo instead")
    rewind.add_argument("--abandon-recovery", action="store_true", help="drop an interrupted transaction's recovery instead")
    _common(rewind, run_rewind)

    redo = subparsers.add_parser("redo", help="list a session's restorable states, or return to one")
    redo.add_argument("subject", metavar="[PUBLICATION_ID | commit TOKEN]", nargs="*", help="the state to return to")
    _common(redo, run_redo)

    fork = subparsers.add_parser("fork", help="fork a session after a turn into a new session")
    fork.add_argument("subject", metavar="TURN | commit TOKEN", nargs="+", help="the turn to fork after")
    fork.add_argument("--worktree", action="store_true", help="give the fork its own linked Git worktree")
    fork.add_argument("--name", help="with --worktree: the worktree's name")
    fork.add_argument("--branch", help="with --worktree: the new branch")
    fork.add_argument("--variants", action="store_true", help="list the source and its direct forks at TURN instead (changes nothing)")
    _common(fork, run_fork)

    save_as = subparsers.add_parser("save-as", help="copy a session into a new, named session")
    save_as.add_argument("subject", metavar="NAME | commit TOKEN", nargs="+", help="the new session's name")
    _common(save_as, run_save_as)


def _common(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int]) -> None:
    parser.add_argument("--yes", action="store_true", help="commit at once, without printing the token first")
    add_session_option(parser)
    add_common(parser)
    parser.set_defaults(run=run)


# Subjects -------------------------------------------------------------------------


def _commit_token(subject: list[str]) -> str | None:
    if not subject or subject[0] != COMMIT:
        return None
    if len(subject) != 2:
        raise CommandError("invalid-params", "`commit` takes exactly one TOKEN (the one the prepare printed)")
    return subject[1]


def _one(subject: list[str], what: str) -> str:
    if len(subject) != 1:
        raise CommandError("invalid-params", f"give exactly one {what} (or `commit TOKEN`), not {len(subject)} arguments")
    return subject[0]


def _turn(text: str) -> int:
    try:
        turn = int(text)
    except ValueError:
        raise CommandError("invalid-params", f"turn {text!r}: is not a turn number") from None
    if turn < 0:
        raise CommandError("invalid-params", f"turn {text!r}: must not be negative")
    return turn


def _token_of(token: str, ops: tuple[str, ...]) -> StateToken:
    """The token, prepared for one of ``ops`` (to find its session; the
    commit checks it again against the session it opened)."""
    return parse_token(token, ops)


async def _session(service: SessionService, arguments: argparse.Namespace, token: StateToken | None, mode: str) -> str:
    sid = arguments.session or (token.session_id if token is not None else None) or await held_session(service, None)
    await service.sessions.open(sid, mode)
    return sid


def _prepared(
    arguments: argparse.Namespace, data: dict[str, Any], lines: list[str], command: str, token: str, agent_history: str | None
) -> None:
    if agent_history:
        lines = [*lines, f"agent history: {agent_history}"]
    lines = [*lines, f"to commit: mevedel {command} commit {token}"]
    emit(arguments, data | {"token": token, "committed": False, "agent_history": agent_history}, lines)


def _labels(labels) -> list[str]:
    return [f"  {label.label}" for label in labels]


def _restores(impact) -> list[str]:
    rows = [f"  {r.action} {r.path} ({r.checkpoint} of turn {r.turn})" for r in impact.restores if r.changes]
    # A retained sub-agent's changes, under its name (Rewind: its tasks in the discarded turns).
    by_agent: dict[str, list[str]] = {}
    for row in impact.restores:
        for agent in row.agents if row.changes else ():
            by_agent.setdefault(agent, []).append(row.path)
    rows += [f"  changed by agent {agent}: {', '.join(paths)}" for agent, paths in sorted(by_agent.items())]
    rows += [f"  not restored {g.path}: {g.reason}" for g in impact.gaps]
    rows += [f"  changed outside the session (overwritten): {e.path}" for e in impact.externally_modified]
    return rows


def _in_place_data(service: SessionService, sid: str, result) -> dict[str, Any]:
    return {
        "session_id": sid,
        "committed": result.committed,
        "settled_turns": service.info(sid).settled_turns,
        "written": list(result.written),
        "actions": dict(result.actions),
        "warning": result.warning,
    }


def _in_place_lines(data: dict[str, Any], command: str, done: str) -> list[str]:
    if not data["committed"] and not data["written"]:
        return [f"{data['session_id']}: nothing to {command}: no turn discarded and no file changed"]
    lines = [f"{data['session_id']}: {done}; {counted(data['settled_turns'], 'turn')}"]
    lines += [f"  {data.get('actions', {}).get(path, 'wrote')} {path}" for path in data["written"]]
    if data["warning"]:
        lines.append(f"warning: {data['warning']}")
    return lines


def _child_data(service: SessionService, source: str, child) -> dict[str, Any]:
    info = service.info(child.session_id)
    return {
        "session_id": child.session_id,
        "source_id": source,
        "display_name": info.display_name,
        "settled_turns": info.settled_turns,
        "committed": True,
        "warning": child.warning,
    }


def _child_lines(data: dict[str, Any], verb: str) -> list[str]:
    lines = [f"{verb} {data['source_id']} as {data['session_id']} ({data['display_name']}, {counted(data['settled_turns'], 'turn')})"]
    if data["warning"]:
        lines.append(f"warning: {data['warning']}")
    return lines


# Rewind ---------------------------------------------------------------------------


def run_rewind(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        if arguments.retry_recovery or arguments.abandon_recovery:
            await _recovery(service, arguments)
            return
        token = _commit_token(arguments.subject)
        if token is not None:
            parsed = _token_of(token, ("rewind",))
            sid = await _session(service, arguments, parsed, "resume")
            data = _in_place_data(service, sid, await service.history.commit_rewind(sid, parsed))
            emit(arguments, data, _in_place_lines(data, "rewind", "rewound"))
            return
        turn = _turn(_one(arguments.subject, "TURN"))
        sid = await _session(service, arguments, None, "resume")
        side = "before" if arguments.before else "after"
        if arguments.yes:
            data = _in_place_data(service, sid, await service.history.rewind_now(sid, side, turn))
            emit(arguments, data, _in_place_lines(data, "rewind", "rewound"))
            return
        impact = await service.history.prepare_rewind(sid, side, turn)
        data = {
            "session_id": sid,
            "boundary": impact.boundary.side.value,
            "turn": impact.boundary.turn,
            "kept_turns": impact.kept_turns,
            "discarded": impact.discarded,
            "transcript_changes": impact.transcript_changes,
            "restores": impact.restores,
            "gaps": impact.gaps,
            "externally_modified": impact.externally_modified,
            "git": {"status": impact.git.status, "divergent": [d.path for d in impact.git.divergent], "detail": impact.git.detail},
            "empty": impact.empty,
        }
        lines = [f"rewind {sid} to {side} turn {turn}: keeps {counted(impact.kept_turns, 'turn')}, discards {len(impact.discarded)}"]
        lines += _labels(impact.discarded) + _restores(impact)
        if impact.empty:
            # The spec's empty impact: the boundary is where the session already
            # ends and every file is as it left it, so committing changes nothing.
            lines.append("  nothing changes: no turn is discarded and no file differs from the boundary's state")
        _prepared(arguments, data, lines, "rewind", impact.token.text, impact.agent_history)

    return run_command(arguments, body)


async def _recovery(service: SessionService, arguments: argparse.Namespace) -> None:
    if arguments.retry_recovery and arguments.abandon_recovery:
        raise CommandError("invalid-params", "--retry-recovery and --abandon-recovery exclude each other")
    if arguments.subject:
        raise CommandError("invalid-params", "a recovery takes no TURN")
    sid = await _session(service, arguments, None, "resume")
    resolve = service.history.retry_recovery if arguments.retry_recovery else service.history.abandon_recovery
    outcome = await resolve(sid)
    data = {
        "session_id": sid, "recovery_id": outcome.recovery_id, "resolution": outcome.resolution,
        "written": list(outcome.written), "left": list(outcome.left),
    }
    lines = [f"{sid}: recovery {outcome.recovery_id} {outcome.resolution}"]
    if outcome.left_note is not None:
        lines.append(outcome.left_note)
    emit(arguments, data, lines)


# Redo -----------------------------------------------------------------------------


def run_redo(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        token = _commit_token(arguments.subject)
        if token is not None:
            parsed = _token_of(token, ("redo",))
            sid = await _session(service, arguments, parsed, "resume")
            data = _in_place_data(service, sid, await service.history.commit_redo(sid, parsed))
            emit(arguments, data, _in_place_lines(data, "redo", "redone"))
            return
        if not arguments.subject:
            sid = await _session(service, arguments, None, "auto")
            states = await service.history.redo_states(sid)
            data = {"session_id": sid, "current_head": states.current_head, "states": states.states, "skipped": states.skipped}
            counts = [counted(s.turn_count, 'turn') for s in states.states]
            width = max(map(len, counts), default=0)
            lines = [f"{s.publication_id}  {n:<{width}}  {s.label}" for s, n in zip(states.states, counts)]
            lines += [f"skipped {s.publication_id}: {s.reason}" for s in states.skipped]
            if states.states:
                lines.append("to return to one: mevedel redo PUBLICATION_ID")
            emit(arguments, data, lines or [f"{sid}: no restorable states"])
            return
        publication = _one(arguments.subject, "PUBLICATION_ID")
        sid = await _session(service, arguments, None, "resume")
        with _listed_on_a_wrong_id():
            if arguments.yes:
                data = _in_place_data(service, sid, await service.history.redo_now(sid, publication))
                emit(arguments, data, _in_place_lines(data, "redo", "redone"))
                return
            impact = await service.history.prepare_redo(sid, publication)
        data = {
            "session_id": sid,
            "publication_id": impact.state.publication_id,
            "common_turns": impact.common_turns,
            "restored": impact.restored,
            "discarded": impact.discarded,
            "restores": impact.restores,
            "gaps": impact.gaps,
            "externally_modified": impact.externally_modified,
        }
        lines = [f"redo {sid} to {publication}: restores {len(impact.restored)} turns, discards {len(impact.discarded)}"]
        lines += _labels(impact.restored) + _restores(impact)
        _prepared(arguments, data, lines, "redo", impact.token.text, impact.agent_history)

    return run_command(arguments, body)


@contextlib.contextmanager
def _listed_on_a_wrong_id() -> Iterator[None]:
    """A publication ID that is malformed or names nothing: where the right
    ones are listed."""
    try:
        yield
    except LifecycleRefused as error:
        if error.kind not in ("invalid-params", "missing-target"):
            raise
        raise CommandError(error.kind, f"{error}; `mevedel redo` lists the states it can return to") from None


# Fork and Save As -------------------------------------------------------------------


def run_fork(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        token = _commit_token(arguments.subject)
        if token is not None:
            parsed = _token_of(token, ("fork", "worktree-fork"))
            sid = await _session(service, arguments, parsed, "auto")
            await _commit_fork(service, arguments, sid, parsed, parsed.op == "worktree-fork")
            return
        turn = _turn(_one(arguments.subject, "TURN"))
        if arguments.variants:
            if arguments.worktree or arguments.name or arguments.branch or arguments.yes:
                raise CommandError("invalid-params", "--variants only lists; it takes no --worktree, --name, --branch or --yes")
            await _variants(service, arguments, turn)
            return
        if not arguments.worktree and (arguments.name or arguments.branch):
            raise CommandError("invalid-params", "--name and --branch need --worktree")
        sid = await _session(service, arguments, None, "auto")
        if arguments.worktree:
            impact = await service.history.prepare_worktree_fork(sid, turn, name=arguments.name, branch=arguments.branch)
            data = {
                "session_id": sid,
                "turns": impact.turns,
                "worktree": impact.worktree,
                "restores": list(impact.restores),
                "unrestored": [{"path": p, "reason": r} for p, r in impact.unrestored],
                "shared": list(impact.shared),
            }
            lines = [f"fork {sid} after {impact.response.label} into worktree {impact.worktree.directory} (branch {impact.worktree.branch})"]
        else:
            impact = await service.history.prepare_fork(sid, turn)
            data = {"session_id": sid, "turns": impact.turns}
            lines = [f"fork {sid} after {impact.response.label}: the new session holds {counted(impact.turns, 'turn')}"]
        # What the child's work:// files will be, as the editors' impact says:
        # the session-local files it copies, and why local/plans/ is not among them.
        data |= {"local_files": list(impact.local_files), "plans_note": impact.plans_note}
        if impact.local_files:
            copied = counted(len(impact.local_files), "session-local (work://) file")
            lines.append(f"  copies {copied}: {', '.join(impact.local_files)}")
        lines.append(f"  plans: {impact.plans_note}")
        if arguments.yes:
            await _commit_fork(service, arguments, sid, impact.token, arguments.worktree)
            return
        _prepared(arguments, data, lines, "fork", impact.token.text, impact.agent_history)

    return run_command(arguments, body)


async def _variants(service: SessionService, arguments: argparse.Namespace, turn: int) -> None:
    sid = await _session(service, arguments, None, "auto")
    group = await service.history.fork_variants(sid, turn)
    variants = [_variant_data(v) for v in group.variants]
    data = {
        "session_id": sid,
        "source_id": group.point.source_id,
        "fork_point_id": group.point.fork_point_id,
        "turn": group.point.turn,
        "source_present": group.source is not None,
        "variants": variants,
    }
    lines = [f"variants of {group.point.source_id} at turn {group.point.turn}:"]
    if group.source is None:
        lines.append("  (the source no longer holds this fork point)")
    for v in variants:
        mark = "*" if v["is_current"] else " "
        preview = (v["latest_preview"] or "").replace("\n", " ")[:60]
        lines.append(f"{mark} {v['role']:<12} {v['session_id']}  {v['display_name']}  {preview}")
    emit(arguments, data, lines)


def _variant_data(variant) -> dict[str, Any]:
    return {
        "session_id": variant.session_id,
        "role": variant.role,
        "display_name": variant.display_name,
        "created_at": variant.created_at,
        "is_current": variant.is_current,
        "latest_preview": variant.latest_preview,
        "worktree_branch": variant.worktree_branch,
        "worktree_directory": variant.worktree_directory,
    }


async def _commit_fork(service: SessionService, arguments: argparse.Namespace, sid: str, token: StateToken, worktree: bool) -> None:
    if worktree:
        result = await service.history.commit_worktree_fork(sid, token)
        data = _child_data(service, sid, result.child) | {
            "worktree": result.worktree,
            "restored": list(result.restored),
            "unrestored": [{"path": p, "reason": r} for p, r in result.unrestored],
        }
        lines = _child_lines(data, "forked") + [f"  worktree {result.worktree.directory} on branch {result.worktree.branch}"]
    else:
        result = await service.history.commit_fork(sid, token)
        data = _child_data(service, sid, result.child)
        lines = _child_lines(data, "forked")
        # One session per client: the child is this client's from now on
        # (the next command, prompt included, goes to it); the source is
        # saved and released for whoever opens it next.
        if service.is_open(sid):
            await service.sessions.close(sid)
        remember_session(arguments, data["session_id"])
        data["current"] = data["session_id"]
        data["released"] = sid
        lines.append(f"{data['session_id']} is this client's session now; {sid} was saved and released (`mevedel session open {sid}` goes back)")
    emit(arguments, data, lines)


def run_save_as(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        token = _commit_token(arguments.subject)
        if token is not None:
            parsed = _token_of(token, ("save-as",))
            sid = await _session(service, arguments, parsed, "auto")
            data = _child_data(service, sid, await service.history.commit_save_as(sid, parsed))
            emit(arguments, data, _child_lines(data, "saved"))
            return
        name = " ".join(arguments.subject)
        sid = await _session(service, arguments, None, "auto")
        impact = await service.history.prepare_save_as(sid, name)
        if arguments.yes:
            data = _child_data(service, sid, await service.history.commit_save_as(sid, impact.token))
            emit(arguments, data, _child_lines(data, "saved"))
            return
        data = {"session_id": sid, "name": impact.name, "turns": impact.turns, "artifacts": impact.artifacts, "size": impact.size}
        lines = [f"save {sid} as {impact.name!r}: {impact.turns} turns, {impact.artifacts} artifacts ({impact.size} bytes)"]
        _prepared(arguments, data, lines, "save-as", impact.token.text, impact.agent_history)

    return run_command(arguments, body)
