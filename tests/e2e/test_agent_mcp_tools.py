"""Agents use resource addresses through mevedel's MCP tools: the real server
(over stdio) drives the scripted ACP agent, which starts the ``mevedel
mcp`` it was given in ``session/new`` with the official ``mcp`` client; the
tool calls run in the server, for that agent's session, and an ApplyPatch
of a project file is undone by Rewind like any change the agent makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mevedel_protocol import methods

from .conftest import answering, request
from .test_agent_turns import Watch, configure, events, prompt

PATCH = """*** Begin Patch
*** Update File: src/app.py
@@
-print("hello")
+print("hello from the agent")
*** Add File: work://shared/findings.md
+The agent found this.
*** End Patch
"""


def tool_server(event: dict) -> dict:
    (server,) = [s for s in event["params"]["mcpServers"] if s["name"] == "mevedel"]
    return server


def token_of(event: dict) -> str:
    return next(v["value"] for v in tool_server(event)["env"] if v["name"] == "MEVEDEL_TOOL_TOKEN")


def said(log, tool: str) -> list[str]:
    return [e["text"] for e in events(log) if e["event"] == "mcp_result" and e["tool"] == tool]


async def test_an_agents_apply_patch_through_the_tools_is_undone_by_rewind(client, workspace):
    app = workspace / "src" / "app.py"
    app.parent.mkdir()
    app.write_text('print("hello")\n')
    watch = Watch(client)
    log = configure(client, workspace, [[
        {"mcp_tools": {}},
        {"mcp_call": {"id": "m1", "tool": "ApplyPatch", "arguments": {"patch": PATCH}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "work://shared/findings.md"}}},
        {"mcp_call": {"tool": "Grep", "arguments": {"pattern": "from the agent", "path": "src"}}},
    ]])
    result = await prompt(client, "Fix the greeting and note what you found")
    assert result["outcome"] == "completed", result

    # The agent was given the tool server, started it, and saw the tools and the roster.
    created = next(e for e in events(log) if e["event"] == "new_session")
    server = tool_server(created)
    assert server["args"][-1] == "mcp" and {v["name"] for v in server["env"]} == {"MEVEDEL_TOOL_SOCKET", "MEVEDEL_TOOL_TOKEN"}
    text = watch.text()
    assert "mcp tools: " in text and all(name in text for name in ("Read", "Glob", "Grep", "ApplyPatch"))
    assert "work://" in text.split("mcp tools: ", 1)[1]  # the roster names the families usable now

    # The patch changed the project file and the session-independent shared file.
    (patched,) = said(log, "ApplyPatch")
    assert patched.startswith("mcp ApplyPatch: "), patched
    assert app.read_text() == 'print("hello from the agent")\n'
    assert (workspace / ".mevedel" / "shared" / "findings.md").read_text() == "The agent found this.\n"
    # The agent read the address back, and searched the project, through the tools.
    (read,) = said(log, "Read")
    assert read.startswith("mcp Read: ") and "The agent found this." in read
    (grep,) = said(log, "Grep")
    assert "src/app.py" in grep and "from the agent" in grep

    # The turn recorded the agent's own tool call.
    shown = await request(client, methods.TURN_SHOW, {"turn": 1})
    calls = [i for i in shown["items"] if i["kind"] == "tool_call" and i.get("name") == "mcp ApplyPatch"]
    assert len(calls) == 1 and "src/app.py" in calls[0]["arguments"]
    results = [i for i in shown["items"] if i["kind"] == "tool_result" and i.get("callId") == calls[0]["callId"]]
    assert len(results) == 1 and not results[0].get("isError") and "src/app.py" in results[0]["output"]

    # Rewind to before the turn restores the project file the tool changed.
    impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before"})
    assert "src/app.py" in {r["path"] for r in impact["restores"] if r["changes"]}
    await request(client, methods.REWIND_COMMIT, {"token": impact["token"]})
    assert app.read_text() == 'print("hello")\n'


async def test_a_token_works_only_for_its_own_running_agent(client, workspace):
    add = "*** Begin Patch\n*** Add File: work://shared/{name}.md\n+written\n*** End Patch\n"
    log = configure(client, workspace, [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": add.format(name="first")}}},
    ]], load_session=True)
    first = await prompt(client, "Write a note")
    assert first["outcome"] == "completed"
    assert (workspace / ".mevedel" / "shared" / "first.md").exists()
    old_token = token_of(next(e for e in events(log) if e["event"] == "new_session"))

    # The session closes: its agent stops, and its token with it.
    await request(client, methods.SESSION_CLOSE, {"sessionId": first["sessionId"]})
    await request(client, methods.SESSION_OPEN, {"sessionId": first["sessionId"]})
    configure(client, workspace, [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": add.format(name="stale")},
                      "env": {"MEVEDEL_TOOL_TOKEN": old_token}}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": add.format(name="forged")},
                      "env": {"MEVEDEL_TOOL_TOKEN": "x" * 43}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "work://shared/first.md"}}},
    ]], load_session=True)
    second = await prompt(client, "Try again", sessionId=first["sessionId"])
    assert second["outcome"] == "completed", second

    # The new agent process was given the tools again (session/load), with a new token.
    loaded = next(e for e in events(log) if e["event"] == "load_session")
    assert token_of(loaded) != old_token
    refused = said(log, "ApplyPatch")[1:]
    assert len(refused) == 2
    for text in refused:
        assert text.startswith("mcp ApplyPatch failed: ") and "refused the token in MEVEDEL_TOOL_TOKEN" in text
    assert not (workspace / ".mevedel" / "shared" / "stale.md").exists()
    assert not (workspace / ".mevedel" / "shared" / "forged.md").exists()
    (read,) = said(log, "Read")
    assert read.startswith("mcp Read: ") and "written" in read
    assert json.dumps(events(log)).count(old_token) >= 2  # the stale token was really tried


async def test_on_an_ssh_workspace_the_tools_run_there_and_rewind_restores_the_patch(openssh_server, tmp_path):
    import sys

    from ssh_fixtures import ALIAS

    from .test_agent_turns import AGENT
    from .test_ssh_workspace import remote_params, server_config, ssh_home

    project = tmp_path / "remote project"
    project.mkdir()
    (project / "kept.txt").write_text("remote before\n")
    url = f"ssh://{ALIAS}{project}"
    patch = "*** Begin Patch\n*** Update File: kept.txt\n@@\n-remote before\n+patched over ssh\n*** End Patch\n"
    log = tmp_path / "events.jsonl"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"log": str(log), "turns": [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": patch}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "kept.txt"}}},
    ]]}))
    settings = {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}, "defaultAgent": "scripted"}
    client = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await client.initialize_session(remote_params(url, **settings))
        result = await prompt(client, "Patch over there", workspaceFolder=url)
        assert result["outcome"] == "completed", result
        (patched,) = said(log, "ApplyPatch")
        assert patched.startswith("mcp ApplyPatch: "), patched
        (read,) = said(log, "Read")
        assert "patched over ssh" in read, read
        assert (project / "kept.txt").read_text() == "patched over ssh\n"
        impact = await request(client, methods.REWIND_PREPARE, {"turn": 1, "boundary": "before", "workspaceFolder": url})
        assert "kept.txt" in {r["path"] for r in impact["restores"] if r["changes"]}
        await request(client, methods.REWIND_COMMIT, {"token": impact["token"], "workspaceFolder": url})
        assert (project / "kept.txt").read_text() == "remote before\n"
    finally:
        await client.shutdown_session()
    # The server removed its tool socket and the directory holding it.
    created = next(e for e in events(log) if e["event"] == "new_session")
    socket_path = next(v["value"] for v in tool_server(created)["env"] if v["name"] == "MEVEDEL_TOOL_SOCKET")
    from pathlib import Path

    assert not Path(socket_path).parent.exists()


def test_mevedel_prompt_hosts_the_tools_too_and_rewind_restores_the_patch(tmp_path):
    """The CLI runs the engine in its own process: it hosts the tools the
    same way, and removes the socket when it exits."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from .test_agent_turns import AGENT

    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("before\n")
    log = tmp_path / "events.jsonl"
    script = tmp_path / "script.json"
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-before\n+after\n*** End Patch\n"
    script.write_text(json.dumps({"log": str(log), "turns": [[{"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": patch}}}]]}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def mevedel(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    done = mevedel("prompt", "Patch a.txt")
    assert done.returncode == 0, done.stderr
    assert "mcp ApplyPatch: M a.txt" in done.stdout, done.stdout
    assert (project / "a.txt").read_text() == "after\n"
    created = next(e for e in events(log) if e["event"] == "new_session")
    socket_path = next(v["value"] for v in tool_server(created)["env"] if v["name"] == "MEVEDEL_TOOL_SOCKET")
    assert not Path(socket_path).parent.exists()  # removed when the CLI exited

    rewound = mevedel("rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert (project / "a.txt").read_text() == "before\n"


async def test_a_project_patch_after_the_turn_ended_is_refused_and_changes_nothing(client, workspace):
    import asyncio

    from deadlines import ticks

    (workspace / "x.txt").write_text("untouched\n")
    trigger = workspace.parent / "turn-ended"
    patch = "*** Begin Patch\n*** Update File: x.txt\n@@\n-untouched\n+changed outside a turn\n*** End Patch\n"
    note = "*** Begin Patch\n*** Add File: work://shared/late.md\n+a late note\n*** End Patch\n"
    log = configure(client, workspace, [[
        {"later": {"when_exists": str(trigger), "steps": [
            {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": patch}}},
            {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": note}}},
        ]}},
        {"say": "done for now"},
    ]])
    result = await prompt(client, "Finish up")
    assert result["outcome"] == "completed"
    trigger.write_text("")
    for _ in ticks():
        if len(said(log, "ApplyPatch")) == 2:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the agent's late calls never finished: {events(log)[-3:]}")
    refused, noted = said(log, "ApplyPatch")
    assert refused.startswith("mcp ApplyPatch error: ") and "no turn of session" in refused, refused
    assert (workspace / "x.txt").read_text() == "untouched\n"
    # What needs no turn's checkpoint (the workspace's shared notes) still works.
    assert noted.startswith("mcp ApplyPatch: "), noted
    assert (workspace / ".mevedel" / "shared" / "late.md").read_text() == "a late note\n"


async def test_two_agents_at_once_each_reach_only_their_own_sessions_files(client, workspace):
    add = "*** Begin Patch\n*** Add File: work://note.md\n+{text}\n*** End Patch\n"
    log = configure(client, workspace, [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": add.format(text="the first agent's note")}}},
    ]])
    first = await prompt(client, "Note something")
    assert first["outcome"] == "completed"
    # The first session is open here: both share the project's files, which
    # the user accepts (the agents' own work:// files stay apart).
    questions = answering(client, "Start anyway")
    second_id = (await request(client, methods.SESSION_CREATE, {"name": "Second"}))["sessionId"]
    assert len(questions) == 1 and '"Note something" is open here' in questions[0].message
    configure(client, workspace, [[
        {"mcp_call": {"tool": "Read", "arguments": {"path": "work://note.md"}}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": add.format(text="the second agent's note")}}},
    ]])
    second = await prompt(client, "Note something else", sessionId=second_id)
    assert second["outcome"] == "completed" and second["sessionId"] != first["sessionId"]
    # Two agent processes, each with its own token; the first is still running.
    tokens = {token_of(e) for e in events(log) if e["event"] == "new_session"}
    assert len(tokens) == 2
    (read,) = said(log, "Read")
    assert read.startswith("mcp Read error: ") and "first agent" not in read, read
    sessions = workspace / ".mevedel" / "sessions"
    assert (sessions / first["sessionId"] / "local" / "note.md").read_text() == "the first agent's note\n"
    assert (sessions / second_id / "local" / "note.md").read_text() == "the second agent's note\n"


def test_mevedel_prompt_on_an_ssh_workspace_patches_there_through_the_tools(openssh_server, tmp_path):
    import os
    import subprocess
    import sys

    from ssh_fixtures import ALIAS

    from .test_agent_turns import AGENT
    from .test_ssh_workspace import ssh_home

    project = tmp_path / "remote project"
    project.mkdir()
    (project / "a.txt").write_text("before\n")
    log = tmp_path / "events.jsonl"
    script = tmp_path / "script.json"
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-before\n+after over ssh\n*** End Patch\n"
    script.write_text(json.dumps({"log": str(log), "turns": [[
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": patch}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "work://"}}},
    ]]}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))
    env = {**os.environ, "HOME": str(ssh_home(tmp_path, openssh_server)), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    url = f"ssh://{ALIAS}{project}"

    def mevedel(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", url], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    done = mevedel("prompt", "Patch a.txt")
    assert done.returncode == 0, done.stderr
    assert "mcp ApplyPatch: M a.txt" in done.stdout, done.stdout
    (read,) = said(log, "Read")
    assert read.startswith("mcp Read: "), read  # the session's work:// listing, over there
    assert (project / "a.txt").read_text() == "after over ssh\n"
    rewound = mevedel("rewind", "1", "--before", "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert (project / "a.txt").read_text() == "before\n"


def test_an_agent_under_mevedel_prompt_reads_the_clis_mcp_servers_through_the_tools(tmp_path):
    """The CLI's configured MCP servers are the agent's mcp:// too, and are
    stopped when the CLI exits."""
    import os
    import subprocess
    import sys

    from .test_agent_turns import AGENT

    server = Path(__file__).resolve().parents[1] / "mcp_servers" / "scripted_server.py"
    project = tmp_path / "project"
    project.mkdir()
    log = tmp_path / "events.jsonl"
    script = tmp_path / "script.json"
    marker = tmp_path / "server-started"
    read = {"mcp_call": {"tool": "Read", "arguments": {"path": "mcp://scripted/test%3A%2F%2Fpid"}}}
    script.write_text(json.dumps({"log": str(log), "turns": [[read]]}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({
        "agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}},
        "mcpServers": {"scripted": {"command": sys.executable, "args": [str(server), "--marker", str(marker)]}},
    }))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "prompt", "Which process answers?"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "mcp Read:" in done.stdout and "pid " in done.stdout, done.stdout
    answered = int(done.stdout.split("pid ", 1)[1].split()[0])
    assert marker.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(answered, 0)  # the server went with the CLI
