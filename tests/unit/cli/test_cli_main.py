"""The ``mevedel`` entry point: ``--help`` lists every command with its
one-line help from a table that imports nothing, and each command loads only
its own modules (the agent and MCP SDKs are seconds of start-up on a loaded
machine)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from mevedel_server.cli.main import COMMANDS, build_parser

SDKS = ("acp", "mcp", "pygls")


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [(action.dest, action.help) for action in sub._choices_actions]


def test_the_lazy_table_lists_exactly_the_commands_the_modules_build():
    assert _commands(build_parser()) == [(name, help_text) for name, (help_text, _) in COMMANDS.items()]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_is_built_by_the_modules_the_table_names(name):
    assert name in dict(_commands(build_parser(COMMANDS[name][1])))


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help_lists_every_command_with_its_help():
    result = _run("--help")
    assert result.returncode == 0, result.stderr
    for name, (help_text, _modules) in COMMANDS.items():
        assert name in result.stdout
        assert help_text.split()[0] in result.stdout
    assert _run("--version").stdout.startswith("mevedel ")
    unknown = _run("bogus")
    assert unknown.returncode == 2 and "invalid choice: 'bogus'" in unknown.stderr


def _sdks_loaded(args: list[str], cwd) -> list[str]:
    probe = (
        "import sys\n"
        "from mevedel_server.cli.main import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(SDKS)!r}))\n"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(cwd / "state")}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["session", "list"], ["address", "work://shared/a.md"], ["read", "mevedel://"]])
def test_quick_commands_load_no_sdk(tmp_path, args):
    assert _sdks_loaded(args, tmp_path) == []
