"""What a fork's first prompt says of the files (the spec's sparse fork
provenance): where the session came from -- source session and turn --
and what state its files are in.

A Conversation fork shares the source's working directory (a Worktree
Fork's checkout too, which it then names) and changed no file
(:func:`~.excerpt.forked_files_note`). A Worktree Fork works in a
linked checkout of its own, made at the source checkout's HEAD, with the
files the kept turns captured restored to their state after the fork turn:
the note names the checkout, its branch and base commit, the files
restored, the ones left at the commit's content (and why), and the
captured paths outside the source checkout that stay shared. It is
regenerated from durable state (the child's sidecar and its retargeted
checkpoints), so a restart before the first prompt loses none of it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from ..store import ForkType, MissingContent, TurnFiles, entry_of
from .excerpt import forked_files_note

#: Paths one list of the note names at most (the rest are counted).
MAX_NAMED = 40


def fork_files_note(conversation, root: str) -> str | None:
    """The note for ``conversation``'s session before its first own turn
    after a fork; None when it is no fork or has prompted since."""
    sidecar = conversation.sidecar
    fork = sidecar.fork
    if fork is None or sidecar.total_turn_count > fork.turn:
        return None
    worktree = sidecar.worktree
    if fork.fork_type is ForkType.CONVERSATION:
        note = forked_files_note(fork.session_id, fork.turn)
        if worktree is None:
            return note
        return (f"{note} Like that session, this one works in the Git worktree {worktree.directory} "
                f"({posixpath.join(root, worktree.directory)}, branch {worktree.branch}): work there, not in the main checkout.")
    if fork.fork_type is not ForkType.WORKTREE or worktree is None:
        return None
    restored, kept, shared = _restoration(conversation.file_snapshots(), fork.turn, worktree.directory, conversation.file_content)
    directory = worktree.directory
    lines = [
        f"This session is a Worktree Fork of session {fork.session_id}, forked after its turn {fork.turn}. "
        f"It works in its own Git worktree, {directory} ({posixpath.join(root, directory)}), on branch {worktree.branch}, "
        f"created at commit {worktree.base_commit[:12]} of the source checkout"
        + ("" if worktree.source_root in (".", "") else f" ({worktree.source_root})")
        + ". That worktree is your working directory: work there, not in the main checkout.",
        "Files restored in the worktree to their state after that turn: " + _names(restored) + "."
        if restored else "No file was restored: the source's turns up to that one changed none in its checkout.",
    ]
    if kept:
        lines.append("Left as the commit has them (not restored): " + _names([f"{path} ({why})" for path, why in kept]) + ".")
    if shared:
        lines.append("Outside the source checkout, so shared with it and not isolated: " + _names(shared) + ".")
    lines.append(
        "Every other file is as that commit has it: changes the source session had not committed are not in the worktree, "
        "and neither is the work of its turns after this one, which this excerpt does not show. "
        "Read a file before relying on its content."
    )
    return " ".join(lines)


def _restoration(files: Sequence[TurnFiles], turn: int, directory: str, content) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """``(restored, kept at the commit with why, shared)`` from the child's
    checkpoints (retargeted to its checkout by the fork): each path's last
    record at or before the fork turn, as the fork planned them."""
    last: dict[str, tuple[object, int]] = {}
    for record in sorted(files, key=lambda r: r.turn):
        if record.turn > turn:
            break
        for path, snapshot in record.files.items():
            last[path] = (snapshot, record.turn)
    restored: list[str] = []
    kept: list[tuple[str, str]] = []
    shared: list[str] = []
    prefix = directory.rstrip("/") + "/"
    for path, (snapshot, recorded) in sorted(last.items()):
        if not path.startswith(prefix):
            shared.append(path)
            continue
        inside = path[len(prefix):]
        post = snapshot.post  # type: ignore[attr-defined]
        if post is None:
            kept.append((inside, snapshot.gap or f"turn {recorded} recorded no content after it"))  # type: ignore[attr-defined]
            continue
        try:
            entry = entry_of(post, content)
        except MissingContent:
            kept.append((inside, f"the content turn {recorded} left is unavailable"))
            continue
        restored.append(inside if entry is not None else f"{inside} (removed)")
    return restored, kept, shared


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f", and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")
