"""Storage stays bounded: superseded publications are collected in the
background after every commit and lease-acquiring open (what Redo offers,
the head and the newest three stay), expired sessions are removed when the
sessions are listed and when a server starts, and a mid-turn checkpoint is
published every interval while a turn is in flight."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_store_cleanup import aged_session, remaining, sid

from mevedel_server.store import ClientIdentity, SessionPaths, read_committed
from mevedel_server.store.authority.packed import read_pack
from mevedel_server.store.service import PRODUCT_STORAGE, EvidenceInput, SessionService
from mevedel_server.store.transactions.redo import redo_states
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("bounded", "this-host")


def publications(root: Path, session_id: str) -> set[str]:
    """The generations left (directories that still hold a manifest)."""
    directory = root / ".mevedel" / "sessions" / session_id / ".publications"
    return {n for n in os.listdir(directory) if (directory / n / "manifest.json").exists()}


def directories(root: Path, session_id: str) -> set[str]:
    directory = root / ".mevedel" / "sessions" / session_id / ".publications"
    return {n for n in os.listdir(directory) if not n.startswith(".")}


class Stamps:
    """Gives each new publication a manifest time 10 s after the previous
    one, right after the call that published it (before its collection
    runs): a real session's saves are seconds apart, and the target clock
    has whole seconds (generations of one second are all kept)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.next = int(time.time()) - 100_000
        self.seen: set[str] = set()

    def __call__(self) -> None:
        for manifest in self.root.glob(".mevedel/sessions/*/.publications/*/manifest.json"):
            if manifest.parent.name in self.seen:
                continue
            self.seen.add(manifest.parent.name)
            self.next += 10
            os.utime(manifest, (self.next, self.next))
            os.utime(manifest.parent, (self.next, self.next))


def age(root: Path, seconds: int = 10) -> None:
    """Every publication so far is ``seconds`` older: a real session's saves
    are seconds apart, and the target clock has whole seconds (generations
    of the same second are all kept)."""
    for manifest in root.glob(".mevedel/sessions/*/.publications/*/manifest.json"):
        stamp = manifest.stat().st_mtime - seconds
        os.utime(manifest, (stamp, stamp))
        os.utime(manifest.parent, (stamp, stamp))


async def idle(service: SessionService) -> None:
    """Until no background collection of ``service`` runs (bounded)."""
    for _ in range(2000):
        busy = [s for sid in service.open_sessions() if (s := service.session(sid)).collector and s.collector.running]
        if not busy:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("publication collection never finished")


async def retained_for_redo(root: Path, session_id: str) -> set[str]:
    """The head, the states Redo offers and the newest three: what must stay."""
    states = await redo_states(LocalTarget(root), session_id)
    return {state.publication_id for state in states.states}


async def test_settled_turns_leave_only_what_redo_offers_and_the_newest_three(tmp_path):
    service = SessionService(LocalTarget(tmp_path), ME, publication_keep_recent=3)
    session_id = (await service.sessions.create()).session_id
    stamp = Stamps(tmp_path)
    for n in range(1, 13):
        await service.turns.begin_turn(session_id, f"prompt {n}")
        await service.turns.checkpoint(session_id)  # a mid-turn publication, superseded at once
        stamp()
        await service.turns.append(session_id, EvidenceInput("response", text=f"answer {n}"))
        await service.turns.checkpoint(session_id)
        stamp()
        await service.turns.settle(session_id)
        stamp()
        await idle(service)
        # Every settled turn stays offered by Redo, collected mid-turn or not.
        assert len((await redo_states(LocalTarget(tmp_path), session_id)).states) == n - 1
    left = publications(tmp_path, session_id)
    # 36 publications were committed; the 24 mid-turn ones are collectable.
    # Settled ones outside the newest three may have moved into the pack.
    offered = await retained_for_redo(tmp_path, session_id)
    packed = set((await read_pack(LocalTarget(tmp_path), SessionPaths(session_id))).generations)
    assert offered <= left | packed
    assert not left & packed
    assert len(left) <= len(offered) + 1 + 3, left
    assert len(left) < 36 // 2
    # Everything that stayed still reads.
    committed = await read_committed(LocalTarget(tmp_path), session_id)
    assert len(await committed.read_all()) > 0
    await service.sessions.close(session_id)


async def test_a_lease_acquiring_open_collects_what_an_earlier_client_left(tmp_path):
    plain = SessionService(LocalTarget(tmp_path), ME)  # collects nothing
    session_id = (await plain.sessions.create()).session_id
    for n in range(6):
        await plain.turns.begin_turn(session_id, f"prompt {n}")
        await plain.turns.checkpoint(session_id)
        await plain.turns.settle(session_id)
        age(tmp_path)
    await plain.sessions.close(session_id)
    age(tmp_path)
    before = publications(tmp_path, session_id)
    collecting = SessionService(LocalTarget(tmp_path), ME, publication_keep_recent=3)
    await collecting.sessions.open(session_id)
    await idle(collecting)
    after = publications(tmp_path, session_id)
    assert len(after) < len(before)
    assert await retained_for_redo(tmp_path, session_id) <= after
    await collecting.sessions.close(session_id)


async def test_a_one_command_service_collects_once_when_it_detaches(tmp_path):
    """A CLI process's service: its publications schedule no job while the
    command runs (over SSH each job is several round trips), and the one job
    due runs when the command detaches, leaving what Redo offers. The
    history is an earlier process's (its saves seconds apart); this
    command's own publications are surveyed by the commits that made them."""
    earlier = SessionService(LocalTarget(tmp_path), ME)
    session_id = (await earlier.sessions.create()).session_id
    stamp = Stamps(tmp_path)
    for n in range(1, 7):
        await earlier.turns.begin_turn(session_id, f"prompt {n}")
        await earlier.turns.checkpoint(session_id)
        stamp()
        await earlier.turns.settle(session_id)
        stamp()
    await earlier.sessions.close(session_id)
    service = SessionService(LocalTarget(tmp_path), ME, publication_keep_recent=3, one_command=True)
    await service.sessions.open(session_id)
    await service.turns.begin_turn(session_id, "prompt 7")
    await service.turns.checkpoint(session_id)
    await service.turns.settle(session_id)
    collector = service.session(session_id).collector
    assert not collector.running
    before = publications(tmp_path, session_id)
    assert collector.steps == 0 and len(before) >= 14
    await service.sessions.detach()
    after = publications(tmp_path, session_id)
    assert collector.steps >= 1 and len(after) < len(before)
    assert await retained_for_redo(tmp_path, session_id) <= after


async def test_expired_sessions_are_removed_when_the_sessions_are_listed(tmp_path):
    target = LocalTarget(tmp_path)
    now = int(time.time())
    for n in range(1, 7):
        await aged_session(target, tmp_path, sid(n), 40 + n, now=now)
    service = SessionService(target, ME, session_max_age_days=30, session_keep_recent=3)
    listing = await service.sessions.list()
    assert remaining(tmp_path) == {sid(1), sid(2), sid(3)}
    assert {row.session_id for row in listing.rows} == {sid(1), sid(2), sid(3)}
    assert {r.session_id for r in service.sessions.last_cleanup.removed} == {sid(4), sid(5), sid(6)}


async def test_a_bare_service_removes_nothing(tmp_path):
    target = LocalTarget(tmp_path)
    now = int(time.time())
    for n in range(1, 6):
        await aged_session(target, tmp_path, sid(n), 40 + n, now=now)
    await SessionService(target, ME).sessions.list()
    assert len(remaining(tmp_path)) == 5


def test_the_product_defaults_are_the_specs():
    assert PRODUCT_STORAGE == {
        "git_excludes": True,
        "publication_keep_recent": 3,
        "checkpoint_seconds": 30,
        "session_max_age_days": 30,
        "session_keep_recent": 3,
    }


# The CLI, as a user runs it --------------------------------------------------------


def cli(workspace: Path, state: Path, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args, "--json"],
        cwd=workspace,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_twelve_cli_turns_leave_only_what_redo_offers(tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    state = tmp_path / "state"
    session_id = cli(workspace, state, "turn", "begin", "--new", "prompt 1")["session_id"]
    cli(workspace, state, "turn", "settle")
    for n in range(2, 13):
        age(workspace)
        cli(workspace, state, "turn", "begin", f"prompt {n}")
        age(workspace)
        cli(workspace, state, "turn", "settle")
    left = publications(workspace, session_id)
    offered = asyncio.run(retained_for_redo(workspace, session_id))
    packed = set(asyncio.run(read_pack(LocalTarget(workspace), SessionPaths(session_id))).generations)
    # Before collection ran, these 24 commands left 25 publication directories;
    # settled ones outside the newest three may have moved into the pack.
    assert offered <= left | packed
    assert len(left) <= len(offered) + 1 + 3, left


# Mid-turn checkpoints --------------------------------------------------------------


async def committed_records(root: Path, session_id: str) -> tuple[bool, str]:
    """Whether the committed head has a turn in flight, and its records as text
    (nothing committed yet: no turn, no records)."""
    from mevedel_server.store.content.turns import Conversation

    if not (root / ".mevedel" / "sessions" / session_id / ".lease").exists():
        return False, ""
    snapshot = await read_committed(LocalTarget(root), session_id)
    if snapshot.head is None:
        return False, ""
    conversation = Conversation.restore(await snapshot.read_all())
    return conversation.open_turn is not None, " ".join(str(r) for r in conversation.records())


async def test_a_turn_in_flight_is_published_every_checkpoint_interval(tmp_path):
    service = SessionService(LocalTarget(tmp_path), ME, checkpoint_seconds=0.2)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "a long turn")
    await service.turns.append(session_id, EvidenceInput("response", text="the first half"))
    # No save was asked for; the timer publishes the unfinished turn.
    for _ in range(500):
        await asyncio.sleep(0.02)
        in_flight, text = await committed_records(tmp_path, session_id)
        if in_flight and "first half" in text:
            break
    else:
        raise AssertionError("the turn in flight was never checkpointed")
    await service.turns.append(session_id, EvidenceInput("response", text="the second half"))
    for _ in range(500):
        await asyncio.sleep(0.02)
        if "second half" in (await committed_records(tmp_path, session_id))[1]:
            break
    else:
        raise AssertionError("the second checkpoint never came")
    await service.turns.settle(session_id)
    timer = service.session(session_id).checkpoints
    await asyncio.sleep(0.5)
    assert not timer.running
    assert (await committed_records(tmp_path, session_id))[0] is False
    await service.sessions.close(session_id)


async def test_no_checkpoint_timer_runs_without_a_turn_in_flight(tmp_path):
    service = SessionService(LocalTarget(tmp_path), ME, checkpoint_seconds=0.05)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "short")
    await service.turns.settle(session_id)
    head = service.info(session_id).head
    await asyncio.sleep(0.3)
    assert service.info(session_id).head == head  # nothing new was published
    assert not service.session(session_id).checkpoints.running
    await service.sessions.close(session_id)


async def test_a_command_that_ends_as_its_turn_begins_does_not_wait_out_the_checkpoint_interval(tmp_path):
    """A CLI command that opens a session with a turn in flight and is
    refused at once stops the checkpoint timer before its task first ran:
    the command ends then, not an interval later."""
    service = SessionService(LocalTarget(tmp_path), ME, checkpoint_seconds=86_400)
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "begun, and the command ends")
    # A day's interval: a stop that slept it out would not return here.
    # (asyncio.timeout, not wait_for: a task of its own would let the
    # timer's task run, and sleep, before the stop; and the stop swallows
    # the cancel, so the deadline is asked whether it passed.)
    async with asyncio.timeout(60) as deadline:
        await service.sessions.detach()
    assert not deadline.expired(), "the checkpoint timer's stop waited for its interval"
