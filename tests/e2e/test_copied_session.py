"""Opening a session copied from another project in the editor asks whether
to bind it to this workspace (``window/showMessageRequest``: Bind here /
Cancel): only Bind here binds it; Cancel, a dismissed question or an error
is ``identity-declined`` and nothing is written."""

from __future__ import annotations

import os
import shutil

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods
from mevedel_server.store import ClientIdentity
from mevedel_server.store.authority.workspace import ensure_workspace_id
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import LocalTarget

from .conftest import SERVER, answering, initialize_params, request


async def _copied_into(tmp_path) -> tuple:
    elsewhere, project = tmp_path / "elsewhere", tmp_path / "project"
    elsewhere.mkdir()
    project.mkdir()
    service = SessionService(LocalTarget(elsewhere), ClientIdentity("maker", "their-host"))
    session_id = (await service.sessions.create()).session_id
    await service.turns.begin_turn(session_id, "made elsewhere")
    await service.turns.append(session_id, EvidenceInput("response", text="hi"))
    await service.turns.settle(session_id)
    await service.sessions.close(session_id)
    await ensure_workspace_id(LocalTarget(project))
    shutil.copytree(elsewhere / ".mevedel" / "sessions" / session_id, project / ".mevedel" / "sessions" / session_id)
    return project, session_id


@pytest.mark.parametrize("answer", ["Bind here", "Cancel", None])
async def test_opening_a_session_copied_from_another_project_asks_before_binding_it(tmp_path, answer):
    project, session_id = await _copied_into(tmp_path)
    lease = project / ".mevedel" / "sessions" / session_id / ".lease"
    before = sorted(os.listdir(lease))
    client = await SERVER.start()
    questions = answering(client, answer)

    try:
        await client.initialize_session(initialize_params(project))
        if answer == "Bind here":
            opened = await request(client, methods.SESSION_OPEN, {"sessionId": session_id})
            assert opened["action"] == "resume"
        else:
            with pytest.raises(JsonRpcException) as refused:
                await request(client, methods.SESSION_OPEN, {"sessionId": session_id})
            assert refused.value.data["kind"] == "identity-declined"
            assert sorted(os.listdir(lease)) == before  # nothing was written
        (question,) = questions
        assert "another workspace" in question.message
        assert [a.title for a in question.actions] == ["Bind here", "Cancel"]
        # confirmIdentity answers the question in advance.
        if answer != "Bind here":
            opened = await request(client, methods.SESSION_OPEN, {"sessionId": session_id, "confirmIdentity": True})
            assert opened["action"] == "resume" and len(questions) == 1
    finally:
        await client.shutdown_session()
