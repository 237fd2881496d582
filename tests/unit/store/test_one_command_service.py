"""A service that serves one CLI command (``one_command``): a session read
after the command's listing starts from what the listing read of it (head,
manifest, recovery journal) -- one program for its turns -- and a session
that moved on since is read afresh."""

from __future__ import annotations

import json
import os
import shutil
import time

from counted_programs import CountedPrograms as Counting
from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.workspace_wide.collection import KEPT_TURN_STATES
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramResult,
)

ME = ClientIdentity("one-command-client", "desk")
OTHER = ClientIdentity("other-client", "laptop")


async def two_turns(root, client=OTHER) -> str:
    writer = SessionService(LocalTarget(root), client)
    sid = (await writer.sessions.create()).session_id
    for n in (1, 2):
        await writer.turns.begin_turn(sid, f"prompt {n}")
        await writer.turns.append(sid, EvidenceInput("response", text=f"answer {n}"))
        await writer.turns.settle(sid)
    await writer.sessions.close(sid)
    return sid


async def test_turns_after_the_listing_cost_one_program_and_the_journal_none(tmp_path):
    sid = await two_turns(tmp_path)
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, one_command=True)
    await service.sessions.list()
    before = counting.programs
    turns = await service.turns.summaries(sid)
    assert [t.preview for t in turns] == ["prompt 1", "prompt 2"]
    assert await service.history.recovery_pending(sid) is None
    assert counting.programs - before == 1
    # A service of a long-lived process reads afresh.
    plain_counting = Counting(LocalTarget(tmp_path))
    plain = SessionService(plain_counting, ME)
    await plain.sessions.list()
    before = plain_counting.programs
    await plain.turns.summaries(sid)
    await plain.history.recovery_pending(sid)
    assert plain_counting.programs - before > 1


async def test_a_session_that_moved_on_since_the_listing_is_read_afresh(tmp_path):
    sid = await two_turns(tmp_path)
    service = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    await service.sessions.list()
    # Another client adds a turn; collection of the old head's payloads is
    # stood in for by removing every publication the listing saw but the new one.
    writer = SessionService(LocalTarget(tmp_path), OTHER)
    await writer.sessions.open(sid, "resume")
    await writer.turns.begin_turn(sid, "prompt 3")
    await writer.turns.settle(sid)
    await writer.sessions.close(sid)
    publications = tmp_path / ".mevedel" / "sessions" / sid / ".publications"
    from mevedel_server.store import read_committed

    current = (await read_committed(LocalTarget(tmp_path), sid)).head
    for publication in publications.iterdir():
        if publication.name != current.split("/")[1]:
            shutil.rmtree(publication)
    turns = await service.turns.summaries(sid)
    assert [t.preview for t in turns] == ["prompt 1", "prompt 2", "prompt 3"]


async def test_a_resume_after_the_listing_starts_from_its_observation_and_snapshot(tmp_path):
    sid = await two_turns(tmp_path, client=ME)
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, one_command=True)
    await service.sessions.list()
    before = counting.programs
    opened = await service.sessions.open(sid, "resume")
    # One program: the payloads with the workspace identity and git's
    # exclude file, the proof of the identity the listed sidecar records,
    # the claim, the journals' listing.
    assert opened.action == "resume" and counting.programs - before == 1
    assert [t.preview for t in await service.turns.summaries(sid)] == ["prompt 1", "prompt 2"]
    await service.turns.begin_turn(sid, "prompt 3")
    await service.turns.settle(sid)
    await service.sessions.close(sid)
    fresh = SessionService(LocalTarget(tmp_path), ME)
    assert [t.preview for t in await fresh.turns.summaries(sid)] == ["prompt 1", "prompt 2", "prompt 3"]


async def test_creating_a_session_reads_what_it_needs_in_one_program(tmp_path):
    """The workspace identity (made if absent), the clock, the saved
    sessions a new ID must avoid and git's exclude file: one program."""
    from mevedel_server.store.service import PRODUCT_STORAGE

    await two_turns(tmp_path)
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, **PRODUCT_STORAGE)
    created = await service.sessions.create()
    assert counting.programs == 1
    listed = {row.session_id for row in (await SessionService(LocalTarget(tmp_path), ME).sessions.list()).rows}
    assert created.session_id not in listed and len(listed) == 1


async def test_a_front_end_s_reads_ride_the_program_that_creates_or_resumes_the_session(tmp_path):
    """``Sessions.open_reads`` (``mevedel prompt``: the file record's kept
    index) cost no program of their own, on a creation or a resume."""
    from mevedel_server.store.service import PRODUCT_STORAGE
    from mevedel_server.targets import Read

    sid = await two_turns(tmp_path, client=ME)
    (tmp_path / "kept.bin").write_bytes(b"kept by an earlier process")
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, one_command=True, **PRODUCT_STORAGE)
    service.sessions.open_reads = [Read("kept.bin", optional=True), Read("absent.bin", optional=True)]
    await service.sessions.list()
    before = counting.programs
    assert (await service.sessions.open(sid, "resume")).action == "resume"
    assert counting.programs - before == 1
    kept, absent = service.sessions.open_found
    assert kept.value == b"kept by an earlier process" and not absent.ok
    before = counting.programs
    await service.sessions.create()
    assert counting.programs - before == 1
    assert service.sessions.open_found[0].value == b"kept by an earlier process"
    await service.sessions.close(sid)
    # Read, judged, then claimed (no listing to start from): read with the
    # committed bytes all the same.
    plain = SessionService(LocalTarget(tmp_path), ME)
    plain.sessions.open_reads = [Read("kept.bin", optional=True)]
    await plain.sessions.open(sid, "resume")
    assert plain.sessions.open_found[0].value == b"kept by an earlier process"
    await plain.sessions.close(sid)


class Recording(Counting):
    """Counts programs and keeps each one's operation kinds."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.shapes: list[tuple[str, ...]] = []

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.shapes.append(tuple(type(op).__name__ for op in program.operations))
        return await super().run(program)


async def earlier_process(root) -> str:
    """A session an earlier CLI process wrote (two turns, each with a
    mid-turn checkpoint), its saves seconds apart (generations of one
    second are all kept)."""
    from mevedel_server.store.service import PRODUCT_STORAGE

    writer = SessionService(LocalTarget(root), ME, one_command=True, **PRODUCT_STORAGE)
    sid = (await writer.sessions.create()).session_id
    for n in (1, 2):
        await writer.turns.begin_turn(sid, f"prompt {n}")
        await writer.turns.checkpoint(sid)  # superseded mid-turn: collectable once old
        await writer.turns.settle(sid)
    await writer.sessions.detach()
    stamped = sorted((root / ".mevedel" / "sessions" / sid / ".publications").glob("*/manifest.json"), key=os.path.getmtime)
    for age, manifest in enumerate(reversed(stamped), start=1):
        os.utime(manifest, (time.time() - 100 * age,) * 2)
        os.utime(manifest.parent, (time.time() - 100 * age,) * 2)
    return sid


async def exit_against_a_fresh_twin(root, sid, *, turns: int, commits_per_turn: int):
    """This command's turns, then its exit: the programs the exit ran, the
    collection's report, and the report of a step that knows nothing, on a
    copy of the workspace taken just before the exit."""
    from mevedel_server.store.service import PRODUCT_STORAGE
    from mevedel_server.store.workspace_wide.collection import collect

    recording = Recording(LocalTarget(root))
    service = SessionService(recording, ME, one_command=True, **PRODUCT_STORAGE)
    await service.sessions.list()
    await service.sessions.open(sid)
    for n in range(turns):
        await service.turns.begin_turn(sid, f"later prompt {n}")
        if commits_per_turn > 1:
            await service.turns.checkpoint(sid)
        await service.turns.settle(sid)
    collector = service.session(sid).collector
    assert collector is not None and collector.steps == 0
    twin = root.parent / f"{root.name}-twin"
    shutil.copytree(root, twin, symlinks=True)
    before = len(recording.shapes)
    await service.sessions.detach()
    twin_service = SessionService(LocalTarget(twin), ME)
    await twin_service.sessions.open(sid)
    fresh = await collect(twin_service.session(sid).lease, quiesced=True)
    return recording.shapes[before:], collector.last, fresh


def removals(shapes) -> list:
    return [shape for shape in shapes if shape[:2] == ("Verify", "Verify") and "Remove" in shape]


async def fresh_collection(root, name: str, sid: str):
    """What a step knowing nothing removes, on a copy of the workspace now."""
    from mevedel_server.store.workspace_wide.collection import collect

    twin = root.parent / f"{root.name}-{name}"
    shutil.copytree(root, twin, symlinks=True)
    twin_service = SessionService(LocalTarget(twin), ME)
    await twin_service.sessions.open(sid)
    return await collect(twin_service.session(sid).lease, quiesced=True)


def publications(root, sid: str) -> set[str]:
    return {p.name for p in (root / ".mevedel" / "sessions" / sid / ".publications").iterdir() if not p.name.startswith(".")}


async def test_collection_rides_a_commit_and_the_exit_leaves_its_removal_for_the_next_command(tmp_path):
    """A commit after the command's first carries collection's removal,
    judged from what the claim and the first commit read: it removes what
    a collection reading everything afresh removes under the head that
    commit replaces, in the commit's own program. The exit then runs no
    program: what it would remove is left for the next command, whose
    commits remove it."""
    from mevedel_server.store.service import PRODUCT_STORAGE

    sid = await earlier_process(tmp_path)
    left = None
    for command in (1, 2):
        recording = Recording(LocalTarget(tmp_path))
        service = SessionService(recording, ME, one_command=True, **PRODUCT_STORAGE)
        await service.sessions.list()
        await service.sessions.open(sid)
        await service.turns.begin_turn(sid, f"later prompt {command}")
        await service.turns.checkpoint(sid)  # the first commit reads what the step judges
        fresh = await fresh_collection(tmp_path, f"before-commit-{command}", sid)
        await service.turns.settle(sid)
        collector = service.session(sid).collector
        rode = collector.rode[-1]
        assert command == 2 or rode.removed or rode.trimmed, rode  # the earlier process's, seconds apart
        assert (rode.removed, rode.trimmed) == (fresh.removed, fresh.trimmed)
        assert not publications(tmp_path, sid) & set(rode.removed)
        if left is not None:  # what the first exit left is gone
            assert not publications(tmp_path, sid) & set(left.removed), left
        # (empty when this command's generations share one second: all kept)
        left = await fresh_collection(tmp_path, f"before-exit-{command}", sid)
        before = len(recording.shapes)
        await service.sessions.detach()
        assert removals(recording.shapes) == []  # no program of its own
        assert collector.steps == 0 and removals(recording.shapes[before:]) == []


async def test_collection_at_exit_reads_nothing_the_commits_read_ahead(tmp_path):
    """A one-command service's collection, run when the command detaches,
    takes the clock, the publications' listing, every directory's survey
    and every generation's turn state from the programs of the claim and
    the head commits (they rode them), and its commits carried the
    removals: it runs no program."""
    sid = await earlier_process(tmp_path)
    at_exit, report, fresh = await exit_against_a_fresh_twin(tmp_path, sid, turns=2, commits_per_turn=2)
    assert at_exit == [] and report is None and fresh.blocked is None
    fresh_service = SessionService(LocalTarget(tmp_path), ME)
    assert [t.preview for t in await fresh_service.turns.summaries(sid)][:2] == ["prompt 1", "prompt 2"]


async def test_a_command_that_commits_once_judges_from_the_turn_states_kept(tmp_path):
    """A command with one commit (as Rewind) has no commit left to read the
    turn states of the generations its first one surveyed: the earlier
    processes kept them beside the publications, and its exit reads none."""
    sid = await earlier_process(tmp_path)
    assert (tmp_path / ".mevedel" / "sessions" / sid / ".publications" / KEPT_TURN_STATES).exists()
    at_exit, report, fresh = await exit_against_a_fresh_twin(tmp_path, sid, turns=1, commits_per_turn=1)
    assert removals(at_exit) and len(at_exit) == len(removals(at_exit)), at_exit
    assert (report.removed, report.trimmed) == (fresh.removed, fresh.trimmed)
    assert {k.publication_id for k in report.kept} == {k.publication_id for k in fresh.kept}


async def test_kept_turn_states_that_do_not_match_or_decode_are_read_again(tmp_path):
    """The kept turn states are a cache: a state whose sidecar digest is
    not the manifest's, or a file that does not decode, is not used; the
    generations are judged from their bytes, and the step removes what a
    step knowing nothing removes."""
    sid = await earlier_process(tmp_path)
    kept = tmp_path / ".mevedel" / "sessions" / sid / ".publications" / KEPT_TURN_STATES
    record = json.loads(kept.read_bytes())
    assert record["states"]
    for state in record["states"].values():  # every state claims the empty session
        state.update(sidecar_sha256="0" * 64, turn_count=0, last_turn=None, in_flight=False)
    kept.write_text(json.dumps(record))
    _at_exit, report, fresh = await exit_against_a_fresh_twin(tmp_path, sid, turns=1, commits_per_turn=1)
    assert (report.removed, report.trimmed) == (fresh.removed, fresh.trimmed) and (fresh.removed or fresh.trimmed)
    assert {k.publication_id: k.reasons for k in report.kept} == {k.publication_id: k.reasons for k in fresh.kept}
    kept.write_bytes(b"{not json")
    _at_exit, report, fresh = await exit_against_a_fresh_twin(tmp_path.parent / f"{tmp_path.name}-twin", sid, turns=1, commits_per_turn=1)
    assert (report.removed, report.trimmed) == (fresh.removed, fresh.trimmed)


async def test_a_resume_records_the_prompt_in_the_programs_it_runs_anyway(tmp_path):
    """``mevedel prompt`` on a saved session: the input history is read in
    the claim's program and the prompt written in the turn's first
    publication (under the history's lock, guarded by the bytes read); a
    history another process changed in between is recorded over on its own
    once the command is done with it, losing nothing."""
    sid = await two_turns(tmp_path, client=ME)
    other = SessionService(LocalTarget(tmp_path), OTHER)
    await other.sessions.open(sid, "join")
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, one_command=True)
    service.sessions.reads_input_history = True
    await service.sessions.list()
    before = counting.programs
    await service.sessions.open(sid, "resume")
    assert await service.sessions.record_input(sid, "prompt 3") is None
    await service.turns.begin_turn(sid, "prompt 3")
    await service.turns.settle(sid)
    assert await service.sessions.input_recorded() is None
    assert counting.programs - before == 2  # the claim, the turn's publication
    assert (await other.sessions.input_history()).entries == ("prompt 3",)
    await service.sessions.detach()
    # A read the riding write no longer matches: recorded on its own.
    again = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    again.sessions.reads_input_history = True
    await again.sessions.list()
    await again.sessions.open(sid, "resume")
    from mevedel_server.store.workspace_wide.input_history import InputHistory

    await InputHistory(LocalTarget(tmp_path)).record("from elsewhere")
    assert await again.sessions.record_input(sid, "prompt 4") is None
    await again.turns.begin_turn(sid, "prompt 4")
    await again.turns.settle(sid)
    assert await again.sessions.input_recorded() is None
    assert (await other.sessions.input_history()).entries == ("prompt 3", "from elsewhere", "prompt 4")
    # No commit at all (the prompt was refused before its turn): written at detach.
    third = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    third.sessions.reads_input_history = True
    await third.sessions.list()
    await third.sessions.open(sid, "resume")
    assert await third.sessions.record_input(sid, "prompt 5") is None
    await third.sessions.detach()
    assert (await other.sessions.input_history()).entries[-1] == "prompt 5"


async def test_a_new_sessions_prompt_rides_its_first_save(tmp_path):
    """A new session: the history read with its creation, the prompt
    written by the first save's publication, right after the claim."""
    recording = Recording(LocalTarget(tmp_path))
    service = SessionService(recording, ME, one_command=True)
    service.sessions.reads_input_history = True
    sid = (await service.sessions.create()).session_id
    assert await service.sessions.record_input(sid, "first words") is None
    before = len(recording.shapes)
    await service.turns.begin_turn(sid, "first words")
    await service.turns.settle(sid)
    assert await service.sessions.input_recorded() is None
    assert len(recording.shapes) - before == 2  # the claim, the publication carrying the write
    assert recording.shapes[-1][-2:] == ("Verify", "Replace")
    assert (await SessionService(LocalTarget(tmp_path), OTHER).sessions.input_history()).entries == ("first words",)


def lease_heads(root, sid) -> list[str]:
    return sorted(p.name for p in (root / ".mevedel" / "sessions" / sid / ".lease").glob("generation-*.json"))


async def test_a_resume_from_the_listing_writes_nothing_when_its_proofs_fail(tmp_path):
    """The claim shares the committed bytes' program only behind proofs:
    the workspace identity the listed sidecar records (a session copied
    from another project), and what the front end's check needs absent.
    A proof that fails stops the program before the claim; the resume then
    reads and judges first, as it always did, and writes nothing to refuse."""
    import pytest

    from mevedel_server.store import IdentityNeedsConfirmation
    from mevedel_server.store.authority.workspace import ensure_workspace_id

    sid = await two_turns(tmp_path, client=ME)
    # Another project's identity, as a copied session finds.
    (tmp_path / ".mevedel" / "workspace-id").unlink()
    await ensure_workspace_id(LocalTarget(tmp_path))
    before = lease_heads(tmp_path, sid)
    service = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    await service.sessions.list()
    with pytest.raises(IdentityNeedsConfirmation):
        await service.sessions.open(sid, "resume")
    assert lease_heads(tmp_path, sid) == before and not service.is_open(sid)

    class Refusing:
        """A check whose guard fails and whose judgement refuses."""

        def reads(self, paths):
            return []

        def guards(self, paths):
            from mevedel_server.targets import Verify

            return [Verify(".mevedel/workspace-id", None)]  # present: fails

        async def judge(self, session_id, results):
            raise RuntimeError("refused by the check")

    checked = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    checked.sessions.resume_check = Refusing()
    await checked.sessions.list()
    with pytest.raises(RuntimeError, match="refused by the check"):
        await checked.sessions.open(sid, "resume", confirm_identity=True)
    assert lease_heads(tmp_path, sid) == before


async def test_payloads_the_claims_program_finds_bad_refuse_and_release(tmp_path):
    """Bytes read in the claim's program are judged after it: a payload
    that does not match its manifest refuses the resume, the lease it took
    released at once (the session is free again), no payload touched."""
    import json

    import pytest

    from mevedel_server.store import error_kind, observe_lease

    sid = await two_turns(tmp_path)
    session = tmp_path / ".mevedel" / "sessions" / sid
    head = json.loads(sorted((session / ".lease").glob("generation-*.json"))[-1].read_bytes())["publication_head"]
    entries = json.loads((session / head).read_bytes())["entries"]
    segment = next(e["published"] for name, e in entries.items() if name.startswith("segment-"))
    (session / segment).write_bytes((session / segment).read_bytes() + b" ")
    payloads = {p: p.read_bytes() for p in session.rglob("*") if p.is_file() and ".lease" not in p.parts}
    service = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    await service.sessions.list()
    with pytest.raises(Exception) as refused:
        await service.sessions.open(sid, "resume")
    assert error_kind(refused.value) == "unreadable" and "SHA-256" in str(refused.value)
    assert not service.is_open(sid)
    observed = await observe_lease(LocalTarget(tmp_path), sid)
    assert observed.record is not None and observed.record.state.value == "released"
    assert {p: p.read_bytes() for p in session.rglob("*") if p.is_file() and ".lease" not in p.parts} == payloads
