"""``mevedel diff [N | N..M | N.. | ..M] [--all] [--stat] [--json]``: what
turns changed in the tree, from their checkpoints (``store/content/diff.py``):
every path with its kind of change -- shell commands' changes included --
and a unified diff of text files, coloured on a terminal and plain when
piped. No argument: the latest turn; ``--all``: since the session began.

``mevedel restore FILE --before N [--yes]``: one file back to its state
before turn N (content, mode, kind), as a turn of its own.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from ..store import CHANGES_UNKNOWN, DiffSide, PathDiff, TreeDiff, describe, stat_lines
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    emit,
    held_session,
    refuse,
    run_command,
    workspace_root,
)

_RANGE = re.compile(r"^(?:(\d+)|(\d*)\.\.(\d*))\Z")
_COLOURS = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}
_RESET = "\033[0m"
_BOLD = "\033[1m"


def register(subparsers: Any) -> None:
    diff = subparsers.add_parser(
        "diff",
        help="show what a turn (or a range of turns) changed in the tree",
        description="What turns changed in the tree, from the session's checkpoints: "
        "fs writes, ApplyPatch and shell commands alike.",
    )
    diff.add_argument("range", metavar="N | N..M", nargs="?", help="a turn or a range (N.., ..M); default: the latest turn")
    diff.add_argument("--all", action="store_true", help="every turn since the session began")
    diff.add_argument("--stat", action="store_true", help="one line per path and the totals, as git diff --stat")
    add_session_option(diff)
    add_common(diff)
    diff.set_defaults(run=run_diff)
    register_restore(subparsers)


def parse_range(text: str | None, every: bool) -> tuple[int | None, int | None]:
    """``(first, last)``; None ends mean the session's first or latest turn
    (both None: the latest turn alone)."""
    if every:
        if text is not None:
            raise CommandError("invalid-params", f"--all and the range {text!r} say different things; give one")
        return 1, None
    if text is None:
        return None, None
    match = _RANGE.match(text.strip())
    if match is None:
        raise CommandError("invalid-params", f"range {text!r}: expected N, N..M, N.. or ..M (turn numbers from 1)")
    if match.group(1) is not None:
        n = int(match.group(1))
        return n, n
    first = int(match.group(2)) if match.group(2) else 1
    last = int(match.group(3)) if match.group(3) else None
    return first, last


def side_data(side: DiffSide) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": side.kind}
    for key in ("mode", "size", "sha256", "target", "why"):
        value = getattr(side, key)
        if value is not None:
            data[key] = value
    return data


def path_data(item: PathDiff) -> dict[str, Any]:
    data: dict[str, Any] = {
        "path": item.path,
        "change": item.change,
        "before": side_data(item.before),
        "after": side_data(item.after),
        "turns": [item.first_turn, item.last_turn],
        "insertions": item.insertions,
        "deletions": item.deletions,
        "binary": item.binary,
    }
    if item.renamed_from is not None:
        data["renamed_from"] = item.renamed_from
    if item.no_text is not None:
        data["no_text"] = item.no_text
    if item.text:
        data["diff"] = item.text
    return data


def diff_data(session_id: str, diff: TreeDiff) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "first": diff.first,
        "last": diff.last,
        "files": [path_data(f) for f in diff.files],
        "insertions": diff.insertions,
        "deletions": diff.deletions,
    }


def _colour_wanted() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def diff_lines(diff: TreeDiff, colour: bool) -> list[str]:
    """The whole diff for a person: per path a header line saying what
    happened, then its unified diff (or why there is none)."""
    lines: list[str] = []
    for item in diff.files:
        header = f"=== {describe(item)}"
        lines.append(f"{_BOLD}{header}{_RESET}" if colour else header)
        if item.binary:
            lines.append(f"binary file: {item.before.size or 0} -> {item.after.size or 0} bytes")
        elif item.no_text:
            lines.append(f"no line diff: {item.no_text}")
        for line in item.text.splitlines():
            code = _COLOURS.get(line[:1]) if colour and not line.startswith(("+++", "---")) else None
            lines.append(f"{code}{line}{_RESET}" if code else line)
    return lines


def run_diff(arguments: argparse.Namespace) -> int:
    try:
        first, last = parse_range(arguments.range, arguments.all)
    except CommandError as error:
        return refuse(arguments, error.kind, str(error))

    async def body(service) -> None:
        sid = await held_session(service, arguments.session)
        diff = await service.turns.diff(sid, first, last)
        span = f"turn {diff.first}" if diff.first == diff.last else f"turns {diff.first}..{diff.last}"
        in_flight, unknown = None, []
        if not diff.files:  # looked up only then: a turn in flight, or one whose changes were lost, did not change nothing
            turns = [t for t in await service.turns.summaries(sid) if diff.first <= t.turn <= diff.last]
            in_flight = next((t.turn for t in turns if t.state == "in-flight"), None)
            unknown = [f"turn {t.turn}: {t.reason}" for t in turns if t.reason and CHANGES_UNKNOWN in t.reason]
        if in_flight is not None:
            # Its changes reach the checkpoint when it settles, or when
            # whoever resumes it after its process stopped records them.
            lines = [f"{span}: nothing checkpointed yet; turn {in_flight} is in flight (its changes are recorded when it "
                     "settles, or, if the process running it stopped, by the next prompt or takeover of the session)"]
        elif unknown:
            lines = [f"{span}: no change recorded, and not because none was made:", *unknown]
        elif not diff.files:
            lines = [f"{span} changed nothing in the tree"]
        elif arguments.stat:
            lines = stat_lines(diff)
        else:
            lines = diff_lines(diff, _colour_wanted())
        emit(arguments, diff_data(sid, diff), lines)

    return run_command(arguments, body)


def register_restore(subparsers: Any) -> None:
    restore = subparsers.add_parser(
        "restore",
        help="put one file back as it was before a turn (as a turn of its own, so it can be rewound)",
        description="Shows what the restore will do; --yes does it, as a new turn of the session.",
    )
    restore.add_argument("path", metavar="FILE", help="a workspace path (relative to the workspace, or absolute inside it)")
    restore.add_argument("--before", metavar="N", type=int, required=True, help="the turn before which the file is wanted")
    restore.add_argument("--yes", action="store_true", help="restore at once")
    add_session_option(restore)
    add_common(restore)
    restore.set_defaults(run=run_restore)


def _workspace_path(arguments: argparse.Namespace, given: str) -> str:
    root = workspace_root(arguments)
    if root is not None and os.path.isabs(given):
        relative = os.path.relpath(given, root)
        if relative == os.curdir or relative.startswith(os.pardir + os.sep) or relative == os.pardir:
            raise CommandError("invalid-params", f"{given}: is not inside the workspace {root}")
        return relative.replace(os.sep, "/")
    return given


def run_restore(arguments: argparse.Namespace) -> int:
    try:
        path = _workspace_path(arguments, arguments.path)
    except CommandError as error:
        return refuse(arguments, error.kind, str(error))

    async def body(service) -> None:
        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        done = await service.turns.restore_file(sid, path, arguments.before, commit=arguments.yes)
        data = {
            "session_id": sid,
            "path": done.path,
            "before_turn": done.before_turn,
            "change": path_data(done.change) if done.needed else None,
            "moved_back": path_data(done.moved_back) if done.moved_back else None,
            "restored": done.turn is not None,
            "turn": done.turn,
        }
        if not done.needed:
            lines = [f"{done.path} is already as it was before turn {done.before_turn}; nothing to do"]
        elif done.turn is None:
            lines = [f"restore {describe(done.change)}", *diff_lines(TreeDiff(0, 0, (done.change,)), _colour_wanted())[1:]]
            if done.moved_back:
                lines.append(f"  and {describe(done.moved_back)}: the turn moved the file, so it moves back")
            lines.append(f"to restore it: mevedel restore {arguments.path} --before {done.before_turn} --yes")
        else:
            lines = [f"restored {done.path} to its state before turn {done.before_turn} as turn {done.turn} "
                     f"(mevedel rewind {done.turn} --before undoes it)"]
        emit(arguments, data, lines)

    return run_command(arguments, body)
