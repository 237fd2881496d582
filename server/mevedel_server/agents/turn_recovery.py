"""What a turn a stopped process left in flight changed in its working
directory: the look-up a front end gives its ``SessionService``
(``stopped_turn_changes``), which records it in that turn before the turn
is settled as interrupted (``Turns.fold_stopped_turn``).

The turn's checkpoint reaches the session only at its mid-turn checkpoints
and its settlement; what the agent changed since the last one lived in the
dead process's memory. So before the engine dispatches a turn's agent it
holds the file-state record's baseline of the tree -- the record just
refreshed, every file's facts and the blobs of its bytes --
(``FileStateRecord.hold``) until the turn's settlement committed, and a
process killed in between leaves it behind. The next owner compares the
tree with it here, in a record of its own that reads and snapshots but
removes and keeps nothing: every path created, modified or deleted since is
the turn's (a command's, a write's, an ApplyPatch's alike), with its state
before read back from the blobs -- the same report a live turn's shell
command gets, so the same kinds, modes, links, directories and gaps. A
path the agent wrote where no walk looks (an ignored directory, ``.git/``)
had its name kept ahead of the write (``FileStateRecord.written_ops``): it
is a capture gap, named, never missing. No
baseline held means the agent was never dispatched: nothing to recover. A
baseline that cannot be read whole is said (the turn's settle reason names
it), never taken for "nothing changed". Checkpoint exclusions (editors'
files, ``checkpointExclude``) apply as they do to a live turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..store import StoppedTurnChanges
from ..targets import Target
from .checkpoint_exclude import CheckpointExclude, is_editor_file
from .file_state import FileStateError
from .working_directory import working_record

#: A path the agent wrote where no walk of the tree looks (inside a
#: directory a ``.gitignore`` ignores, or ``.git/``): its name was kept
#: before the write, its state before the turn was not.
UNSEEN_GAP = ("the agent wrote it where mevedel's record of the workspace's files does not look (a directory .gitignore "
              "ignores, or .git/), and its process stopped before the turn's checkpoint held its state before")


async def stopped_turn_changes(
    target: Target, session_id: str, turn_id: str, working_directory: str, *, max_file_bytes: int,
    checkpoint_exclude: Sequence[str] = (),
) -> StoppedTurnChanges | None:
    """What turn ``turn_id`` of ``session_id``, whose process stopped, changed
    in ``working_directory`` (workspace-relative) since its agent was
    dispatched; None when no baseline of it is held. ``max_file_bytes``:
    the snapshot limit the engine's records were made with."""
    record = working_record(target, working_directory, max_file_bytes=max_file_bytes, watch=False)
    marker = record.held_marker(session_id, turn_id)
    try:
        found = await record.changes_since_held(marker)
    except FileStateError as error:
        return StoppedTurnChanges(lost=str(error), finish=_releaser(record, marker))
    if found is None:
        return None
    excluded = CheckpointExclude.of(tuple(checkpoint_exclude))
    changes = [
        (change.path, change.before, change.gap) for change in found
        if not is_editor_file(change.path) and not excluded(change.path, change.made_directory or (
            change.before is not None and change.before.kind == change.before.DIRECTORY))
    ]
    seen = {change.path for change in found}
    changes += [(path, None, UNSEEN_GAP) for path in await record.written_since_held(marker)
                if path not in seen and not is_editor_file(path) and not excluded(path, False)]
    return StoppedTurnChanges(tuple(changes), finish=_releaser(record, marker))


def _releaser(record, marker: str) -> Callable:
    async def release() -> None:
        await record.release(marker)

    return release
