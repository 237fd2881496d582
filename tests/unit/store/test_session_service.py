"""The session service: lazy creation, turns saved at settlement, open modes,
takeover, stale owners, renewal, pending publications."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from deadlines import ticks
from mevedel_server.store import (
    ClientIdentity,
    LeaseHeld,
    LeaseLost,
    LeaseStanding,
    PublicationFailed,
    PublicationPending,
    TakeoverNeedsConfirmation,
    acquire_lease,
    observe_lease,
    read_committed,
)
from mevedel_server.store.content.sidecar import SIDECAR_PATH
from mevedel_server.store.content.turns import Conversation, ConversationError
from mevedel_server.store.service import (
    Access,
    EvidenceInput,
    InvalidSessionInput,
    NoSuchTurn,
    SessionIncompatible,
    SessionNotOpen,
    SessionReadOnly,
    SessionService,
    error_kind,
)
from mevedel_server.targets import FaultInjectingTarget, LocalTarget

ME = ClientIdentity("client-me", "workstation")
OTHER = ClientIdentity("client-other", "laptop")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def service(root: Path, client: ClientIdentity = ME, **options) -> SessionService:
    return SessionService(LocalTarget(root), client, **options)


def session_dirs(root: Path) -> list[str]:
    sessions = root / ".mevedel" / "sessions"
    return sorted(p.name for p in sessions.iterdir()) if sessions.exists() else []


def publications(root: Path, session_id: str) -> set[str]:
    return {p.name for p in (root / ".mevedel" / "sessions" / session_id / ".publications").iterdir()}


async def committed(root: Path, session_id: str) -> Conversation:
    snapshot = await read_committed(LocalTarget(root), session_id)
    return Conversation.restore(await snapshot.read_all())


async def one_turn(svc: SessionService, sid: str, prompt: str = "do the thing", answer: str = "done") -> None:
    await svc.turns.begin_turn(sid, prompt)
    await svc.turns.append(sid, EvidenceInput("response", text=answer))
    await svc.turns.settle(sid)


async def wait_until_expired(root: Path, sid: str) -> None:
    for _ in ticks():
        if (await observe_lease(LocalTarget(root), sid)).standing is LeaseStanding.EXPIRED:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the lease never expired")


async def test_create_is_lazy_and_an_empty_close_writes_nothing(root):
    svc = service(root)
    info = await svc.sessions.create("  Refactor   the parser ")
    assert info.display_name == "Refactor the parser" and info.named
    assert not info.materialized and info.head is None
    assert session_dirs(root) == []
    listing = await svc.sessions.list()
    assert [row.session_id for row in listing.rows] == [info.session_id]
    assert listing.unsaved == (info.session_id,) and listing.rows[0].action.value == "Switch"
    assert (await svc.sessions.save(info.session_id)).note.startswith("nothing to save")
    assert await svc.sessions.close(info.session_id) is not None
    assert session_dirs(root) == []
    assert not svc.is_open(info.session_id)


async def test_first_settle_materializes_and_each_settle_is_one_publication(root):
    (root / "src.py").write_text("print('old')\n")
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    started = await svc.turns.begin_turn(sid, "fix src.py")
    assert started.turn == 1 and not started.reminder
    captured = await svc.turns.capture_file(sid, "src.py")
    assert (captured.state, captured.size) == ("present", 13)
    (root / "src.py").write_text("print('new')\n")
    await svc.turns.append(sid, EvidenceInput("tool_call", call_id="c1", name="edit", arguments='{"path": "src.py"}'))
    await svc.turns.append(sid, EvidenceInput("tool_result", call_id="c1", output="ok"))
    await svc.turns.append(sid, EvidenceInput("response", text="Fixed."))
    assert session_dirs(root) == []  # nothing before settlement
    result = await svc.turns.settle(sid)
    assert result.committed and result.materialized
    assert session_dirs(root) == [sid]
    assert len(publications(root, sid)) == 1
    fresh = await committed(root, sid)
    assert fresh.sidecar.total_turn_count == 1 and fresh.open_turn is None
    files = fresh.file_snapshots()[0].files["src.py"]
    assert fresh.file_content(files.pre.sha256) == b"print('old')\n"
    assert fresh.file_content(files.post.sha256) == b"print('new')\n"
    await one_turn(svc, sid, "second")
    assert len(publications(root, sid)) == 2
    assert (await committed(root, sid)).sidecar.total_turn_count == 2


async def test_settle_publishes_only_what_changed(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    await svc.turns.begin_turn(sid, "next")
    result = await svc.turns.settle(sid)
    assert set(result.written) == {"session.json", "segment-0001/part-000001.chat.jsonl", "index/prompts-000001.jsonl"}


async def test_checkpoint_saves_an_unfinished_turn_without_settling_it(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    await svc.turns.begin_turn(sid, "long task")
    await svc.turns.append(sid, EvidenceInput("response", text="halfway"))
    result = await svc.turns.checkpoint(sid)
    assert result.committed and result.materialized
    fresh = await committed(root, sid)
    assert fresh.open_turn is not None and fresh.sidecar.total_turn_count == 0
    assert (await svc.turns.checkpoint(sid)).committed is False  # nothing new
    with pytest.raises(ConversationError):
        await svc.turns.checkpoint((await svc.sessions.create()).session_id)  # no turn in flight


async def test_explicit_save_publishes_even_when_nothing_changed(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    before = svc.info(sid).head
    result = await svc.sessions.save(sid)
    assert result.committed and result.head != before and result.written == ()
    assert (await svc.sessions.close(sid)).committed is False  # the close save finds nothing new


async def test_rename_publishes_only_display_metadata(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    assert (await svc.sessions.rename(sid, "Early name")).display_name == "Early name"
    assert session_dirs(root) == []  # a lazy session's name waits for its first save
    await one_turn(svc, sid)
    assert (await committed(root, sid)).sidecar.display_name == "Early name"
    changes = []
    svc.on_change.append(changes.append)
    head = svc.info(sid).head
    info = await svc.sessions.rename(sid, "Parser\tcleanup")
    assert info.display_name == "Parser cleanup" and info.head != head
    assert [c.reason for c in changes] == ["renamed"]
    assert (await committed(root, sid)).sidecar.display_name == "Parser cleanup"
    with pytest.raises(InvalidSessionInput):
        await svc.sessions.rename(sid, " \n ")


async def test_a_second_client_joins_read_only_and_its_writes_are_refused(root):
    mine = service(root)
    sid = (await mine.sessions.create()).session_id
    await one_turn(mine, sid)
    theirs = service(root, OTHER)
    opened = await theirs.sessions.open(sid)
    assert opened.action == "join" and opened.info.access is Access.READ_ONLY
    assert opened.info.holder_host == "workstation"
    for attempt in (theirs.turns.begin_turn(sid, "x"), theirs.sessions.rename(sid, "y"), theirs.sessions.save(sid)):
        with pytest.raises(SessionReadOnly) as refused:
            await attempt
        assert error_kind(refused.value) == "read-only"
    with pytest.raises(LeaseHeld):
        await theirs.sessions.open(sid, "resume")
    # The joined view follows the owner's committed turns.
    await one_turn(mine, sid, "another")
    assert len(await theirs.turns.summaries(sid)) == 2
    await mine.sessions.close(sid)
    resumed = await theirs.sessions.open(sid, "resume")
    assert resumed.action == "resume" and resumed.info.access is Access.WRITABLE
    assert resumed.info.reconciliation_pending
    started = await theirs.turns.begin_turn(sid, "after resume")
    assert started.reminder


async def test_resume_settles_a_turn_in_flight_as_interrupted(root):
    crashed = service(root)
    sid = (await crashed.sessions.create()).session_id
    await crashed.turns.begin_turn(sid, "never finished")
    await crashed.turns.checkpoint(sid)
    await crashed.sessions.detach()  # the process goes away holding its lease
    other = service(root, OTHER, lease_seconds=60)
    with pytest.raises(LeaseHeld):
        await other.sessions.open(sid, "resume")
    same_client_restarted = service(root, ClientIdentity("client-me", "workstation"))
    continued = await same_client_restarted.sessions.open(sid)
    # Its own live lease: the same client continues, nothing is interrupted.
    assert continued.interrupted_turn is None and continued.info.open_turn == 1
    await same_client_restarted.sessions.close(sid)
    resumed = await other.sessions.open(sid)
    assert resumed.interrupted_turn == 1 and resumed.info.open_turn is None
    fresh = await committed(root, sid)
    assert [t.state for t in await other.turns.summaries(sid)] == ["interrupted"]
    assert fresh.sidecar.reconciliation_pending
    assert (await other.turns.begin_turn(sid, "and now")).reminder
    assert [t.reminder for t in await other.turns.summaries(sid)] == [False, True]


async def test_expired_foreign_lease_needs_confirmation_and_the_stale_owner_is_refused(root):
    stale = service(root, lease_seconds=1, renew_every=3600)
    sid = (await stale.sessions.create()).session_id
    await one_turn(stale, sid)
    await stale.turns.begin_turn(sid, "stale work")
    await stale.session(sid).stop_renewal()  # the owner stalls
    await wait_until_expired(root, sid)
    rows = {row.session_id: row for row in (await service(root, OTHER).sessions.list()).rows}
    assert rows[sid].action.value == "Take over" and rows[sid].holder_host == "workstation"
    successor = service(root, OTHER)
    with pytest.raises(TakeoverNeedsConfirmation) as asked:
        await successor.sessions.open(sid)
    assert asked.value.holder_host == "workstation" and error_kind(asked.value) == "takeover-needs-confirmation"
    with pytest.raises(TakeoverNeedsConfirmation):
        await successor.sessions.open(sid, "takeover")
    taken = await successor.sessions.open(sid, "takeover", confirm_takeover=True)
    assert taken.action == "takeover" and taken.info.access is Access.WRITABLE
    changes = []
    stale.on_change.append(changes.append)
    with pytest.raises(LeaseLost) as refused:
        await stale.turns.settle(sid)
    assert "lease lost" in str(refused.value) and error_kind(refused.value) == "lease-lost"
    assert stale.info(sid).access is Access.READ_ONLY
    assert [c.reason for c in changes] == ["read-only"]
    with pytest.raises(SessionReadOnly):
        await stale.turns.begin_turn(sid, "again")
    assert (await committed(root, sid)).sidecar.total_turn_count == 1


async def test_background_renewal_keeps_the_lease_and_a_superseded_lease_turns_read_only(root):
    svc = service(root, lease_seconds=30, renew_every=0.05)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    renewal = svc.session(sid).renewal
    assert renewal is not None and renewal.running
    start = svc.session(sid).lease.generation
    for _ in ticks():
        if renewal.renewals >= 2:
            break
        await asyncio.sleep(0.02)
    assert svc.session(sid).lease.generation > start
    changes = []
    svc.on_change.append(changes.append)
    # Another handle of the same client rotates the lease behind this one's back.
    await acquire_lease(LocalTarget(root), sid, ME)
    for _ in ticks():
        if changes:
            break
        await asyncio.sleep(0.02)
    assert [c.reason for c in changes] == ["read-only"]
    assert svc.info(sid).access is Access.READ_ONLY and "lost the lease" in svc.info(sid).read_only_reason


async def test_a_failed_publication_is_pending_until_retried(root):
    target = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    await svc.turns.begin_turn(sid, "will fail to save")
    target.arm(3, "error")  # inside the publication program
    with pytest.raises(PublicationFailed):
        await svc.turns.settle(sid)
    info = svc.info(sid)
    assert info.pending_publication and info.settled_turns == 2
    assert (await committed(root, sid)).sidecar.total_turn_count == 1
    with pytest.raises(PublicationPending):
        await svc.turns.begin_turn(sid, "blocked")
    with pytest.raises(PublicationPending):
        await svc.sessions.close(sid)
    result = await svc.sessions.retry_publication(sid)
    assert result.committed and svc.info(sid).pending_publication is None
    assert (await committed(root, sid)).sidecar.total_turn_count == 2


async def test_an_abandoned_publication_goes_out_with_the_next_save(root):
    target = FaultInjectingTarget(LocalTarget(root))
    svc = SessionService(target, ME)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    await svc.turns.begin_turn(sid, "fails")
    target.arm(1, "error")
    with pytest.raises(PublicationFailed):
        await svc.turns.settle(sid)
    assert await svc.sessions.abandon_publication(sid)
    assert not await svc.sessions.abandon_publication(sid)
    await one_turn(svc, sid, "third")
    assert (await committed(root, sid)).sidecar.total_turn_count == 3


async def test_turns_and_a_turn_for_open_and_closed_sessions(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    await svc.turns.begin_turn(sid, "first prompt")
    await svc.turns.append(sid, EvidenceInput("reasoning", text="hidden"))
    await svc.turns.append(sid, EvidenceInput("tool_call", call_id="t1", name="grep", arguments="{}"))
    await svc.turns.append(sid, EvidenceInput("tool_result", call_id="t1", output="3 hits", is_error=False))
    await svc.turns.append(sid, EvidenceInput("mail", mail_id="m1", sender="agent://helper", text="result"))
    await svc.turns.settle(sid, "errored", reason="provider failed")
    await svc.turns.begin_turn(sid, "second prompt")
    summaries = await svc.turns.summaries(sid)
    assert [(t.turn, t.state, t.preview) for t in summaries] == [(1, "errored", "first prompt"), (2, "in-flight", "second prompt")]
    assert summaries[0].tool_calls == 1 and summaries[0].reason == "provider failed"
    detail = await svc.turns.detail(sid, 1)
    assert [item.kind for item in detail.items] == ["reasoning", "tool_call", "tool_result", "mail"]
    assert "**Tool call** `grep`" in detail.markdown and "hidden" not in detail.markdown
    assert "*Turn 1 errored: provider failed*" in detail.markdown
    with pytest.raises(NoSuchTurn):
        await svc.turns.detail(sid, 3)
    await svc.sessions.close(sid)
    reader = service(root, OTHER)
    assert [t.state for t in await reader.turns.summaries(sid)] == ["errored", "in-flight"]
    assert (await reader.turns.detail(sid, 2)).prompt == "second prompt"


async def test_captures_gaps_and_bad_paths(root):
    (root / "big.bin").write_bytes(b"x" * 2048)
    svc = service(root, max_snapshot_bytes=1024)
    sid = (await svc.sessions.create()).session_id
    with pytest.raises(ConversationError):
        await svc.turns.capture_file(sid, "big.bin")  # no turn in flight
    await svc.turns.begin_turn(sid, "touch files")
    assert (await svc.turns.capture_file(sid, "big.bin")).state == "gap"
    assert (await svc.turns.capture_file(sid, "new.txt")).state == "absent"
    assert (await svc.turns.capture_file(sid, "run.sh", gap="a shell command may write it")).state == "gap"
    for bad in ("../outside", "/etc/passwd", ".mevedel/workspace-id", ""):
        with pytest.raises(InvalidSessionInput):
            await svc.turns.capture_file(sid, bad)
    (root / "new.txt").write_text("created\n")
    await svc.turns.settle(sid)
    files = (await committed(root, sid)).file_snapshots()[0].files
    assert files["big.bin"].gap.startswith("the file is larger")
    assert type(files["new.txt"].pre).__name__ == "Absent" and files["new.txt"].post.size == 8
    assert files["run.sh"].gap == "a shell command may write it"


async def test_an_incompatible_session_is_refused_not_guessed(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    await one_turn(svc, sid)
    await svc.sessions.close(sid)
    lease = await acquire_lease(LocalTarget(root), sid, OTHER)
    from mevedel_server.store import Publisher

    await Publisher(lease).publish({SIDECAR_PATH: b'{"format_version": 99}'})
    await lease.release()
    with pytest.raises(SessionIncompatible) as refused:
        await service(root, OTHER).sessions.open(sid)
    assert "format_version 99" in str(refused.value) and error_kind(refused.value) == "incompatible"


async def test_unknown_sessions_and_bad_input_have_kinds(root):
    svc = service(root)
    with pytest.raises(SessionNotOpen) as not_open:
        await svc.turns.begin_turn("2026-07-19T09-47-bf87b5dd793a", "x")
    assert error_kind(not_open.value) == "owner-missing"
    from mevedel_server.store import InvalidSessionId, SessionMissing

    with pytest.raises(InvalidSessionId) as bad_id:
        await svc.sessions.open("not-a-session")
    assert error_kind(bad_id.value) == "invalid-params"
    with pytest.raises(SessionMissing) as missing:
        await svc.sessions.open("2026-07-19T09-47-bf87b5dd793a")
    assert error_kind(missing.value) == "missing-target"
    sid = (await svc.sessions.create()).session_id
    with pytest.raises(InvalidSessionInput):
        await svc.turns.begin_turn(sid, "   ")
    await svc.turns.begin_turn(sid, "ok")
    with pytest.raises(InvalidSessionInput):
        await svc.turns.append(sid, EvidenceInput("tool_call", call_id="c"))
    with pytest.raises(InvalidSessionInput):
        await svc.turns.append(sid, EvidenceInput("verdict", text="x"))
    with pytest.raises(ConversationError) as orphan:
        await svc.turns.append(sid, EvidenceInput("tool_result", call_id="never", output="x"))
    assert error_kind(orphan.value) == "conflict"
    with pytest.raises(InvalidSessionInput):
        await svc.turns.settle(sid, "finished")
    with pytest.raises(InvalidSessionInput):
        await svc.sessions.open(sid, "borrow")


def test_every_service_kind_is_a_documented_protocol_kind():
    from mevedel_protocol.session import SESSION_ERROR_KINDS
    from mevedel_server.addresses import ErrorKind
    from mevedel_server.store.service import KINDS

    documented = {kind.value for kind in ErrorKind} | {"invalid-params"} | SESSION_ERROR_KINDS
    assert KINDS <= documented, KINDS - documented


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(root.rglob("*"))
    }


def _head_files(root: Path, sid: str) -> tuple[Path, Path, Path]:
    session = root / ".mevedel" / "sessions" / sid
    generations = sorted((session / ".lease").glob("generation-*.json"))
    head = json.loads(generations[-1].read_bytes())
    manifest_path = session / head["publication_head"]
    sidecar = json.loads(manifest_path.read_bytes())["entries"]["session.json"]["published"]
    return generations[-1], manifest_path, session / sidecar


def _truncate_manifest(root: Path, sid: str) -> None:
    _lease, manifest, _sidecar = _head_files(root, sid)
    manifest.write_bytes(manifest.read_bytes()[:40])


def _corrupt_sidecar(root: Path, sid: str) -> None:
    _lease, _manifest, sidecar = _head_files(root, sid)
    sidecar.write_bytes(sidecar.read_bytes().replace(b"Bad bytes", b"Bad bytez"))


def _non_finite_lease(root: Path, sid: str) -> None:
    lease, _manifest, _sidecar = _head_files(root, sid)
    lease.write_bytes(re.sub(rb'"expires_at":[0-9]+', b'"expires_at":NaN', lease.read_bytes()))


def _symlinked_lease_dir(root: Path, sid: str) -> None:
    session = root / ".mevedel" / "sessions" / sid
    (session / ".lease").rename(session / "lease-elsewhere")
    (session / ".lease").symlink_to(session / "lease-elsewhere")


@pytest.mark.parametrize(
    ("tamper", "kind", "says"),
    [
        (_truncate_manifest, "unreadable", "truncated"),
        (_corrupt_sidecar, "unreadable", "SHA-256"),
        (_non_finite_lease, "unreadable", "non-finite"),
        (_symlinked_lease_dir, "unreadable", "symbolic link"),
    ],
    ids=["truncated-manifest", "sidecar-digest", "nan-lease", "symlinked-lease-dir"],
)
async def test_bad_bytes_refuse_the_open_and_nothing_is_written_or_deleted(root, tamper, kind, says):
    svc = service(root)
    sid = (await svc.sessions.create("Bad bytes")).session_id
    await one_turn(svc, sid)
    await svc.sessions.close(sid)
    tamper(root, sid)
    before = _tree(root)
    for mode in ("auto", "resume", "join"):
        with pytest.raises(Exception) as refused:
            await service(root, OTHER).sessions.open(sid, mode)
        assert error_kind(refused.value) == kind, (mode, refused.value)
        assert says in str(refused.value) and str(root) not in str(refused.value)
    assert _tree(root) == before


async def test_session_files_written_before_the_first_save_do_not_block_it(root):
    svc = service(root)
    sid = (await svc.sessions.create()).session_id
    local = root / ".mevedel" / "sessions" / sid / "local" / "plans"
    local.mkdir(parents=True)  # work://plans/... written through the resolver
    (local / "plan.md").write_text("step\n")
    await one_turn(svc, sid)
    assert (await committed(root, sid)).sidecar.total_turn_count == 1
    assert (local / "plan.md").read_text() == "step\n"
    # A directory that already has a lease is someone else's session.
    other = service(root, OTHER)
    from mevedel_server.store import SessionOccupied

    clash = await other.sessions.create()
    taken = root / ".mevedel" / "sessions" / clash.session_id
    (taken / ".lease").mkdir(parents=True)
    (taken / ".lease" / "generation-00000000000000000001.json").write_bytes(b"{}")
    await other.turns.begin_turn(clash.session_id, "x")
    with pytest.raises(SessionOccupied):
        await other.turns.settle(clash.session_id)


async def test_reading_a_session_not_open_here_costs_two_programs(tmp_path):
    """The lease head comes with the manifest it names, and the sidecar with
    every other payload: over SSH, two round trips for `session turns`."""
    from mevedel_server.store import ClientIdentity
    from mevedel_server.targets import ControlProgram, ProgramTarget

    class Counting(ProgramTarget):
        def __init__(self, inner) -> None:
            self.inner, self.programs = inner, 0

        async def run(self, program: ControlProgram):
            self.programs += 1
            return await self.inner.run(program)

    writer = SessionService(LocalTarget(tmp_path), ClientIdentity("writer", "desk"))
    sid = (await writer.sessions.create()).session_id
    await writer.turns.begin_turn(sid, "first")
    await writer.turns.settle(sid)
    await writer.sessions.close(sid)
    counted = Counting(LocalTarget(tmp_path))
    reader = SessionService(counted, ClientIdentity("reader", "laptop"))
    assert [t.preview for t in await reader.turns.summaries(sid)] == ["first"]
    assert counted.programs == 2


async def test_an_unnamed_session_is_listed_by_its_first_words_however_long_its_first_prompt(root):
    """A first prompt past the name limit (a pasted log), or with an
    unreadable character further on, still names the session in the
    listing by its first four words, not by its ID."""
    svc = service(root)
    for prompt in ("Explain this failure please: " + "trace line\n" * 200, "Fix the parser now \u202e reversed"):
        sid = (await svc.sessions.create()).session_id
        await one_turn(svc, sid, prompt)
        await svc.sessions.close(sid)
    again = service(root)
    names = {row.display_name for row in (await again.sessions.list()).rows}
    assert names == {"Explain this failure please:…", "Fix the parser now…"}, names
