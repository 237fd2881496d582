"""Restore one file to its state before a turn, as a turn of its own.

The state wanted is the one the session's checkpoints recorded for the path
before the earliest turn at or after ``before_turn`` that changed it:
content, mode and kind alike (a file, a link, a directory, or nothing). The
restore is itself a recorded change -- a new turn whose checkpoint holds the
path's current state (and any parent directory it has to make) -- so Rewind
can undo it like any other turn. Everything goes through the workspace's
target (local or SSH), with the same compare-and-swap the Rewind uses: a
file changed between the look and the write is refused, never overwritten.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...targets import (
    ControlProgram,
    Entry,
    PutEntry,
    ReadEntry,
    Status,
    raise_for_result,
)
from ..content.checkpoints import MissingContent, entry_of, file_state
from ..content.diff import UNCHANGED, PathDiff, path_diff
from ..content.sidecar import Absent, FileState, Present
from .errors import InvalidSessionInput, NoSuchTurn

if TYPE_CHECKING:
    from .turns import Turns


@dataclass(frozen=True)
class FileRestore:
    """What restoring ``path`` to before ``before_turn`` does (``change``:
    the current state to the wanted one), and, once committed, the turn that
    recorded it."""

    session_id: str
    path: str
    before_turn: int
    change: PathDiff
    #: The turn that recorded the restore (None: only prepared, or nothing to do).
    turn: int | None = None
    #: A file the turns moved to ``path`` goes back: its old path, from
    #: nothing to what it held.
    moved_back: PathDiff | None = None

    @property
    def needed(self) -> bool:
        return self.change.change != UNCHANGED


def _wanted(turns: Turns, session_id: str, path: str, before_turn: int) -> FileState:
    conversation = turns.table.get(session_id, "restore a file").conversation
    count = len(conversation.prompt_index())
    if isinstance(before_turn, bool) or not isinstance(before_turn, int) or not 1 <= before_turn <= count:
        raise NoSuchTurn(session_id, before_turn, count)
    for record in sorted(conversation.file_snapshots(), key=lambda r: r.turn):
        if record.turn < before_turn or path not in record.files:
            continue
        snapshot = record.files[path]
        if snapshot.pre is None:
            raise InvalidSessionInput(
                f"path {path!r}", f"its state before turn {record.turn} was not recorded ({snapshot.gap}); it cannot be restored"
            )
        return snapshot.pre
    raise InvalidSessionInput(f"path {path!r}", f"no turn from {before_turn} on changed it; there is nothing to restore")


async def _read(turns: Turns, path: str) -> Entry | None:
    op = ReadEntry(path, optional=True)
    result = (await turns.table.target.run(ControlProgram([op])))[0]
    if result.status is Status.ABSENT:
        return None
    raise_for_result(op, result)
    return result.value


def _earliest_pre(conversation, path: str, before_turn: int) -> FileState | None:
    for record in sorted(conversation.file_snapshots(), key=lambda r: r.turn):
        if record.turn >= before_turn and path in record.files:
            return record.files[path].pre
    return None


async def _moved_from(
    turns: Turns, conversation, path: str, before_turn: int, current: Entry | None, wanted: FileState
) -> tuple[str, FileState] | None:
    """When ``path`` did not exist before the turn and now holds the very
    bytes another path held then -- a path that is gone now -- the turn
    moved that file here: that path and the state it had."""
    if not isinstance(wanted, Absent) or current is None or current.kind != Entry.FILE or not current.data:
        return None
    digest = hashlib.sha256(current.data).hexdigest()
    candidates = sorted(
        {p for r in conversation.file_snapshots() if r.turn >= before_turn for p in r.files} - {path}
    )
    for other in candidates:
        pre = _earliest_pre(conversation, other, before_turn)
        if isinstance(pre, Present) and pre.sha256 == digest and pre.size == len(current.data):
            if await _read(turns, other) is None:
                return other, pre
    return None


async def restore_file(
    turns: Turns, session_id: str, path: str, before_turn: int, *, commit: bool
) -> FileRestore:
    """The restore of ``path`` to its state before ``before_turn``; with
    ``commit``, done as a new turn of the open, writable session. A file
    the turns moved to ``path`` goes back where it was (both paths in the
    one turn), so restoring a rename never leaves its bytes nowhere."""
    conversation = turns.table.get(session_id, "restore a file").conversation
    wanted_state = _wanted(turns, session_id, path, before_turn)
    current = await _read(turns, path)
    change = path_diff(path, file_state(current), wanted_state, conversation.file_content, turn=before_turn)
    moved = await _moved_from(turns, conversation, path, before_turn, current, wanted_state)
    back = path_diff(moved[0], Absent(), moved[1], conversation.file_content, turn=before_turn) if moved else None
    plan = FileRestore(session_id, path, before_turn, change, moved_back=back)
    if not commit or not plan.needed:
        return plan
    steps = [(path, current, wanted_state)] + ([(moved[0], None, moved[1])] if moved else [])
    try:
        wanted = [entry_of(state, conversation.file_content) for _p, _c, state in steps]
    except MissingContent:
        raise InvalidSessionInput(f"path {path!r}", "the bytes it had are no longer kept in the session") from None
    started = await turns.begin_turn(session_id, f"Restore {path} to its state before turn {before_turn}")
    try:
        for (where, now, _state), entry in zip(steps, wanted):
            if entry is not None:
                # Parents the restore has to make are changes of this turn too.
                parent = posixpath.dirname(where)
                missing = []
                while parent and await _read(turns, parent) is None:
                    missing.append(parent)
                    parent = posixpath.dirname(parent)
                for directory in reversed(missing):
                    turns.record_pre_state(session_id, directory, None)
            turns.record_pre_state(session_id, where, now)
        # Both paths of a move in one program: the bytes are never in neither.
        ops = [PutEntry(where, expected=now, wanted=entry) for (where, now, _s), entry in zip(steps, wanted)]
        results = await turns.table.target.run(ControlProgram(list(reversed(ops))))
        for op, result in zip(reversed(ops), results):
            if result.status is Status.MISMATCH:
                raise InvalidSessionInput(f"path {op.path!r}", f"changed while it was being restored ({result.reason})")
            raise_for_result(op, result)
    except BaseException:
        await turns.settle(session_id, "errored", reason=f"the restore of {path} did not happen")
        raise
    await turns.settle(session_id)
    return FileRestore(session_id, path, before_turn, change, started.turn, back)
