"""What a fork's first prompt says of the files (``agents/fork_note.py``),
from the child's sidecar and checkpoints: a Worktree Fork names its
source, turn, checkout, branch and base commit, the files restored, the
ones left at the commit (and why), and the shared ones outside the source
checkout; a Conversation fork says no file changed; a fork that has
prompted since, or no fork, says nothing."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from mevedel_server.agents.fork_note import MAX_NAMED, fork_files_note
from mevedel_server.store.content.sidecar import (
    Absent,
    FileSnapshot,
    ForkOrigin,
    ForkType,
    Present,
    TurnFiles,
    WorktreeOrigin,
)

BASE = "0123456789abcdef0123456789abcdef01234567"
TURN_IDS = {1: "a" * 32, 2: "b" * 32, 3: "c" * 32}


def present(data: bytes) -> Present:
    return Present(sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def conversation(fork_type: ForkType, files: list[TurnFiles], *, turns: int = 2, stored: dict[str, bytes] | None = None):
    worktree = WorktreeOrigin(source_root=".", directory=".worktrees/wt1", branch="mevedel/wt1", base_commit=BASE)
    sidecar = SimpleNamespace(
        fork=ForkOrigin(fork_type=fork_type, session_id="2026-12-04T10-00-000000000001", turn=2, fork_point_id=None),
        worktree=worktree if fork_type is ForkType.WORKTREE else None,
        total_turn_count=turns,
    )
    stored = stored or {}
    return SimpleNamespace(sidecar=sidecar, file_snapshots=lambda: files, file_content=stored.get)


def test_a_worktree_forks_note_names_its_origin_and_each_files_fate():
    kept = b"kept\n"
    files = [
        TurnFiles(turn=1, turn_id=TURN_IDS[1], files={
            ".worktrees/wt1/a.txt": FileSnapshot(pre=Absent(), post=present(kept)),
            ".worktrees/wt1/gone.txt": FileSnapshot(pre=present(b"x"), post=Absent()),
            ".worktrees/wt1/big.bin": FileSnapshot(pre=None, gap="larger than the snapshot limit"),
            ".worktrees/wt1/lost.txt": FileSnapshot(pre=Absent(), post=present(b"not stored")),
            "/etc/outside.conf": FileSnapshot(pre=Absent(), post=present(kept)),
        }),
        # A turn after the fork point is not what the fork restored.
        TurnFiles(turn=3, turn_id=TURN_IDS[3], files={".worktrees/wt1/later.txt": FileSnapshot(pre=Absent(), post=present(kept))}),
    ]
    note = fork_files_note(conversation(ForkType.WORKTREE, files, stored={hashlib.sha256(kept).hexdigest(): kept}), "/srv/project")
    assert note is not None
    assert "Worktree Fork of session 2026-12-04T10-00-000000000001, forked after its turn 2" in note
    assert ".worktrees/wt1 (/srv/project/.worktrees/wt1), on branch mevedel/wt1, created at commit 0123456789ab" in note
    assert "Files restored in the worktree to their state after that turn: a.txt, gone.txt (removed)." in note
    assert "big.bin (larger than the snapshot limit)" in note and "lost.txt (the content turn 1 left is unavailable)" in note
    assert "shared with it and not isolated: /etc/outside.conf" in note
    assert "later.txt" not in note and "did not change any file" not in note


def test_a_worktree_fork_that_restored_nothing_says_so_and_long_lists_are_counted():
    none = fork_files_note(conversation(ForkType.WORKTREE, []), "/p")
    assert none is not None and "No file was restored" in none
    many = [TurnFiles(turn=1, turn_id=TURN_IDS[1], files={
        f".worktrees/wt1/f{n:03d}.txt": FileSnapshot(pre=Absent(), post=Absent()) for n in range(MAX_NAMED + 5)})]
    note = fork_files_note(conversation(ForkType.WORKTREE, many), "/p")
    assert note is not None and f"f{MAX_NAMED - 1:03d}.txt (removed), and 5 more." in note


def test_a_conversation_fork_says_no_file_changed_and_a_fork_that_prompted_since_says_nothing():
    note = fork_files_note(conversation(ForkType.CONVERSATION, []), "/p")
    assert note is not None and "The fork did not change any file" in note and "worktree" not in note
    of_a_worktree = conversation(ForkType.CONVERSATION, [])
    of_a_worktree.sidecar.worktree = WorktreeOrigin(source_root=".", directory=".worktrees/wt1", branch="mevedel/wt1", base_commit=BASE)
    note = fork_files_note(of_a_worktree, "/p")
    assert note is not None and "The fork did not change any file" in note
    assert "works in the Git worktree .worktrees/wt1 (/p/.worktrees/wt1, branch mevedel/wt1)" in note
    assert fork_files_note(conversation(ForkType.WORKTREE, [], turns=3), "/p") is None
    assert fork_files_note(SimpleNamespace(sidecar=SimpleNamespace(fork=None, worktree=None, total_turn_count=0)), "/p") is None
