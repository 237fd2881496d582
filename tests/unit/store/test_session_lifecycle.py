"""Rewind, Redo, Fork, Worktree Fork, Save As and the recovery gate through
the session service: the live session follows each commit, children open
here writable, a moved state refuses the commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, RecoveryPending, StaleState
from mevedel_server.store.service import (
    EvidenceInput,
    InvalidSessionInput,
    SessionService,
    error_kind,
)
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


async def edit_turn(svc: SessionService, root: Path, sid: str, prompt: str, content: str | None = None) -> None:
    """One settled turn that rewrites ``notes.txt`` to ``content``."""
    await svc.turns.begin_turn(sid, prompt)
    if content is not None:
        await svc.turns.capture_file(sid, "notes.txt")
        (root / "notes.txt").write_text(content)
    await svc.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await svc.turns.settle(sid)


async def three_turns(root: Path) -> tuple[SessionService, str]:
    (root / "notes.txt").write_text("v0\n")
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await edit_turn(svc, root, sid, "first", "v1\n")
    await edit_turn(svc, root, sid, "second", "v2\n")
    await edit_turn(svc, root, sid, "third", "v3\n")
    return svc, sid


async def test_rewind_discards_prompts_restores_files_and_follows_the_live_session(root):
    svc, sid = await three_turns(root)
    changes = []
    svc.on_change.append(changes.append)
    impact = await svc.history.prepare_rewind(sid, "after", 1)
    assert [label.preview for label in impact.discarded] == ["second", "third"]
    assert {r.path for r in impact.restores if r.changes} == {"notes.txt"}
    assert (root / "notes.txt").read_text() == "v3\n"  # prepare changes nothing

    result = await svc.history.commit_rewind(sid, impact.token.text)
    assert result.committed
    assert (root / "notes.txt").read_text() == "v1\n"
    assert svc.info(sid).settled_turns == 1
    assert [t.preview for t in await svc.turns.summaries(sid)] == ["first"]
    assert "answer to third" not in "\n".join(svc.live_history(sid).lines())
    assert changes[-1].reason == "rewound"
    # The next turn continues from the rewound state.
    await edit_turn(svc, root, sid, "again")
    assert svc.info(sid).settled_turns == 2


async def test_a_token_is_refused_once_the_state_moved(root):
    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_rewind(sid, "before", 3)
    await edit_turn(svc, root, sid, "fourth")
    with pytest.raises(StaleState) as refused:
        await svc.history.commit_rewind(sid, impact.token.text)
    assert error_kind(refused.value) == "stale-head"
    assert svc.info(sid).settled_turns == 4
    assert svc.info(sid).pending_publication is None


async def test_bad_boundaries_and_tokens_are_refused_by_name(root):
    svc, sid = await three_turns(root)
    with pytest.raises(InvalidSessionInput, match="boundary 'around'"):
        await svc.history.prepare_rewind(sid, "around", 1)
    with pytest.raises(Exception) as refused:
        await svc.history.commit_rewind(sid, "not-a-token")
    assert error_kind(refused.value) == "invalid-params"
    with pytest.raises(Exception) as missing:
        await svc.history.prepare_rewind(sid, "after", 9)
    assert error_kind(missing.value) == "invalid-params" and "no settled turn 9" in str(missing.value)


async def test_redo_returns_to_the_head_a_rewind_left(root):
    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_rewind(sid, "after", 1)
    await svc.history.commit_rewind(sid, impact.token.text)
    states = await svc.history.redo_states(sid)
    three = [s for s in states.states if s.turn_count == 3]
    assert three, states
    redo = await svc.history.prepare_redo(sid, three[0].publication_id)
    assert [label.preview for label in redo.restored] == ["second", "third"]
    result = await svc.history.commit_redo(sid, redo.token.text)
    assert result.committed
    assert svc.info(sid).settled_turns == 3
    assert (root / "notes.txt").read_text() == "v3\n"


async def test_fork_opens_the_child_writable_and_lists_it_as_a_variant(root):
    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_fork(sid, 2)
    assert impact.turns == 2
    result = await svc.history.commit_fork(sid, impact.token.text)
    child = result.child.session_id
    assert child != sid and svc.is_open(child)
    info = svc.info(child)
    assert info.access.value == "writable" and info.settled_turns == 2
    await edit_turn(svc, root, child, "child turn")
    assert svc.info(child).settled_turns == 3
    assert svc.info(sid).settled_turns == 3
    variants = await svc.history.fork_variants(sid, 2)
    assert child in {v.session_id for v in variants.forks}
    listed = {row.session_id for row in (await svc.sessions.list()).rows}
    assert {sid, child} <= listed


async def test_save_as_opens_a_named_copy(root):
    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_save_as(sid, "  Copy   of work ")
    assert impact.name == "Copy of work" and impact.turns == 3
    child = await svc.history.commit_save_as(sid, impact.token.text)
    info = svc.info(child.session_id)
    assert info.display_name == "Copy of work" and info.settled_turns == 3 and info.named


async def test_a_token_of_another_session_is_refused(root):
    svc, sid = await three_turns(root)
    other = (await svc.sessions.create()).session_id
    await edit_turn(svc, root, other, "elsewhere")
    impact = await svc.history.prepare_save_as(sid, "Copy")
    with pytest.raises(Exception) as refused:
        await svc.history.commit_save_as(other, impact.token.text)
    assert error_kind(refused.value) == "invalid-params" and f"prepared for session {sid}" in str(refused.value)
    rewind = await svc.history.prepare_rewind(sid, "after", 1)
    with pytest.raises(Exception) as wrong:
        await svc.history.commit_rewind(other, rewind.token.text)
    assert error_kind(wrong.value) == "invalid-params"
    assert svc.info(sid).settled_turns == 3 and svc.open_sessions() == [sid, other]


async def test_fork_refuses_a_turn_in_flight(root):
    svc, sid = await three_turns(root)
    await svc.turns.begin_turn(sid, "in flight")
    with pytest.raises(Exception) as refused:
        await svc.history.prepare_fork(sid, 2)
    assert error_kind(refused.value) == "conflict"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


async def test_worktree_fork_opens_the_child_in_a_new_worktree(root):
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".mevedel/\n.worktrees/\n")
    (root / "notes.txt").write_text("v0\n")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "base")
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    await edit_turn(svc, root, sid, "first", "v1\n")
    await edit_turn(svc, root, sid, "second", "v2\n")
    impact = await svc.history.prepare_worktree_fork(sid, 1, name="try-one", branch="try-one")
    result = await svc.history.commit_worktree_fork(sid, impact.token.text)
    assert svc.is_open(result.child.session_id)
    assert (root / result.worktree.directory / "notes.txt").read_text() == "v1\n"
    assert (root / "notes.txt").read_text() == "v2\n"


async def test_a_recovery_marker_gates_mutations_until_abandoned(root):
    svc, sid = await three_turns(root)
    # A marker is written only by the holder's in-place transactions (the
    # gate looks once per lease taken and again after each of them): one
    # left by a process that stopped is found when the session is resumed.
    await svc.sessions.close(sid)
    recovery = root / ".mevedel" / "sessions" / sid / ".recovery"
    recovery.mkdir()
    (recovery / ("recovery-" + "ab" * 16 + ".json")).write_text("{not a marker")
    await svc.sessions.open(sid, "resume")
    with pytest.raises(RecoveryPending) as refused:
        await svc.turns.begin_turn(sid, "blocked")
    assert error_kind(refused.value) == "recovery-pending"
    with pytest.raises(RecoveryPending):
        await svc.history.prepare_rewind(sid, "after", 1)
    assert svc.info(sid).recovery_pending == "ab" * 16
    with pytest.raises(Exception) as retried:
        await svc.history.retry_recovery(sid)
    assert error_kind(retried.value) == "recovery-pending"
    outcome = await svc.history.abandon_recovery(sid)
    assert outcome.resolution == "abandoned"
    assert svc.info(sid).recovery_pending is None
    await edit_turn(svc, root, sid, "unblocked")
    assert svc.info(sid).settled_turns == 4


async def test_a_recovery_found_at_open_is_reported_and_blocks(root):
    svc, sid = await three_turns(root)
    await svc.sessions.close(sid)
    recovery = root / ".mevedel" / "sessions" / sid / ".recovery"
    recovery.mkdir()
    (recovery / ("recovery-" + "cd" * 16 + ".json")).write_text("{}")
    again = SessionService(LocalTarget(root), ME)
    opened = await again.sessions.open(sid)
    assert opened.info.recovery_pending == "cd" * 16
    with pytest.raises(RecoveryPending):
        await again.sessions.rename(sid, "blocked")


async def test_a_rewind_that_fails_leaving_its_marker_gates_the_next_mutation(tmp_path):
    """The gate looks once per lease taken, and again after every in-place
    transaction: a Rewind whose program fails after its journal, and whose
    rollback cannot write the file back, leaves the marker, and the next
    mutation of the same open session is refused."""
    from mevedel_server.store.transactions.recovery import find_recovery
    from mevedel_server.targets import FaultInjectingTarget, TargetError

    class ThenRefusesNotes(FaultInjectingTarget):
        """After its injected fault, every write to notes.txt fails."""

        async def run(self, program):
            if self.fired and any(op.writes and op.path == "notes.txt" for op in program.operations):
                raise TargetError("notes.txt", "permission denied")
            return await super().run(program)

    for point in range(1, 40):
        root = tmp_path / f"point-{point}"
        root.mkdir()
        (root / "notes.txt").write_text("v0\n")
        target = ThenRefusesNotes(LocalTarget(root))
        svc = SessionService(target, ME)
        sid = (await svc.sessions.create()).session_id
        for n, content in enumerate(("v1\n", "v2\n")):
            await edit_turn(svc, root, sid, f"turn {n}", content)
        await svc.turns.begin_turn(sid, "gate looked at")  # the gate has looked: nothing pending
        await svc.turns.append(sid, EvidenceInput("response", text="ok"))
        await svc.turns.settle(sid)
        impact = await svc.history.prepare_rewind(sid, "after", 1)
        target.arm(point, "error")
        try:
            await svc.history.commit_rewind(sid, impact.token.text)
        except Exception:
            pass
        target.arm(None)
        if (await find_recovery(LocalTarget(root), sid)).recovery_id is None:
            continue
        with pytest.raises(RecoveryPending):
            await svc.turns.begin_turn(sid, "after the failed rewind")
        return
    raise AssertionError("no write point of the Rewind left its recovery marker")


class _Counting(LocalTarget):
    """A LocalTarget that counts its programs (one program is one round
    trip on an SSH workspace)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.programs: list = []

    async def run(self, program):
        self.programs.append(program)
        return await super().run(program)


async def test_a_rewind_of_the_open_session_reads_what_its_lease_already_proves_once(root):
    """The held lease and the bytes the open session last committed (proven
    by the head's manifest) are the committed state, so the prepare reads
    only the working tree, in one program with the recovery journal and the
    prompt queue, and the commit rechecks it in one more before the one
    that restores and publishes; ``rewind_now`` (``--yes``) reads no file
    (the recorded states stand for them, checked in the restore's own
    program), so it costs one program less than a prepare and a commit,
    and restores the same."""
    (root / "notes.txt").write_text("v0\n")
    target = _Counting(root)
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    for n in (1, 2, 3):
        await edit_turn(svc, root, sid, f"turn {n}", f"v{n}\n")

    mark = len(target.programs)
    impact = await svc.history.prepare_rewind(sid, "after", 2)
    prepared = target.programs[mark:]
    assert len(prepared) == 1, [[type(op).__name__ for op in p.operations] for p in prepared]
    assert {r.path for r in impact.restores if r.changes} == {"notes.txt"}

    mark = len(target.programs)
    await svc.history.commit_rewind(sid, impact.token.text)
    two_phase = len(target.programs) - mark + 1
    assert (root / "notes.txt").read_text() == "v2\n"

    await edit_turn(svc, root, sid, "turn 3 again", "v3\n")
    mark = len(target.programs)
    result = await svc.history.rewind_now(sid, "after", 2)
    assert result.committed and result.written == ("notes.txt",)
    assert (root / "notes.txt").read_text() == "v2\n"
    assert svc.info(sid).settled_turns == 2
    assert len(target.programs) - mark == two_phase - 1


def _names(program) -> list[str]:
    return [type(op).__name__ for op in program.operations]


async def _resumed(target, sid: str) -> SessionService:
    """A new process of this client opening ``sid`` as ``mevedel rewind``
    does: the listing, then the claim that reads the committed bytes."""
    svc = SessionService(target, ME)
    await svc.sessions.list()
    await svc.sessions.open(sid, "resume")
    return svc


async def test_rewind_now_of_a_resumed_session_is_one_program(root):
    """``mevedel rewind --yes`` in a process of its own: the claim's
    program listed the recovery journal and the queue, the files are
    predicted from the last turn's recorded states, and the checks, the
    journal, the restore, the publication and the journal's removal are
    one program -- which gives back the file, its mode, and a directory
    the discarded turns made."""
    import os

    (root / "notes.txt").write_text("v0\n")
    os.chmod(root / "notes.txt", 0o640)
    target = _Counting(root)
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    await edit_turn(svc, root, sid, "first", "v1\n")
    await svc.turns.begin_turn(sid, "second")
    await svc.turns.capture_file(sid, "notes.txt")
    await svc.turns.capture_file(sid, "made")
    await svc.turns.capture_file(sid, "made/new.txt")
    (root / "notes.txt").write_text("v2\n")
    os.chmod(root / "notes.txt", 0o755)
    (root / "made").mkdir()
    (root / "made" / "new.txt").write_text("new\n")
    await svc.turns.append(sid, EvidenceInput("response", text="answer"))
    await svc.turns.settle(sid)
    await svc.sessions.close(sid)

    again = await _resumed(target, sid)
    mark = len(target.programs)
    result = await again.history.rewind_now(sid, "after", 1)
    ran = target.programs[mark:]
    assert len(ran) == 1, [_names(p) for p in ran]
    assert {"PutEntry", "Barrier", "Remove"} <= set(_names(ran[0]))
    assert result.committed and set(result.written) == {"notes.txt", "made", "made/new.txt"}
    assert (root / "notes.txt").read_text() == "v1\n" and (root / "notes.txt").stat().st_mode & 0o7777 == 0o640
    assert not (root / "made").exists()
    assert again.info(sid).settled_turns == 1
    assert not (root / ".mevedel" / "sessions" / sid / ".recovery").exists()


async def test_rewind_now_overwrites_a_file_changed_outside_the_session(root):
    """A file changed since the last turn recorded it is not what the
    prediction says: the checks stop the program before anything is
    written, the file is read, and the Rewind overwrites it as ``--yes``
    does (one program to read, one to restore and publish)."""
    target = _Counting(root)
    svc, sid = await three_turns(root)
    await svc.sessions.close(sid)
    (root / "notes.txt").write_text("edited by hand\n")
    again = await _resumed(target, sid)
    mark = len(target.programs)
    result = await again.history.rewind_now(sid, "after", 1)
    assert len(target.programs) - mark == 3, [_names(p) for p in target.programs[mark:]]
    assert result.committed and result.written == ("notes.txt",)
    assert (root / "notes.txt").read_text() == "v1\n"


async def test_rewind_now_refuses_a_path_that_cannot_be_restored(root):
    """A FIFO where the prediction says a file is: the check stops the
    program, the path is read, and the Rewind is refused naming it, as a
    prepare that reads refuses -- nothing written, no marker."""
    import os

    svc, sid = await three_turns(root)
    await svc.sessions.close(sid)
    (root / "notes.txt").unlink()
    os.mkfifo(root / "notes.txt")
    again = await _resumed(LocalTarget(root), sid)
    with pytest.raises(Exception, match=r"captured files cannot be restored \(notes.txt: ") as refused:
        await again.history.rewind_now(sid, "after", 1)
    assert error_kind(refused.value) == "unreadable"
    assert again.info(sid).settled_turns == 3
    assert not (root / ".mevedel" / "sessions" / sid / ".recovery").exists()


class _ChangesBeforeTheRestore(LocalTarget):
    """Writes ``notes.txt`` just before each of the next programs that
    restore project files, one content each: another writer between the
    read and the restore."""

    def __init__(self, root: Path, *contents: str) -> None:
        super().__init__(root)
        self.contents = list(contents)

    async def run(self, program):
        if self.contents and any(type(op).__name__ == "PutEntry" for op in program.operations):
            (Path(self.root) / "notes.txt").write_text(self.contents.pop(0))
        return await super().run(program)


async def test_a_change_between_the_recheck_and_the_restore_refuses_the_commit(root):
    """The restore's program checks each file against what the recheck
    read, before its journal and before any write: a file changed in
    between refuses the commit as stale, naming it, and nothing of the
    Rewind happens."""
    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_rewind(sid, "after", 1)
    await svc.sessions.close(sid)
    target = _ChangesBeforeTheRestore(root, "written meanwhile\n")
    again = await _resumed(target, sid)
    with pytest.raises(StaleState) as refused:
        await again.history.commit_rewind(sid, impact.token.text)
    assert "notes.txt changed since it was read" in str(refused.value) and "prepare again" in str(refused.value)
    assert error_kind(refused.value) == "stale-head"
    assert (root / "notes.txt").read_text() == "written meanwhile\n"
    assert again.info(sid).settled_turns == 3
    assert not (root / ".mevedel" / "sessions" / sid / ".recovery").exists()


async def test_rewind_now_refuses_a_file_that_changes_again_while_it_runs(root):
    """``--yes``: the prediction fails (the file was edited by hand), the
    file is read, and it changes once more before the restore: refused as
    stale, nothing written."""
    svc, sid = await three_turns(root)
    await svc.sessions.close(sid)
    (root / "notes.txt").write_text("edited by hand\n")
    target = _ChangesBeforeTheRestore(root, "edited by hand\n", "and again\n")
    again = await _resumed(target, sid)
    with pytest.raises(StaleState, match="notes.txt changed since it was read"):
        await again.history.rewind_now(sid, "after", 1)
    assert (root / "notes.txt").read_text() == "and again\n"
    assert again.info(sid).settled_turns == 3


async def queue_a_prompt(svc: SessionService, sid: str) -> str:
    """Queues a follow-up prompt in the session, as a second process of
    this client would; returns its entry ID."""
    from mevedel_server.store.transactions.pending_inputs import (
        InputRecord,
        write_inputs,
    )

    entry = "e" * 32
    queued = InputRecord(
        entry_id=entry, session_id=sid, kind="follow-up", state="queued", order=1, text="meanwhile", client_id=ME.client_id, host="h", queued_at=0
    )
    await write_inputs(svc.session(sid).lease, [queued], new=[entry])
    return entry


async def test_a_prompt_queued_after_the_prepare_refuses_the_commit_and_rewind_now(root):
    """The queue is looked at in the commit's recheck program too, and by
    ``rewind_now``: a prompt written against the conversation is never
    sent into a rewound one."""
    from mevedel_server.store.service.errors import TurnStateConflict
    from mevedel_server.store.transactions.pending_inputs import remove_input

    svc, sid = await three_turns(root)
    impact = await svc.history.prepare_rewind(sid, "after", 1)
    lease = svc.session(sid).lease
    entry = await queue_a_prompt(svc, sid)
    for attempt in (lambda: svc.history.commit_rewind(sid, impact.token.text), lambda: svc.history.rewind_now(sid, "after", 1)):
        with pytest.raises(TurnStateConflict) as refused:
            await attempt()
        assert "has 1 queued prompt: send or cancel it before you rewind it" in str(refused.value)
        assert (root / "notes.txt").read_text() == "v3\n"
        assert svc.info(sid).settled_turns == 3
    await remove_input(lease, entry)
    await svc.history.rewind_now(sid, "after", 1)
    assert (root / "notes.txt").read_text() == "v1\n"


async def test_redo_is_refused_while_a_prompt_waits_in_the_queue(root):
    """Redo changes the conversation a queued prompt was written against,
    as Rewind does: its prepare, its commit and ``redo_now`` refuse,
    naming the queue, and nothing moves until the prompt is gone."""
    from mevedel_server.store.service.errors import TurnStateConflict
    from mevedel_server.store.transactions.pending_inputs import remove_input

    svc, sid = await three_turns(root)
    rewound = await svc.history.prepare_rewind(sid, "after", 1)
    await svc.history.commit_rewind(sid, rewound.token.text)
    head = next(s for s in (await svc.history.redo_states(sid)).states if s.turn_count == 3).publication_id
    redo = await svc.history.prepare_redo(sid, head)
    lease = svc.session(sid).lease
    entry = await queue_a_prompt(svc, sid)
    for attempt in (
        lambda: svc.history.prepare_redo(sid, head),
        lambda: svc.history.commit_redo(sid, redo.token.text),
        lambda: svc.history.redo_now(sid, head),
    ):
        with pytest.raises(TurnStateConflict) as refused:
            await attempt()
        assert "has 1 queued prompt: send or cancel it before you redo it" in str(refused.value)
        assert (root / "notes.txt").read_text() == "v1\n"
        assert svc.info(sid).settled_turns == 1
    await remove_input(lease, entry)
    await svc.history.redo_now(sid, head)
    assert (root / "notes.txt").read_text() == "v3\n" and svc.info(sid).settled_turns == 3
