"""history:// over the session service: the live projection of the open
session and the saved segments of the workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mevedel_server.addresses import AddressError, ErrorKind, Operation
from mevedel_server.resources import (
    GlobOptions,
    GrepOptions,
    ReadOptions,
    ResolverContext,
    execute,
    prepare,
)
from mevedel_server.store import ClientIdentity, Publisher, acquire_lease
from mevedel_server.store.content.sidecar import SIDECAR_PATH
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")


def context(root: Path, svc: SessionService | None = None, sid: str | None = None) -> ResolverContext:
    live = svc.live_history(sid) if svc is not None and sid is not None else None
    session_dir = root / ".mevedel" / "sessions" / sid if sid else None
    return ResolverContext(workspace_root=root, session_dir=session_dir, live_history=live, docs_root=root / "docs")


async def run(op: Operation, address: str, options, ctx: ResolverContext):
    return await execute(prepare(op, address, options, ctx))


async def failure(op: Operation, address: str, options, ctx: ResolverContext) -> AddressError:
    with pytest.raises(AddressError) as caught:
        await run(op, address, options, ctx)
    assert str(caught.value).startswith(address + ": ")
    return caught.value


async def saved_session(svc: SessionService, prompts: list[str]) -> str:
    sid = (await svc.sessions.create()).session_id
    for prompt in prompts:
        await svc.turns.begin_turn(sid, prompt)
        await svc.turns.append(svc_id := sid, EvidenceInput("response", text=f"answer to {prompt}"))
        await svc.turns.settle(svc_id)
    return sid


async def test_bare_history_lists_what_is_available(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    listing = await run(Operation.READ, "history://", ReadOptions(), context(root, svc, sid))
    assert listing.kind == "listing" and listing.plain_text.split("\n") == ["history://root", "history://saved"]
    assert (await run(Operation.READ, "history://", ReadOptions(), context(root))).plain_text == "history://saved"
    empty = await run(Operation.READ, "history://", ReadOptions(), ResolverContext(docs_root=root))
    assert empty.kind == "empty" and "no session" in empty.notice


async def test_history_root_reads_and_greps_the_live_unsaved_conversation(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    ctx = context(root, svc, sid)
    await svc.turns.begin_turn(sid, "find the needle")
    await svc.turns.append(sid, EvidenceInput("reasoning", text="secret needle reasoning"))
    await svc.turns.append(sid, EvidenceInput("response", text="the needle is here"))
    page = await run(Operation.READ, "history://root", ReadOptions(), ctx)
    lines = page.plain_text.split("\n")
    assert lines[0] == "# Segment 1" and "the needle is here" in lines and "secret" not in page.text
    hits = await run(Operation.GREP, "history://root", GrepOptions(pattern="needle"), ctx)
    assert [(m.address, m.line) for m in hits.matches] == [("history://root", 7), ("history://root", lines.index("the needle is here") + 1)]
    assert lines[hits.matches[0].line - 1] == "> find the needle"
    await svc.turns.append(sid, EvidenceInput("response", text="more"))
    grown = await run(Operation.READ, "history://root", ReadOptions(), ctx)
    assert grown.plain_text.split("\n")[: len(lines)] == lines  # earlier lines never move
    second = await run(Operation.READ, "history://root", ReadOptions(offset=3, limit=2), ctx)
    assert (second.start_line, second.end_line, second.next_offset) == (3, 4, 5)
    assert not (root / ".mevedel" / "sessions").exists()  # reading never materializes


async def test_history_root_without_a_session_and_with_agent_paths(root):
    error = await failure(Operation.READ, "history://root", ReadOptions(), context(root))
    assert error.kind is ErrorKind.OWNER_MISSING
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    error = await failure(Operation.READ, "history://root/reviewer", ReadOptions(), context(root, svc, sid))
    assert error.kind is ErrorKind.UNAVAILABLE and "has no retained agent reviewer" in error.reason


async def test_history_saved_lists_reads_globs_and_greps_committed_segments(root):
    svc = SessionService(LocalTarget(root), ME)
    first = await saved_session(svc, ["alpha question", "beta question"])
    second = await saved_session(svc, ["gamma question"])
    conversation = svc.session(second).conversation
    conversation.rotate_segment("we talked about gamma", at=conversation.sidecar.updated_at)
    await svc.turns.begin_turn(second, "delta question")
    await svc.turns.append(second, EvidenceInput("response", text="unsaved delta answer"))  # never settled
    ctx = context(root)
    a1 = f"history://saved/{first}/segment-0001.chat.jsonl"
    b1, b2 = (f"history://saved/{second}/segment-000{n}.chat.jsonl" for n in (1, 2))
    assert (await run(Operation.READ, "history://saved", ReadOptions(), ctx)).plain_text.split("\n") == sorted([a1, b1])
    await svc.turns.checkpoint(second)
    listing = await run(Operation.READ, "history://saved", ReadOptions(), ctx)
    assert listing.plain_text.split("\n") == sorted([a1, b1, b2]) and listing.notice is None
    assert (await run(Operation.READ, f"history://saved/{second}", ReadOptions(), ctx)).plain_text.split("\n") == [b1, b2]
    globbed = await run(Operation.GLOB, "history://saved", GlobOptions(pattern="*/segment-0002.chat.jsonl"), ctx)
    assert globbed.matches == (b2,)
    page = await run(Operation.READ, a1, ReadOptions(), ctx)
    text = page.plain_text
    assert "> alpha question" in text and "answer to beta question" in text and page.kind == "file"
    assert "## Summary of segment 1" in (await run(Operation.READ, b2, ReadOptions(), ctx)).plain_text
    hits = await run(Operation.GREP, "history://saved", GrepOptions(pattern="question"), ctx)
    assert {m.address for m in hits.matches} == {a1, b1, b2} and hits.files_searched == 3
    for match in hits.matches:
        shown = (await run(Operation.READ, match.address, ReadOptions(offset=match.line, limit=1), ctx)).plain_text
        assert "question" in shown  # Grep lines are Read lines
    narrowed = await run(Operation.GREP, "history://saved", GrepOptions(pattern="question", glob="segment-0002.chat.jsonl"), ctx)
    assert {m.address for m in narrowed.matches} == {b2}
    one = await run(Operation.GREP, b2, GrepOptions(pattern="delta"), ctx)
    assert [m.preview for m in one.matches] == ["> delta question", "unsaved delta answer"]


async def test_history_saved_omits_and_counts_incompatible_sessions(root):
    svc = SessionService(LocalTarget(root), ME)
    good = await saved_session(svc, ["kept"])
    bad = await saved_session(svc, ["hidden"])
    await svc.sessions.close(bad)
    lease = await acquire_lease(LocalTarget(root), bad, ClientIdentity("other", "laptop"))
    await Publisher(lease).publish({SIDECAR_PATH: json.dumps({"format_version": 7}).encode()})
    await lease.release()
    listing = await run(Operation.READ, "history://saved", ReadOptions(), context(root))
    assert listing.plain_text == f"history://saved/{good}/segment-0001.chat.jsonl"
    assert listing.notice.startswith("1 session(s) omitted") and bad in listing.notice and "format version 7" in listing.notice
    assert ".publications" not in listing.notice
    hits = await run(Operation.GREP, "history://saved", GrepOptions(pattern="hidden|kept"), context(root))
    assert [m.preview for m in hits.matches] == ["> kept", "answer to kept"]
    error = await failure(Operation.READ, f"history://saved/{bad}", ReadOptions(), context(root))
    assert error.kind is ErrorKind.UNAVAILABLE and "format_version 7" in error.reason


async def test_history_saved_refuses_bytes_that_fail_verification(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = await saved_session(svc, ["tampered"])
    publications = root / ".mevedel" / "sessions" / sid / ".publications"
    for data in publications.glob("*/*.data"):
        if b'"kind":"segment"' in data.read_bytes():
            data.write_bytes(data.read_bytes().replace(b"tampered", b"tampered!"))
    address = f"history://saved/{sid}/segment-0001.chat.jsonl"
    error = await failure(Operation.READ, address, ReadOptions(), context(root))
    assert error.kind is ErrorKind.UNREADABLE and "digest-mismatch" in error.reason
    assert str(root) not in str(error)
    hits = await run(Operation.GREP, "history://saved", GrepOptions(pattern="tampered"), context(root))
    assert hits.matches == () and hits.notice.startswith("1 session could not be searched: "), hits.notice


async def test_history_saved_missing_sessions_and_segments(root):
    svc = SessionService(LocalTarget(root), ME)
    sid = await saved_session(svc, ["only"])
    ctx = context(root)
    for address in (
        "history://saved/2026-07-19T09-47-bf87b5dd793a",
        "history://saved/not-a-session",
        f"history://saved/{sid}/segment-0009.chat.jsonl",
    ):
        assert (await failure(Operation.READ, address, ReadOptions(), ctx)).kind is ErrorKind.MISSING_TARGET
    (root / "empty-ws").mkdir()
    nothing = await run(Operation.READ, "history://saved", ReadOptions(), ResolverContext(workspace_root=root / "empty-ws", docs_root=root))
    assert nothing.kind == "empty" and "no saved conversations" in nothing.notice
    error = await failure(Operation.READ, "history://saved", ReadOptions(), ResolverContext(docs_root=root))
    assert error.kind is ErrorKind.OWNER_MISSING


async def test_history_root_of_a_session_not_open_here_reads_its_committed_transcript(root):
    owner = SessionService(LocalTarget(root), ClientIdentity("client-owner", "laptop"))
    sid = await saved_session(owner, ["committed question"])
    await owner.turns.begin_turn(sid, "unsaved question")  # live in the owner only
    ctx = context(root, None, sid)  # this reader has the session chosen, not open
    page = await run(Operation.READ, "history://root", ReadOptions(), ctx)
    assert "> committed question" in page.plain_text and "unsaved question" not in page.plain_text
    assert "not open in this server" in page.notice and "read-only" in page.notice
    hits = await run(Operation.GREP, "history://root", GrepOptions(pattern="committed"), ctx)
    assert [m.preview for m in hits.matches] == ["> committed question", "answer to committed question"]
    await owner.turns.settle(sid)
    await owner.turns.compact(sid, "a summary of the first segment")
    rotated = await run(Operation.READ, "history://root", ReadOptions(), ctx)
    lines = rotated.plain_text.split("\n")
    assert lines[0] == "# Segment 2 (continues segment 1 after compaction)"
    assert "> a summary of the first segment" in lines and "> committed question" not in lines
    assert "(segment 2)" in rotated.notice
    unknown = await failure(Operation.READ, "history://root", ReadOptions(), context(root, None, "2026-01-01T00-00-000000000000"))
    assert unknown.kind is ErrorKind.OWNER_MISSING and "not a saved session" in unknown.reason
    assert not (root / ".mevedel" / "sessions" / "2026-01-01T00-00-000000000000").exists()  # reading writes nothing


async def test_describe_history_names_the_session_it_reads(root):
    from mevedel_server.resources import describe

    svc = SessionService(LocalTarget(root), ME)
    sid = await saved_session(svc, ["described"])
    live = await describe("history://root", context(root, svc, sid))
    assert (live.status, live.kind) == ("exists", "virtual") and sid in live.detail and "live" in live.detail
    assert live.reason is None
    nobody = await describe("history://root", context(root))
    assert nobody.status == "unavailable" and "no session is open" in nobody.reason
    assert "not an unavailable family" not in nobody.reason
    committed = await describe("history://root", ResolverContext(
        workspace_root=root, session_dir=root / ".mevedel" / "sessions" / sid, docs_root=root / "docs"
    ))
    assert committed.status == "exists" and "committed" in committed.detail and "not open" in committed.detail
    unknown = await describe("history://root", context(root, None, "2026-01-01T00-00-000000000000"))
    assert unknown.status == "unavailable" and "not a saved session" in unknown.reason
    assert (await describe("history://", context(root))).status == "discovery"
    assert (await describe("history://saved", context(root))).status == "discovery"
    assert (await describe(f"history://saved/{sid}", context(root))).status == "discovery"
    segment = await describe(f"history://saved/{sid}/segment-0001.chat.jsonl", context(root))
    assert segment.status == "exists" and sid in segment.detail
    assert (await describe(f"history://saved/{sid}/segment-0002.chat.jsonl", context(root))).status == "missing"
    assert (await describe("history://saved/2026-01-01T00-00-000000000000", context(root))).status == "missing"
    agent = await describe("history://root/reviewer", context(root, svc, sid))
    assert agent.status == "unavailable" and "has no retained agent reviewer" in agent.reason
    no_workspace = await describe("history://saved", ResolverContext(docs_root=root))
    assert no_workspace.status == "unavailable" and "no workspace" in no_workspace.reason


async def with_reviewer(root: Path, result: str) -> tuple[SessionService, str]:
    """A session whose first turn is in flight and made the retained agent
    ``reviewer`` (its latest result ``result``)."""
    from mevedel_server.store.content.sidecar import AgentResult, RetainedAgent

    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    started = await svc.turns.begin_turn(sid, "Get a review")
    svc.agents.set_retained_agents(sid, [RetainedAgent(
        path="reviewer", agent="codex", fingerprint="a" * 64, machine="here", created_turn=started.turn,
        created_turn_id=started.turn_id, result=AgentResult(turn=1, outcome="completed", text=result))])
    return svc, sid


async def test_history_root_path_is_a_retained_agents_conversation_live_and_committed(root):
    svc, sid = await with_reviewer(root, "Two issues.")
    steps = [EvidenceInput("reasoning", text="hidden thought"), EvidenceInput("tool_call", call_id="c1", name="Read a.py", arguments="{}"),
             EvidenceInput("tool_result", call_id="c1", output="print(1)"), EvidenceInput("response", text="Two issues.")]
    svc.agents.append_agent_task(sid, "reviewer", "codex", "Review a.py", steps, "completed")
    live = context(root, svc, sid)
    text = (await execute(prepare(Operation.READ, "history://root/reviewer", ReadOptions(), live))).text
    assert "Task 1 · reviewer (codex) in turn 1" in text and "Review a.py" in text and "Two issues." in text
    assert "Read a.py" in text and "hidden thought" not in text
    found = await execute(prepare(Operation.GREP, "history://root/reviewer", GrepOptions(pattern="Two issues"), live))
    (match,) = found.matches
    assert match.address == "history://root/reviewer" and "Two issues." in text.splitlines()[match.line - 1]
    # Bare history:// lists the root, then its retained agents, then saved sessions.
    listing = (await execute(prepare(Operation.READ, "history://", ReadOptions(), live))).text
    assert [line.split("\t")[1] for line in listing.splitlines()] == ["history://root", "history://root/reviewer", "history://saved"]
    # The root's history names the task and where to read it.
    root_text = (await execute(prepare(Operation.READ, "history://root", ReadOptions(), live))).text
    assert "**Agent** `reviewer` (codex) · history://root/reviewer" in root_text and "Review a.py" not in root_text
    # Settled and saved, another reader sees the same through the committed publication.
    await svc.turns.settle(sid, "completed")
    committed = (await execute(prepare(Operation.READ, "history://root/reviewer", ReadOptions(), context(root, None, sid)))).text
    assert "Review a.py" in committed and "Two issues." in committed


async def test_a_session_written_before_agent_transcripts_still_shows_its_agents_tasks(root):
    """Sessions written when a task's records were kept whole in the turn
    (no ``agents/`` transcript) read the same: history://root/PATH (live and
    committed), Grep, and the turn's agent_task item; a task recorded after
    them goes to the agent's own transcript and follows them."""
    from mevedel_server.store.content.transcript import AgentStep, AgentTask, Outcome

    svc, sid = await with_reviewer(root, "Old answer.")
    # What the writer before agent transcripts appended: the whole task, in the turn.
    conversation = svc.session(sid).conversation
    conversation.append(AgentTask(
        turn_id=conversation.open_turn.turn_id, path="reviewer", agent="codex", prompt="Old review", outcome=Outcome.COMPLETED,
        steps=[AgentStep(kind="response", text="Old answer.")], paths=["a.py"]))
    await svc.turns.settle(sid, "completed")
    assert not any(p.startswith("agents/") for p in (await (await read_committed_snapshot(root, sid)).read_all()))

    await svc.turns.begin_turn(sid, "Again")
    svc.agents.append_agent_task(sid, "reviewer", "codex", "New review", [EvidenceInput("response", text="New answer.")], "completed")
    await svc.turns.settle(sid, "completed")
    for ctx in (context(root, svc, sid), context(root, None, sid)):  # live, then committed
        text = (await run(Operation.READ, "history://root/reviewer", ReadOptions(), ctx)).text
        assert "Task 1 · reviewer (codex) in turn 1" in text and "Old answer." in text
        assert "Task 2 · reviewer (codex) in turn 2" in text and "New answer." in text
        assert text.index("Old answer.") < text.index("New answer.")
        found = await run(Operation.GREP, "history://root/reviewer", GrepOptions(pattern="Old answer"), ctx)
        assert len(found.matches) == 1
    assert any(p.startswith("agents/reviewer/") for p in (await (await read_committed_snapshot(root, sid)).read_all()))
    old, new = (await svc.turns.detail(sid, 1)).items, (await svc.turns.detail(sid, 2)).items
    (old_task,) = [i for i in old if i.kind == "agent_task"]
    (new_task,) = [i for i in new if i.kind == "agent_task"]
    assert "Old answer." in old_task.output and old_task.paths == ("a.py",)
    assert "New answer." in new_task.output and "Old answer." not in new_task.output
    # The agent continues from both (its excerpt's source).
    assert [task.prompt for _turn, task in svc.agents.agent_tasks(sid, "reviewer")] == ["Old review", "New review"]


async def read_committed_snapshot(root: Path, sid: str):
    from mevedel_server.store import read_committed

    return await read_committed(LocalTarget(root), sid)
