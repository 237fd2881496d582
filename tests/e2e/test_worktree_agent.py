"""A Worktree Fork's agent works in the fork's checkout, through the real
server (``mevedel/worktreeFork/*``, ``mevedel/turn/prompt``,
``mevedel/rewind/*``) driving the scripted ACP agent: what it writes
through ``fs/*`` and its shell command land in ``.worktrees/wt1``, the main
checkout is untouched, and a Rewind of the child restores the worktree.
Locally and on an SSH workspace (a real OpenSSH server on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lsprotocol import types

from mevedel_protocol import methods

from .conftest import request
from .test_agent_turns import AGENT, Watch, events, prompt


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def repository(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "a.txt").write_text("zero\n")
    (root / "b.txt").write_text("b\n")
    git(root, "add", "a.txt", "b.txt")
    git(root, "commit", "-qm", "base")


def script(root: Path, steps: list) -> tuple[dict, Path]:
    """The agent's settings, its script's one turn being ``steps`` (an
    agent process reads it when it starts: each session has its own)."""
    log = root.parent / "agent-events.jsonl"
    path = root.parent / "script.json"
    path.write_text(json.dumps({"log": str(log), "turns": [steps]}))
    return {"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(path)]}}, "defaultAgent": "scripted"}, log


SOURCE_TURN = [{"write": {"path": "a.txt", "content": "one\n"}}]
CHILD_TURN = [
    {"write": {"path": "w.txt", "content": "in the worktree\n"}},
    {"terminal": {"command": "sh", "args": ["-c", "pwd; echo new > made.txt; rm b.txt; echo more >> a.txt"]}},
    {"write": {"path": "../../a.txt", "content": "escaped\n"}},
    {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": "*** Begin Patch\n*** Add File: sub/p.txt\n+by patch\n*** End Patch\n"}}},
    {"mcp_call": {"tool": "Glob", "arguments": {"pattern": "**/*.txt"}}},
]


async def work_in_a_worktree_fork(client, main: Path, log: Path, **folder) -> None:
    first = await prompt(client, "one", **folder)
    source = first["sessionId"]
    impact = await request(client, methods.WORKTREE_FORK_PREPARE, {"turn": 1, "name": "wt1", "sessionId": source, **folder})
    assert impact["worktree"]["directory"] == ".worktrees/wt1" and impact["restores"] == [".worktrees/wt1/a.txt"]
    committed = await request(client, methods.WORKTREE_FORK_COMMIT, {"token": impact["token"], "sessionId": source, **folder})
    child = committed["session"]["sessionId"]
    worktree = main / ".worktrees" / "wt1"
    main_before = {name: (main / name).read_text() for name in ("a.txt", "b.txt")}

    script(main, CHILD_TURN)  # the child's agent process starts with its first prompt
    watch = Watch(client)
    turn = await prompt(client, "in the worktree", sessionId=child, **folder)
    assert turn["outcome"] == "completed", turn
    said = watch.text()
    assert f"ran: exit 0\n{worktree}\n" in said
    (refusal,) = [e["error"] for e in events(log) if e["event"] == "client_response" and "error" in e]
    assert "write ../../a.txt failed" in said and "outside the session's working directory" in json.dumps(refusal["data"])
    assert [e["params"]["cwd"] for e in events(log) if e["event"] == "new_session"][-1] == str(worktree)
    assert (worktree / "w.txt").read_text() == "in the worktree\n" and (worktree / "made.txt").read_text() == "new\n"
    assert (worktree / "a.txt").read_text() == "one\nmore\n" and not (worktree / "b.txt").exists()
    assert {name: (main / name).read_text() for name in ("a.txt", "b.txt")} == main_before
    assert not (main / "w.txt").exists() and not (main / "made.txt").exists()
    assert (worktree / "sub" / "p.txt").read_text() == "by patch\n" and not (main / "sub").exists()
    (globbed,) = [e["text"] for e in events(log) if e["event"] == "mcp_result" and e["tool"] == "Glob"]
    assert "sub/p.txt" in globbed and "w.txt" in globbed and ".worktrees" not in globbed
    sent = json.dumps([e for e in events(log) if e["event"] == "prompt"][-1]["params"])
    assert f"Worktree Fork of session {source}, forked after its turn 1" in sent and "did not change any file" not in sent

    rewind = await request(client, methods.REWIND_PREPARE, {"turn": 2, "boundary": "before", "sessionId": child, **folder})
    restored = {r["path"] for r in rewind["restores"] if r["changes"]}
    assert {".worktrees/wt1/w.txt", ".worktrees/wt1/made.txt", ".worktrees/wt1/a.txt", ".worktrees/wt1/b.txt",
            ".worktrees/wt1/sub/p.txt"} <= restored
    assert not {"a.txt", "b.txt", "w.txt", "made.txt"} & restored
    await request(client, methods.REWIND_COMMIT, {"token": rewind["token"], "sessionId": child, **folder})
    assert (worktree / "a.txt").read_text() == "one\n" and (worktree / "b.txt").read_text() == "b\n"
    assert not (worktree / "w.txt").exists() and not (worktree / "made.txt").exists() and not (worktree / "sub").exists()
    assert {name: (main / name).read_text() for name in ("a.txt", "b.txt")} == main_before

    # Redo brings the turn back, in the worktree too.
    heads = await request(client, methods.REDO_LIST, {"sessionId": child, **folder})
    undone = next(h for h in heads["states"] if h["turnCount"] == 2)
    redo = await request(client, methods.REDO_PREPARE, {"publicationId": undone["publicationId"], "sessionId": child, **folder})
    await request(client, methods.REDO_COMMIT, {"token": redo["token"], "sessionId": child, **folder})
    assert (worktree / "w.txt").read_text() == "in the worktree\n" and (worktree / "a.txt").read_text() == "one\nmore\n"
    assert not (worktree / "b.txt").exists() and (worktree / "sub" / "p.txt").read_text() == "by patch\n"
    assert {name: (main / name).read_text() for name in ("a.txt", "b.txt")} == main_before
    assert not (main / "w.txt").exists() and not (main / "sub").exists()


async def test_a_worktree_forks_agent_works_in_its_checkout_and_rewind_restores_it(client, workspace):
    repository(workspace)
    settings, log = script(workspace, SOURCE_TURN)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))
    await work_in_a_worktree_fork(client, workspace, log)


async def test_on_an_ssh_workspace_a_worktree_forks_agent_works_in_its_checkout(openssh_server, tmp_path):
    from ssh_fixtures import ALIAS

    from .test_ssh_workspace import remote_params, server_config, ssh_home

    main = tmp_path / "remote project"
    repository(main)
    url = f"ssh://{ALIAS}{main}"
    settings, log = script(main, SOURCE_TURN)
    client = await server_config(ssh_home(tmp_path, openssh_server)).start()
    try:
        await client.initialize_session(remote_params(url, **settings))
        await work_in_a_worktree_fork(client, main, log, workspaceFolder=url)
    finally:
        await client.shutdown_session()
