"""A service that serves one CLI command (``one_command``): a session read
after the command's listing starts from what the listing read of it (head,
manifest, recovery journal) -- one program for its turns -- and a session
that moved on since is read afresh."""

from __future__ import annotations

import shutil

from mevedel_server.store import ClientIdentity
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import (
    ControlProgram,
    LocalTarget,
    ProgramResult,
    ProgramTarget,
)

ME = ClientIdentity("one-command-client", "desk")
OTHER = ClientIdentity("other-client", "laptop")


class Counting(ProgramTarget):
    def __init__(self, inner) -> None:
        self.inner = inner
        self.programs = 0

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.programs += 1
        return await self.inner.run(program)


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
    # The payloads with the workspace identity and git's exclude file; the
    # claim with the journals' listing.
    assert opened.action == "resume" and counting.programs - before == 2
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


class Recording(Counting):
    """Counts programs and keeps each one's operation kinds."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.shapes: list[tuple[str, ...]] = []

    async def run(self, program: ControlProgram) -> ProgramResult:
        self.shapes.append(tuple(type(op).__name__ for op in program.operations))
        return await super().run(program)


async def test_collection_at_exit_starts_from_what_the_last_commit_listed(tmp_path):
    """A one-command service's collection, run when the command detaches,
    takes its clock and publications listing from the last head commit's
    program (they rode it) instead of a program of its own."""
    from mevedel_server.store.service import PRODUCT_STORAGE

    recording = Recording(LocalTarget(tmp_path))
    service = SessionService(recording, ME, one_command=True, **PRODUCT_STORAGE)
    sid = (await service.sessions.create()).session_id
    for n in range(1, 5):
        await service.turns.begin_turn(sid, f"prompt {n}")
        await service.turns.settle(sid)
    session = service.session(sid)
    collector = session.collector
    assert collector is not None and collector.steps == 0
    before = len(recording.shapes)
    await service.sessions.detach()
    assert collector.steps >= 1
    assert ("Clock", "ListDir") not in recording.shapes[before:]
    assert recording.shapes[before - 1][-2:] == ("Clock", "ListDir")  # the settlement's commit carried them
    assert collector.last is not None and collector.last.blocked is None
    assert {k.publication_id for k in collector.last.kept} >= {session.lease.publication_head.split("/")[1]}
    fresh = SessionService(LocalTarget(tmp_path), ME)
    assert [t.preview for t in await fresh.turns.summaries(sid)] == [f"prompt {n}" for n in range(1, 5)]


async def test_a_resume_records_the_prompt_in_the_programs_it_runs_anyway(tmp_path):
    """``mevedel prompt`` on a saved session: the input history is read with
    the committed bytes and the prompt written in the claim's program (under
    the history's lock, guarded by the bytes read); a history another
    process changed in between is still recorded over, losing nothing."""
    sid = await two_turns(tmp_path, client=ME)
    other = SessionService(LocalTarget(tmp_path), OTHER)
    await other.sessions.open(sid, "join")
    counting = Counting(LocalTarget(tmp_path))
    service = SessionService(counting, ME, one_command=True)
    service.sessions.reads_input_history = True
    service.sessions.input_to_record = "prompt 3"
    await service.sessions.list()
    before = counting.programs
    await service.sessions.open(sid, "resume")
    assert await service.sessions.record_input(sid, "prompt 3") is None
    assert counting.programs - before == 2  # the committed bytes, the claim
    assert (await other.sessions.input_history()).entries == ("prompt 3",)
    # A read the claim's write no longer matches: recorded on its own.
    again = SessionService(LocalTarget(tmp_path), ME, one_command=True)
    again.sessions.reads_input_history = True
    again.sessions.input_to_record = "prompt 4"
    await again.sessions.list()
    original = again.sessions._committed_conversation

    async def meddling(*args, **kwargs):
        got = await original(*args, **kwargs)
        from mevedel_server.store.workspace_wide.input_history import InputHistory

        await InputHistory(LocalTarget(tmp_path)).record("from elsewhere")
        return got

    again.sessions._committed_conversation = meddling
    await again.sessions.open(sid, "resume")
    assert await again.sessions.record_input(sid, "prompt 4") is None
    assert (await other.sessions.input_history()).entries == ("prompt 3", "from elsewhere", "prompt 4")
