"""``mevedel``: the command-line face of the mevedel services.

Each subcommand is a module in this package exposing
``register(subparsers)``; it adds its parser and sets ``run`` (a function of
the parsed arguments returning the exit status) as a default. Adding a command
is adding a module and naming it in ``COMMAND_MODULES``.

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

#: The subcommand modules, imported when the parser is built (so that
#: ``mevedel mcp`` in relay mode starts without importing any of them).
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

#: The modules that make each command (``session`` gains subcommands from
#: two more). A command's parser is built from its own modules only, so a
#: quick one (``session list``, ``artifact show``) never imports the agent
#: and MCP SDKs that ``prompt`` and ``read`` need -- seconds of start-up on
#: a loaded machine; no command or ``--help`` builds them all.
COMMAND_OWNERS = {
    "address": ("address_command",),
    "read": ("resource_command",),
    "glob": ("resource_command",),
    "grep": ("resource_command",),
    "apply-patch": ("resource_command",),
    "session": ("session_command", "control_command", "follow_command"),
    "turn": ("turn_command",),
    "prompt": ("prompt_command",),
    "fork": ("lifecycle_command",),
    "redo": ("lifecycle_command",),
    "rewind": ("lifecycle_command",),
    "save-as": ("lifecycle_command",),
    "mcp": ("mcp_command",),
    "artifact": ("artifact_command",),
    "diff": ("diff_command",),
    "restore": ("diff_command",),
}

INTERNAL_ERROR = 70
INTERRUPTED = 130


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mevedel-lsp")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mevedel", description="mevedel resource addresses and sessions.")
    parser.add_argument("--version", action="version", version=f"mevedel {_version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


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
    parser = build_parser(COMMAND_OWNERS.get(args[0], COMMAND_MODULES) if args else COMMAND_MODULES)
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
