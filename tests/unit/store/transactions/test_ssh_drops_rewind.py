"""A connection to an SSH workspace that drops in the one program of a
``--yes`` Rewind (its checks, journal, restored files, publication and the
journal's removal): whatever part ran, the Rewind is committed and the
files restored, or it did not happen and the session can rewind again --
never half of it, and never a recovery marker left behind. When the host
is gone too, the user is told only what may be true, and the recovery
retried once it is back answers with what the host holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, OutcomeUnknown, find_recovery
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.in_place import RolledBack
from mevedel_server.store.transactions.recovery import NothingToRecover

ME = ClientIdentity("client-me", "workstation")


async def _connect(fault_server, root: Path):
    from mevedel_server.targets.ssh import SshTarget

    # Few reconnection attempts: a host that is gone is found gone quickly.
    return await SshTarget.connect(fault_server.url(root), reconnect_attempts=2, reconnect_delay=0.05, **fault_server.options())


async def _three_turns(target, root: Path) -> str:
    (root / "notes.txt").write_text("v0\n")
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    for n in (1, 2, 3):
        await svc.turns.begin_turn(sid, f"turn {n}")
        await svc.turns.capture_file(sid, "notes.txt")
        (root / "notes.txt").write_text(f"v{n}\n")
        await svc.turns.append(sid, EvidenceInput("response", text="done"))
        await svc.turns.settle(sid)
    await svc.sessions.close(sid)
    return sid


async def _resumed(target, sid: str) -> SessionService:
    svc = SessionService(target, ME)
    await svc.sessions.list()
    await svc.sessions.open(sid, "resume")
    return svc


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


async def test_a_drop_after_the_rewind_ran_is_found_committed(root, fault_server):
    """The program ran to its end and the answer was lost: the Rewind
    looks at the head on a new connection, finds its replacement there,
    and finishes (the journal its program had removed is gone)."""
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        fault_server.when = (b"PutEntry", "drop-after-run")
        result = await svc.history.rewind_now(sid, "after", 1)
        assert fault_server.when is None  # the drop happened
        assert result.committed and result.written == ("notes.txt",) and result.warning is None
        assert (root / "notes.txt").read_text() == "v1\n"
        assert svc.info(sid).settled_turns == 1
        assert not (await find_recovery(target, sid)).pending
    finally:
        await target.close()


async def test_a_drop_before_the_rewind_ran_is_told_and_it_can_run_again(root, fault_server):
    """The request reached the host and nothing ran: the Rewind says it
    did not happen (kind ``unavailable``), the files and the session are
    as they were, no marker blocks, and the same Rewind then succeeds."""
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        fault_server.when = (b"PutEntry", "drop-before-run")
        with pytest.raises(RolledBack) as caught:
            await svc.history.rewind_now(sid, "after", 1)
        assert caught.value.kind == "unavailable" and "the rewind did not happen" in str(caught.value)
        assert (root / "notes.txt").read_text() == "v3\n"
        assert svc.info(sid).settled_turns == 3
        assert not (await find_recovery(target, sid)).pending
        result = await svc.history.rewind_now(sid, "after", 1)
        assert result.committed and (root / "notes.txt").read_text() == "v1\n"
    finally:
        await target.close()


async def _rewind_while_the_host_goes_away(fault_server, svc, sid: str, drop: str) -> OutcomeUnknown:
    """A Rewind to after turn 1 whose connection drops (``drop``) at its
    program and whose host then stops listening: told unknown, checked by
    :func:`_told_unknown`; the host listens again before this returns."""
    fault_server.when, fault_server.then_unreachable = (b"PutEntry", drop), True
    with pytest.raises(OutcomeUnknown) as caught:
        await svc.history.rewind_now(sid, "after", 1)
    _told_unknown(caught.value)
    await fault_server.start()
    return caught.value


def _told_unknown(error: OutcomeUnknown) -> str:
    """The message, checked for what an unreachable host leaves unknown."""
    message = str(error)
    assert error.kind == "unavailable" and error.follow_up == "retry-recovery"
    assert "the rewind may or may not have been applied" in message
    assert "cannot be reached now" in message and "when the host can be reached again, retry the recovery" in message
    # A marker is only one that may be there, never one said to keep anything.
    assert f"recovery {error.marker} may be left on the host" in message and "keeps" not in message
    return message


async def test_a_rewind_that_ran_while_the_host_went_away_is_told_unknown_and_found_applied(root, fault_server):
    """The program ran to its end, the answer was lost and the host is gone:
    nothing is rolled back over a head that may have committed, the user is
    told the Rewind may or may not have been applied, and the recovery
    retried once the host is back says nothing is left and that the session
    holds the one turn the Rewind kept -- live here too."""
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        await _rewind_while_the_host_goes_away(fault_server, svc, sid, "drop-after-run")
        assert (root / "notes.txt").read_text() == "v1\n"
        assert not (await find_recovery(target, sid)).pending  # the marker it named never stayed
        with pytest.raises(NothingToRecover) as answer:
            await svc.history.retry_recovery(sid)
        assert "no Rewind or Redo was left half done; the session holds 1 settled turn (published as" in str(answer.value)
        assert svc.info(sid).settled_turns == 1
        assert (await _resumed(target, sid)).info(sid).settled_turns == 1
    finally:
        await target.close()


async def test_a_rewind_that_never_ran_while_the_host_went_away_is_found_not_applied(root, fault_server):
    """The request reached the host and nothing ran, and the host is gone:
    the same words (the client cannot tell the two apart), and once the host
    is back a new process's retried recovery says the session still holds
    its three turns; the Rewind then runs."""
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        await _rewind_while_the_host_goes_away(fault_server, svc, sid, "drop-before-run")
        assert (root / "notes.txt").read_text() == "v3\n"
        later = await _resumed(target, sid)
        with pytest.raises(NothingToRecover) as answer:
            await later.history.retry_recovery(sid)
        assert "the session holds 3 settled turns" in str(answer.value)
        # The process that lost the answer adopts the committed state at its
        # next gate, and rewinds.
        result = await svc.history.rewind_now(sid, "after", 1)
        assert result.committed and (root / "notes.txt").read_text() == "v1\n"
    finally:
        await target.close()


async def test_a_rewind_that_stopped_with_its_journal_while_the_host_went_away_is_rolled_back_by_the_retry(root, fault_server):
    """The program journalled the restore and stopped at a file it could not
    write (a directory replaced by a file outside the session), the answer
    was lost and the host is gone: the marker the message names is the one
    the host holds, it blocks the session, and the retried recovery puts
    every file back (the head never moved)."""
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_text("a0\n")
    target = await _connect(fault_server, root)
    try:
        svc = SessionService(target, ME)
        sid = (await svc.sessions.create()).session_id
        (root / "notes.txt").write_text("v0\n")
        for n in (1, 2, 3):
            await svc.turns.begin_turn(sid, f"turn {n}")
            await svc.turns.capture_file(sid, "notes.txt")
            if n == 2:
                await svc.turns.capture_file(sid, "sub/a.txt")
                (root / "sub" / "a.txt").unlink()
                (root / "sub").rmdir()
                (root / "sub").write_text("not a directory\n")
            (root / "notes.txt").write_text(f"v{n}\n")
            await svc.turns.append(sid, EvidenceInput("response", text="done"))
            await svc.turns.settle(sid)
        await svc.sessions.close(sid)
        svc = await _resumed(target, sid)
        unknown = await _rewind_while_the_host_goes_away(fault_server, svc, sid, "drop-after-run")
        left = await find_recovery(target, sid)
        assert left.recovery_id == unknown.marker
        later = await _resumed(target, sid)
        with pytest.raises(Exception, match=f"is in recovery {left.recovery_id}"):
            await later.history.rewind_now(sid, "after", 1)
        outcome = await later.history.retry_recovery(sid)
        assert outcome.resolution == "rolled-back" and outcome.recovery_id == left.recovery_id
        assert (root / "notes.txt").read_text() == "v3\n" and (root / "sub").read_text() == "not a directory\n"
        assert later.info(sid).settled_turns == 3
        assert not (await find_recovery(target, sid)).pending
    finally:
        await target.close()


async def test_a_rewind_that_never_ran_and_could_not_roll_back_names_no_marker(root, fault_server):
    """The request reached the host and nothing ran, the host still answers,
    and the rollback cannot write back a file replaced at that moment by a
    directory holding someone's file: the program never wrote its recovery
    marker, so none is named or left -- the Rewind did not happen, their
    directory stays, and the session can rewind again."""
    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        notes = root / "notes.txt"

        def replaced() -> None:
            notes.unlink()
            notes.mkdir()
            (notes / "theirs.txt").write_text("theirs\n")

        fault_server.when, fault_server.struck = (b"PutEntry", "drop-before-run"), replaced
        with pytest.raises(RolledBack) as caught:
            await svc.history.rewind_now(sid, "after", 1)
        assert fault_server.when is None  # the drop happened
        message = str(caught.value)
        assert caught.value.kind == "unavailable" and "the rewind did not happen" in message
        assert "recovery" not in message.lower() and "can be run again" in message
        assert not (await find_recovery(target, sid)).pending
        assert (notes / "theirs.txt").read_text() == "theirs\n"
        assert svc.info(sid).settled_turns == 3
        (notes / "theirs.txt").unlink()
        notes.rmdir()
        notes.write_text("v3\n")
        result = await svc.history.rewind_now(sid, "after", 1)
        assert result.committed and notes.read_text() == "v1\n"
    finally:
        await target.close()


async def test_a_file_edited_outside_as_a_rewind_that_never_ran_drops_is_kept_and_the_rewind_told_undone(root, fault_server):
    """Someone edits the file the Rewind restores at the moment its
    program's connection drops, before the program ran: the host, asked
    again, shows the program never journalled -- so it wrote nothing and
    the rollback writes nothing either. Their edit stays, the user is told
    (once, by the session's ID, with no publication said to be pending)
    that the Rewind did not happen and can be made again, and an editor is
    told the same."""
    from mevedel_server.lsp.handlers import refusal

    target = await _connect(fault_server, root)
    try:
        sid = await _three_turns(target, root)
        svc = await _resumed(target, sid)
        notes = root / "notes.txt"
        fault_server.when, fault_server.struck = (b"PutEntry", "drop-before-run"), lambda: notes.write_text("theirs\n")
        with pytest.raises(RolledBack) as caught:
            await svc.history.rewind_now(sid, "after", 1)
        assert fault_server.when is None  # the drop happened
        assert notes.read_text() == "theirs\n"
        message = str(caught.value)
        assert caught.value.kind == "unavailable" and message.count(sid) == 1
        assert message.startswith(f"session {sid}: the rewind did not happen: the connection to ssh target 127.0.0.1:")
        assert "before it changed any project file; the session and its files are as they were" in message
        assert message.endswith("so the rewind can be run again")
        assert "pending" not in message and "recovery" not in message.lower()
        told = refusal(caught.value, "mevedel/rewind/commit")
        assert told.data["authored"] == sid and told.data["kind"] == "unavailable"
        assert told.message == f"{sid}: {told.data['reason']}" and told.message.count(sid) == 1
        assert told.data["reason"].startswith("the rewind did not happen: the connection to ssh target")
        assert not (await find_recovery(target, sid)).pending
        assert svc.info(sid).settled_turns == 3
        # Made again, the Rewind restores over what is there now.
        result = await svc.history.rewind_now(sid, "after", 1)
        assert result.committed and notes.read_text() == "v1\n"
    finally:
        await target.close()
