"""A Worktree Fork's agent works in the fork's checkout, through the CLI as
a person runs it: ``mevedel prompt "one"``, ``mevedel fork 1 --worktree
--name wt1 --yes``, then ``mevedel prompt --session CHILD ...``. The
scripted ACP agent (a real subprocess on the official SDK) writes through
``fs/*``, runs a shell command and calls the ``mevedel mcp`` tools with
plain relative paths: everything lands in ``.worktrees/wt1``, nothing in
the main checkout, attempts to leave the checkout are refused, the first
prompt says where the fork came from, and a Rewind of the child restores
the worktree (never the main checkout). Locally and over SSH (a real
OpenSSH server on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"

PATCH = """*** Begin Patch
*** Update File: a.txt
@@
 one
+patched
*** Add File: sub/p.txt
+added by patch
*** End Patch
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def repository(root: Path) -> None:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "a.txt").write_text("zero\n")
    (root / "b.txt").write_text("b\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")


class Cli:
    def __init__(self, tmp_path: Path, cwd: Path, workspace: str | None = None, home: Path | None = None) -> None:
        self.tmp = tmp_path
        self.cwd = cwd
        self.workspace = workspace
        self.log = tmp_path / "agent-events.jsonl"
        self.env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
        if home is not None:
            self.env["HOME"] = str(home)

    def script(self, steps: list) -> None:
        """The agent's one turn (each CLI prompt starts a new agent process)."""
        script = self.tmp / "script.json"
        script.write_text(json.dumps({"log": str(self.log), "turns": [steps]}))
        config = self.tmp / "config" / "mevedel" / "config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(script)]}}}))

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        where = ["--workspace", self.workspace] if self.workspace else []
        done = subprocess.run(
            [sys.executable, "-m", "mevedel_server.cli", *args, *where], cwd=self.cwd, env=self.env,
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def events(self, kind: str) -> list[dict]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [e for e in map(json.loads, lines) if e["event"] == kind]


def tree(root: Path) -> dict[str, bytes]:
    """Every file of a checkout but git's and mevedel's own and the worktrees."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".mevedel", ".worktrees")]
        for name in files:
            full = Path(directory) / name
            found[str(full.relative_to(root))] = full.read_bytes()
    return found


def fork_a_worktree(cli: Cli, main: Path) -> tuple[str, str]:
    cli.script([{"write": {"path": "a.txt", "content": "one\n"}}, {"say": "done one"}])
    first = cli("prompt", "one", "--json")
    assert first.returncode == 0, first.stderr
    source = json.loads(first.stdout)["session_id"]
    forked = cli("fork", "1", "--worktree", "--name", "wt1", "--yes", "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)
    assert child["worktree"]["directory"] == ".worktrees/wt1" and child["worktree"]["branch"] == "mevedel/wt1"
    assert (main / ".worktrees" / "wt1" / "a.txt").read_text() == "one\n"
    return source, child["session_id"]


def work_in_the_worktree(cli: Cli, main: Path, child: str, agent_root: str) -> str:
    """The child's turn: fs/* writes, a shell command and the tools, all
    with plain relative paths, plus every way out of the checkout."""
    worktree = main / ".worktrees" / "wt1"
    (worktree / "up").symlink_to("../..")  # a link in the checkout to the main checkout
    outside = f"{agent_root}/a.txt"
    cli.script([
        {"echo_prompt": True},
        {"write": {"path": "w.txt", "content": "in the worktree\n"}},
        {"terminal": {"command": "sh", "args": ["-c", "pwd; echo new > made.txt; rm b.txt; echo more >> a.txt"]}},
        {"mcp_tools": {}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": PATCH}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": "sub/p.txt"}}},
        {"mcp_call": {"tool": "Glob", "arguments": {"pattern": "**/*.txt"}}},
        # Every way out of the checkout is refused.
        {"write": {"path": "../../a.txt", "content": "escaped\n"}},
        {"write": {"path": outside, "content": "escaped\n"}},
        {"write": {"path": "up/b.txt", "content": "escaped\n"}},
        {"terminal": {"command": "pwd", "cwd": "../.."}},
        {"mcp_call": {"tool": "ApplyPatch", "arguments": {"patch": "*** Begin Patch\n*** Add File: ../../x.txt\n+x\n*** End Patch\n"}}},
        {"mcp_call": {"tool": "Read", "arguments": {"path": outside}}},
    ])
    done = cli("prompt", "--session", child, "in the worktree")
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_the_turn(cli: Cli, main: Path, source: str, said: str, agent_root: str, main_before: dict) -> None:
    worktree = main / ".worktrees" / "wt1"
    agent_worktree = f"{agent_root}/.worktrees/wt1"
    # The agent's session was opened in the worktree, and the shell ran there.
    (opened,) = cli.events("new_session")[-1:]
    assert opened["params"]["cwd"] == agent_worktree
    assert f"ran: exit 0\n{agent_worktree}\n" in said
    # Everything it did is in the worktree...
    assert (worktree / "w.txt").read_text() == "in the worktree\n"
    assert (worktree / "made.txt").read_text() == "new\n" and not (worktree / "b.txt").exists()
    assert (worktree / "a.txt").read_text() == "one\npatched\nmore\n"
    assert (worktree / "sub" / "p.txt").read_text() == "added by patch\n"
    # ... and nothing in the main checkout.
    assert tree(main) == main_before
    # The tools tell the model where plain paths are, and name files relative to the worktree.
    assert "This session works in its own Git worktree, .worktrees/wt1: plain paths are relative to it" in said
    results = {e["tool"]: e["text"] for e in cli.events("mcp_result")}
    reads = [e["text"] for e in cli.events("mcp_result") if e["tool"] == "Read"]
    assert "added by patch" in reads[0]
    assert "sub/p.txt" in results["Glob"] and "w.txt" in results["Glob"] and ".worktrees" not in results["Glob"]
    # Every way out was refused, naming why.
    assert "write ../../a.txt failed" in said and "write up/b.txt failed" in said and "terminal failed" in said
    refusals = [(e["method"], e["params"].get("path") or e["params"].get("cwd"), json.dumps(e["error"]))
                for e in cli.events("client_response") if "error" in e]
    assert len(refusals) == 4, refusals
    for method, path, why in refusals:
        if path.endswith("/up/b.txt"):
            assert "link" in why, why  # the target refuses the link, not the lexical check
        else:
            assert "outside the session's working directory" in why, (method, path, why)
    patches = [e["text"] for e in cli.events("mcp_result") if e["tool"] == "ApplyPatch"]
    assert patches[0].startswith("mcp ApplyPatch: ") and "error" in patches[1] and "outside" in patches[1]
    assert reads[1].startswith("mcp Read error") and "outside" in reads[1]
    # The first prompt said where the fork came from and what it restored.
    prompt = json.dumps(cli.events("prompt")[-1]["params"])
    assert f"Worktree Fork of session {source}, forked after its turn 1" in prompt
    assert ".worktrees/wt1" in prompt and "mevedel/wt1" in prompt
    assert "restored in the worktree to their state after that turn: a.txt" in prompt
    assert "did not change any file" not in prompt


def check_the_rewind(cli: Cli, main: Path, child: str, main_before: dict) -> None:
    worktree = main / ".worktrees" / "wt1"
    rewound = cli("rewind", "2", "--before", "--session", child, "--yes")
    assert rewound.returncode == 0, rewound.stderr
    assert (worktree / "a.txt").read_text() == "one\n" and (worktree / "b.txt").read_text() == "b\n"
    assert not (worktree / "w.txt").exists() and not (worktree / "made.txt").exists() and not (worktree / "sub").exists()
    assert tree(main) == main_before


def test_a_worktree_forks_agent_works_in_its_checkout_and_rewind_restores_it_there(tmp_path):
    main = tmp_path / "project"
    repository(main)
    cli = Cli(tmp_path, main)
    source, child = fork_a_worktree(cli, main)
    main_before = tree(main)
    said = work_in_the_worktree(cli, main, child, str(main))
    check_the_turn(cli, main, source, said, str(main), main_before)
    check_the_rewind(cli, main, child, main_before)
    # The source session, prompted again, still works in the main checkout.
    cli.script([{"write": {"path": "c.txt", "content": "main\n"}}, {"terminal": {"command": "pwd"}}])
    again = cli("prompt", "--session", source, "back in main")
    assert again.returncode == 0 and f"ran: exit 0\n{main}\n" in again.stdout
    assert (main / "c.txt").read_text() == "main\n" and not (main / ".worktrees" / "wt1" / "c.txt").exists()


def test_a_worktree_fork_whose_checkout_is_gone_is_not_started_elsewhere(tmp_path):
    main = tmp_path / "project"
    repository(main)
    cli = Cli(tmp_path, main)
    _source, child = fork_a_worktree(cli, main)
    git(main, "worktree", "remove", "--force", ".worktrees/wt1")
    before = tree(main)
    cli.script([{"write": {"path": "w.txt", "content": "where?\n"}}])
    refused = cli("prompt", "--session", child, "in the worktree")
    assert refused.returncode != 0
    assert "working directory .worktrees/wt1" in refused.stderr and "does not exist" in refused.stderr
    assert tree(main) == before and not cli.events("prompt")[1:]


@pytest.mark.usefixtures("openssh_server")
def test_over_ssh_a_worktree_forks_agent_works_in_its_checkout_and_rewind_restores_it_there(tmp_path, openssh_server):
    from e2e.test_ssh_workspace import ssh_home
    from ssh_fixtures import ALIAS

    main = tmp_path / "remote project"
    repository(main)
    home = ssh_home(tmp_path, openssh_server)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli = Cli(tmp_path, elsewhere, workspace=f"ssh://{ALIAS}{main}", home=home)
    source, child = fork_a_worktree(cli, main)
    main_before = tree(main)
    said = work_in_the_worktree(cli, main, child, str(main))
    check_the_turn(cli, main, source, said, str(main), main_before)
    check_the_rewind(cli, main, child, main_before)


async def test_mevedel_mcp_bound_to_a_worktree_fork_reads_and_writes_its_checkout(tmp_path):
    """``mevedel mcp --session CHILD`` (an agent mevedel does not drive)
    takes plain paths as the fork's own agent does: its checkout's."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    main = tmp_path / "project"
    repository(main)
    cli = Cli(tmp_path, main)
    _source, child = fork_a_worktree(cli, main)
    (main / ".worktrees" / "wt1" / "only.txt").write_text("only in the checkout\n")
    before = tree(main)
    server = StdioServerParameters(command=sys.executable, args=["-m", "mevedel_server.cli", "mcp", "--workspace", str(main), "--session", child],
                                   env=cli.env)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            assert "own Git worktree, .worktrees/wt1" in (initialized.instructions or "")

            async def text(tool: str, **arguments) -> tuple[bool, str]:
                result = await session.call_tool(tool, arguments)
                return bool(result.isError), result.content[0].text

            assert "only in the checkout" in (await text("Read", path="only.txt"))[1]
            failed, said = await text("ApplyPatch", patch="*** Begin Patch\n*** Add File: new.txt\n+in the checkout\n*** End Patch\n")
            assert not failed and said == "A new.txt", said
            failed, said = await text("Read", path=str(main / "b.txt"))
            assert failed and "outside the session's working directory .worktrees/wt1" in said
    assert (main / ".worktrees" / "wt1" / "new.txt").read_text() == "in the checkout\n"
    assert tree(main) == before


def test_a_conversation_fork_of_a_worktree_fork_keeps_working_in_its_checkout(tmp_path):
    """The spec: a Conversation Fork keeps the source's working directory;
    of a Worktree Fork, that is its checkout, never the main one."""
    main = tmp_path / "project"
    repository(main)
    cli = Cli(tmp_path, main)
    _source, child = fork_a_worktree(cli, main)
    cli.script([{"say": "looked"}])
    assert cli("prompt", "--session", child, "look").returncode == 0
    forked = cli("fork", "2", "--session", child, "--yes", "--json")
    assert forked.returncode == 0, forked.stderr
    grandchild = json.loads(forked.stdout)["session_id"]
    before = tree(main)
    cli.script([{"write": {"path": "g.txt", "content": "grandchild\n"}}, {"terminal": {"command": "pwd"}}])
    done = cli("prompt", "--session", grandchild, "where am I")
    assert done.returncode == 0, done.stderr
    worktree = main / ".worktrees" / "wt1"
    assert f"ran: exit 0\n{worktree}\n" in done.stdout
    assert (worktree / "g.txt").read_text() == "grandchild\n" and tree(main) == before
    prompt = json.dumps(cli.events("prompt")[-1]["params"])
    assert f"forked from session {child} after its turn 2. The fork did not change any file" in prompt
    assert "this one works in the Git worktree .worktrees/wt1" in prompt
