"""``mevedel``: the command-line face of the mevedel services.

Each subcommand is a module in this package exposing
``register(subparsers)``; it adds its parser and sets ``run`` (a function of
the parsed arguments returning the exit status) as a default. Adding a command
is adding a module and naming it in ``COMMANDS``.

Exit statuses: 0 success, 1 a reported failure (an invalid address...), 2 a
usage error (argparse), 70 an internal error, 130 interrupted. No traceback
reaches the user: an unexpected exception is reported in one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

from . import (
    address_command,
    control_command,
    follow_command,
    lifecycle_command,
    mcp_command,
    prompt_command,
    resource_command,
    session_command,
    turn_command,
)

COMMANDS = (
    address_command,
    resource_command,
    session_command,
    control_command,
    turn_command,
    prompt_command,
    lifecycle_command,
    follow_command,
    mcp_command,
)

INTERNAL_ERROR = 70
INTERRUPTED = 130


def _version() -> str:
    try:
        return metadata.version("mevedel-lsp")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mevedel", description="mevedel resource addresses and sessions.")
    parser.add_argument("--version", action="version", version=f"mevedel {_version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Non-ASCII addresses must print even on an ASCII-only terminal.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser()
    try:
        arguments = parser.parse_args(list(argv) if argv is not None else None)
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
