"""The ``mevedel`` entry point: ``--help`` lists every command with its
one-line help from a table that imports nothing, and each command loads only
its own modules (the agent and MCP SDKs are seconds of start-up on a loaded
machine)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from mevedel_server.cli.main import COMMANDS, SUBCOMMAND_MODULES, build_parser

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


def _modules_loaded(args: list[str], cwd) -> set[str]:
    """The modules ``mevedel ARGS`` imported, run in ``cwd`` (its output
    on the probe's own stdout, which is read past)."""
    probe = (
        "import contextlib, io, sys\n"
        "from mevedel_server.cli.main import main\n"
        "try:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(sys.modules))\n"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(cwd / "state")}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(eval(result.stdout.strip().splitlines()[-1]))


def _sdks_loaded(args: list[str], cwd) -> list[str]:
    return sorted({name.split(".")[0] for name in _modules_loaded(args, cwd)} & set(SDKS))


@pytest.mark.parametrize("args", [["--help"], ["session", "list"], ["address", "work://shared/a.md"], ["read", "mevedel://"]])
def test_quick_commands_load_no_sdk(tmp_path, args):
    assert _sdks_loaded(args, tmp_path) == []


def _cli_in(cwd, *args: str) -> subprocess.CompletedProcess:
    """``mevedel ARGS`` run in ``cwd`` as the CLI client whose state is there."""
    env = {**os.environ, "XDG_STATE_HOME": str(cwd / "state")}
    done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_reading_the_docs_loads_neither_the_session_store_nor_the_mcp_client(tmp_path):
    # A workspace whose store holds a session of this CLI client: a read
    # of work:// would look it up, a read of mevedel:// has no use for it.
    _cli_in(tmp_path, "turn", "begin", "Plan it", "--new")
    loaded = _modules_loaded(["read", "mevedel://"], tmp_path)
    assert "mevedel_server.resources.families.mevedel_docs" in loaded  # it did read
    assert {"mevedel_server.store.service", "mevedel_server.mcp_client.access", "regex"} & loaded == set()
    # A session's address still finds the session this client holds.
    assert "mevedel_server.store.service" in _modules_loaded(["read", "work://notes.md"], tmp_path)


def test_listing_a_local_workspace_loads_no_ssh_machinery(tmp_path):
    # A session to list: its lease record and sidecar are read and decoded.
    _cli_in(tmp_path, "turn", "begin", "Plan it", "--new")
    listed = _cli_in(tmp_path, "session", "list", "--json")
    assert [row["latest_prompt"] for row in json.loads(listed.stdout)["sessions"]] == ["Plan it"]
    ssh = {"asyncssh", "mevedel_server.targets.ssh", "mevedel_server.targets.ssh_config", "mevedel_server.targets.location"}
    assert ssh & _modules_loaded(["session", "list"], tmp_path) == set()
    # A local directory named with --workspace is parsed (the grammar
    # loads) but nothing connects anywhere.
    assert "asyncssh" not in _modules_loaded(["session", "list", "--workspace", str(tmp_path)], tmp_path)


@pytest.mark.parametrize("columns", ["50", "132", "0", "-3", "wide", None])
def test_help_is_as_wide_as_the_standard_library_finds_the_terminal(monkeypatch, columns):
    import shutil

    from mevedel_server.cli.main import terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns


def test_help_wraps_at_the_terminal_width(tmp_path):
    def help_at(columns: str) -> str:
        env = {**os.environ, "COLUMNS": columns}
        done = subprocess.run([sys.executable, "-m", "mevedel_server.cli", "session", "list", "--help"],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    whole = "the workspace root, here or over SSH (default: the current directory)"
    assert whole in help_at("200")
    narrow = help_at("50")
    assert whole not in narrow and "the workspace root" in narrow
    options = narrow[narrow.index("options:"):].splitlines()
    assert max(map(len, options)) <= 50


def test_a_listing_loads_neither_archive_modules_nor_tls(tmp_path):
    # shutil, with lzma and bz2, is what argparse's stock help formatter
    # imports for the terminal's width: no help is printed. asyncio's TLS
    # support (OpenSSL with it) waits for a connection that speaks TLS.
    assert {"shutil", "lzma", "bz2", "_ssl"} & _modules_loaded(["session", "list"], tmp_path) == set()


def test_tls_through_asyncio_loads_when_a_connection_asks_for_it(tmp_path):
    # A server that answers a TLS client in plain text: the client's
    # handshake fails as TLS fails, so TLS was there to try.
    probe = (
        "import sys\n"
        "from mevedel_server.tls_on_demand import defer_tls\n"
        "defer_tls()\n"
        "import asyncio, ssl\n"
        "assert '_ssl' not in sys.modules\n"
        "async def main():\n"
        "    async def answer(reader, writer):\n"
        "        writer.write(b'HTTP/1.0 400 plain text\\r\\n\\r\\n')\n"
        "        await writer.drain()\n"
        "        writer.close()\n"
        "    server = await asyncio.start_server(answer, '127.0.0.1', 0)\n"
        "    port = server.sockets[0].getsockname()[1]\n"
        "    try:\n"
        "        await asyncio.open_connection('127.0.0.1', port, ssl=ssl.create_default_context())\n"
        "    except ssl.SSLError as error:\n"
        "        print('refused:', error.reason)\n"
        "    server.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused: WRONG_VERSION_NUMBER"


def _help(parser: argparse.ArgumentParser, args: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(args)
    return out.getvalue()


def _command_lines() -> list[list[str]]:
    """Every command, and each of its subcommands, as typed."""
    lines = []
    for name, (_help_text, modules) in COMMANDS.items():
        (sub,) = [a for a in build_parser(modules)._actions if isinstance(a, argparse._SubParsersAction)]
        nested = [a for a in sub.choices[name]._actions if isinstance(a, argparse._SubParsersAction)]
        lines += [[name]] + [[name, subcommand] for action in nested for subcommand in action.choices]
    return lines


@pytest.mark.parametrize("words", _command_lines(), ids=" ".join)
def test_a_command_lines_parser_is_the_whole_parsers_part_it_names(monkeypatch, words):
    # Only the subcommand named is built: its help (every argument, the
    # subcommands listed) is what the parser of every command says.
    from mevedel_server.cli.main import parser_for

    monkeypatch.setenv("COLUMNS", "100")
    modules = COMMANDS[words[0]][1]
    assert _help(parser_for([*words, "--help"]), [*words, "--help"]) == _help(build_parser(modules), [*words, "--help"])


@pytest.mark.parametrize("name", list(SUBCOMMAND_MODULES))
def test_the_subcommand_table_lists_exactly_the_subcommands_the_modules_build(name):
    (sub,) = [a for a in build_parser(COMMANDS[name][1])._actions if isinstance(a, argparse._SubParsersAction)]
    (nested,) = [a for a in sub.choices[name]._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(nested.choices) == list(SUBCOMMAND_MODULES[name])


def test_a_listing_imports_no_other_session_subcommands_module(tmp_path):
    loaded = _modules_loaded(["session", "list"], tmp_path)
    assert "mevedel_server.cli.session_command" in loaded
    assert {"mevedel_server.cli.control_command", "mevedel_server.cli.follow_command"} & loaded == set()


def test_an_unknown_subcommand_is_refused_with_every_choice(capsys):
    from mevedel_server.cli.main import parser_for

    with pytest.raises(SystemExit) as exited:
        parser_for(["session", "lst"]).parse_args(["session", "lst"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'lst'" in error and all(f"'{name}'" in error for name in ("list", "take-control", "follow"))
