"""``mevedel``: the command-line face of the mevedel services.

Each subcommand is a module in this package exposing
``register(subparsers)``; it adds its parser and sets ``run`` (a function of
the parsed arguments returning the exit status) as a default. Adding a command
is adding a module, naming it in ``COMMAND_MODULES`` and giving its commands a
row of ``COMMANDS``.

Start-up is what a person waits for, so nothing is imported that the command
given does not need: ``COMMANDS`` names each command's one-line help and its
modules without importing them. ``mevedel --help`` (or no command, or one
that does not exist) is answered from the table alone; a command imports its
own modules only, so ``session list`` never loads the agent and MCP SDKs that
``prompt`` and ``read`` need (a test checks the table against the parsers the
modules build).

Exit statuses: 0 success, 1 a reported failure (an invalid address...), 2 a
usage error (argparse), 70 an internal error, 130 interrupted. No traceback
reaches the user: an unexpected exception is reported in one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .loading import loading

#: The subcommand modules, in the order their commands are listed.
COMMAND_MODULES = (
    "address_command",
    "resource_command",
    "session_command",
    "control_command",
    "turn_command",
    "prompt_command",
    "lifecycle_command",
    "follow_command",
    "mcp_command",
    "artifact_command",
    "diff_command",
)

#: Every command, in ``--help``'s order: its one-line help and the modules
#: that build its parser (``session`` gains subcommands from two more).
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "address": ("validate and canonicalise resource addresses", ("address_command",)),
    "read": ("print the Read projection of an address", ("resource_command",)),
    "glob": ("list the files under an address that match a pattern", ("resource_command",)),
    "grep": ("search the Read projection under an address", ("resource_command",)),
    "apply-patch": (
        "apply a '*** Begin Patch' envelope to workspace files, work:// and memory:// files",
        ("resource_command",),
    ),
    "session": (
        "list, create, open and manage durable sessions",
        ("session_command", "control_command", "follow_command"),
    ),
    "turn": ("begin, record and settle a turn of a session", ("turn_command",)),
    "prompt": ("prompt an ACP agent: the next turn of a session", ("prompt_command",)),
    "rewind": ("rewind a session to after (or before) a turn", ("lifecycle_command",)),
    "redo": ("list a session's restorable states, or return to one", ("lifecycle_command",)),
    "fork": ("fork a session after a turn into a new session", ("lifecycle_command",)),
    "save-as": ("copy a session into a new, named session", ("lifecycle_command",)),
    "mcp": ("serve Read/Glob/Grep/ApplyPatch with resource addresses to an MCP client (stdio)", ("mcp_command",)),
    "artifact": ("the workspace's artifacts, documents and whiteboards", ("artifact_command",)),
    "diff": ("show what a turn (or a range of turns) changed in the tree", ("diff_command",)),
    "restore": (
        "put one file back as it was before a turn (as a turn of its own, so it can be rewound)",
        ("diff_command",),
    ),
}

INTERNAL_ERROR = 70
INTERRUPTED = 130
DESCRIPTION = "mevedel resource addresses and sessions."


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mevedel-lsp")
    except metadata.PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, whose number is looked up only when asked for
    (``importlib.metadata`` alone costs more than a quick command's start)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"mevedel {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def terminal_columns() -> int:
    """The terminal's width as :func:`shutil.get_terminal_size` finds it
    (``COLUMNS``, else standard output's terminal, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Parser(argparse.ArgumentParser):
    """argparse makes a help formatter for every argument added (to check
    its ``nargs``), and the stock one imports :mod:`shutil` for the
    terminal's width -- with the lzma and bz2 modules shutil loads, a
    twentieth of a listing's start. Subparsers are of this class too."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = _Parser(prog="mevedel", description=DESCRIPTION)
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    return parser, subparsers


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser built by ``modules`` (every command's, by default)."""
    parser, subparsers = _top_parser()
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


def listing_parser() -> argparse.ArgumentParser:
    """The parser that lists every command from ``COMMANDS``, importing none:
    it answers ``--help``, ``--version``, no command and an unknown one."""
    parser, subparsers = _top_parser()
    for name, (help_text, _modules) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def parser_for(args: Sequence[str]) -> argparse.ArgumentParser:
    """The parser for a command line: the named command's modules only."""
    entry = COMMANDS.get(args[0]) if args else None
    return listing_parser() if entry is None else build_parser(entry[1])


def main(argv: Sequence[str] | None = None) -> int:
    # Non-ASCII addresses must print even on an ASCII-only terminal.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    args = list(argv) if argv is not None else sys.argv[1:]
    if args[:1] == ["mcp"] and os.environ.get("MEVEDEL_TOOL_SOCKET") and os.environ.get("MEVEDEL_TOOL_TOKEN"):
        # An agent's relay to the language server: it starts with every
        # agent, so it imports nothing but the relay (see mcp_command).
        from ..tool_server.relay import relay_stdio

        return int(relay_stdio(os.environ["MEVEDEL_TOOL_SOCKET"], os.environ["MEVEDEL_TOOL_TOKEN"]) or 0)
    with loading():
        parser = parser_for(args)
    try:
        arguments = parser.parse_args(args)
        return int(arguments.run(arguments))
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``mevedel address ... | head``); nothing to report.
        return 0
    except SystemExit:
        raise
    except Exception as error:
        print(f"mevedel: internal error ({type(error).__name__}): {error}", file=sys.stderr)
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
