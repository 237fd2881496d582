"""Redo: the superseded heads as turn states, restoring one in both
directions with its files, divergent branches, stale tokens."""

from __future__ import annotations

import pytest
from txn_sessions import DELETE, committed_view, open_session, snapshot_files, write

from mevedel_server.store.content.transcript import Response
from mevedel_server.store.layout import publication_id_of
from mevedel_server.store.transactions.lifecycle_token import (
    LifecycleRefused,
    StaleState,
)
from mevedel_server.store.transactions.redo import (
    commit_redo,
    prepare_redo,
    redo_states,
)
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.snapshot_cut import Boundary

FILES = ("a.txt", "b.txt")


async def session_of_three(root):
    write(root, "a.txt", b"a0\n")
    s = await open_session(root)
    await s.turn("one", {"a.txt": b"a1\n"})
    await s.turn("two", {"a.txt": b"a2\n", "b.txt": b"b2\n"})
    await s.turn("three", {"b.txt": DELETE})
    return s


async def rewind(s, boundary):
    impact = await prepare_rewind(s.target, s.session_id, boundary)
    result = await commit_rewind(s.publisher, impact.token)
    s.adopt(result.conversation)
    return result


def by_turns(states):
    return {state.turn_count: state for state in states.states}


async def test_states_are_one_per_turn_count_without_the_current_one(tmp_path):
    s = await session_of_three(tmp_path)
    # A rename publishes another head with the same turn state.
    candidate = s.conversation.rename("Renamed")
    await s.publisher.publish(candidate.changed)
    s.conversation.mark_committed(candidate)
    states = await redo_states(s.target, s.session_id)
    assert states.current_head == s.lease.publication_head
    assert [st.turn_count for st in states.states] == [2, 1]  # newest first; 3 is current
    assert [st.label for st in states.states] == ["turn 2 (segment 1): two", "turn 1 (segment 1): one"]
    assert states.skipped == ()


async def test_mid_turn_heads_are_dropped(tmp_path):
    s = await session_of_three(tmp_path)
    settled_three = s.lease.publication_head
    turn_id = s.conversation.begin_turn("four", at=s.at + 1)
    s.conversation.append(Response(turn_id=turn_id, text="half"))
    candidate = s.conversation.checkpoint()
    await s.publisher.publish(candidate.changed)
    s.conversation.mark_committed(candidate)
    mid_turn = s.lease.publication_head
    s.conversation.settle("completed", at=s.at + 2)
    await s.save()
    states = await redo_states(s.target, s.session_id)
    assert [st.turn_count for st in states.states] == [3, 2, 1]
    offered = {st.head for st in states.states}
    assert settled_three in offered and mid_turn not in offered


async def test_redo_composes_in_both_directions_with_files(tmp_path):
    s = await session_of_three(tmp_path)
    await rewind(s, Boundary.after(1))
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a1\n", "b.txt": None}
    states = by_turns(await redo_states(s.target, s.session_id))
    assert sorted(states) == [2, 3]

    impact = await prepare_redo(s.target, s.session_id, states[3].publication_id)
    assert impact.common_turns == 1
    assert [t.preview for t in impact.restored] == ["two", "three"] and impact.discarded == ()
    assert {r.path: (r.checkpoint, r.turn, r.changes) for r in impact.restores} == {
        "a.txt": ("post-turn", 2, True),
        "b.txt": ("post-turn", 3, False),
    }
    result = await commit_redo(s.publisher, impact.token)
    s.adopt(result.conversation)
    assert await committed_view(tmp_path, s.session_id) == (3, ["one", "two", "three"])
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a2\n", "b.txt": None}

    # The head redo moved away from (the rewound one) is now a state too.
    states = by_turns(await redo_states(s.target, s.session_id))
    assert sorted(states) == [1, 2]
    impact = await prepare_redo(s.target, s.session_id, states[1].publication_id)
    assert [t.preview for t in impact.discarded] == ["two", "three"]
    await commit_redo(s.publisher, impact.token.text)
    assert await committed_view(tmp_path, s.session_id) == (1, ["one"])
    assert snapshot_files(tmp_path, FILES) == {"a.txt": b"a1\n", "b.txt": None}


async def test_redo_to_another_branch_restores_both_sides_files(tmp_path):
    s = await session_of_three(tmp_path)
    await rewind(s, Boundary.after(1))
    # A new branch: turn 2' touches c.txt only.
    await s.turn("two, differently", {"c.txt": b"c2'\n"})
    states = await redo_states(s.target, s.session_id)
    labels = [st.label for st in states.states]
    assert "turn 2 (segment 1): two" in labels and "turn 3 (segment 1): three" in labels
    three = by_turns(states)[3]
    impact = await prepare_redo(s.target, s.session_id, three.publication_id)
    assert impact.common_turns == 1
    assert [t.preview for t in impact.discarded] == ["two, differently"]
    restores = {r.path: (r.state, r.checkpoint, r.turn) for r in impact.restores}
    # c.txt goes back to before turn 2' (absent); a.txt, b.txt forward.
    assert restores == {
        "a.txt": ("present", "post-turn", 2),
        "b.txt": ("absent", "post-turn", 3),
        "c.txt": ("absent", "pre-turn", 2),
    }
    await commit_redo(s.publisher, impact.token)
    assert snapshot_files(tmp_path, ("a.txt", "b.txt", "c.txt")) == {"a.txt": b"a2\n", "b.txt": None, "c.txt": None}
    # Two states with two turns each exist: the branch is still offered.
    states = await redo_states(s.target, s.session_id)
    two = [st for st in states.states if st.turn_count == 2]
    assert sorted(st.last_turn.preview for st in two) == ["two", "two, differently"]


async def test_the_name_is_the_sessions_not_the_heads(tmp_path):
    s = await session_of_three(tmp_path)
    await rewind(s, Boundary.after(1))
    candidate = s.conversation.rename("Named after the rewind")
    await s.publisher.publish(candidate.changed)
    s.conversation.mark_committed(candidate)
    three = by_turns(await redo_states(s.target, s.session_id))[3]
    impact = await prepare_redo(s.target, s.session_id, three.publication_id)
    result = await commit_redo(s.publisher, impact.token)
    assert result.conversation.sidecar.display_name == "Named after the rewind"


async def test_a_moved_head_or_file_is_stale(tmp_path):
    s = await session_of_three(tmp_path)
    await rewind(s, Boundary.after(1))
    three = by_turns(await redo_states(s.target, s.session_id))[3]
    impact = await prepare_redo(s.target, s.session_id, three.publication_id)
    write(tmp_path, "a.txt", b"edited\n")
    with pytest.raises(StaleState, match="a.txt changed"):
        await commit_redo(s.publisher, impact.token)
    impact = await prepare_redo(s.target, s.session_id, three.publication_id)
    assert [e.path for e in impact.externally_modified] == ["a.txt"]
    await s.turn("meanwhile")
    with pytest.raises(StaleState, match="committed head moved"):
        await commit_redo(s.publisher, impact.token)


async def test_unknown_or_current_publications_are_refused(tmp_path):
    s = await session_of_three(tmp_path)
    current = publication_id_of(s.lease.publication_head)
    with pytest.raises(LifecycleRefused, match="current state"):
        await prepare_redo(s.target, s.session_id, current)
    with pytest.raises(LifecycleRefused, match="not a publication id"):
        await prepare_redo(s.target, s.session_id, "../../etc")
    with pytest.raises(LifecycleRefused, match=f"there is no publication {'0' * 32}$") as refused:
        await prepare_redo(s.target, s.session_id, "0" * 32)
    assert refused.value.kind == "missing-target"


async def test_a_publication_with_corrupt_bytes_is_skipped_or_refused(tmp_path):
    s = await session_of_three(tmp_path)
    two = by_turns(await redo_states(s.target, s.session_id))[2]
    pub = tmp_path / ".mevedel" / "sessions" / s.session_id / ".publications" / two.publication_id
    manifest = (pub / "manifest.json").read_bytes()
    (pub / "manifest.json").write_bytes(manifest[:-10])
    states = await redo_states(s.target, s.session_id)
    assert two.publication_id in [k.publication_id for k in states.skipped]
    assert 2 not in by_turns(states)


async def test_rewind_and_redo_that_keep_a_retained_agent_cut_and_restore_its_transcript_and_detach_its_native_history(tmp_path):
    """The agent's native conversation holds every task it ran; after a
    Rewind or a Redo it no longer matches the session's record of it, so
    its id is cleared (the next task continues from the excerpt)."""
    from mevedel_server.store.content.sidecar import RetainedAgent
    from mevedel_server.store.content.transcript import AgentStep, AgentTask, Outcome

    s = await session_of_three(tmp_path)
    c = s.conversation
    for number, (prompt, text) in enumerate((("look", "Seen."), ("look again", "Seen twice.")), start=4):
        c.begin_turn(f"turn {number}", at=s.at + number)
        if number == 4:
            c.set_agents([RetainedAgent(path="reviewer", agent="codex", fingerprint="a" * 64, machine="here",
                                        native_session_id="native-1", created_turn=4, created_turn_id=c.open_turn.turn_id)],
                         at=s.at + number)
        c.record_agent_task(AgentTask(turn_id=c.open_turn.turn_id, path="reviewer", agent="codex", prompt=prompt,
                                      outcome=Outcome.COMPLETED, steps=[AgentStep(kind="response", text=text)]))
        c.settle(Outcome.COMPLETED, at=s.at + number)
        await s.save()
    assert s.conversation.sidecar.agents[0].native_session_id == "native-1"

    await rewind(s, Boundary.after(4))
    (kept,) = s.conversation.sidecar.agents
    assert kept.path == "reviewer" and kept.native_session_id is None
    assert [t.prompt for t in s.conversation.agent_tasks("reviewer")] == ["look"]

    states = by_turns(await redo_states(s.target, s.session_id))
    impact = await prepare_redo(s.target, s.session_id, states[5].publication_id)
    result = await commit_redo(s.publisher, impact.token)
    redone = result.conversation
    assert [t.prompt for t in redone.agent_tasks("reviewer")] == ["look", "look again"]
    assert redone.sidecar.agents[0].native_session_id is None  # the redone head had native-1
