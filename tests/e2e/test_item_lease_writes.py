"""Every write into a live item (a document) goes through its item lease,
whichever route it takes, across real server processes on one workspace:
while one LSP server edits a document, ``mevedel mcp``'s ApplyPatch (the
official MCP client), another LSP server's applyPatch and ``mevedel
artifact delete`` are refused naming the holder and change nothing; once
the holder lets go, the same patch applies and the patching process holds
the item."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import one_holding_a_document, request
from .test_mcp_tool_server import _session, envelope, served


def _cli(workspace, state, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args],
        cwd=workspace, env={**os.environ, "XDG_STATE_HOME": str(state)}, capture_output=True, text=True, timeout=120,
    )


async def test_a_document_held_by_one_server_is_written_by_no_other_route(workspace, tmp_path):
    me = tmp_path / "cli-state"
    sid = _session(workspace, me)
    async with one_holding_a_document(workspace, leaseSeconds=30) as (one, two, item):
        document = workspace / ".mevedel" / "artifacts" / item["id"] / "document.md"
        assert document.read_text() == "one\n"
        patch = envelope(f"*** Update File: .mevedel/artifacts/{item['id']}/document.md\n@@\n-one\n+patched\n")

        async with served(workspace, me, "--session", sid) as (session, _roster):
            result = await session.call_tool("ApplyPatch", {"patch": patch})
            text = result.content[0].text
            assert result.isError and "item-held" in text and item["id"] in text and "another mevedel process on" in text, text
            assert "Traceback" not in text
        assert document.read_text() == "one\n"

        with pytest.raises(JsonRpcException) as caught:
            await request(two, methods.RESOURCE_APPLY_PATCH, {"patch": patch})
        assert caught.value.data["kind"] == "item-held"
        assert document.read_text() == "one\n"

        deleted = _cli(workspace, me, "artifact", "delete", item["id"], "--json")
        assert deleted.returncode == 1 and "Traceback" not in deleted.stderr + deleted.stdout, deleted
        assert json.loads(deleted.stdout)["error"]["kind"] == "item-held"
        assert document.read_text() == "one\n"
        listed = [i["id"] for i in (await request(one, methods.ARTIFACT_LIST, {}))["items"]]
        assert item["id"] in listed

        # The holder lets go (its server exits): the patch applies, and
        # the patching process now holds the item.
        await one.shutdown_session()
        await one.stop()
        async with served(workspace, me, "--session", sid) as (session, _roster):
            result = await session.call_tool("ApplyPatch", {"patch": patch})
            assert not result.isError, result.content[0].text
            assert document.read_text() == "patched\n"
            with pytest.raises(JsonRpcException) as caught:
                await request(two, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "two\n"})
            assert caught.value.data["kind"] == "item-held"
        # Released at exit: the other server writes again.
        await request(two, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "two\n"})
        assert document.read_text() == "two\n"


async def test_a_shell_write_into_a_held_document_is_not_taken_as_the_sessions_edit(workspace, tmp_path):
    from .test_agent_turns import configure, prompt

    async with one_holding_a_document(workspace, leaseSeconds=30) as (one, two, item):
        await request(two, methods.SESSION_CREATE, {"name": "Shell"})
        document = f".mevedel/artifacts/{item['id']}/document.md"
        configure(two, workspace, [[{"terminal": {"command": "sh", "args": ["-c", f"echo shell > {document}"]}}]])
        result = await prompt(two, "Write the document from the shell")
        assert result["outcome"] == "completed", result
        versions = (await request(two, methods.ARTIFACT_VERSIONS, {"id": item["id"]}))["versions"]
        assert [v["reason"] for v in versions] == ["created"]  # no version of the turn
        attached = {i["id"]: i["attached"] for i in (await request(two, methods.ARTIFACT_LIST, {}))["items"]}
        assert attached == {item["id"]: False}
        # The holder still holds it; the shell's bytes are the holder's to overwrite.
        await request(one, methods.ARTIFACT_WRITE, {"id": item["id"], "content": "one again\n"})
        assert (workspace / document).read_text() == "one again\n"
