"""``mevedel prompt`` while this client's turn runs in another ``mevedel
prompt``: said so, and ``--queue`` / ``--steer`` instead of taking the
session's lease from under that turn.

The process that runs a session's agent turns records itself
(``.pending-input/runner.json``: host, pid, boot, and the process's start
time and namespaces); another process of the same CLI client that cannot
prove it ended does not open the session (which would rotate the lease
under the running turn). With
``--queue`` it adds its prompt to the session's durable queue, which the
running process sends when its turn settles; with ``--steer`` it adds
steering and asks that process (SIGUSR1, only to a process proven to be
that ``mevedel``) to cancel its turn, so the steering goes next.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
from pathlib import Path

from ..store import (
    InputRecord,
    RunnerRecord,
    SessionPaths,
    SessionService,
    add_foreign_input,
    clear_runner,
    encode_runner,
    load_inputs,
    read_runner,
    record_runner,
    runner_clear_ops,
    runner_from,
    runner_ops,
    runner_read,
    runner_recorded,
)
from ..targets import (
    Status,
    Verify,
    process_has_ended,
    read_target_clock,
    this_boot,
    this_process,
)
from .session_client import CommandError

#: The signal a steering ``mevedel prompt`` sends the process running the turn.
STEER_SIGNAL = signal.SIGUSR1


def boot_id() -> str:
    """This boot's id as the runner record keeps it ("" when unreadable)."""
    return (this_boot() or "")[:64]


def _is_mevedel(pid: int) -> bool:
    """``pid`` is a live process of this user running mevedel's CLI."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"mevedel" in part for part in argv) and any(part == b"prompt" for part in argv)


async def other_runner(service: SessionService, session_id: str) -> RunnerRecord | None:
    """The other live ``mevedel prompt`` of this client on this machine
    running the session's agent turns, if any."""
    return _live_other(service, await read_runner(service.target, SessionPaths(session_id)))


class RunnerRunning(Exception):
    """Another ``mevedel prompt`` of this client runs the session's turns."""

    def __init__(self, runner: RunnerRecord) -> None:
        super().__init__(f"pid {runner.pid} runs the session's turns")
        self.runner = runner


class RunnerCheck:
    """:func:`other_runner` for a session being resumed: the record is read
    in the program that reads its committed bytes, and a live other runner
    stops the resume (:class:`RunnerRunning`) before its lease is claimed."""

    def __init__(self, service: SessionService) -> None:
        self.service = service

    def reads(self, paths: SessionPaths) -> list:
        return [runner_read(paths)]

    def guards(self, paths: SessionPaths) -> list:
        # No record at all: nothing to judge, so the claim may share the program.
        return [Verify(runner_read(paths).path, None)]

    async def judge(self, session_id: str, results: tuple | None) -> None:
        if results:
            runner = runner_from(results[0])
        else:
            runner = await read_runner(self.service.target, SessionPaths(session_id))
        live = _live_other(self.service, runner)
        if live is not None:
            raise RunnerRunning(live)


def _live_other(service: SessionService, runner: RunnerRecord | None) -> RunnerRecord | None:
    if runner is None or runner.pid == os.getpid():
        return None
    if runner.client_id != service.client.client_id or runner.host != service.client.host:
        return None
    return runner if _may_run(runner) else None


def _may_run(runner: RunnerRecord) -> bool:
    """``runner`` may still run: not proven ended. A record naming its
    process (start time, namespaces) is ended once ``process_has_ended``
    proves it, which a PID another ``mevedel prompt`` took since cannot
    fool. Doubt there, and a record of an older version, fall back to the
    weaker judgment: this boot, and a ``mevedel prompt`` at that PID."""
    if runner.process is not None and process_has_ended(runner.process):
        return False
    return bool(runner.boot) and runner.boot == boot_id() and _is_mevedel(runner.pid)


async def interrupt_orphaned_turn(service: SessionService, session_id: str) -> str | None:
    """Settle as interrupted an agent's turn that a ``mevedel prompt`` of
    this client left in flight (its record names the agent: only a prompt
    begins a turn with one): its process no longer runs it, so nobody else
    ever will. What to tell the user, or None. Called once no live runner
    was found. The runner record tells the two ways it was left: one still
    there belongs to a prompt that was stopped mid-turn (killed, its
    terminal closed, the machine restarted); a prompt that ended on its own
    removed its record, so it ended with the settlement unrecorded (the
    store refused it). A turn begun with no agent is left to its ``mevedel
    turn`` commands (see :func:`turn_in_flight_refusal`)."""
    opened = service.turns.open_turn(session_id)
    if opened is None or opened.agent is None:
        return None
    runner = await read_runner(service.target, SessionPaths(session_id))
    # What it changed since its last checkpoint is recorded in the turn first
    # (``stopped``: no process here ran it).
    if runner is not None:
        by = f"the `mevedel prompt` running it (pid {runner.pid})"
        await service.turns.abort(session_id, f"{by} ended before the turn settled", stopped=True)
        return f"turn {opened.turn} was left in flight: {by} ended before it settled; recorded as interrupted"
    by = f"the `mevedel prompt` that ran it with {opened.agent}"
    await service.turns.abort(session_id, f"{by} could not record its settlement", stopped=True)
    return (f"turn {opened.turn} was left in flight: {by} could not record its settlement (the error was shown "
            "when it ended); recorded as interrupted")


def turn_in_flight_refusal(service: SessionService, session_id: str) -> CommandError | None:
    """The refusal of a prompt while a turn begun with no agent is in
    flight (a prompt's own turn was settled by :func:`interrupt_orphaned_turn`):
    what began it and what ends it."""
    opened = service.turns.open_turn(session_id)
    if opened is None:
        return None
    return CommandError(
        "turn-in-flight",
        f"turn {opened.turn} of {session_id} is in flight, begun by hand with no agent (`mevedel turn begin`, "
        "`mevedel session create --prompt` or an editor's turn): `mevedel turn settle` records it as done, "
        "`mevedel turn abort` ends it as interrupted; then prompt again (or `mevedel prompt --new`)",
    )


def refusal(session_id: str, runner: RunnerRecord) -> CommandError:
    return CommandError(
        "turn-running",
        f"an agent turn of {session_id} is running in another `mevedel prompt` of yours (pid {runner.pid}): "
        "`mevedel prompt --queue TEXT` sends your prompt when that turn settles, "
        "`mevedel prompt --steer TEXT` cancels that turn and sends yours at once",
    )


async def queue_behind(service: SessionService, session_id: str, runner: RunnerRecord, text: str,
                       arguments: argparse.Namespace, *, steer: bool) -> dict:
    """Queue ``text`` for the running process (steering: and ask it to
    cancel its turn). The lease stays that process's."""
    if not text.strip():
        raise CommandError("invalid-params", "the prompt is blank; write what the agent should do")
    paths = SessionPaths(session_id)
    known, _problems = await load_inputs(service.target, paths)
    orders = [r.order for r in known]
    order = (min(orders, default=1) - 1) if steer else (max(orders, default=0) + 1)
    now = await read_target_clock(service.target)
    record = InputRecord(
        entry_id=secrets.token_hex(16), session_id=session_id, kind="steer" if steer else "follow-up", state="queued",
        order=order, text=text, agent=arguments.agent, attachments=tuple(arguments.attach),
        client_id=service.client.client_id, host=service.client.host[:255], queued_at=now,
    )
    await add_foreign_input(service.target, paths, record)
    if steer:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _may_run(runner):
                os.kill(runner.pid, STEER_SIGNAL)
    return {"session_id": session_id, "entry_id": record.entry_id, "kind": record.kind, "runner_pid": runner.pid}


class RunnerMark:
    """This process runs the session's turns: recorded while it does."""

    def __init__(self, service: SessionService, session_id: str) -> None:
        self.service = service
        self.session_id = session_id
        self.recorded = False
        #: The record this process wrote (proven still there when cleared).
        self.written: bytes | None = None
        #: The session and rider carrying the record on the first save.
        self._riding = None

    def _record(self) -> RunnerRecord:
        return RunnerRecord(client_id=self.service.client.client_id, host=self.service.client.host[:255],
                            pid=os.getpid(), boot=boot_id(), process=this_process())

    async def __aenter__(self) -> RunnerMark:
        session = self.service.session(self.session_id)
        if session.lease is not None:
            with contextlib.suppress(Exception):  # without it, a second prompt is told of the turn the old way
                self.written = await record_runner(session.lease, self._record())
                self.recorded = True
        return self

    def ride_first_save(self) -> None:
        """The record rides the turn's first publication (behind its lease
        proof; a new session's, right after its first save claims the
        lease) instead of a program of its own after it."""
        session = self.service.session(self.session_id)
        if self.recorded:
            return
        self._stop_riding()
        written = encode_runner(self._record())
        ops = runner_ops(session.paths, written)

        def delivered(results) -> None:
            with contextlib.suppress(Exception):  # not recorded: written on its own after the save
                runner_recorded(ops, results)
                self.written, self.recorded = written, True

        self._riding = (session, session.ride_next_commit(ops, delivered=delivered))

    def turn_starting(self, session_id: str) -> None:
        """A turn of this process starts: recorded again on its first
        publication when a settlement cleared the record (a prompt queued
        meanwhile is being sent)."""
        if session_id == self.session_id and self.written is not None and not self.recorded:
            self.ride_first_save()

    def turn_settling(self, session_id: str) -> None:
        """The turn's settlement carries the record's removal, behind its
        lease proof and after the queue's listing, instead of a program of
        its own at exit (the settlement is this process's last publication
        unless something was queued meanwhile: then :meth:`turn_starting`
        records it again). Its own record only: another's stops the rider."""
        session = self.service.session(self.session_id) if self.service.is_open(self.session_id) else None
        if session_id != self.session_id or session is None or session.lease is None or not self.recorded or self.written is None:
            return
        ops = runner_clear_ops(session.paths, self.written)

        def delivered(results) -> None:
            if results[0].ok or results[0].status is Status.MISMATCH:
                self.recorded = False  # removed, or another runner's now: nothing of ours is left

        self._stop_riding()
        self._riding = (session, session.ride_next_commit(ops, delivered=delivered))

    def _stop_riding(self) -> None:
        riding, self._riding = self._riding, None
        if riding is not None:
            riding[0].withdraw(riding[1])

    async def mark_after_first_save(self) -> None:
        self._stop_riding()
        if not self.recorded:
            await self.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        self._stop_riding()  # a save after this process's turns must not record it
        session = self.service.session(self.session_id) if self.service.is_open(self.session_id) else None
        if session is not None and session.lease is not None and self.recorded:
            with contextlib.suppress(Exception):
                await clear_runner(session.lease, os.getpid(), written=self.written)
