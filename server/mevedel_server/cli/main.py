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
modules build). Of a command's subcommands only the one named gets its
parser built (:class:`_Subcommands`), and asyncio's TLS support loads only
for a connection that uses it (:mod:`..tls_on_demand`).

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

from ..loading import loading
from ..tls_on_demand import defer_tls
from ..version import VERSION

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

#: The subcommands of a command whose modules are several, each with the
#: module that adds it: the command's first module builds the command, and
#: a command line naming a subcommand imports its module alone beside it.
SUBCOMMAND_MODULES: dict[str, dict[str, str]] = {
    "session": {
        **dict.fromkeys(
            ("list", "create", "open", "close", "rename", "save", "retry-publication", "abandon-publication",
             "acknowledge-mutation", "compact", "clear", "turns", "turn"),
            "session_command",
        ),
        **dict.fromkeys(("take-control", "release-control", "grant-control", "keep-control"), "control_command"),
        "follow": "follow_command",
    },
}

INTERNAL_ERROR = 70
INTERRUPTED = 130
DESCRIPTION = "mevedel resource addresses and sessions."


class _VersionAction(argparse.Action):
    """``--version`` (the number from :mod:`mevedel_server.version`, not
    ``importlib.metadata``, which alone costs more than a quick command's start)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"mevedel {VERSION}")  # on stdout, as argparse's own version action
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


class _Unbuilt:
    """Stands for the parser of a subcommand the command line does not name:
    whatever its module adds to it (arguments, defaults, subcommands) goes
    nowhere."""

    def __getattr__(self, _name: str) -> _Unbuilt:
        return self

    def __call__(self, *_args: object, **_kwargs: object) -> _Unbuilt:
        return self


class _Subcommands(argparse._SubParsersAction):
    """Subcommands of which only the one the command line names gets its
    parser built: the 18 parsers of ``session`` (with their arguments) were
    a tenth of what ``session list`` spent on its own code. The others are
    listed by name and help as ever -- a name that is none of them is
    refused with the full choice -- and with no subcommand named (``-h``,
    nothing), every parser is built."""

    wanted: str | None = None
    rest: tuple[str, ...] = ()

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser | _Unbuilt:
        aliases = tuple(kwargs.get("aliases", ()))
        if self.wanted is None or self.wanted in (name, *aliases):
            return super().add_parser(name, command_line=self.rest, **kwargs)
        if "help" in kwargs:
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, kwargs["help"]))
        unbuilt = _Unbuilt()
        for each in (name, *aliases):
            self._name_parser_map[each] = unbuilt
        return unbuilt


class _Parser(argparse.ArgumentParser):
    """The parser of every command and subcommand (``add_subparsers`` makes
    its subparsers of its own class), given the words of the command line
    that follow its name: the first is the subcommand to build."""

    def __init__(self, *args, command_line: Sequence[str] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)
        self.command_line = tuple(command_line)

    def add_subparsers(self, **kwargs) -> argparse._SubParsersAction:
        subcommands = super().add_subparsers(**kwargs)
        if self.command_line and not self.command_line[0].startswith("-"):
            subcommands.wanted, subcommands.rest = self.command_line[0], self.command_line[1:]
        return subcommands

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a help formatter for every argument added (to check
        # its nargs), and the stock one imports shutil for the terminal's
        # width -- with the lzma and bz2 modules shutil loads, a twentieth
        # of a listing's start.
        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)


def _top_parser(command_line: Sequence[str] = ()) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = _Parser(prog="mevedel", description=DESCRIPTION, command_line=command_line)
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    return parser, subparsers


def build_parser(modules: Sequence[str] = COMMAND_MODULES, command_line: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser built by ``modules`` (every command's, by default); with
    ``command_line``, only the parsers of the (sub)commands it names."""
    parser, subparsers = _top_parser(command_line)
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


def command_modules(args: Sequence[str]) -> tuple[str, ...]:
    """The modules that build the parser of a command line naming a
    command: the command's, or of a subcommand in
    :data:`SUBCOMMAND_MODULES`, the command's first and the subcommand's."""
    modules = COMMANDS[args[0]][1]
    subcommand = SUBCOMMAND_MODULES.get(args[0], {}).get(args[1] if len(args) > 1 else "")
    return modules if subcommand is None else tuple(dict.fromkeys((modules[0], subcommand)))


def parser_for(args: Sequence[str]) -> argparse.ArgumentParser:
    """The parser for a command line: the named command's modules only."""
    if not args or args[0] not in COMMANDS:
        return listing_parser()
    return build_parser(command_modules(args), args)


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
        from ..tool_server import relay_stdio

        return int(relay_stdio(os.environ["MEVEDEL_TOOL_SOCKET"], os.environ["MEVEDEL_TOOL_TOKEN"]) or 0)
    defer_tls()
    with loading():
        parser = parser_for(args)
    status = _run(parser, args)
    if argv is None:  # the process's own command line: the process ends here
        _end_process(status)
    return status


def _run(parser: argparse.ArgumentParser, args: Sequence[str]) -> int:
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


def _end_process(status: int) -> None:
    """Exit with ``status`` once the command is done, without the
    interpreter's teardown: freeing every module and object one by one was
    about 5 ms of a listing's CPU, for memory the process hands back whole.
    What that teardown does that anyone could notice is done first -- the
    ``atexit`` handlers run (logging's shutdown, ``weakref.finalize``) and
    standard output and error are flushed. While another thread still runs
    (the interpreter would wait for it), or a flush fails (a reader gone:
    the interpreter reports it as ever), the ordinary exit is left to do it."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
