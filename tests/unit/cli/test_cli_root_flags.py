"""``--memory-root`` and ``--skill-root`` are one pair of flags wherever a
command reads resources itself: ``mevedel read`` (and its siblings) and
``mevedel mcp`` describe them alike and refuse the same bad root with the
same words, naming the flag and what was written. The real CLI runs as a
person runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

COMMANDS = (("read", "README.md"), ("mcp",))


def mevedel(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def flag_help(text: str, flag: str) -> str:
    """The help of one flag, its lines joined (argparse wraps by width)."""
    match = re.search(rf"^  {flag} [^\n]*\n((?:\s{{6,}}[^\n]*\n)*)", text, re.MULTILINE)
    assert match is not None, text
    return " ".join(match.group(0).split())


def test_both_commands_describe_the_root_flags_alike(tmp_path, workspace):
    helps = [mevedel(tmp_path, workspace, command[0], "--help").stdout for command in COMMANDS]
    for flag in ("--memory-root", "--skill-root"):
        read, mcp = (flag_help(text, flag) for text in helps)
        assert read == mcp, (read, mcp)
    assert "refused for an SSH one" in flag_help(helps[0], "--memory-root")


def test_both_commands_refuse_a_bad_root_in_the_same_words(tmp_path, workspace):
    # A relative root of an SSH workspace is refused before the host is reached.
    ssh = "ssh://unreachable.invalid/srv/project"
    cases = {
        ("--memory-root", "local:mevedel:notes", "--workspace", ssh):
            "mevedel: --memory-root 'local:mevedel:notes': a relative root needs a local workspace; give this machine's absolute path",
        ("--skill-root", "user:skills", "--workspace", ssh):
            "mevedel: --skill-root 'user:skills': a relative root needs a local workspace; give this machine's absolute path",
        ("--memory-root", "nowhere:mevedel:/tmp/m"):
            "mevedel: --memory-root 'nowhere:mevedel:/tmp/m': memory root location must be local or global, not 'nowhere'",
        ("--skill-root", "/tmp/s"): "mevedel: --skill-root '/tmp/s': expected ORIGIN:PATH",
    }
    for flags, said in cases.items():
        for command in COMMANDS:
            done = mevedel(tmp_path, workspace, *command, *flags)
            assert (done.returncode, done.stdout, done.stderr.strip()) == (2, "", said), (command, flags)
