"""The content model through the real publication layer: publishing only a
candidate's changes over the committed manifest gives exactly the complete
snapshot, and a fresh reader restores the same conversation."""

from __future__ import annotations

import hashlib
import itertools

from mevedel_server.store import (
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
    read_committed,
)
from mevedel_server.store.content.checkpoints import history_path
from mevedel_server.store.content.transcript import (
    Outcome,
    Response,
    ToolCall,
    ToolResult,
)
from mevedel_server.store.content.turns import Conversation
from mevedel_server.targets import LocalTarget

SID = "2026-07-19T09-47-bf87b5dd793a"


async def test_saves_publish_their_changes_and_a_reader_restores_the_conversation(tmp_path) -> None:
    target = LocalTarget(tmp_path)
    await materialize_session(target, SID)
    publisher = Publisher(await acquire_lease(target, SID, ClientIdentity("writer", "host")))
    ids = (f"{n:016x}" for n in itertools.count(1))
    c = Conversation.new(session_id=SID, workspace_id="2" * 64, at=1, turn_ids=lambda: next(ids))

    async def save(candidate) -> None:
        outcome = await publisher.publish(candidate.changed)
        assert outcome.committed
        # Only the changed logical paths were written.
        assert set(outcome.written) <= set(candidate.changed)
        c.mark_committed(candidate)

    for n in range(3):
        turn = c.begin_turn(f"request {n}", at=10 + n)
        c.capture_file("notes.txt", f"v{n}".encode())
        c.append(ToolCall(turn_id=turn, call_id="c1", name="write", arguments="{}"))
        c.append(ToolResult(turn_id=turn, call_id="c1", output="ok"))
        await save(c.checkpoint())
        c.append(Response(turn_id=turn, text=f"answer {n}"))
        c.settle(Outcome.COMPLETED, at=20 + n, current={"notes.txt": f"v{n + 1}".encode()})
        await save(c.artifacts_for_save())
    await save(c.rename("Notes session"))

    committed = await (await read_committed(LocalTarget(tmp_path), SID)).read_all()
    assert committed == dict(c.metadata_candidate().artifacts)
    assert history_path(hashlib.sha256(b"v3").hexdigest()) in committed
    restored = Conversation.restore(committed)
    assert restored.sidecar.display_name == "Notes session"
    assert restored.prompt_index() == c.prompt_index()
    assert restored.records() == c.records()
    assert restored.file_snapshots() == c.file_snapshots()
    # Nothing left to publish: an identical save performs no transaction.
    outcome = await publisher.publish(restored.artifacts_for_save().changed)
    assert not outcome.committed
