"""``mevedel mcp`` (standalone) driven over stdio by the official ``mcp``
client: the tools and their schemas, each tool on addresses and on plain
workspace paths, errors as tool results (the server stays up), links and
FIFOs, write authority, the roster, and oversized output saved as
``artifact://``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from .conftest import write_file

SECRET = "top-secret-outside-the-workspace"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_file(root / "src" / "app.py", "import os\n\ndef main():\n    return 'hello tool server'\n")
    write_file(root / "README.md", "# Project\nhello readme\n")
    write_file(root / "long.txt", "short\n" + "x" * 2500 + "END\n")
    write_file(root / ".mevedel" / "shared" / "notes.md", "# Notes\nhello shared note\n")
    write_file(root / ".git" / "config", "[core]\n")
    return root


def _cli(workspace: Path, state: Path, *args: str, stdin: str | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args],
        cwd=workspace,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _session(workspace: Path, state: Path) -> str:
    """A saved session whose lease the CLI client of ``state`` holds."""
    begun = _cli(workspace, state, "turn", "begin", "--new", "--name", "Tools", "-", "--json", stdin="look around\n")
    _cli(workspace, state, "turn", "append", "response", "--text", "I looked at the roster.", "--json")
    _cli(workspace, state, "turn", "settle", "--json")
    return begun["session_id"]


def _params(workspace: Path, state: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mevedel_server.cli", "mcp", "--workspace", str(workspace), *args],
        # The CLI's config.json (mcpServers) is this test's own, beside its state.
        env={**os.environ, "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(state.parent / "config")},
    )


@contextlib.asynccontextmanager
async def served(workspace: Path, state: Path, *args: str) -> AsyncIterator[tuple[ClientSession, str]]:
    async with stdio_client(_params(workspace, state, *args)) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            yield session, initialized.instructions or ""


async def call(session: ClientSession, name: str, **arguments) -> tuple[bool, str]:
    result = await session.call_tool(name, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text"
    return bool(result.isError), result.content[0].text


async def ok(session: ClientSession, name: str, **arguments) -> str:
    failed, text = await call(session, name, **arguments)
    assert not failed, text
    return text


async def error(session: ClientSession, name: str, **arguments) -> str:
    failed, text = await call(session, name, **arguments)
    assert failed, text
    assert "Traceback" not in text
    return text


def envelope(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def add(path: str, *lines: str) -> str:
    return f"*** Add File: {path}\n" + "".join(f"+{line}\n" for line in lines)


async def test_the_tools_are_listed_with_their_schemas_and_no_resources(workspace, tmp_path):
    async with served(workspace, tmp_path / "state") as (session, _roster):
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert sorted(tools) == ["ApplyPatch", "Glob", "Grep", "Read"]
        assert tools["Read"].inputSchema["required"] == ["path"]
        assert set(tools["Read"].inputSchema["properties"]) == {"path", "offset", "limit", "char_offset"}
        assert tools["Glob"].inputSchema["required"] == ["pattern"]
        assert {"pattern", "path", "glob", "ignore_case", "limit", "context_lines"} == set(tools["Grep"].inputSchema["properties"])
        assert tools["ApplyPatch"].inputSchema["required"] == ["patch"]
        assert "*** Begin Patch" in (tools["ApplyPatch"].description or "")
        for tool in tools.values():
            assert tool.inputSchema["additionalProperties"] is False
        # Addresses are not MCP resources: none is published.
        capabilities = session.get_server_capabilities()
        assert capabilities is not None and capabilities.resources is None


async def test_read_glob_grep_on_plain_paths_and_addresses(workspace, tmp_path):
    async with served(workspace, tmp_path / "state") as (session, _roster):
        assert await ok(session, "Read", path="src/app.py") == (
            "     1\timport os\n     2\t\n     3\tdef main():\n     4\t    return 'hello tool server'"
        )
        # Absolute inside the workspace, and ./ spellings, read the same file.
        assert "hello tool server" in await ok(session, "Read", path=str(workspace / "src" / "app.py"))
        assert "hello tool server" in await ok(session, "Read", path="./src/../src/app.py", offset=4)
        listing = await ok(session, "Read", path=".")
        assert listing.splitlines() == ["     1\tREADME.md", "     2\tlong.txt", "     3\tsrc/"]  # no .git, no .mevedel
        assert "hello shared note" in await ok(session, "Read", path="work://shared/notes.md")
        assert "mevedel://architecture.md" in await ok(session, "Read", path="mevedel://")

        assert (await ok(session, "Glob", pattern="**/*.py")).splitlines() == ["src/app.py"]
        assert (await ok(session, "Glob", pattern="*.md", path="work://shared")).splitlines() == ["work://shared/notes.md"]

        found = await ok(session, "Grep", pattern="hello")
        assert found.splitlines()[:2] == ["README.md:2:1: hello readme", "src/app.py:4:13: return 'hello tool server'"] or (
            "README.md:2:1: hello readme" in found and "src/app.py:4:" in found
        )
        assert "work://shared" not in found  # the project walk does not enter .mevedel
        shared = await ok(session, "Grep", pattern="hello", path="work://shared/")
        assert shared.splitlines()[0] == "work://shared/notes.md:2:1: hello shared note"
        # A Grep line number is the Read line number.
        assert await ok(session, "Read", path="src/app.py", offset=4, limit=1) == "     4\t    return 'hello tool server'"
        docs = await ok(session, "Grep", pattern="ApplyPatch", path="mevedel://", limit=1)
        assert docs.startswith("mevedel://")


async def test_paging_gives_executable_retries(workspace, tmp_path):
    async with served(workspace, tmp_path / "state") as (session, _roster):
        page = await ok(session, "Read", path="long.txt", limit=1)
        assert page.splitlines()[0] == "     1\tshort"
        assert "next page: Read long.txt offset=2" in page
        long_line = await ok(session, "Read", path="long.txt", offset=2)
        assert "line 2 continues: Read long.txt offset=2 char_offset=2000" in long_line
        rest = await ok(session, "Read", path="long.txt", offset=2, char_offset=2000)
        assert rest.splitlines()[0] == "     2\t" + "x" * 500 + "END"
        past = await error(session, "Read", path="src/app.py", offset=40, limit=3)
        assert past == "src/app.py: out-of-range: offset 40 is past the last line (1-4); retry Read src/app.py offset=2 limit=3"
        retried = await ok(session, "Read", path="src/app.py", offset=2, limit=3)
        assert retried.splitlines()[-1] == "     4\t    return 'hello tool server'"


async def test_bad_arguments_and_malformed_patches_are_tool_errors_and_the_server_stays_up(workspace, tmp_path):
    async with served(workspace, tmp_path / "state") as (session, _roster):
        assert await error(session, "Read") == "Read: the argument 'path' is required"
        assert await error(session, "Read", path=7) == "Read: the argument 'path' must be a string, not int"
        assert "offset 0 is invalid" in await error(session, "Read", path="README.md", offset=0)
        assert "must be a whole number" in await error(session, "Read", path="README.md", limit="many")
        assert "unknown argument 'file_path'" in await error(session, "Read", path="README.md", file_path="x")
        assert "not a valid regular expression" in await error(session, "Grep", pattern="(unclosed")
        assert await error(session, "Frobnicate") == "unknown tool 'Frobnicate'; the tools are Read, Glob, Grep, ApplyPatch"
        assert "invalid-patch" in await error(session, "ApplyPatch", patch="please change the file")
        assert "invalid-patch" in await error(session, "ApplyPatch", patch="*** Begin Patch\n*** Frobnicate: x\n")
        assert "unknown-scheme" in await error(session, "Read", path="http://example.com/x")
        assert "malformed-address" in await error(session, "Read", path="work://../etc/passwd")
        missing = await error(session, "Read", path="work://shared/nope.md")
        assert missing == "work://shared/nope.md: missing-target: does not exist; Read work://shared lists what exists"
        assert "find the right path with Glob" in await error(session, "Read", path="src/nope.py")
        outside = await error(session, "Read", path="/etc/passwd")
        assert outside.startswith("/etc/passwd: containment: is outside the workspace")
        assert "outside the workspace" in await error(session, "Glob", pattern="*", path="../")
        # Still serving.
        assert "hello readme" in await ok(session, "Read", path="README.md")


async def test_links_and_fifos_leak_nothing_and_hang_nothing(workspace, tmp_path):
    outside = tmp_path / "outside"
    write_file(outside / "secret.txt", SECRET + "\n")
    (workspace / "src" / "leak.txt").symlink_to(outside / "secret.txt")
    (workspace / "linked-dir").symlink_to(outside)
    os.mkfifo(workspace / "src" / "pipe")
    state = tmp_path / "state"
    sid = _session(workspace, state)
    async with served(workspace, state, "--session", sid) as (session, _roster):
        for path in ("src/leak.txt", "linked-dir/secret.txt", str(workspace / "linked-dir" / "secret.txt")):
            text = await error(session, "Read", path=path)
            assert SECRET not in text and str(outside) not in text
            assert "symbolic link" in text
        assert "is not a regular file" in await error(session, "Read", path="src/pipe")
        assert "is not a regular file" in await error(session, "Grep", pattern=".", path="src/pipe")
        fifo_patch = envelope("*** Update File: src/pipe\n@@\n-x\n+y\n")
        assert "is not a regular file" in await error(session, "ApplyPatch", patch=fifo_patch)
        everything = await ok(session, "Grep", pattern="secret|.", limit=5000)
        assert SECRET not in everything and "leak.txt" not in everything and "pipe" not in everything
        listed = await ok(session, "Glob", pattern="**/*")
        assert "leak.txt" not in listed and "linked-dir" not in listed and "pipe" not in listed
        # Writes through a link are refused; nothing outside changes.
        refused = await error(session, "ApplyPatch", patch=envelope(add("linked-dir/new.txt", "x")))
        assert "symbolic link" in refused and str(outside) not in refused
        update = "*** Update File: src/leak.txt\n@@\n-" + SECRET + "\n+changed\n"
        assert SECRET not in await error(session, "ApplyPatch", patch=envelope(update))
        assert (outside / "secret.txt").read_text() == SECRET + "\n"
        assert not (outside / "new.txt").exists()


async def test_writes_need_the_session_held_here(workspace, tmp_path):
    me, other = tmp_path / "me", tmp_path / "other"
    sid = _session(workspace, me)
    session_dir = workspace / ".mevedel" / "sessions" / sid
    # Another client's session, its lease live (just taken), is served read-only:
    # every write refused, nothing created.
    async with served(workspace, other, "--session", sid) as (session, roster):
        assert "work://" in roster
        assert "I looked at the roster." in await ok(session, "Read", path="history://root")
        for patch in (envelope(add("work://plan.md", "p")), envelope(add("src/new.py", "x"))):
            text = await error(session, "ApplyPatch", patch=patch)
            assert f"session {sid} is not open for writing by this client" in text
        assert not (session_dir / "local").exists() and not (workspace / "src" / "new.py").exists()
    # Without a session: the shared scope is writable, project files are not.
    async with served(workspace, me) as (session, _roster):
        refused = await error(session, "ApplyPatch", patch=envelope(add("work://shared/a.md", "a"), add("src/new.py", "x")))
        assert refused.startswith("src/new.py: owner-missing: no session is open")
        assert not (workspace / "src" / "new.py").exists() and not (workspace / ".mevedel" / "shared" / "a.md").exists()
        assert "A work://shared/a.md" == await ok(session, "ApplyPatch", patch=envelope(add("work://shared/a.md", "a")))
    # The holder writes project and session files in one patch.
    async with served(workspace, me, "--session", sid) as (session, _roster):
        patch = envelope(add("work://plan.md", "step one"), add("src/new.py", "print('new')"))
        assert await ok(session, "ApplyPatch", patch=patch) == "A work://plan.md\nA src/new.py"
        assert (session_dir / "local" / "plan.md").read_text() == "step one\n"
        assert (workspace / "src" / "new.py").read_text() == "print('new')\n"
        update = "*** Update File: src/new.py\n@@\n-print('new')\n+print('changed')\n*** Update File: work://plan.md\n@@\n-step one\n+step two\n"
        assert await ok(session, "ApplyPatch", patch=envelope(update)) == "M src/new.py\nM work://plan.md"
        # .git and .mevedel are never project files.
        for path in (".git/hooks/post-checkout", ".mevedel/sessions/x.md", str(workspace / ".git" / "config")):
            assert "cannot be patched" in await error(session, "ApplyPatch", patch=envelope(add(path, "x")))
        # All or nothing: a failing change leaves the good one unapplied.
        bad = envelope(add("src/fresh.py", "x"), "*** Update File: README.md\n@@\n-no such line\n+x\n")
        await error(session, "ApplyPatch", patch=bad)
        assert not (workspace / "src" / "fresh.py").exists()
        assert (workspace / "README.md").read_text() == "# Project\nhello readme\n"


async def test_grep_and_glob_counts_agree_in_number(workspace, tmp_path):
    async with served(workspace, tmp_path / "state") as (session, _roster):
        assert await ok(session, "Grep", pattern="hello readme") == (
            "README.md:2:1: hello readme\n-- 1 matching line in 1 file (3 searched)"
        )
        assert (await ok(session, "Grep", pattern="hello")).endswith("\n-- 2 matching lines in 2 files (3 searched)")
        assert await ok(session, "Grep", pattern="absent", path="README.md") == "no match below README.md (1 file searched)"
        cut = await ok(session, "Grep", pattern="hello", limit=1)
        assert "showing the first matching line;" in cut and "first 1 " not in cut
        cut = await ok(session, "Glob", pattern="**/*", limit=1)
        assert "showing the first match;" in cut and "first 1 " not in cut


async def test_a_cut_report_says_so_once_and_skipped_files_agree_in_number(workspace, tmp_path):
    """A Grep or Glob cut at its limit says so in one line, the one that
    says how to see more; the non-text files Grep skipped are counted as
    its other counts are."""
    async with served(workspace, tmp_path / "state") as (session, _roster):
        cut = (await ok(session, "Grep", pattern="hello", limit=1)).splitlines()
        assert len(cut) == 3 and cut[1].startswith("-- 1 matching line in 1 file (") and cut[1].endswith(" searched)"), cut
        assert cut[2] == "-- showing the first matching line; narrow the pattern or raise limit", cut
        listed = (await ok(session, "Glob", pattern="**/*", limit=1)).splitlines()
        assert len(listed) == 2 and listed[1] == "-- showing the first match; narrow the pattern or raise limit", listed
        (workspace / "logo.bin").write_bytes(b"\x00\x01hello\x00")
        found = await ok(session, "Grep", pattern="hello")
        assert "\n-- 1 non-text file skipped: logo.bin" in found, found
        (workspace / "photo.bin").write_bytes(b"\x00\x02")
        found = await ok(session, "Grep", pattern="hello")
        assert "\n-- 2 non-text files skipped: " in found, found


async def test_applypatch_names_each_file_by_its_workspace_path_or_address(workspace, tmp_path):
    """However the patch spells a file (absolute, ./ and .., a plain path),
    the result names it as Grep and Glob do."""
    state = tmp_path / "me"
    sid = _session(workspace, state)
    async with served(workspace, state, "--session", sid) as (session, _roster):
        patch = envelope(
            add(f"{workspace}/src/abs.py", "x = 1"),
            add("./docs/../notes.md", "n"),
            f"*** Update File: {workspace}/README.md\n*** Move to: ./doc/README.md\n@@\n-hello readme\n+hello moved\n",
            add("work://plan.md", "p"),
        )
        assert await ok(session, "ApplyPatch", patch=patch) == (
            "A src/abs.py\nA notes.md\nR README.md -> doc/README.md\nA work://plan.md"
        )
        assert (await ok(session, "Glob", pattern="**/*.md")).splitlines() == ["doc/README.md", "notes.md"]
        assert await ok(session, "ApplyPatch", patch=envelope(f"*** Delete File: {workspace}/src/./abs.py\n")) == "D src/abs.py"


async def test_an_unknown_session_is_refused_and_nothing_is_created(workspace, tmp_path):
    unknown = "2026-01-01T00-00-0123456789ab"
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", "mcp", "--workspace", str(workspace), "--session", unknown],
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert unknown in done.stderr and "Traceback" not in done.stderr
    assert not (workspace / ".mevedel" / "sessions").exists()


async def test_the_roster_says_what_is_usable_now(workspace, tmp_path):
    state = tmp_path / "state"
    async with served(workspace, state) as (session, without):
        pass
    sid = _session(workspace, state)
    async with served(workspace, state, "--session", sid) as (session, with_session):
        assert "hello" in await ok(session, "Read", path="README.md")
    for roster in (without, with_session):
        assert "- mevedel://" in roster and "- work://shared/" in roster and "- history://saved" in roster
        assert "mcp://" not in roster and "agent://" not in roster and "skill://" not in roster
    assert "- work:// " not in without and "- artifact://" not in without and "- history://root" not in without
    assert "No session is bound" in without
    assert "- work:// " in with_session and "- artifact://" in with_session and "- history://root" in with_session
    assert "No session is bound" not in with_session
    memory = workspace / "memory"
    memory.mkdir()
    async with served(workspace, state, "--memory-root", f"local:mevedel:{memory}") as (session, with_memory):
        assert "- memory://root" in with_memory


async def test_oversized_output_is_saved_as_an_artifact(workspace, tmp_path):
    write_file(workspace / "big.txt", "".join(f"needle {index:05d} {'y' * 60}\n" for index in range(3000)))
    state = tmp_path / "state"
    sid = _session(workspace, state)
    async with served(workspace, state) as (session, _roster):
        cut = await ok(session, "Grep", pattern="needle", limit=3000)
        assert "cannot be saved as artifact://" in cut and len(cut) < 70_000
    async with served(workspace, state, "--session", sid) as (session, _roster):
        answer = await ok(session, "Grep", pattern="needle", limit=3000)
        assert len(answer) < 70_000
        assert answer.startswith("big.txt:1:1: needle 00000")
        address = answer.rsplit("saved as ", 1)[1].split(":", 2)
        handle = "artifact:" + address[1]
        assert handle.startswith("artifact://grep-") and handle.endswith(".txt")
        assert handle in await ok(session, "Read", path="artifact://")
        last = await ok(session, "Grep", pattern="needle 02999", path=handle)
        assert last.startswith(f"{handle}:3000:") and "big.txt:3000:1: needle 02999" in last
        page = await ok(session, "Read", path=handle, offset=2999, limit=1)
        assert page == "  2999\tbig.txt:2999:1: needle 02998 " + "y" * 60 + f"\n\nshowing lines 2999-2999 of 3001; next page: Read {handle} offset=3000"
    saved = list((workspace / ".mevedel" / "sessions" / sid / "tool-results").iterdir())
    assert [path.name for path in saved] == [handle.removeprefix("artifact://")]


async def test_a_long_read_page_is_cut_to_whole_lines_with_the_next_call(workspace, tmp_path):
    write_file(workspace / "wide.txt", "".join(f"{index:04d} {'z' * 1500}\n" for index in range(200)))
    async with served(workspace, tmp_path / "state") as (session, _roster):
        page = await ok(session, "Read", path="wide.txt")
        body, _sep, notice = page.partition("\n\n")
        shown = body.splitlines()
        assert len(page) < 70_000 and 1 < len(shown) < 200
        last = len(shown)
        assert shown[-1].startswith(f"{last:>6}\t{last - 1:04d} ")
        assert notice.endswith(f"next page: Read wide.txt offset={last + 1}")
        following = await ok(session, "Read", path="wide.txt", offset=last + 1, limit=1)
        assert following.startswith(f"{last + 1:>6}\t{last:04d} ")


EVERYTHING = Path(__file__).resolve().parents[2] / "tests" / "mcp_servers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
STATIC = "mcp://everything/demo%3A%2F%2Fresource%2Fstatic%2Fdocument%2Farchitecture.md"


@pytest.mark.skipif(
    not EVERYTHING.exists() or shutil.which("node") is None,
    reason="server-everything is installed by scripts/setup --test (npm)",
)
async def test_configured_mcp_servers_are_read_through_the_tools_and_a_workspace_one_never_runs_unapproved(workspace, tmp_path):
    state = tmp_path / "state"
    write_file(tmp_path / "config" / "mevedel" / "config.json", json.dumps({"mcpServers": {"everything": {"command": "node", "args": [str(EVERYTHING)]}}}))
    marker = tmp_path / "ran"
    write_file(workspace / ".mcp.json", json.dumps({"mcpServers": {"cloned": {"command": "touch", "args": [str(marker)]}}}))
    async with served(workspace, state) as (session, roster):
        assert "- mcp:// -- " in roster
        assert "mcp://everything" in await ok(session, "Read", path="mcp://")
        document = await ok(session, "Read", path=STATIC)
        assert document.startswith("     1\t") and "architecture" in document.lower()
        refused = await error(session, "Read", path="mcp://cloned")
        assert "mevedel read mcp://cloned --approve-mcp cloned" in refused
    assert not marker.exists()


async def test_a_grep_pattern_that_backtracks_without_end_is_stopped_while_other_calls_are_answered(workspace, tmp_path):
    write_file(workspace / "bait.txt", "a" * 48 + "!\n")
    async with served(workspace, tmp_path / "state") as (session, _roster):
        finished: list[str] = []

        async def grep() -> str:
            text = await error(session, "Grep", pattern="(a|aa)+$", path="bait.txt")
            finished.append("grep")
            return text

        async def reads() -> None:
            # Answered while the Grep is still matching: nothing is frozen.
            for _ in range(3):
                assert "hello readme" in await ok(session, "Read", path="README.md")
            finished.append("reads")

        stopped, _ = await asyncio.gather(grep(), reads())
        assert finished == ["reads", "grep"]
        assert stopped.startswith("bait.txt: invalid-option: Grep pattern '(a|aa)+$' took more than 10 s to match")
        assert "hello readme" in await ok(session, "Read", path="README.md")


async def test_a_client_that_drops_xdg_variables_names_the_cli_client_explicitly(workspace, tmp_path):
    me = tmp_path / "me"
    sid = _session(workspace, me)
    # The MCP client starts the server without XDG_STATE_HOME (its own HOME,
    # as some do): --client-state names the CLI client all the same.
    bare = {key: value for key, value in os.environ.items() if not key.startswith("XDG_")}
    bare["HOME"] = str(tmp_path / "elsewhere")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mevedel_server.cli", "mcp", "--workspace", str(workspace), "--session", sid, "--client-state", str(me / "mevedel")],
        env=bare,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert await ok(session, "ApplyPatch", patch=envelope(add("src/mine.py", "x"))) == "A src/mine.py"
    assert (workspace / "src" / "mine.py").read_text() == "x\n"
    missing = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", "mcp", "--workspace", str(workspace), "--client-state", str(tmp_path / "nowhere")],
        env=bare, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    assert missing.returncode == 1 and "--client-state" in missing.stderr and "cli-client.json" in missing.stderr, missing.stderr


@pytest.mark.parametrize("held_elsewhere", [True, False])
async def test_a_session_another_client_wrote_reads_its_conversation_and_retained_agents(workspace, tmp_path, held_elsewhere):
    """``mevedel mcp --session`` on a session another client wrote (joined
    read-only while that client holds it, else resumed): history://root,
    its retained agent's transcript and agent:// read as the CLI reads them."""
    from unit.cli.test_cli_session_addresses import _write_session

    sid = await _write_session(workspace, close=not held_elsewhere)
    async with served(workspace, tmp_path / "state", "--session", sid) as (session, _):
        assert "The reviewer found two issues." in await ok(session, "Read", path="history://root")
        assert "Task 1 · reviewer (codex) in turn 1" in await ok(session, "Read", path="history://root/reviewer")
        listing = await ok(session, "Read", path="agent://")
        assert "agent://root/reviewer" in listing and "agent://root/worker" in listing
        assert "Two issues in the parser." in await ok(session, "Read", path="agent://root/reviewer")
        assert "has no retained agent nobody" in await error(session, "Read", path="agent://root/nobody")
