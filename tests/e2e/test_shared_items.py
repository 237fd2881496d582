"""shared:// and model writes to the workspace artifact store, through the
real processes: the language server over stdio (items made with
mevedel/artifact/create, then read and searched as shared://, and an
authored file written with mevedel/resource/applyPatch), and ``mevedel
mcp`` driven by the official MCP client (an ApplyPatch into a new id
directory creates an artifact the language server lists; the store's
bookkeeping is refused with nothing written; a linked authored directory
never redirects a write)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import SERVER, collect, initialize_params, request
from .test_mcp_tool_server import _cli, _session, add, envelope, error, ok, served

SCENE = {
    "type": "excalidraw",
    "version": 2,
    "elements": [
        {"id": "headline-1", "type": "text", "text": "Queue needle"},
        {"id": "frame-2", "type": "rectangle"},
    ],
}


async def _refused(client, method: str, params: dict) -> dict:
    with pytest.raises(JsonRpcException) as refused:
        await request(client, method, params)
    return refused.value.data


async def _saved_session(client) -> str:
    sid = (await request(client, methods.SESSION_CREATE, {"name": "Shared"}))["sessionId"]
    await request(client, methods.TURN_BEGIN, {"prompt": "set up"})
    await request(client, methods.TURN_APPEND, {"kind": "response", "text": "ready"})
    await request(client, methods.TURN_SETTLE, {})
    return sid


async def _read(client, address: str, **params) -> dict:
    return await request(client, methods.RESOURCE_READ, {"address": address, "view": "plain", **params})


async def test_shared_lists_reads_and_searches_the_stores_items(client, workspace):
    sid = await _saved_session(client)
    doc = await request(
        client, methods.ARTIFACT_CREATE, {"kind": "document", "title": "Design notes", "content": "# Design\n\nThe queue is FIFO.\n\n- keep it small\n"}
    )
    board = await request(client, methods.ARTIFACT_CREATE, {"kind": "whiteboard", "title": "Architecture", "content": json.dumps(SCENE)})
    await request(client, methods.ARTIFACT_DETACH, {"id": board["id"]})
    await request(client, methods.ARTIFACT_CREATE, {"kind": "artifact", "title": "Report", "fileName": "report.md", "content": "r\n"})

    listing = await _read(client, "shared://")
    assert listing["text"].split("\n") == [
        f"Architecture -- shared://{board['id']} (whiteboard)",
        f"Design notes -- shared://{doc['id']} (document, attached to this session)",
        "shared://library -- element libraries",
    ]
    overview = (await _read(client, f"shared://{doc['id']}"))["text"].split("\n")
    assert [line[10:] for line in overview] == ["# Design", "The queue is FIFO.", "- keep it small"]
    assert all(len(line.split("  ")[0]) == 8 for line in overview)
    elements = (await _read(client, f"shared://{board['id']}"))["text"].split("\n")
    assert [line.split("  ")[1:] for line in elements] == [["headline-1", "text", "Queue needle"], ["frame-2", "rectangle"]]
    element = await _read(client, f"shared://{board['id']}/elements/headline-1")
    assert json.loads(element["text"]) == SCENE["elements"][0]

    found = await request(client, methods.RESOURCE_GREP, {"address": f"shared://{board['id']}", "pattern": "needle", "ignoreCase": True})
    assert [(m["address"], m["line"]) for m in found["matches"]] == [(f"shared://{board['id']}", 1)]
    found = await request(client, methods.RESOURCE_GREP, {"address": f"shared://{doc['id']}", "pattern": "FIFO"})
    assert [m["line"] for m in found["matches"]] == [2]

    await request(client, methods.ARTIFACT_COMMENT, {"id": doc["id"], "text": "Why FIFO?"})
    talk = await _read(client, f"shared://{doc['id']}/discussions")
    assert "    Why FIFO?" in talk["text"].split("\n")
    history = await _read(client, f"shared://{doc['id']}/history")
    assert history["text"].startswith("version 1  ") and "created" in history["text"]

    image = await _refused(client, methods.RESOURCE_READ, {"address": f"shared://{board['id']}/view.png"})
    assert image["kind"] == "unavailable" and f"Read shared://{board['id']} for its text view" in image["reason"]
    missing = await _refused(client, methods.RESOURCE_READ, {"address": "shared://nosuchitem"})
    assert missing["kind"] == "missing-target" and "nosuchitem" in missing["reason"]
    bad = await _refused(client, methods.RESOURCE_READ, {"address": "shared://no.dots"})
    assert bad["kind"] == "malformed-address"
    assert (await _read(client, "shared://library"))["text"] == ""
    assert sid


async def test_apply_patch_of_an_authored_file_creates_an_attached_artifact(client, workspace):
    sid = await _saved_session(client)
    patch = envelope(add(".mevedel/artifacts/notes-1/notes.md", "# Notes", "written by a patch"))
    applied = await request(client, methods.RESOURCE_APPLY_PATCH, {"patch": patch})
    assert [c["address"] for c in applied["changes"]] == [".mevedel/artifacts/notes-1/notes.md"]
    listed = {i["id"]: i for i in (await request(client, methods.ARTIFACT_LIST, {}))["items"]}
    assert listed["notes-1"]["kind"] == "artifact" and listed["notes-1"]["title"] == "notes.md"
    assert listed["notes-1"]["attached"] and listed["notes-1"]["versions"] == 1
    read = await request(client, methods.ARTIFACT_READ, {"id": "notes-1"})
    assert read["content"] == "# Notes\nwritten by a patch\n"
    for path in (".mevedel/artifacts/.state/notes-1/meta.json", ".mevedel/leases/artifacts/notes-1/handover.json"):
        refused = await _refused(client, methods.RESOURCE_APPLY_PATCH, {"patch": envelope(add(path, "{}"))})
        assert refused["kind"] == "unsupported-operation" and "read-only to the model's tools" in refused["reason"]
    assert not (workspace / ".mevedel/leases/artifacts/notes-1/handover.json").exists()
    assert sid


async def test_the_mcp_tool_server_writes_artifacts_and_never_the_bookkeeping(workspace, tmp_path):
    state = tmp_path / "state"
    sid = _session(workspace, state)
    outside = tmp_path / "outside"
    outside.mkdir()
    authored = workspace / ".mevedel" / "artifacts"
    authored.mkdir(parents=True)
    os.symlink(outside, authored / "linked")
    async with served(workspace, state, "--session", sid) as (session, roster):
        assert "- shared://" not in roster  # no whiteboard or document yet
        text = await ok(session, "ApplyPatch", patch=envelope(add(".mevedel/artifacts/newreport/report.md", "# Report", "all good")))
        assert text.split("\n") == [
            "A .mevedel/artifacts/newreport/report.md",
            f"created artifact newreport (report.md), attached to session {sid}",
        ]
        assert "all good" in await ok(session, "Read", path=".mevedel/artifacts/newreport/report.md")
        for path in (".mevedel/artifacts/.state/newreport/meta.json", ".mevedel/leases/artifacts/newreport/generation-1.json"):
            refused = await error(session, "ApplyPatch", patch=envelope(add(path, "{}")))
            assert "read-only to the model's tools" in refused and "unsupported-operation" in refused
        meta = workspace / ".mevedel/artifacts/.state/newreport/meta.json"
        before = meta.read_bytes()
        mixed = envelope(add("src/fine.py", "x"), add(".mevedel/artifacts/.state/newreport/meta.json", "{}"))
        await error(session, "ApplyPatch", patch=mixed)
        assert meta.read_bytes() == before and not (workspace / "src" / "fine.py").exists()
        assert not (workspace / ".mevedel/leases/artifacts/newreport").exists()
        linked = await error(session, "ApplyPatch", patch=envelope(add(".mevedel/artifacts/linked/x.md", "escape")))
        assert "containment" in linked
        assert list(outside.iterdir()) == []
        # shared:// reads through the same tools.
        assert "shared://library" in await ok(session, "Read", path="shared://")

    listed = _cli(workspace, state, "artifact", "list", "--session", sid, "--json")
    assert [(i["id"], i["attached"]) for i in listed["items"]] == [("newreport", True)]

    server = await SERVER.start()
    try:
        await server.initialize_session(initialize_params(workspace))
        items = (await request(server, methods.ARTIFACT_LIST, {}))["items"]
        assert [(i["id"], i["kind"], i["title"], i["primary"]) for i in items] == [("newreport", "artifact", "report.md", "report.md")]
        board = await request(server, methods.ARTIFACT_CREATE, {"kind": "whiteboard", "title": "Board"})
    finally:
        await server.shutdown_session()
        await server.stop()
    async with served(workspace, state, "--session", sid) as (session, roster):
        assert "- shared:// -- " in roster
        assert f"Board -- shared://{board['id']} (whiteboard)" in await ok(session, "Read", path="shared://")
    assert Path(outside).exists() and list(outside.iterdir()) == []


async def test_an_agents_apply_patch_creates_an_artifact_and_its_turn_records_a_version(client, workspace):
    from .test_agent_mcp_tools import said
    from .test_agent_turns import configure, events, prompt

    create = envelope(add(".mevedel/artifacts/agent-report/report.md", "# Report", "first draft"))
    revise = "*** Begin Patch\n*** Update File: .mevedel/artifacts/agent-report/report.md\n@@\n-first draft\n+final text\n*** End Patch\n"
    # A forged newest version file would be the item's history: refused.
    bookkeeping = envelope(add(".mevedel/artifacts/.state/agent-report/versions/0000000009.version", "MEVEDEL-VERSION 1", "{}"))
    log = configure(client, workspace, [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": create}}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": revise}}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": bookkeeping}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "shared://"}}},
    ]])
    result = await prompt(client, "Write the report as an artifact")
    assert result["outcome"] == "completed", result
    created, revised, refused = said(log, "ApplyPatch")
    assert "created artifact agent-report (report.md), attached to session" in created, created
    assert "M .mevedel/artifacts/agent-report/report.md" in revised
    assert "read-only to the model's tools" in refused
    assert any(e["event"] == "mcp_result" and e["tool"] == "Read" for e in events(log))
    items = {i["id"]: i for i in (await request(client, methods.ARTIFACT_LIST, {}))["items"]}
    assert items["agent-report"]["attached"] and items["agent-report"]["title"] == "report.md"
    assert (await request(client, methods.ARTIFACT_READ, {"id": "agent-report"}))["content"] == "# Report\nfinal text\n"
    versions = (await request(client, methods.ARTIFACT_VERSIONS, {"id": "agent-report"}))["versions"]
    assert [(v["reason"], v.get("turn")) for v in versions] == [("turn", result["turn"]), ("created", result["turn"])]
    assert not (workspace / ".mevedel/artifacts/.state/agent-report/versions/0000000009.version").exists()


async def test_an_agents_shell_command_creates_an_artifact_and_its_turn_records_a_version(client, workspace):
    """A command is no ApplyPatch, yet what it writes into a new id directory
    becomes an artifact the session attaches, and its later rewrite of the
    primary file gets the turn's version; Rewind leaves the item alone."""
    from .test_agent_turns import configure, prompt

    item = ".mevedel/artifacts/shell-note"
    (workspace / "plain.txt").write_text("before\n")
    configure(client, workspace, [[
        {"terminal": {"command": "sh", "args": ["-c", f"mkdir -p {item} && printf '# Shell\\nfirst\\n' > {item}/notes.md"]}},
        {"terminal": {"command": "sh", "args": ["-c", f"printf '# Shell\\nfinal\\n' > {item}/notes.md; echo after > plain.txt"]}},
        {"say": "Done."},
    ]])
    result = await prompt(client, "Take notes from the shell")
    assert result["outcome"] == "completed", result
    items = {i["id"]: i for i in (await request(client, methods.ARTIFACT_LIST, {}))["items"]}
    assert items["shell-note"]["attached"] and items["shell-note"]["title"] == "notes.md", items
    assert (await request(client, methods.ARTIFACT_READ, {"id": "shell-note"}))["content"] == "# Shell\nfinal\n"
    versions = (await request(client, methods.ARTIFACT_VERSIONS, {"id": "shell-note"}))["versions"]
    assert [(v["reason"], v.get("turn")) for v in versions] == [("turn", result["turn"]), ("created", result["turn"])]
    # The command's project write is checkpointed; the item is versioned instead.
    impact = await request(client, methods.REWIND_PREPARE, {"turn": result["turn"], "boundary": "before"})
    assert [r["path"] for r in impact["restores"] if r["changes"]] == ["plain.txt"]


def test_mevedel_prompt_tells_the_store_of_an_agents_artifact_write(workspace, tmp_path):
    import subprocess
    import sys

    agent = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"
    create = envelope(add(".mevedel/artifacts/cli-note/note.md", "draft"))
    revise = "*** Begin Patch\n*** Update File: .mevedel/artifacts/cli-note/note.md\n@@\n-draft\n+done\n*** End Patch\n"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": create}}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": revise}}},
        {"say": "Written."},
    ]]}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(agent), str(script)]}}}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", "prompt", "Write a note", "--json"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    turn = json.loads(done.stdout)["turn"]
    listed = _cli(workspace, tmp_path / "state", "artifact", "list", "--json")
    assert [(i["id"], i["attached"], i["title"]) for i in listed["items"]] == [("cli-note", True, "note.md")]
    versions = _cli(workspace, tmp_path / "state", "artifact", "versions", "cli-note", "--json")["versions"]
    assert [(v["reason"], v.get("turn")) for v in versions] == [("turn", turn), ("created", turn)]


async def test_a_comment_reaches_the_agent_with_the_next_prompt_once_it_is_answered(client, workspace):
    """A comment routed to the session rides its next prompt, naming the
    item; a turn that fails leaves it for the next, and once a turn has
    completed it is marked delivered and never sent again."""
    from .test_agent_turns import configure, events, prompt

    await _saved_session(client)
    doc = await request(client, methods.ARTIFACT_CREATE, {"kind": "document", "title": "Rollout plan", "content": "# Plan\n"})
    await request(client, methods.ARTIFACT_COMMENT, {"id": doc["id"], "text": "Please add a rollback section."})
    changes = collect(client, methods.ARTIFACT_DID_CHANGE)
    log = configure(client, workspace, [
        [{"error": {"code": -32603, "message": "model overloaded"}}],
        [{"say": "Added."}],
        [{"say": "Nothing else."}],
    ])
    failed = await prompt(client, "Work on the plan")
    assert failed["outcome"] == "errored", failed
    done = await prompt(client, "Try again")
    assert done["outcome"] == "completed", done
    await prompt(client, "Anything else?")
    sent = [json.dumps(e["params"]) for e in events(log) if e["event"] == "prompt"]
    assert len(sent) == 3
    named = json.dumps(f'"Rollout plan" (shared://{doc["id"]})')[1:-1]
    for carried in sent[:2]:
        assert "Please add a rollback section." in carried and named in carried
    assert "rollback" not in sent[2]
    comments = (await request(client, methods.ARTIFACT_READ, {"id": doc["id"]}))["comments"]
    assert [c["deliveredIn"] for c in comments] == [done["turn"]]
    # An editor showing the discussion is told once, when it was delivered.
    assert [c["id"] for c in changes if c["reason"] == "delivered"] == [doc["id"]]
