"""``mevedel address`` through the real console script and ``python -m``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("mevedel")
COMMANDS = [
    pytest.param([str(SCRIPT)], id="console-script"),
    pytest.param([sys.executable, "-m", "mevedel_server.cli"], id="python-m-package"),
    pytest.param([sys.executable, "-m", "mevedel_server.cli.main"], id="python-m-main"),
]


def run(command: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    if command[0] == str(SCRIPT) and not SCRIPT.exists() and shutil.which("mevedel") is None:
        pytest.skip("the mevedel console script is not installed beside this interpreter")
    return subprocess.run([*command, *args], capture_output=True, text=True, encoding="utf-8", timeout=60)


@pytest.mark.parametrize("command", COMMANDS)
def test_json_lines_per_address_and_exit_status(command):
    done = run(command, "address", "--json", "work://a%3ab/", "WORK://x", "memory://journal")
    assert done.returncode == 1
    assert done.stderr == ""
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines == [
        {
            "authored": "work://a%3ab/",
            "canonical": "work://a%3Ab",
            "family": "work",
            "locator_class": "session-relative",
            "operations": ["Read", "Glob", "Grep", "ApplyPatch"],
        },
        {"authored": "WORK://x", "error": {"kind": "malformed-address", "reason": "scheme must be lowercase: work://"}},
        {
            "authored": "memory://journal",
            "canonical": "memory://journal/",
            "family": "journal",
            "locator_class": "discovery",
            "operations": ["Read", "Glob", "Grep"],
        },
    ]


def test_all_valid_exits_zero_with_readable_lines():
    done = run(COMMANDS[1].values[0], "address", "agent://root/a#/x", "shared://b/view.png")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "agent://root/a#/x  ->  agent://root/a#/x  [agent, session-relative; Read]",
        "shared://b/view.png  ->  shared://b/view.png  [shared, session-relative; Read]",
    ]


def test_unknown_scheme_is_reported_not_raised():
    done = run(COMMANDS[1].values[0], "address", "--json", "foo://x")
    assert done.returncode == 1
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["error"]["kind"] == "unknown-scheme"
    assert "work://" in result["error"]["reason"]


@pytest.mark.parametrize("args", [["address"], [], ["address", "--bogus", "work://"], ["nonsense"]])
def test_bad_arguments_are_usage_errors_without_traceback(args):
    done = run(COMMANDS[1].values[0], *args)
    assert done.returncode == 2
    assert "usage: mevedel" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_non_ascii_output_on_an_ascii_terminal_does_not_crash():
    done = subprocess.run(
        [sys.executable, "-m", "mevedel_server.cli", "address", "work://é"],
        capture_output=True,
        timeout=60,
        env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("ascii") == "work://\\xe9  ->  work://%C3%A9  [work, session-relative; Read, Glob, Grep, ApplyPatch]\n"
