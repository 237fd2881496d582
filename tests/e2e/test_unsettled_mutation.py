"""The editor is told of a command a previous owner may have left running
before anything changes the workspace: through the real server, a turn's
begin, a prompt, Rewind, Redo and a file's restore are refused with
``unsettled-mutation``, whose message says what to check and how to
acknowledge it; once acknowledged they go through."""

from __future__ import annotations

from mevedel_protocol import methods

from .conftest import request
from .test_sessions import failure, unprovable_latch_taken_over


async def test_every_mutating_request_is_refused_naming_the_unsettled_command(client, workspace):
    (workspace / "a.txt").write_text("one\n")
    await unprovable_latch_taken_over(client, workspace)
    for method, params in (
        (methods.TURN_BEGIN, {"prompt": "second"}),
        (methods.TURN_PROMPT, {"text": "second"}),
        (methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"}),
        (methods.REDO_PREPARE, {"publicationId": "20261204T000000-0000000000000000"}),
        (methods.TURN_RESTORE_FILE, {"path": "a.txt", "beforeTurn": 1}),
    ):
        refused = await failure(client, method, params)
        assert refused["kind"] == "unsettled-mutation", (method, refused)
        assert "cannot be proven gone" in refused["reason"] and "mevedel/session/acknowledgeMutation" in refused["reason"], method
    assert (await request(client, methods.SESSION_ACKNOWLEDGE_MUTATION, {}))["cleared"] is True
    assert (await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"}))["token"]
    assert (await request(client, methods.TURN_BEGIN, {"prompt": "second"}))["turn"] == 2
