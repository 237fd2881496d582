"""A connection to an SSH workspace that drops in the one program of a
``--yes`` Rewind (its checks, journal, restored files, publication and the
journal's removal): whatever part ran, the Rewind is committed and the
files restored, or it did not happen and the session can rewind again --
never half of it, and never a recovery marker left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_server.store import ClientIdentity, find_recovery
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.transactions.in_place import RolledBack

ME = ClientIdentity("client-me", "workstation")


async def _connect(fault_server, root: Path):
    from mevedel_server.targets.ssh import SshTarget

    return await SshTarget.connect(fault_server.url(root), **fault_server.options())


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
