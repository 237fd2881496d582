"""A new session beside a held one, on the command line: ``mevedel session
create``, ``mevedel prompt`` and ``mevedel turn begin --new`` start a
session after the store's advisory (``store.BesideHeld``: another session
of the workspace is open or running elsewhere, and both would share the
project's files; a Worktree Fork works in a checkout of its own). On a
terminal the person is asked, and only ``y`` starts it: an empty answer,
anything else, end of input or Ctrl-C starts nothing. Without a terminal
the command is refused, naming ``--beside-held``, which accepts it in
advance. Each command asks anew: a command is its own process."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

from .session_client import CommandError

if TYPE_CHECKING:
    import argparse

    from ..store import SessionInfo, SessionService

FLAG = "--beside-held"


def add_beside_held_option(parser: Any) -> None:
    parser.add_argument(
        FLAG, action="store_true", dest="beside_held",
        help="start the new session even while another session of the workspace is held (open or running elsewhere): "
             "both work on the same project files (a Worktree Fork, `mevedel fork TURN --worktree`, works in a checkout "
             "of its own); without it a terminal asks, and no terminal refuses",
    )


async def new_session(service: SessionService, arguments: argparse.Namespace, name: str | None = None) -> SessionInfo:
    """A new session, after the advisory when another one is held."""
    # Where it is needed: `session list` imports this module with its own.
    from ..store import BesideHeld

    try:
        return await service.sessions.create(name, warn_beside_held=not arguments.beside_held)
    except BesideHeld as asked:
        first = asked.held[0].session_id
        told = f"{asked.said}; `mevedel fork TURN --worktree --session {first}` makes one"
        if not sys.stdin.isatty():
            raise CommandError("beside-held-needs-confirmation", f"{told}; {FLAG} starts a new session anyway") from None
        print(f"mevedel: {told}", file=sys.stderr, flush=True)
        from .terminal_answer import read_answer

        try:
            answer = await read_answer("start a new session anyway? [y/N] ")
        except asyncio.CancelledError:
            print("mevedel: interrupted; no new session was started", file=sys.stderr, flush=True)
            raise
        if answer is None or answer.strip().lower() not in ("y", "yes"):
            raise CommandError("beside-held-declined", "no new session was started") from None
    return await service.sessions.create(name)
