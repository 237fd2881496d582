"""Session listing: rows from committed sidecars, the action each lease
standing allows, Inspect rows for every kind of bad bytes (nothing deleted),
and the cost of N sessions: one program surveys them all."""

from __future__ import annotations

import hashlib
import math
import os
import time
from pathlib import Path

import msgspec
import pytest

from counted_programs import CountedPrograms as CountingTarget
from mevedel_server.store import (
    ClientIdentity,
    LeaseRecord,
    LeaseStanding,
    LeaseState,
    Publisher,
    RecordErrorKind,
    acquire_lease,
    encode_record,
    materialize_session,
)
from mevedel_server.store.content.sidecar import (
    Layout,
    NamingState,
    Sidecar,
    SidecarErrorKind,
    encode_sidecar,
)
from mevedel_server.store.workspace_wide.listing import (
    InspectSubject,
    SessionAction,
    list_sessions,
)
from mevedel_server.targets import (
    Chain,
    ChainLink,
    ControlProgram,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
    Status,
    SurveyDirs,
)

ME = ClientIdentity("me-client", "my-laptop")
OTHER = ClientIdentity("other-client", "their-desktop")
WORKSPACE = "a" * 64


def sid(n: int) -> str:
    return f"2026-07-19T09-47-{n:012x}"


def sidecar_bytes(session_id: str, *, turns: int = 0, name: str | None = None, updated: int = 1_000, in_flight: bool = False) -> bytes:
    prompts = turns + int(in_flight)
    return encode_sidecar(
        Sidecar(
            session_id=session_id,
            workspace_id=WORKSPACE,
            display_name=name,
            naming_state=NamingState.EXPLICIT if name else NamingState.PENDING,
            created_at=0,
            updated_at=updated,
            total_turn_count=turns,
            in_flight_turn=f"{turns + 1:016x}" if in_flight else None,
            layout=Layout(segment_parts=[1], prompt_pages=1 if prompts else 0, file_pages=0),
            first_user_message="prompt 1" if prompts else None,
            latest_user_message=f"prompt {prompts}" if prompts else None,
        )
    )


async def published_session(target, session_id: str, *, client=ME, release=True, **sidecar) -> None:
    await materialize_session(target, session_id)
    lease = await acquire_lease(target, session_id, client)
    await Publisher(lease).publish({"session.json": sidecar_bytes(session_id, **sidecar), "segment-0001.chat.jsonl": b"{}\n"})
    if release:
        await lease.release()


def session_dir(root: Path, session_id: str) -> Path:
    return root / ".mevedel" / "sessions" / session_id


def head_generation(root: Path, session_id: str) -> Path:
    lease = session_dir(root, session_id) / ".lease"
    return lease / max(n for n in os.listdir(lease) if n.startswith("generation-"))


def write_generation(root: Path, session_id: str, generation: int, **fields) -> bytes:
    values = dict(
        generation=generation,
        state=LeaseState.ACTIVE,
        client_id=OTHER.client_id,
        host=OTHER.host,
        renewed_at=100,
        expires_at=160,
        publication_head=None,
        unsettled_mutation=False,
        transfer_generation=0,
    )
    values.update(fields)
    data = encode_record(LeaseRecord(**values))
    (session_dir(root, session_id) / ".lease" / f"generation-{generation:020d}.json").write_bytes(data)
    return data


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for directories/links)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            out[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return out


@pytest.fixture
def target(tmp_path):
    return LocalTarget(tmp_path)


async def test_a_workspace_without_sessions_lists_nothing(target):
    listing = await list_sessions(target, ME)
    assert listing.rows == () and listing.inspect_rows == ()


async def test_rows_carry_name_turns_preview_and_sort_newest_first(tmp_path, target):
    await published_session(target, sid(1), turns=3, name="Fix the parser", updated=5_000)
    await published_session(target, sid(2), turns=1, updated=9_000)
    await materialize_session(target, sid(3))  # never claimed, never published
    listing = await list_sessions(target, ME)
    by_id = {row.session_id: row for row in listing.rows}
    named = by_id[sid(1)]
    assert (named.display_name, named.named, named.turn_count, named.latest_preview) == ("Fix the parser", True, 3, "prompt 3")
    assert named.published and named.updated_at == 5_000
    unnamed = by_id[sid(2)]
    # Unnamed, it is labelled by its first prompt (the ID only without one).
    assert (unnamed.display_name, unnamed.named, unnamed.turn_count) == ("prompt 1", False, 1)
    empty = by_id[sid(3)]
    assert not empty.published and empty.turn_count == 0 and empty.latest_preview is None
    assert empty.lease_state is None and empty.action is SessionAction.RESUME
    # The unpublished session dates from its directory (target clock, now),
    # so it sorts before the two whose sidecars say 9,000 and 5,000.
    assert [row.session_id for row in listing.rows] == [sid(3), sid(2), sid(1)]
    assert listing.inspect_rows == ()


async def test_each_lease_standing_allows_its_action(tmp_path, target):
    # Free: released by its last owner.
    await published_session(target, sid(1))
    # Held by this client and open here; held by this client but not open here.
    await published_session(target, sid(2), release=False)
    await published_session(target, sid(3), release=False)
    # Held by another live client.
    await published_session(target, sid(4), client=OTHER, release=False)
    # Another client's lease expired long ago.
    await published_session(target, sid(5), client=OTHER)
    head5 = head_generation(tmp_path, sid(5))
    write_generation(tmp_path, sid(5), int(head5.name[11:31]) + 1, renewed_at=100, expires_at=160)
    # This client's own lease expired.
    await published_session(target, sid(6))
    head6 = head_generation(tmp_path, sid(6))
    write_generation(tmp_path, sid(6), int(head6.name[11:31]) + 1, client_id=ME.client_id, host=ME.host)
    # "Open here" but the lease now belongs to someone else: not ours to switch to.
    await published_session(target, sid(7), client=OTHER, release=False)

    listing = await list_sessions(target, ME, open_sessions={sid(2), sid(7)})
    by_id = {row.session_id: row for row in listing.rows}
    expected = {
        sid(1): (SessionAction.RESUME, LeaseStanding.FREE),
        sid(2): (SessionAction.SWITCH, LeaseStanding.HELD),
        sid(3): (SessionAction.RESUME, LeaseStanding.HELD),
        sid(4): (SessionAction.JOIN, LeaseStanding.HELD),
        sid(5): (SessionAction.TAKE_OVER, LeaseStanding.EXPIRED),
        sid(6): (SessionAction.RESUME, LeaseStanding.EXPIRED),
        sid(7): (SessionAction.JOIN, LeaseStanding.HELD),
    }
    assert {k: (r.action, r.standing) for k, r in by_id.items()} == expected
    assert by_id[sid(4)].holder_host == "their-desktop" and not by_id[sid(4)].holder_is_self
    assert by_id[sid(5)].holder_host == "their-desktop" and by_id[sid(5)].lease_expires_at == 160
    assert by_id[sid(2)].holder_is_self and by_id[sid(1)].lease_state is LeaseState.RELEASED
    assert listing.now is not None and abs(listing.now - time.time()) < 120


def _rewrite_head_lease(root, session_id, transform):
    path = head_generation(root, session_id)
    path.write_bytes(transform(path.read_bytes()))


def _manifest(root, session_id) -> Path:
    [pub] = os.listdir(session_dir(root, session_id) / ".publications")
    return session_dir(root, session_id) / ".publications" / pub / "manifest.json"


def _sidecar_file(root, session_id) -> Path:
    import json

    manifest = json.loads(_manifest(root, session_id).read_bytes())
    return session_dir(root, session_id) / manifest["entries"]["session.json"]["published"]


def _republish_sidecar(root, session_id, data: bytes) -> None:
    """Replace the sidecar bytes and fix the manifest digest, so only the
    sidecar's content is wrong."""
    import json

    path = _sidecar_file(root, session_id)
    path.write_bytes(data)
    manifest_path = _manifest(root, session_id)
    manifest = json.loads(manifest_path.read_bytes())
    manifest["entries"]["session.json"]["sha256"] = hashlib.sha256(data).hexdigest()
    manifest["entries"]["session.json"]["size"] = len(data)
    manifest_path.write_bytes(json.dumps(manifest).encode())


CORRUPTIONS = {
    "lease-truncated": (InspectSubject.LEASE, RecordErrorKind.TRUNCATED,
                        lambda root, s: _rewrite_head_lease(root, s, lambda b: b[: len(b) // 2])),
    "lease-nan": (InspectSubject.LEASE, RecordErrorKind.NON_FINITE,
                  lambda root, s: _rewrite_head_lease(root, s, lambda b: b.replace(b'"expires_at":', b'"expires_at":NaN,"x":', 1))),
    "lease-wrong-version": (InspectSubject.LEASE, RecordErrorKind.WRONG_VERSION,
                            lambda root, s: _rewrite_head_lease(root, s, lambda b: b.replace(b'"format_version":1', b'"format_version":2', 1))),
    "manifest-missing": (InspectSubject.MANIFEST, RecordErrorKind.MISSING,
                         lambda root, s: _manifest(root, s).unlink()),
    "manifest-truncated": (InspectSubject.MANIFEST, RecordErrorKind.TRUNCATED,
                           lambda root, s: _manifest(root, s).write_bytes(_manifest(root, s).read_bytes()[:40])),
    "sidecar-digest-mismatch": (InspectSubject.SIDECAR, RecordErrorKind.DIGEST_MISMATCH,
                                lambda root, s: _sidecar_file(root, s).write_bytes(_sidecar_file(root, s).read_bytes().replace(b"prompt", b"PROMPT"))),
    "sidecar-missing": (InspectSubject.SIDECAR, RecordErrorKind.MISSING,
                        lambda root, s: _sidecar_file(root, s).unlink()),
    "sidecar-unsupported-version": (InspectSubject.SIDECAR, SidecarErrorKind.UNSUPPORTED_VERSION,
                                    lambda root, s: _republish_sidecar(root, s, _sidecar_file(root, s).read_bytes().replace(b'"format_version":1', b'"format_version":2', 1))),
    "sidecar-unknown-field": (InspectSubject.SIDECAR, SidecarErrorKind.UNKNOWN_FIELD,
                              lambda root, s: _republish_sidecar(root, s, _sidecar_file(root, s).read_bytes().replace(b"{", b'{"mood":"good",', 1))),
    "sidecar-of-another-session": (InspectSubject.SIDECAR, RecordErrorKind.INVALID_VALUE,
                                   lambda root, s: _republish_sidecar(root, s, sidecar_bytes(sid(99), turns=2))),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
async def test_bad_bytes_become_inspect_rows_and_nothing_is_deleted(tmp_path, target, case):
    subject, kind, corrupt = CORRUPTIONS[case]
    await published_session(target, sid(1), turns=2, name="healthy")
    await published_session(target, sid(2), turns=2, name="damaged")
    corrupt(tmp_path, sid(2))
    before = tree(tmp_path)
    listing = await list_sessions(target, ME)
    assert [row.session_id for row in listing.rows] == [sid(1)]
    [row] = listing.inspect_rows
    assert (row.name, row.subject, row.kind) == (sid(2), subject, kind)
    assert sid(2) in row.reason and str(tmp_path) not in row.reason
    assert row.modified_at is not None
    # Clock probes come and go; nothing else changed.
    assert tree(tmp_path) == before


async def test_a_listing_after_a_new_publication_or_claim_shows_the_new_records(tmp_path, target):
    await published_session(target, sid(1), turns=1, name="before")
    await published_session(target, sid(2), turns=1, name="before")
    assert [r.display_name for r in (await list_sessions(target, ME)).rows] == ["before", "before"]
    after = sidecar_bytes(sid(1), turns=2, name="after", updated=2_000)
    lease = await acquire_lease(target, sid(1), ME)
    await Publisher(lease).publish({"session.json": after})
    await lease.release()
    rows = {r.session_id: r for r in (await list_sessions(target, ME)).rows}
    assert (rows[sid(1)].display_name, rows[sid(1)].turn_count) == ("after", 2)
    assert (rows[sid(2)].display_name, rows[sid(2)].turn_count) == ("before", 1)
    assert rows[sid(1)].action is SessionAction.RESUME
    held = await acquire_lease(target, sid(1), OTHER)
    rows = {r.session_id: r for r in (await list_sessions(target, ME)).rows}
    assert (rows[sid(1)].action, rows[sid(1)].holder_host) == (SessionAction.JOIN, "their-desktop")
    await held.release()
    # The same sidecar bytes published again under another session are its
    # sidecar no more than before.
    _republish_sidecar(tmp_path, sid(2), after)
    listing = await list_sessions(target, ME)
    assert [r.session_id for r in listing.rows] == [sid(1)]
    [row] = listing.inspect_rows
    assert (row.name, row.kind) == (sid(2), RecordErrorKind.INVALID_VALUE) and "belongs to session" in row.reason


async def test_a_sidecar_missing_a_field_is_refused_naming_the_file_and_the_field(tmp_path, target):
    await published_session(target, sid(1), turns=2, name="damaged")
    data = _sidecar_file(tmp_path, sid(1)).read_bytes()
    assert b'"chapters":[],' in data
    _republish_sidecar(tmp_path, sid(1), data.replace(b'"chapters":[],', b"", 1))
    listing = await list_sessions(target, ME)
    [row] = listing.inspect_rows
    assert (row.subject, row.kind) == (InspectSubject.SIDECAR, SidecarErrorKind.MISSING_FIELD)
    published = _sidecar_file(tmp_path, sid(1)).relative_to(session_dir(tmp_path, sid(1)))
    assert row.reason == f"session {sid(1)}: {published} (session.json): missing field(s) chapters"
    assert listing.rows == ()


async def test_a_publication_without_a_sidecar_is_an_inspect_row(tmp_path, target):
    await materialize_session(target, sid(1))
    lease = await acquire_lease(target, sid(1), ME)
    await Publisher(lease).publish({"segment-0001.chat.jsonl": b"{}\n"})
    listing = await list_sessions(target, ME)
    [row] = listing.inspect_rows
    assert row.subject is InspectSubject.SIDECAR and "session.json" in row.reason and listing.rows == ()


async def test_foreign_entries_and_unsafe_directories_are_inspect_rows(tmp_path, target):
    await published_session(target, sid(1), turns=1)
    sessions = tmp_path / ".mevedel" / "sessions"
    (sessions / "not-a-session").mkdir()
    (sessions / sid(2)).write_bytes(b"a file where a session should be")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (sessions / sid(3)).symlink_to(outside)
    await published_session(target, sid(4), turns=1)
    lease4 = session_dir(tmp_path, sid(4)) / ".lease"
    moved = tmp_path / "lease-elsewhere"
    lease4.rename(moved)
    lease4.symlink_to(moved)
    (sessions / ".staging-123").mkdir()  # dot-named: a temporary, not a session
    before = tree(tmp_path)
    listing = await list_sessions(target, ME)
    reasons = {row.name: (row.subject, row.reason) for row in listing.inspect_rows}
    assert set(reasons) == {"not-a-session", sid(2), sid(3), sid(4)}
    assert reasons["not-a-session"][0] is InspectSubject.DIRECTORY and "not a session ID" in reasons["not-a-session"][1]
    assert "not a directory" in reasons[sid(2)][1]
    assert "symbolic link" in reasons[sid(3)][1]
    assert reasons[sid(4)][0] is InspectSubject.LEASE and "symbolic link" in reasons[sid(4)][1]
    assert [row.session_id for row in listing.rows] == [sid(1)]
    assert tree(tmp_path) == before


@pytest.mark.parametrize(("count", "batch"), [(1, None), (5, None), (100, None), (32, 32), (33, 32), (100, 32)])
async def test_listing_cost_is_one_program_per_batch(tmp_path, count, batch):
    inner = LocalTarget(tmp_path)
    for n in range(count):
        await published_session(inner, sid(n + 1), turns=n % 4, updated=1_000 + n)
    counting = CountingTarget(inner)
    listing = await (list_sessions(counting, ME) if batch is None else list_sessions(counting, ME, batch=batch))
    assert len(listing.rows) == count and listing.inspect_rows == ()
    assert [row.session_id for row in listing.rows] == [sid(n + 1) for n in reversed(range(count))]
    assert all(row.published and row.turn_count == n % 4 for n, row in enumerate(reversed(listing.rows)))
    # Each program surveys a batch (by default every session): per session
    # its directory's stat and listing (an interrupted Fork's remains are no
    # session; a recovery journal is listed only when it shows there), its
    # lease chain from head to sidecar, and its newest request for control
    # (a holder is told what waits for it), in one operation beside a clock.
    programs = 1 if batch is None else math.ceil(count / batch)
    assert counting.programs == programs
    assert counting.operations == 2 * programs


async def test_a_recovery_journal_is_listed_where_the_directory_shows_one(tmp_path):
    """Only a session whose directory holds ``.recovery/`` has it listed,
    in the next program: beside the next batch, if any."""
    inner = LocalTarget(tmp_path)
    for n in range(40):
        await published_session(inner, sid(n + 1), turns=1, updated=1_000 + n)
    sessions = tmp_path / ".mevedel" / "sessions"
    marker = "recovery-" + "cd" * 16 + ".json"
    for n, journal in ((2, [marker]), (5, []), (39, [marker])):  # sid(5): a journal left empty
        (sessions / sid(n) / ".recovery").mkdir()
        for name in journal:
            (sessions / sid(n) / ".recovery" / name).write_text("{}")
    (sessions / sid(7) / ".recovery").write_text("not a directory")
    counting = CountingTarget(inner)
    listing = await list_sessions(counting, ME)
    pending = {row.session_id: row.recovery_pending for row in listing.rows if row.recovery_pending}
    assert pending.pop(sid(7)).startswith("its recovery directory cannot be read")
    assert pending == {sid(2): "cd" * 16, sid(39): "cd" * 16}
    # The journals are listed in one program after the survey.
    assert counting.programs == 2
    assert counting.operations == 2 + 4
    # In batches, the first batch's journals ride with the second batch;
    # the second's need one program more.
    batched = CountingTarget(inner)
    assert (await list_sessions(batched, ME, batch=32)).rows == listing.rows
    assert batched.programs == 1 + 1 + 1
    assert batched.operations == 2 + (2 + 3) + 1


async def test_sessions_without_a_head_or_a_lease_cost_no_extra_program(tmp_path, target):
    await published_session(target, sid(1), turns=1)
    await materialize_session(target, sid(2))  # never claimed
    await materialize_session(target, sid(3))
    await acquire_lease(target, sid(3), OTHER)  # claimed, never published
    (tmp_path / ".mevedel" / "sessions" / "not-a-session").mkdir()
    counting = CountingTarget(target)
    listing = await list_sessions(counting, ME)
    assert counting.programs == 1
    assert {row.session_id: (row.published, row.lease_state) for row in listing.rows} == {
        sid(1): (True, LeaseState.RELEASED),
        sid(2): (False, None),
        sid(3): (False, LeaseState.ACTIVE),
    }
    [foreign] = listing.inspect_rows
    assert foreign.name == "not-a-session" and foreign.modified_at is not None


async def test_smaller_batches_cost_more_programs_but_list_the_same(tmp_path):
    inner = LocalTarget(tmp_path)
    for n in range(10):
        await published_session(inner, sid(n + 1), turns=1, updated=2_000 + n)
    wide, narrow = CountingTarget(inner), CountingTarget(inner)
    a = await list_sessions(wide, ME)
    b = await list_sessions(narrow, ME, batch=2)
    assert [r.session_id for r in a.rows] == [r.session_id for r in b.rows]
    assert narrow.programs > wide.programs


class RewritingTarget(ProgramTarget):
    """Runs programs on ``inner`` and lets ``rewrite`` change the lease
    chain each survey answers for ``session_id`` (what a target reports,
    not what the files hold)."""

    def __init__(self, inner, session_id: str, rewrite) -> None:
        self.inner, self.session_id, self.rewrite = inner, session_id, rewrite
        self.programs = 0
        self.rewritten = 0

    async def run(self, program):
        self.programs += 1
        result = await self.inner.run(program)
        answers = list(result.results)
        for index, op in enumerate(program.operations):
            if isinstance(op, SurveyDirs) and answers[index].ok:
                entries = [self._rewritten(entry) for entry in answers[index].value.entries]
                survey = msgspec.structs.replace(answers[index].value, entries=tuple(entries))
                answers[index] = msgspec.structs.replace(answers[index], value=survey)
        return ProgramResult(tuple(answers), result.stopped_at)

    def _rewritten(self, entry):
        lease = entry.chains[0]
        if entry.name != self.session_id or not lease.ok:
            return entry
        chain = self.rewrite(lease.value)
        if chain is None:
            return entry
        self.rewritten += 1
        return msgspec.structs.replace(entry, chains=(msgspec.structs.replace(lease, value=chain), *entry.chains[1:]))


def _vanished(chain: Chain) -> Chain:
    """What the target answers when the newest generation kept vanishing
    between its listing and its read."""
    head = chain.links[0]
    return Chain(chain.names, (ChainLink(head.path, Status.ABSENT, None, "the newest file kept vanishing"),))


async def test_a_head_pruned_between_listing_and_read_is_listed_and_read_again(tmp_path, target):
    await published_session(target, sid(1), turns=1)
    await published_session(target, sid(2), turns=1)

    def supersede_once(chain):
        if moving.rewritten:
            return None
        # A successor writes a newer generation and prunes the one listed.
        generation = int(chain.names[-1][11:31])
        write_generation(tmp_path, sid(1), generation + 1, renewed_at=int(time.time()), expires_at=int(time.time()) + 3600)
        (session_dir(tmp_path, sid(1)) / ".lease" / chain.names[-1]).unlink()
        return _vanished(chain)

    moving = RewritingTarget(target, sid(1), supersede_once)
    listing = await list_sessions(moving, ME)
    assert moving.rewritten == 1
    by_id = {row.session_id: row for row in listing.rows}
    assert by_id[sid(1)].holder_host == OTHER.host and by_id[sid(1)].action is SessionAction.JOIN
    # The newer record names no head: a listing shows the state it names.
    assert not by_id[sid(1)].published and by_id[sid(2)].published
    # Only the moved session was read again, in one more program.
    assert moving.programs == 2


async def test_a_head_that_moves_on_every_observation_is_an_inspect_row(tmp_path, target):
    await published_session(target, sid(1), turns=1)
    moving = RewritingTarget(target, sid(1), _vanished)
    listing = await list_sessions(moving, ME)
    [row] = listing.inspect_rows
    assert (row.subject, row.reason) == (InspectSubject.LEASE, f"session {sid(1)}: the lease changed on every observation")
    assert row.modified_at is not None and listing.rows == ()
    assert moving.rewritten == 4


@pytest.mark.parametrize("kept", [1, 2])
async def test_files_the_chain_did_not_reach_are_read_directly(tmp_path, target, kept):
    # A target whose JSON reading stopped early (or had no JSON scanner):
    # the listing reads the manifest and the sidecar itself.
    await published_session(target, sid(1), turns=2, name="direct")
    short = RewritingTarget(target, sid(1), lambda chain: Chain(chain.names, chain.links[:kept]))
    listing = await list_sessions(short, ME)
    [row] = listing.rows
    assert (row.display_name, row.turn_count, row.published) == ("direct", 2, True)
    assert short.programs == 1 + (3 - kept)


async def test_a_link_counts_only_as_the_file_the_decoded_record_names(tmp_path, target):
    # A target that answers another session's manifest and sidecar for
    # this head: the links' paths are not the ones this lease names, so the
    # listing reads those itself and shows this session's own state.
    await published_session(target, sid(1), turns=1, name="one")
    await published_session(target, sid(2), turns=5, name="two")
    inner = LocalTarget(tmp_path)
    foreign: dict[str, Chain] = {}

    class Swapping(RewritingTarget):
        async def run(self, program):
            for op in program.operations:
                if isinstance(op, SurveyDirs):
                    [theirs] = (await inner.run(ControlProgram([op]))).results
                    foreign.update((e.name, e.chains[0].value) for e in theirs.value.entries if e.name == sid(2))
            return await super().run(program)

    def swap(chain):
        other = foreign[sid(2)]
        return Chain(chain.names, (chain.links[0], *other.links[1:]))

    swapping = Swapping(target, sid(1), swap)
    listing = await list_sessions(swapping, ME)
    assert swapping.rewritten == 1
    by_id = {row.session_id: row for row in listing.rows}
    assert (by_id[sid(1)].display_name, by_id[sid(1)].turn_count) == ("one", 1)
    assert (by_id[sid(2)].display_name, by_id[sid(2)].turn_count) == ("two", 5)
    assert listing.inspect_rows == ()


async def test_without_a_json_scanner_on_the_target_the_listing_is_the_same(tmp_path, target, monkeypatch):
    from mevedel_server.targets import executor

    for n in range(3):
        await published_session(target, sid(n + 1), turns=n, name=f"s{n}")
    expected = await list_sessions(target, ME)
    # The executor's own JSON reader, as a remote program has it (the local
    # target reads with msgspec), and no scanner for it.
    monkeypatch.setattr(target._executor, "parse_json", executor._parse_json)
    monkeypatch.setattr(executor, "_json_scanner", None)
    counting = CountingTarget(target)
    listing = await list_sessions(counting, ME)
    assert listing.rows == expected.rows and listing.inspect_rows == ()
    # The lease head in the survey, then the manifest and the sidecar directly.
    assert counting.programs == 3


async def test_a_symlinked_sessions_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / sid(1)).mkdir(parents=True)
    (tmp_path / ".mevedel").mkdir()
    (tmp_path / ".mevedel" / "sessions").symlink_to(elsewhere)
    from mevedel_server.targets import UnsafePathError

    with pytest.raises(UnsafePathError) as info:
        await list_sessions(LocalTarget(tmp_path), ME)
    assert str(tmp_path) not in str(info.value)
