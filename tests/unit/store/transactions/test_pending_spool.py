"""This machine's spool of saves an SSH host could not record: each step
is told (kept, recorded, published), and two processes of one client that
resume the session at the same moment -- two ``mevedel`` commands, which
follow each other's lease generation -- put one record on the host and
tell it once. Real SSH connections, a host that goes away and comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.unit.store.transactions.test_ssh_drops_rewind import (
    ME,
    _connect,
    _three_turns,
)

from mevedel_server.store import PendingSpool, PublicationUnknown, workspace_spool
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget, parse_ssh_location


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def _spool(tmp_path: Path) -> PendingSpool:
    (tmp_path / "spool").mkdir(exist_ok=True)
    return PendingSpool(LocalTarget(tmp_path / "spool"), "a" * 32)


def _on_host(root: Path, sid: str) -> list[str]:
    return sorted(p.name for p in (root / ".mevedel" / "sessions" / sid / ".pending-publication").glob("pending-*.json"))


async def _kept_fourth_turn(target, root: Path, spool: PendingSpool, fault_server) -> tuple[str, SessionService, list]:
    """A fourth turn whose settlement the host went away in: kept in ``spool``."""
    sid = await _three_turns(target, root)
    svc = SessionService(target, ME, pending_spool=spool)
    told: list = []
    svc.on_spool.append(told.append)
    await svc.sessions.list()
    await svc.sessions.open(sid, "resume")
    await svc.turns.begin_turn(sid, "turn 4")
    await svc.turns.append(sid, EvidenceInput("response", text="done"))
    fault_server.when, fault_server.then_unreachable = (b"Barrier", "drop-before-run"), True
    with pytest.raises(PublicationUnknown) as caught:
        await svc.turns.settle(sid)
    assert caught.value.spooled and not caught.value.recorded
    assert [(n.session_id, n.event, n.kept_by) for n in told] == [(sid, "kept", ME.host)]
    return sid, svc, told


async def test_a_kept_save_the_same_process_retries_is_told_published(root, tmp_path, fault_server):
    spool = _spool(tmp_path)
    target = await _connect(fault_server, root)
    try:
        sid, svc, told = await _kept_fourth_turn(target, root, spool, fault_server)
        await fault_server.start()
        assert (await svc.sessions.retry_publication(sid)).committed
        assert [n.event for n in told] == ["kept", "published"]
        assert told[0].failed_at == told[1].failed_at
        assert not (tmp_path / "spool" / "unrecorded" / ("a" * 32) / sid).exists()
    finally:
        await target.close()


async def test_two_processes_of_one_client_resuming_at_once_record_a_kept_save_once(root, tmp_path, fault_server):
    spool = _spool(tmp_path)
    target = await _connect(fault_server, root)
    try:
        sid, _, _ = await _kept_fourth_turn(target, root, spool, fault_server)
        [kept] = (tmp_path / "spool" / "unrecorded" / ("a" * 32) / sid).glob("pending-*.json")
    finally:
        await target.close()
    await fault_server.start()
    # Two processes: each its own connection and service, one client.
    targets = [await _connect(fault_server, root) for _ in range(2)]
    try:
        services = [SessionService(t, ME, pending_spool=spool) for t in targets]
        told: list = []
        for svc in services:
            svc.on_spool.append(told.append)
        await asyncio.gather(*(svc.sessions.list() for svc in services))
        await asyncio.gather(*(svc.sessions.open(sid, "resume") for svc in services), return_exceptions=True)
        assert [n.event for n in told] == ["recorded"]
        assert _on_host(root, sid) == [kept.name]
        assert not kept.parent.exists()
        # Whichever holds the lease now publishes it, once.
        reader = SessionService(targets[0], ME, pending_spool=spool)
        await reader.sessions.list()
        await reader.sessions.open(sid, "resume")
        assert reader.info(sid).pending_publication is not None
        assert (await reader.sessions.retry_publication(sid)).committed
        assert _on_host(root, sid) == [] and reader.info(sid).settled_turns == 4
    finally:
        for t in targets:
            await t.close()


def test_a_workspace_on_this_machine_gets_no_spool_and_an_ssh_one_a_spool_per_location(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert workspace_spool(tmp_path) is None and workspace_spool(str(tmp_path)) is None
    here = workspace_spool(parse_ssh_location("ssh://host/srv/project"))
    copy = workspace_spool(parse_ssh_location("ssh://host/srv/copy"))
    again = workspace_spool(parse_ssh_location("ssh://host/srv/project"))
    assert here is not None and copy is not None and again is not None
    assert here.workspace == again.workspace != copy.workspace
    assert (tmp_path / "state" / "mevedel").is_dir()  # made by the first client on this machine
