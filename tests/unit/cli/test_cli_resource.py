"""``mevedel read|glob|grep|apply-patch`` run through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def mevedel(workspace: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", str(workspace)],
        input=stdin,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shared = tmp_path / ".mevedel" / "shared"
    shared.mkdir(parents=True)
    (shared / "notes.md").write_text("alpha\nbeta\ngamma\n")
    return tmp_path


def test_read_prints_numbered_lines(workspace: Path) -> None:
    ran = mevedel(workspace, "read", "work://shared/%6Eotes.md", "--offset", "2", "--limit", "1")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == "     2\tbeta"


def test_grep_json_gives_projection_line_numbers(workspace: Path) -> None:
    ran = mevedel(workspace, "grep", "gam+", "work://shared", "--json")
    assert ran.returncode == 0, ran.stderr
    (match,) = json.loads(ran.stdout)["matches"]
    assert (match["address"], match["line"]) == ("work://shared/notes.md", 3)


def test_glob_lists_canonical_addresses(workspace: Path) -> None:
    ran = mevedel(workspace, "glob", "work://shared", "*.md")
    assert ran.stdout.split() == ["work://shared/notes.md"]


def test_apply_patch_from_stdin_then_read_back(workspace: Path) -> None:
    patch = "*** Begin Patch\n*** Update File: work://shared/notes.md\n@@\n alpha\n-beta\n+BETA\n*** End Patch\n"
    ran = mevedel(workspace, "apply-patch", "-", stdin=patch)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "M work://shared/notes.md"
    assert (workspace / ".mevedel" / "shared" / "notes.md").read_text() == "alpha\nBETA\ngamma\n"


def test_apply_patch_json_is_the_documented_apply_patch_result(workspace: Path) -> None:
    """``--json`` prints what ``mevedel/resource/applyPatch`` answers: each
    change's authored address, kind, line counts and a move's destination
    (only for a move), and the summary -- no field of the resolver's own."""
    (workspace / ".mevedel" / "shared" / "old.md").write_text("gone\n")
    patch = (
        "*** Begin Patch\n*** Add File: work://shared/new.md\n+one\n+two\n"
        "*** Update File: work://shared/%6Eotes.md\n*** Move to: work://shared/moved.md\n@@\n alpha\n-beta\n+BETA\n"
        "*** Delete File: work://shared/old.md\n*** End Patch\n"
    )
    ran = mevedel(workspace, "apply-patch", "-", "--json", stdin=patch)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {
        "changes": [
            {"address": "work://shared/new.md", "kind": "add", "added": 2, "removed": 0},
            {"address": "work://shared/%6Eotes.md", "kind": "update", "added": 1, "removed": 1, "moveTo": "work://shared/moved.md"},
            {"address": "work://shared/old.md", "kind": "delete", "added": 0, "removed": 1},
        ],
        "summary": "A work://shared/new.md\nR work://shared/notes.md -> work://shared/moved.md\nD work://shared/old.md",
    }


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (("read", "work://shared/missing.md"), "missing-target"),
        (("read", "work://shared/../etc"), "malformed-address"),
        (("read", "work://notes.md"), "owner-missing"),
        (("grep", "x", "mcp://server"), "unsupported-operation"),
    ],
)
def test_failures_name_the_address_and_kind_without_traceback(workspace: Path, args: tuple[str, ...], kind: str) -> None:
    ran = mevedel(workspace, *args, "--json")
    assert ran.returncode == 1
    error = json.loads(ran.stdout)["error"]
    assert error["kind"] == kind
    assert error["authored"] == args[-1]
    assert "Traceback" not in ran.stderr
    assert str(workspace) not in ran.stdout


@pytest.mark.parametrize(
    ("authored", "step"),
    [
        ("work://shared/missing.md", "see what exists with: mevedel read work://shared"),
        ("mevedel://nope.md", "see what exists with: mevedel read mevedel://"),
        ("src/nope.py", "find the right path with: mevedel glob '**/NAME*'"),
        ("wrk://x", "the address documentation: mevedel read mevedel://"),
    ],
)
def test_a_name_that_is_not_there_says_what_to_type_next(workspace: Path, authored: str, step: str) -> None:
    """As the model's tools say "Read X lists what exists": a person typing
    a wrong name is told the command that finds the right one."""
    ran = mevedel(workspace, "read", authored)
    assert ran.returncode == 1
    assert ran.stderr.rstrip("\n").endswith("; " + step), ran.stderr


@pytest.mark.parametrize(("authored", "shown"), [("", "''"), (" work://shared/notes.md", "' work://shared/notes.md'")])
def test_an_address_that_would_not_read_as_typed_is_quoted(workspace: Path, authored: str, shown: str) -> None:
    ran = mevedel(workspace, "read", authored)
    assert ran.returncode == 1
    assert ran.stderr.startswith(f"{shown}: "), ran.stderr


def test_offset_past_the_end_suggests_an_exact_retry(workspace: Path) -> None:
    ran = mevedel(workspace, "read", "work://shared/notes.md", "--offset", "9")
    assert ran.returncode == 1
    assert "1-3" in ran.stderr and "work://shared/notes.md" in ran.stderr


def test_bad_root_flag_is_a_usage_error(workspace: Path) -> None:
    ran = mevedel(workspace, "read", "memory://root", "--memory-root", "nowhere")
    assert ran.returncode == 2
    assert "LOCATION:KIND:PATH" in ran.stderr


# -- apply-patch --session: writes under this client's own lease only ----------

INTRUDER = "*** Begin Patch\n*** Add File: work://intruder.md\n+x\n*** End Patch\n"


def as_client(workspace: Path, state: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", str(workspace)],
        input=stdin, capture_output=True, text=True, env=env, timeout=60,
    )


def test_apply_patch_to_an_unknown_session_is_refused_and_creates_nothing(workspace: Path, tmp_path_factory) -> None:
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    ran = as_client(workspace, tmp_path_factory.mktemp("me"), "apply-patch", "-", "--session", "2026-01-01T00-00-000000000000", "--json", stdin=INTRUDER)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert json.loads(ran.stdout)["error"]["kind"] == "missing-target"
    assert sorted(p.relative_to(workspace) for p in workspace.rglob("*")) == before


def test_apply_patch_writes_only_a_session_this_client_holds(workspace: Path, tmp_path: Path) -> None:
    created = as_client(workspace, tmp_path / "owner", "session", "create", "--prompt", "start", "--json")
    assert created.returncode == 0, created.stderr
    sid = json.loads(created.stdout)["session_id"]
    local = workspace / ".mevedel" / "sessions" / sid / "local"
    # Another client may join the session, not write into it.
    ran = as_client(workspace, tmp_path / "intruder", "apply-patch", "-", "--session", sid, "--json", stdin=INTRUDER)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert json.loads(ran.stdout)["error"]["kind"] == "lease-held"
    assert not (local / "intruder.md").exists()
    # The holder writes; its lease stays held.
    ran = as_client(workspace, tmp_path / "owner", "apply-patch", "-", "--session", sid, stdin=INTRUDER.replace("intruder", "mine"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "A work://mine.md"
    assert (local / "mine.md").read_text() == "x\n"


def test_a_malformed_patch_claims_no_lease(workspace: Path, tmp_path_factory) -> None:
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    ran = as_client(workspace, tmp_path_factory.mktemp("me"), "apply-patch", "-", "--session", "2026-01-01T00-00-000000000000", "--json", stdin="not a patch")
    assert json.loads(ran.stdout)["error"]["kind"] == "invalid-patch"
    assert sorted(p.relative_to(workspace) for p in workspace.rglob("*")) == before


@pytest.fixture
def small_filesystem(tmp_path: Path):
    """A 2 MiB tmpfs (a real filesystem that runs out of space), where the
    test may mount one."""
    root = tmp_path / "small"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root)], check=False)


def test_a_patch_whose_later_file_cannot_be_written_changes_nothing_and_says_so(small_filesystem: Path, tmp_path: Path) -> None:
    workspace = small_filesystem
    created = as_client(workspace, tmp_path / "me", "session", "create", "--prompt", "start", "--json")
    sid = json.loads(created.stdout)["session_id"]
    free = os.statvfs(workspace).f_bavail * os.statvfs(workspace).f_frsize
    # The journal (both files) fits; a.txt is written, then b.txt finds no space.
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** Add File: b.txt\n+" + "y" * int(free * 0.7) + "\n*** End Patch\n"
    ran = as_client(workspace, tmp_path / "me", "apply-patch", "-", "--session", sid, "--json", stdin=patch)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    error = json.loads(ran.stdout)["error"]
    assert error["authored"] == "b.txt" and "no space left on device" in error["reason"] and "no file was changed" in error["reason"]
    assert sorted(p.name for p in workspace.iterdir()) == [".mevedel"]


@pytest.mark.usefixtures("openssh_server")
def test_over_ssh_read_glob_grep_and_apply_patch_go_through_the_workspaces_target(workspace: Path, tmp_path_factory, openssh_server) -> None:
    from e2e.test_ssh_workspace import ssh_home
    from ssh_fixtures import ALIAS

    here = tmp_path_factory.mktemp("client")
    env = {**os.environ, "XDG_STATE_HOME": str(here / "state"), "HOME": str(ssh_home(here, openssh_server))}

    def remote(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args, "--workspace", f"ssh://{ALIAS}{workspace}"],
                             input=stdin, capture_output=True, text=True, env=env, timeout=120, cwd=here)
        assert "Traceback" not in ran.stderr, ran.stderr
        return ran

    assert remote("read", "work://shared/notes.md", "--offset", "2", "--limit", "1").stdout.splitlines()[0] == "     2\tbeta"
    assert remote("glob", "work://shared", "*.md").stdout.split() == ["work://shared/notes.md"]
    assert "work://shared/notes.md:3:" in remote("grep", "gam+", "work://shared").stdout
    refused = remote("read", "memory://local-mevedel/", "--memory-root", "local:mevedel:notes")
    assert refused.returncode == 2 and "a relative root needs a local workspace" in refused.stderr
    created = remote("session", "create", "--prompt", "start", "--json")
    assert created.returncode == 0, created.stderr
    sid = json.loads(created.stdout)["session_id"]
    # This client holds the session it created: its patch writes the session's work:// there.
    ran = remote("apply-patch", "-", "--session", sid, stdin=INTRUDER.replace("intruder", "mine"))
    assert ran.returncode == 0, ran.stderr
    assert (workspace / ".mevedel" / "sessions" / sid / "local" / "mine.md").read_text() == "x\n"
    # Another client may not write into it.
    env["XDG_STATE_HOME"] = str(here / "intruder")
    ran = remote("apply-patch", "-", "--session", sid, "--json", stdin=INTRUDER)
    assert ran.returncode == 1 and json.loads(ran.stdout)["error"]["kind"] == "lease-held"
    assert not (workspace / ".mevedel" / "sessions" / sid / "local" / "intruder.md").exists()


def test_a_patch_that_cannot_be_read_says_why_and_what_to_give(workspace: Path) -> None:
    """The patch given as the argument itself (a person's first try), a
    missing file, a directory, bytes that are not UTF-8: each says why in
    words, nothing is written, and - with the patch on standard input
    works."""
    patch = "*** Begin Patch\n*** Add File: work://shared/n.md\n+hi\n*** End Patch\n"
    (workspace / "bad.patch").write_bytes(b"\xff\xfe")
    for given, said in [
        (patch, "the patch is read from a file, not given as an argument: put it in a file, or give - and the patch on standard input"),
        ("nope.patch", "patch file nope.patch: no such file"),
        (str(workspace), f"patch file {workspace}: is a directory"),
        (str(workspace / "bad.patch"), f"patch file {workspace / 'bad.patch'}: is not UTF-8 text"),
    ]:
        ran = mevedel(workspace, "apply-patch", given)
        assert ran.returncode == 2 and said in ran.stderr and "Error" not in ran.stderr, ran.stderr
    assert not (workspace / ".mevedel" / "shared" / "n.md").exists()
    ran = mevedel(workspace, "apply-patch", "-", stdin=patch)
    assert ran.returncode == 0 and ran.stdout.strip() == "A work://shared/n.md", ran.stderr


def test_a_shared_note_written_with_no_session_stays_out_of_git_status(tmp_path: Path) -> None:
    """work://shared is working material, never the project's: written
    before any session exists, it still leaves `git status` to the user's
    files (the generated excludes a session's start adds, added by the
    write)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    patch = "*** Begin Patch\n*** Add File: work://shared/handoff.md\n+notes\n*** End Patch\n"
    ran = mevedel(repo, "apply-patch", "-", stdin=patch)
    assert ran.returncode == 0, ran.stderr
    assert (repo / ".mevedel" / "shared" / "handoff.md").read_text() == "notes\n"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout.splitlines() == ["?? README.md"], status.stdout
