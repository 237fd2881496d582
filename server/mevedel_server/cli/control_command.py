"""``mevedel session take-control|release-control|grant-control|keep-control``.

The CLI side of control transfer (:mod:`..store.service.control`), with the
CLI's one-client-per-user model (:mod:`.session_client`):

- ``take-control ID``: a free, released or own lease is acquired; an
  expired foreign one only with ``--confirm-takeover``; a held one is
  requested, and the command waits (``--wait SECONDS``, default 120) for the
  owner's answer and, after a grant, for its release, then acquires the
  session. Run it again to keep waiting: the request is the same one.
  ``--wait 0`` files the request and reports it (outcome ``requested``,
  status 0); a wait that runs out is a ``conflict`` (status 1).
- ``release-control``: save, publish and release the session this client
  holds, in one program; a save that fails releases nothing, and the
  refusal says what to run before release-control again.
- ``grant-control`` / ``keep-control``: answer the request waiting for this
  client's session. A CLI owner is asked by nobody and polls nothing
  between commands, so a request to it is answered only by these; a grant
  hands over at once unless a turn is in flight (settle or abort it, then
  grant again) or a publication is pending (retry or abandon it). A release
  that fails (the host refused a write, the connection dropped) is said so,
  with why: the next grant-control tries it again, and reports the
  hand-over an earlier command granted as finished when it finishes it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING, Any

from ..store import SessionService
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    emit,
    held_session,
    refuse,
    run_command,
)
from .session_command import info_data, info_line

if TYPE_CHECKING:
    from ..store import ControlStatus

DEFAULT_WAIT_SECONDS = 120.0
#: How often a waiting take-control looks at the decision and the lease.
POLL_SECONDS = 0.25
_ENDS = {"acquired": None, "rejected": "rejected", "void": "conflict", "failed": "unreadable"}


def register(subparsers: Any) -> None:
    commands = subparsers.choices["session"].session_commands

    take = commands.add_parser(
        "take-control",
        help="write this session here: acquire a free lease, or ask its owner for it",
    )
    take.add_argument("session_id", metavar="ID")
    take.add_argument("--confirm-takeover", action="store_true", help="take over a lease whose holder let it expire")
    take.add_argument(
        "--wait",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        help=f"how long to wait for the owner's answer and release (default {DEFAULT_WAIT_SECONDS:g}; 0: ask and return)",
    )
    add_common(take)
    take.set_defaults(run=run_take)

    release = commands.add_parser("release-control", help="save, publish and release the session this client holds")
    add_session_option(release)
    add_common(release)
    release.set_defaults(run=run_release)

    for name, verb in (("grant-control", "grant"), ("keep-control", "keep")):
        answer = commands.add_parser(name, help=f"{verb} the request for control of the session this client holds")
        add_session_option(answer)
        add_common(answer)
        answer.set_defaults(run=run_answer, verb=verb)


def run_take(arguments: argparse.Namespace) -> int:
    if not arguments.wait >= 0:  # also refuses nan
        return refuse(arguments, "invalid-params", f"--wait {arguments.wait:g}: must be 0 or more seconds")

    async def body(service: SessionService) -> None:
        # Imported here: every session command registers this module.
        from ..store import ControlEvent, SessionControl

        control = SessionControl(service)
        events: list[ControlEvent] = []
        control.on_event.append(events.append)
        taken = await control.take(arguments.session_id, confirm_takeover=arguments.confirm_takeover)
        if taken.outcome != "requested":
            emit(arguments, info_data(taken.info) | {"outcome": taken.outcome}, [f"{taken.outcome}: {info_line(taken.info)}"])
            return
        owner = taken.owner_host or "the owner"
        if arguments.wait == 0:
            # Asked not to wait: filing the request is the whole command.
            emit(
                arguments,
                info_data(taken.info) | {"outcome": "requested", "owner_host": taken.owner_host},
                [f"requested: {owner} is asked to hand session {arguments.session_id} over; "
                 "run take-control again to wait for it"],
            )
            return
        deadline = time.monotonic() + arguments.wait
        # The wait can be long (the owner's person decides): say at once
        # what is happening and until when, on stderr so --json stays one
        # object on stdout.
        until = time.strftime("%H:%M:%S", time.localtime(time.time() + arguments.wait))
        print(
            f"asked {owner} to hand session {arguments.session_id} over; waiting for the answer until {until} "
            f"({arguments.wait:g} s; Ctrl-C stops waiting, the request stays and take-control again resumes it)",
            file=sys.stderr,
            flush=True,
        )
        while True:
            ended = next((e for e in events if e.phase in _ENDS), None)
            if ended is not None:
                break
            if time.monotonic() >= deadline:
                raise CommandError(
                    "conflict",
                    f"{taken.owner_host or 'the owner'} has not handed session {arguments.session_id} over yet; "
                    "run take-control again to keep waiting",
                )
            await asyncio.sleep(POLL_SECONDS)
            await control.poll()
        kind = _ENDS[ended.phase]
        if kind is not None:
            raise CommandError(kind, ended.message)
        info = service.info(arguments.session_id)
        emit(arguments, info_data(info) | {"outcome": "acquired"}, [f"acquired: {info_line(info)}"])

    return run_command(arguments, body)


def run_release(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        from ..store import ReleaseFailed, SessionControl

        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        try:
            result, info = await SessionControl(service).release(sid)
        except ReleaseFailed as failed:
            raise ReleaseFailed(sid, failed.failed, _after_failed_release(sid, failed)) from failed.failed
        committed = bool(result and result.committed)
        emit(arguments, info_data(info) | {"saved": committed}, [f"released: {info_line(info)}"])

    return run_command(arguments, body)


def _after_failed_release(sid: str, failed: Any) -> str:
    """What to run after a release-control whose save failed (the session
    is still this client's): the pending save published or dropped first
    -- when this command's end does not drop it, held in its memory only --
    then release-control again."""
    again = f"mevedel session release-control --session {sid}"
    if failed.recorded:
        return (
            f"mevedel session retry-publication --session {sid} publishes it (abandon-publication drops it), "
            f"then {again} releases"
        )
    if failed.spooled or failed.follow_up is not None:
        return f"once it is published, {again} releases"
    return f"this command ends without it: {again} saves and releases again"


def run_answer(arguments: argparse.Namespace) -> int:
    async def body(service: SessionService) -> None:
        from ..store import ControlEvent, SessionControl

        sid = await held_session(service, arguments.session)
        await service.sessions.open(sid, "resume")
        control = SessionControl(service)
        events: list[ControlEvent] = []
        control.on_event.append(events.append)
        await control.poll()  # finds the request addressed to this client (or a grant of an earlier command)
        status = control.status(sid)
        if any(e.session_id == sid and e.phase == "released" for e in events):
            # An earlier command's grant, whose hand-over this one finished.
            if arguments.verb != "grant":
                raise CommandError("conflict", f"session {sid} was granted by an earlier command and is handed over now")
            line = f"granted earlier; session {sid} is handed over now"
        elif status.phase == "draining":  # granted by an earlier command, not finished
            raise CommandError("conflict", f"session {sid} is already granted; {_unfinished(sid, status)}")
        else:
            status = await (control.grant(sid) if arguments.verb == "grant" else control.keep(sid))
            if status.phase == "draining":
                line = f"granted; {_unfinished(sid, status)}"
            elif arguments.verb == "grant":
                line = f"granted: session {sid} is handed over"
            else:
                line = f"kept control of session {sid}"
        emit(
            arguments,
            {"session_id": sid, "verb": arguments.verb, "phase": status.phase, "waiting_for": status.waiting_for,
             "failure": status.failure},
            [line],
        )

    return run_command(arguments, body)


def _unfinished(sid: str, status: ControlStatus) -> str:
    """What a granted hand-over that did not finish in this command waits
    for, and what to run (a CLI owner polls nothing between commands: the
    next grant-control is what tries again)."""
    if status.failure is not None:
        return f"its release failed ({status.failure}); run grant-control again to try it again"
    then = "then run grant-control again"
    if status.waiting_for == "the pending publication to be retried or abandoned":
        then = f"mevedel session retry-publication --session {sid} publishes it (abandon-publication drops it); " + then
    return f"the hand-over waits for {status.waiting_for} ({then})"
