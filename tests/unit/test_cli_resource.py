"""``mevedel read|glob|grep|apply-patch`` run through the real console script."""

from __future__ import annotations

import json
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


def test_offset_past_the_end_suggests_an_exact_retry(workspace: Path) -> None:
    ran = mevedel(workspace, "read", "work://shared/notes.md", "--offset", "9")
    assert ran.returncode == 1
    assert "1-3" in ran.stderr and "work://shared/notes.md" in ran.stderr


def test_bad_root_flag_is_a_usage_error(workspace: Path) -> None:
    ran = mevedel(workspace, "read", "memory://root", "--memory-root", "nowhere")
    assert ran.returncode == 2
    assert "LOCATION:KIND:PATH" in ran.stderr
