"""``SshTarget``: the same :class:`Target` on another machine, over SSH.

Every control program is one remote process, so one round trip: the
:mod:`remote program <.remote_program>` runs the shared
:mod:`executor <.executor>`, the very code :class:`LocalTarget` runs, on the
remote filesystem, with the root's device and inode (pinned when the target
connects) re-proved by every operation. Request and answer travel as
length-prefixed frames on the process's standard input and output (see
:mod:`.wire`), so any byte of a name or a payload passes unchanged and no
payload ever meets an argument list.

What never happens is an unknown outcome reported as success. A program
whose process dies, whose channel or connection drops, whose answer is cut
short, malformed or followed by a failing exit status raises
:class:`TargetUnavailable`; ``outcome_unknown`` tells the caller the program
may have run, so it must re-observe. A request that provably never reached
the target (the connection was found lost before its last byte was handed
over) is retried once on a fresh connection.

A process is started *before* it is needed: once the root is pinned the
target keeps ``spares`` remote processes warm (interpreter started, bundle
sent and loaded, blocked reading its request), so a program costs the
request and its answer, not an interpreter start. A warm process still
serves exactly one program and then exits; it holds nothing open in the
workspace while it waits (its root is opened and proved when the request
arrives), and the target clock is read when the program runs, not when the
process started. A warm process found dead, or on a connection that has
gone, is never sent a request: the program goes to a fresh process. Warm
processes unused for ``spare_idle_seconds`` are closed.

One asyncssh connection carries every program of a target as separate
channels, so concurrent programs never read each other's answers. A dropped
connection is re-established on the next program with exponential backoff,
for a bounded number of attempts within the connect time limit. A host that
goes silent is found out by keepalives (see :mod:`.ssh_config` for both
limits): the connection closes, a program waiting on it ends
:class:`TargetUnavailable` with its outcome unknown, and a host still silent
when it is dialed again fails the dial at its time limit. A program stuck
on a host that still answers (a hung mount, a stopped process) is given up
on once it made no progress for ``program_timeout`` (:data:`PROGRAM_TIMEOUT`):
its remote process is ended, the program ends :class:`TargetUnavailable`
with its outcome unknown, and the connection serves the next. A program
whose caller is cancelled has its remote process ended the same way, by a
task of the target's (the cancel returns at once; :meth:`SshTarget.close`
waits for that task, which is bounded): a stopped process left behind would
hold one of the connection's few SSH sessions. The interpreter's
real path, reported when the root is pinned, replaces the configured command
name for later programs (skipping version-manager shims); a program that
finds it gone (exit status 126/127: nothing ran) falls back to the name once.
The target clock is the remote filesystem's (``Clock`` operations run
remotely); this client's wall clock never enters a reading.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shlex
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from .asyncssh_import import asyncssh
from .errors import TargetOperationError
from .paths import split_target_path
from .plain_form import plain_operations, program_result, refusal_error_of
from .process_group import RemoteGroup
from .program import ControlProgram, ProgramResult
from .remote_bundle import (
    BYTECODE_MAGIC,
    compiled_script,
    remote_command,
    remote_script,
)
from .remote_errors import HostKeyRefused, SshLocationError, TargetUnavailable
from .ssh_config import CONNECT_TIMEOUT, SshLocation, client_options, parse_ssh_location
from .target import ProgramTarget
from .wire import (
    HEAD_SIZE,
    MAGIC_HEAD,
    NONCE_SIZE,
    TAIL_SIZE,
    FrameError,
    check_tail,
    decode_value,
    frame_chunks,
)

_log = logging.getLogger(__name__)

# Output a login script may print before the answer is skipped, up to this much.
_NOISE_LIMIT = 64 * 1024
_STDERR_KEPT = 4096
_DRAIN_EVERY = 1 << 20
_JOIN_LIMIT = 32 * 1024
#: run_command's status for a cwd that failed its check (nothing ran).
_CWD_REFUSED = 125
_MAX_BACKOFF = 10.0
#: Seconds a remote program may go without progress (taking request bytes,
#: giving answer bytes, ending) before it is given up on and ended. A
#: program is a bounded batch of file operations on the host's own disk,
#: done in well under a second, a whole-workspace survey in seconds; 120 s
#: is far beyond that, and beyond the keepalives' 45 s, so a host that
#: stopped answering is told apart from a program stuck on a host that
#: answers. Counted from the last progress, so a large payload on a slow
#: link is never cut while its bytes move.
PROGRAM_TIMEOUT = 120.0
#: Seconds a remote process signalled through its channel is given to end
#: (its channel closes) before it is killed by its process id.
_SIGNAL_GRACE = 2.0
#: Seconds the command that kills a remote process by its id may take.
_END_LIMIT = 10.0
_PID_ANNOUNCEMENT = re.compile(rb"\x00mevedel-pid ([0-9]+)\n")
#: Seconds (at most; the connect limit if shorter) that a dial which found
#: the host silent stands as the answer of the programs starting after it.
_SILENT_HOLD = 5.0
# Failures that a retry cannot cure.
_FINAL_CONNECT_ERRORS = (
    asyncssh.PermissionDenied,
    asyncssh.HostKeyNotVerifiable,
    asyncssh.KeyExchangeFailed,
    asyncssh.ProtocolNotSupported,
    asyncssh.IllegalUserName,
)
_TRANSPORT_ERRORS = (asyncssh.Error, OSError, EOFError, asyncio.IncompleteReadError)


@dataclass(frozen=True)
class CommandOutcome:
    """What a command run by :meth:`SshTarget.run_command` left behind."""

    exit_status: int
    stdout: bytes
    stderr: bytes


#: Run by the host's interpreter in front of a command (``run_command``'s
#: ``started``): a session of its own, announced, then the command itself.
_GROUP_WRAPPER = (
    "import os,sys\n"
    "os.setsid()\n"
    "def r(p):\n"
    " try:\n"
    "  with open(p,'rb') as f: v=f.readline().decode('ascii').strip()\n"
    " except Exception: v=''\n"
    " return v if v and ' ' not in v else '-'\n"
    "os.write(2,('\\0mevedel-group %d %s %s\\n'%(os.getpid(),r('/etc/machine-id'),r('/proc/sys/kernel/random/boot_id'))).encode())\n"
    "try: os.execvp(sys.argv[1],sys.argv[1:])\n"
    "except OSError as e:\n"
    " os.write(2,('%s: %s\\n'%(sys.argv[1],e.strerror)).encode()); os._exit(127)\n"
)
_ANNOUNCEMENT = re.compile(rb"^\x00mevedel-group ([0-9]+) (\S+) (\S+)\n\Z")


class _NotSent(Exception):
    """The request never reached the target whole; safe to send again."""


class _SpareGone(_NotSent):
    """A warm process died before its request reached it: nothing ran, and
    a fresh process may take the program without using up its retry."""


@dataclass(eq=False)
class _Spare:
    """A remote process started ahead of its program, waiting for the
    request on its standard input."""

    conn: asyncssh.SSHClientConnection
    process: asyncssh.SSHClientProcess
    #: The (interpreter, compiled) pair it was started with.
    key: tuple[str, bool]
    diagnostics: _Stderr

    def alive(self) -> bool:
        return not self.conn.is_closed() and not _reported_end(self.process) and not self.process.channel.is_closing()

    def discard(self) -> None:
        self.process.close()
        self.diagnostics.task.cancel()


class _Stderr:
    """A remote process's standard error, drained so that the remote side
    never blocks on it; the end is kept for diagnostics (never read as a
    result), and ``pid`` is the process id the remote program announced."""

    def __init__(self, process: asyncssh.SSHClientProcess) -> None:
        self.pid: int | None = None
        self.task = asyncio.ensure_future(self._collect(process))

    async def _collect(self, process: asyncssh.SSHClientProcess) -> bytes:
        kept = head = b""
        try:
            while True:
                chunk = await process.stderr.read(65536)
                if not chunk:
                    return kept
                if self.pid is None and len(head) <= _NOISE_LIMIT:
                    # A login script may print before the program starts.
                    head += chunk
                    found = _PID_ANNOUNCEMENT.search(head)
                    if found is not None:
                        self.pid = int(found.group(1))
                kept = (kept + chunk)[-_STDERR_KEPT:]
        except _TRANSPORT_ERRORS:
            return kept


class _Place:
    """A program's place among its target's ``max_channels``, given back
    once: by the program, or, when its remote process has to be ended, by
    the task that ends it (``taken``), since the process holds its SSH
    session until then."""

    def __init__(self, places: asyncio.Semaphore) -> None:
        self._places = places
        self.taken = False

    def release(self) -> None:
        self._places.release()


class _NoInterpreter(Exception):
    """The shell could not start the interpreter (exit status 126/127), so
    nothing ran."""


class SshTarget(ProgramTarget):
    """A target rooted at a directory on an SSH host. Build it with
    :meth:`connect`; close it with :meth:`close` (or ``async with``)."""

    def __init__(
        self,
        location: SshLocation,
        options: asyncssh.SSHClientConnectionOptions | dict,
        config,
        *,
        python: str,
        reconnect_attempts: int,
        reconnect_delay: float,
        program_timeout: float | None,
        max_channels: int,
        spares: int,
        spare_idle_seconds: float,
        connection: Callable[[], Awaitable[asyncssh.SSHClientConnection]] | None = None,
    ) -> None:
        if reconnect_attempts < 1:
            raise ValueError("reconnect_attempts counts connection attempts from 1")
        if spares < 0 or max_channels < 1:
            raise ValueError("spares counts from 0 and max_channels from 1")
        self._location = location
        self._options = options
        self._config = config
        self._python = python
        # The interpreter the remote side reported at connection time; a
        # program that finds it gone falls back to ``python`` once.
        self._interpreter = python
        self._script = remote_script()
        #: Whether ``_script`` is the compiled bundle (the pinned interpreter
        #: reported this client's bytecode magic number).
        self._compiled = False
        self._attempts = reconnect_attempts
        self._delay = reconnect_delay
        self._timeout = program_timeout
        self._channels = asyncio.Semaphore(max_channels)
        self._connect_lock = asyncio.Lock()
        #: Dials ended; why the last one failed if it found the host
        #: silent, and until when (event loop time) that stands for the
        #: programs that start meanwhile.
        self._dials = 0
        self._silent: str | None = None
        self._silent_until = 0.0
        self._pin_lock = asyncio.Lock()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._borrow = connection
        self._root: str | None = None
        self._identity: tuple[int, int] | None = None
        self._closed = False
        self._spare_count = spares
        self._spare_idle = spare_idle_seconds
        self._spares: list[_Spare] = []
        self._spawning: set[asyncio.Task] = set()
        #: Remote processes being ended (see :meth:`_end_remote`).
        self._endings: set[asyncio.Task] = set()
        self._idle_timer: asyncio.TimerHandle | None = None
        #: Programs sent to a remote process (one process each): the
        #: round-trip count.
        self.round_trips = 0
        #: Programs a warm process served.
        self.warm_served = 0
        #: Connections established, the first one included.
        self.connections = 0

    @classmethod
    def deferred(
        cls,
        location: str | SshLocation,
        root: str | None = None,
        *,
        config=(),
        known_hosts=(),
        client_keys=(),
        agent_path=(),
        python: str = "python3",
        reconnect_attempts: int = 5,
        reconnect_delay: float = 0.25,
        program_timeout: float | None = PROGRAM_TIMEOUT,
        max_channels: int = 6,
        spares: int = 2,
        spare_idle_seconds: float = 60.0,
        connection: Callable[[], Awaitable[asyncssh.SSHClientConnection]] | None = None,
        **ssh_options,
    ) -> SshTarget:
        """A target for ``location`` that connects and pins its root at its
        first program (a server configures workspaces before anyone uses
        them, and a host that is down must not fail the configuration).
        A failed connection or root check fails that program and is tried
        again by the next one. Arguments as for :meth:`connect`; a
        malformed location raises :class:`SshLocationError` at once."""
        where = location if isinstance(location, SshLocation) else parse_ssh_location(location, root)
        explicit = dict(known_hosts=known_hosts, client_keys=client_keys, agent_path=agent_path, **ssh_options)
        return cls(
            where,
            explicit,
            config,
            python=python,
            reconnect_attempts=reconnect_attempts,
            reconnect_delay=reconnect_delay,
            program_timeout=program_timeout,
            max_channels=max_channels,
            spares=spares,
            spare_idle_seconds=spare_idle_seconds,
            connection=connection,
        )

    @classmethod
    async def connect(cls, location: str | SshLocation, root: str | None = None, **options) -> SshTarget:
        """Connect to ``ssh://[user@]host[:port]/path`` (or a host and
        ``root``) and pin the root's identity in one round trip. The
        keyword ``options`` are :meth:`deferred`'s:

        ``config``, ``known_hosts``, ``client_keys`` and ``agent_path`` and
        any other ``ssh_options`` are asyncssh's; left at ``()`` they come
        from the user's OpenSSH configuration. An unknown or changed host
        key raises :class:`HostKeyRefused`. A missing, symlinked or
        non-directory root raises the same errors as :class:`LocalTarget`.

        ``python`` names the remote interpreter (3.7 or later).
        ``reconnect_attempts`` bounds the connection attempts after a drop,
        spaced ``reconnect_delay`` seconds and doubling, all within the
        connect time limit (asyncssh's ``connect_timeout``, from
        ``ConnectTimeout``); keepalives are asyncssh's ``keepalive_interval``
        and ``keepalive_count_max`` (``ServerAliveInterval``,
        ``ServerAliveCountMax``), never off. ``program_timeout``
        bounds how long one program may go without progress (taking its
        request, giving its answer, ending; waiting for its lock is none):
        past it, the remote process is ended (its channel closed and it
        killed, from another channel of the connection, by the process id
        it announced) and the program raises :class:`TargetUnavailable`
        with an unknown outcome; the connection serves the next program.
        ``None``: no bound. A program whose caller is cancelled has its
        remote process ended the same way. At most ``max_channels`` programs
        run at once on the connection; more wait their turn, also for a
        program whose process is being ended (its session is not free
        before; the kill takes one more channel for a moment). ``spares`` processes are kept
        warm for the programs to come (0: every program starts its own),
        closed after ``spare_idle_seconds`` without a program; together
        with ``max_channels`` they stay within OpenSSH's default of ten
        sessions per connection.

        ``connection``, when given, is called instead of dialing and returns
        an open connection its caller owns: the target borrows it (and calls
        again once it is lost) and never closes it. Targets that each stand
        for a separate client process can so share one connection -- a
        target keeps none of its state (pinned root, interpreter, warm
        processes) on the connection, every program runs in a remote process
        of its own -- without the handshake and SSH session each costs.
        """
        target = cls.deferred(location, root, **options)
        try:
            await target._pin()
        except BaseException:
            await target.close()
            raise
        return target

    async def _pin(self, program: ControlProgram | None = None, since: int | None = None) -> list | None:
        """Resolve the SSH settings (once), then prove and pin the root.
        With ``program``, the same remote process runs it once the root is
        pinned and its answer is returned: a command's first program costs
        no round trip of its own for the pin."""
        if isinstance(self._options, dict):
            self._options = await client_options(self._location, self._config, **self._options)
        request = ["pin", self._location.root]
        if program is not None:
            request += [program.lock, plain_operations(program)]
        answer = await self._exchange(request, since)
        if answer[0] == "refused" and len(answer) == 4:
            # The root check names the root "." (the executor knows no
            # other name for it); a person wrote ssh://host/path, so the
            # message names that and the host.
            reason = str(answer[3]).replace("the target root", f"the workspace directory on {self.host}")
            raise refusal_error_of(str(answer[1]), self._location.uri, reason)
        if answer[0] == "error":
            raise self._unavailable(f"the remote program failed: {answer[1] if len(answer) > 1 else '?'}", True)
        if answer[0] != "pinned" or len(answer) not in ((6,) if program is None else (9, 10)):
            raise self._unavailable("the target answered the root check with something else", True)
        _, pinned_root, dev, ino, interpreter, magic = answer[:6]
        self._root, self._identity = str(pinned_root), (int(dev), int(ino))
        if isinstance(interpreter, str) and interpreter.startswith("/"):
            self._interpreter = interpreter
            # Code compiled here runs only on the interpreter that said it
            # can, so the compiled bundle goes with its cached path.
            if magic == BYTECODE_MAGIC:
                self._script, self._compiled = compiled_script(), True
        if self._conn is not None:
            self._refill(self._conn)  # warm processes for the first programs
        return answer[6:] if program is not None else None

    async def _pinned(self, program: ControlProgram | None = None, since: int | None = None) -> list | None:
        """Pin the root if no program has yet. With ``program``, the
        answer of that program when it was run with the pin (``None``
        when the root was already pinned and it still has to run)."""
        if self._identity is None:
            async with self._pin_lock:
                if self._identity is None:
                    try:
                        return await self._pin(program, since)
                    except SshLocationError as error:
                        raise self._unavailable(error.reason, False) from None
        return None

    # -- public surface ------------------------------------------------------

    @property
    def location(self) -> SshLocation:
        return self._location

    @property
    def host(self) -> str:
        """The host as the user wrote it (for messages)."""
        return self._location.display_host

    @property
    def root(self) -> str:
        """Backing location of the root on the host. Internal: never show it
        to a user."""
        assert self._root is not None
        return self._root

    @property
    def absolute_root(self) -> str | None:
        """The root as an absolute path on the host (a ``~/`` root with the
        home the host gave it): what an absolute path inside the workspace
        begins with there. None until the first program pinned the root."""
        return self._root

    def __repr__(self) -> str:
        return f"SshTarget({self.host}, <root>)"

    async def run(self, program: ControlProgram) -> ProgramResult:
        since = self._dials
        with_pin = await self._pinned(program, since)
        if with_pin is not None:
            if with_pin[0] == "done" and len(with_pin) == 3:
                return self._result(program, with_pin[1], with_pin[2])
            if with_pin[0] == "refused" and len(with_pin) == 4:
                raise refusal_error_of(str(with_pin[1]), str(with_pin[2]), str(with_pin[3]))
            raise self._unavailable("the target answered with something that is not a program result", True)
        assert self._identity is not None
        dev, ino = self._identity
        answer = await self._exchange(["program", self._root, dev, ino, program.lock, plain_operations(program)], since)
        kind = answer[0] if answer else None
        if kind == "done" and len(answer) == 3:
            return self._result(program, answer[1], answer[2])
        if kind == "refused" and len(answer) == 4:
            # The program did not start (root or lock directory refused).
            raise refusal_error_of(str(answer[1]), str(answer[2]), str(answer[3]))
        if kind == "error":
            raise self._unavailable(f"the remote program failed: {answer[1] if len(answer) > 1 else '?'}", True)
        raise self._unavailable("the target answered with something that is not a program result", True)

    def _result(self, program: ControlProgram, results, stopped_at) -> ProgramResult:
        try:
            return program_result(program, results, stopped_at)
        except (TypeError, ValueError) as exc:
            raise self._unavailable(f"the target's answer does not fit the program ({exc})", True) from None

    async def run_command(
        self, argv: Sequence[str], cwd: str = ".", *, timeout: float = 60.0,
        started: Callable[[RemoteGroup], Awaitable[None]] | None = None,
    ) -> CommandOutcome:
        """Run ``argv`` (a program and its arguments, no shell syntax) on the
        host in ``cwd``, a target-relative directory below the pinned root,
        and return its exit status and output. For tools that must run where
        the files are (``git`` for a Worktree Fork); durable store I/O never
        goes this way. The command line is built from quoted words, so no
        argument is ever interpreted by the remote shell.

        Before the command starts, the shell proves that ``cwd`` is, with
        every symbolic link resolved, the directory its spelling names below
        the root (a link that leads elsewhere, or a missing directory,
        raises :class:`TargetOperationError` naming ``cwd``; nothing runs).
        A dropped connection or a command that outlives ``timeout`` (it is
        then killed) raises :class:`TargetUnavailable` with an unknown
        outcome.

        With ``started``, the command runs in a process group (a session)
        of its own, which the watchdog kills whole when the channel closes
        before the command ended (a task cancelled, a timeout); ``started``
        is told that group, the host's machine id and its boot once it
        exists, before the command's own first instruction (the
        unsettled-mutation latch records them: ``ProcessGroup`` proves the
        group gone later)."""
        if not argv:
            raise ValueError("a command needs at least the program name")
        since = self._dials
        await self._pinned(since=since)
        parts = split_target_path(cwd)
        directory = "/".join([self.root.rstrip("/"), *parts]) or "/"
        below = "".join("/" + shlex.quote(part) for part in parts)
        # The physical root and the physical cwd must agree component by
        # component; the check's own failure is status 125, which no
        # command is run to produce.
        words = " ".join(shlex.quote(word) for word in argv)
        if started is None:
            launch, stop, tail = words, 'kill "$c"', 'exec 3<&-; wait "$c"'
        else:
            # Its own session, announced on stderr before the exec. The
            # watchdog kills the whole group when the channel closes first,
            # and is dismissed when the command ends by itself: what it left
            # running lives on, as a local command's does, until its
            # terminal is released (Terminals kills the group then).
            launch = f"{shlex.quote(self._interpreter)} -c {shlex.quote(_GROUP_WRAPPER)} {words}"
            stop = 'kill -9 -"$c" 2>/dev/null || kill "$c"'
            tail = 'w=$!; exec 3<&-; wait "$c"; s=$?; kill "$w" 2>/dev/null; exit $s'
        line = (
            f"r=$(cd -P -- {shlex.quote(self.root)} 2>/dev/null && pwd -P) && "
            f"cd -P -- {shlex.quote(directory)} 2>/dev/null && "
            f'[ "$(pwd -P)" = "${{r%/}}"{below} ] || exit {_CWD_REFUSED}; '
            # The command runs beside a watchdog that kills it once its
            # standard input -- the channel -- closes: OpenSSH drops the
            # signal a client sends, so closing the channel is the one way to
            # stop a command given up on.
            f"exec 3<&0; {launch} </dev/null 3<&- & c=$!; "
            f"(cat >/dev/null; {stop}) <&3 3<&- >/dev/null 2>&1 & {tail}"
        )
        async with self._channels:
            conn = await self._connection(since)
            try:
                process = await conn.create_process(line, encoding=None)
            except _TRANSPORT_ERRORS as exc:
                if conn.is_closed():
                    self._forget(conn)
                raise self._unavailable(f"'{argv[0]}' could not start ({_describe(exc)})", False) from None
            try:
                head = b""
                if started is not None:
                    head = await self._announced(process, started, timeout)
                done = await asyncio.wait_for(process.wait(), timeout)
            except asyncio.CancelledError:
                _stop(process)  # the watchdog ends the command with its channel
                raise
            except asyncio.TimeoutError:
                _stop(process)
                raise self._unavailable(f"'{argv[0]}' did not finish within {timeout:g} s", True) from None
            except _TRANSPORT_ERRORS as exc:
                _stop(process)
                if conn.is_closed():
                    self._forget(conn)
                raise self._unavailable(f"'{argv[0]}' was cut off ({_describe(exc)})", True) from None
        if done.exit_status is None and not done.exit_signal:
            # The channel closed with neither a status nor a signal: the
            # connection went, and with it what the command did, if it ran.
            if conn.is_closed():
                self._forget(conn)
            raise self._unavailable(f"'{argv[0]}' was cut off before it reported how it ended", True)
        status = done.exit_status if done.exit_status is not None else -1
        if status == _CWD_REFUSED:
            raise TargetOperationError(
                cwd, "is not a directory below the workspace root (missing, or a symbolic link leads elsewhere)"
            )
        return CommandOutcome(status, bytes(done.stdout or b""), head + bytes(done.stderr or b""))

    async def _announced(self, process: asyncssh.SSHClientProcess, started, timeout: float) -> bytes:
        """Read the group announcement a command run by ``_GROUP_WRAPPER``
        writes first on stderr and tell ``started``; what was read that is
        no announcement (the shell's own complaint) is given back as the
        start of stderr."""
        first = await asyncio.wait_for(process.stderr.readline(), timeout)
        found = _ANNOUNCEMENT.match(first)
        if found is None:
            return bytes(first)
        machine, boot = (None if v == b"-" else v.decode("ascii") for v in (found.group(2), found.group(3)))
        await started(RemoteGroup(int(found.group(1)), machine, boot))
        return b""

    async def close(self, *, abandon: bool = False) -> None:
        """Close the connection once the remote processes of cancelled
        programs are ended. ``abandon``: at once (the person stopped waiting
        for a host that does not answer): those processes are left to end
        when their channel's end reaches them."""
        self._closed = True
        self._drop_spares()
        for task in list(self._spawning):
            task.cancel()
        if abandon:
            for task in list(self._endings):
                task.cancel()
            conn, self._conn = self._conn, None
            if conn is not None and self._borrow is None:
                conn.abort()
            return
        if self._endings:
            # Each is bounded, and needs the connection that closes next.
            # asyncio.wait, unlike gather, leaves them running if this
            # close is itself cancelled.
            await asyncio.wait(set(self._endings))
        conn, self._conn = self._conn, None
        if conn is not None and self._borrow is None:
            conn.close()
            await conn.wait_closed()

    async def __aenter__(self) -> SshTarget:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # -- connection ----------------------------------------------------------

    def _unavailable(self, reason: str, outcome_unknown: bool) -> TargetUnavailable:
        return TargetUnavailable(self.host, reason, outcome_unknown=outcome_unknown)

    async def _connection(self, since: int | None = None) -> asyncssh.SSHClientConnection:
        """The open connection, dialed if there is none. A program that
        began (``since``: the count of ended dials then) before a dial that
        found the host silent ended takes that failure instead of dialing in
        turn: programs queued behind a silent host would each wait out its
        time limit again, the last of them that many times over. So does one
        that starts shortly after: the programs of one operation (a save,
        then the reads that tell what became of it) wait for one dial, not
        one each. A dial that failed fast (refused: an SSH server
        restarting) is no answer for another program, which dials itself."""
        dials = self._dials if since is None else since
        async with self._connect_lock:
            if self._closed:
                raise self._unavailable("the target was closed", False)
            if self._conn is None or self._conn.is_closed():
                silent = self._silent
                recent = asyncio.get_running_loop().time() < self._silent_until
                if silent is not None and (self._dials != dials or recent):
                    raise self._unavailable(silent, False)
                self._silent = None
                try:
                    self._conn = await self._dial()
                finally:
                    self._dials += 1
            return self._conn

    def _forget(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.abort()

    async def _dial(self) -> asyncssh.SSHClientConnection:
        """A new connection, within the connect time limit for all attempts
        together. A refused or reset connection is tried again with
        backoff (an SSH server restarting); a host silent for the whole
        limit is not: it ends the dial at once."""
        if self._borrow is not None:
            return await self._borrow()
        limit = self._options.connect_timeout or CONNECT_TIMEOUT
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        last: BaseException | None = None
        tried = 0
        for attempt in range(self._attempts):
            if attempt:
                pause = min(self._delay * 2 ** (attempt - 1), _MAX_BACKOFF)
                if loop.time() + pause >= deadline:
                    break
                await asyncio.sleep(pause)
            tried += 1
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await asyncssh.connect(
                        self._location.host, self._location.port or (), options=self._options, config=self._config
                    )
            except TimeoutError:
                self._silent = (
                    f"no answer while connecting within {limit:g} s: check that the host is up and reachable "
                    "from this machine and that its SSH server answers (ConnectTimeout in your SSH config sets "
                    "this limit)"
                )
                self._silent_until = loop.time() + min(_SILENT_HOLD, limit)
                raise self._unavailable(self._silent, False) from None
            except asyncssh.HostKeyNotVerifiable as exc:
                raise HostKeyRefused(
                    self.host,
                    f"the host key is not trusted ({exc.reason}); it is unknown to known_hosts or it changed. "
                    "Verify the key and add it to known_hosts before connecting",
                ) from None
            except asyncssh.PermissionDenied:
                raise self._unavailable("authentication failed: no key or agent identity was accepted", False) from None
            except _FINAL_CONNECT_ERRORS as exc:
                raise self._unavailable(f"cannot connect: {exc}", False) from None
            except socket.gaierror as exc:
                # A name the resolver does not know will not appear on retry.
                raise self._unavailable(f"cannot resolve the host name ({exc.strerror})", False) from None
            except OSError as exc:
                if exc.filename is None:
                    last = exc
                    continue
                # A file of this machine the SSH settings name (a
                # UserKnownHostsFile or IdentityFile that is not there yet):
                # no retry makes it appear, so say which one at once.
                raise self._unavailable(_unreadable_setting(exc), False) from None
            except _TRANSPORT_ERRORS as exc:
                last = exc
                continue
            self.connections += 1
            return conn
        raise self._unavailable(
            f"cannot connect after {tried} attempt{'s' if tried > 1 else ''}: {_describe(last)}; "
            "check that the host is up and that its SSH server listens",
            False,
        )

    # -- one round trip ------------------------------------------------------

    async def _exchange(self, request: list, since: int | None = None) -> list:
        """Send ``request`` to a fresh remote process and return its answer
        value; retried once only when it provably never ran."""
        await self._channels.acquire()
        place = _Place(self._channels)
        try:
            attempt = 0
            gone = 0
            while attempt < 2:
                conn = await self._connection(since)
                try:
                    return await self._exchange_on(conn, request, place)
                except _NoInterpreter as exc:
                    if attempt or self._interpreter == self._python:
                        raise self._unavailable(str(exc), False) from None
                    self._back_to_command_name()
                except _SpareGone as exc:
                    # Bounded: each loss also removes a warm process.
                    gone += 1
                    if gone > self._spare_count + 1:
                        raise self._unavailable(str(exc), False) from None
                    continue
                except _NotSent as exc:
                    lost = conn.is_closed()
                    if lost:
                        self._forget(conn)
                    if attempt or not lost:
                        raise self._unavailable(str(exc), False) from None
                except TargetUnavailable:
                    if conn.is_closed():
                        self._forget(conn)
                    raise
                attempt += 1
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            if not place.taken:
                place.release()

    async def _exchange_on(self, conn: asyncssh.SSHClientConnection, request: list, place: _Place) -> list:
        """One program in one remote process, given up on once it made no
        progress for ``program_timeout`` seconds: the process is then ended
        (see :meth:`_end_remote`) and the program raises
        :class:`TargetUnavailable` with an unknown outcome. A program whose
        caller is cancelled has its process ended the same way, by a task of
        the target's: the cancel waits on nothing remote."""
        running: list = []  # the process and its stderr, once there is one
        loop = asyncio.get_running_loop()
        limit = self._timeout
        try:
            async with asyncio.timeout(limit) as window:

                def progress() -> None:
                    if limit is not None:
                        window.reschedule(loop.time() + limit)

                return await self._run_process(conn, request, running, progress)
        except TimeoutError:
            if limit is None or not window.expired():
                raise
            ending = self._end_remote(conn, running, place)
            if ending is not None:
                # Shielded: a caller cancelled meanwhile leaves the rest of
                # the ending to its task.
                await asyncio.shield(ending)
            raise self._unavailable(
                f"no answer within {limit:g} s: the remote program made no progress for that long, so it was "
                "ended; it may have run in whole or in part (a stuck file system on the host, or a stopped "
                "process)",
                True,
            ) from None
        except asyncio.CancelledError:
            self._end_remote(conn, running, place)
            raise
        finally:
            if running:
                running[0].close()
                running[1].task.cancel()
            # Replacements start once this program is over, so that their
            # interpreter start does not compete with its run.
            self._refill(conn)

    def _end_remote(self, conn: asyncssh.SSHClientConnection, running: list, place: _Place) -> asyncio.Task | None:
        """End the remote process of a program given up on (stuck, or its
        caller cancelled) in a task the target keeps, which takes over its
        channel (``running`` is emptied) and closes it once the process is
        gone, and the program's ``place`` among ``max_channels`` until then;
        ``None`` if the program had no process yet. A stopped or stuck
        process never reads its channel's end, and OpenSSH keeps its
        session, one of the connection's few, for as long as it lives: so
        closing the channel is not enough, and the session is not free for
        the next program before the process is gone."""
        if not running:
            return None
        process, stderr = running
        running.clear()
        place.taken = True
        task = asyncio.ensure_future(self._end(conn, process, stderr))
        self._endings.add(task)

        def ended(task: asyncio.Task) -> None:
            self._endings.discard(task)
            place.release()

        task.add_done_callback(ended)
        return task

    async def _end(self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess, stderr: _Stderr) -> None:
        """Signal the process through its channel (some sshd setups honour
        that, others drop it); if its channel is still open after
        :data:`_SIGNAL_GRACE`, kill it by its announced id from a channel of
        its own (any sshd; the signal may also have reached only the shell
        that started it). Only while the channel is open and no exit is
        reported, so the id is still its own: a process that ended is never
        killed. Bounded throughout: a host that does not answer is the
        keepalives' to find."""
        try:
            if _reported_end(process):
                return
            try:
                process.send_signal("KILL")
            except (asyncssh.Error, OSError, ValueError):
                pass
            try:
                # A process still reading its request (a caller cancelled
                # during the send) finds it cut short and ends at once,
                # having run none of it.
                process.stdin.write_eof()
            except _TRANSPORT_ERRORS:
                pass
            try:
                await asyncio.wait_for(process.wait_closed(), _SIGNAL_GRACE)
                return
            except (asyncio.TimeoutError, *_TRANSPORT_ERRORS):
                pass
            if _reported_end(process) or conn.is_closed():
                return
            # Read only now: an announcement still on its way when the
            # program was given up on has come in meanwhile.
            pid = stderr.pid
            if pid is None:
                _log.debug("%s: a remote program given up on was left to its channel's close (no process id)", self.host)
                return
            try:
                async with asyncio.timeout(_END_LIMIT):
                    await conn.run(f"kill -KILL {pid}", encoding=None, stdin=asyncssh.DEVNULL)
            except (TimeoutError, *_TRANSPORT_ERRORS) as exc:
                _log.debug("%s: could not end a remote program given up on: %s", self.host, _describe(exc))
        finally:
            process.close()
            stderr.task.cancel()

    async def _run_process(
        self, conn: asyncssh.SSHClientConnection, request: list, running: list, progress: Callable[[], None]
    ) -> list:
        nonce = secrets.token_bytes(NONCE_SIZE)
        chunks = frame_chunks(nonce, request)
        spare = self._take_spare(conn)
        if spare is not None:
            process, diagnostics = spare.process, spare.diagnostics
            self.warm_served += 1
        else:
            try:
                process = await conn.create_process(remote_command(self._interpreter, self._compiled), encoding=None)
            except _TRANSPORT_ERRORS as exc:
                raise _NotSent(f"cannot start the remote program: {_describe(exc)}") from None
            diagnostics = _Stderr(process)
        running += [process, diagnostics]
        progress()
        self.round_trips += 1
        try:
            await self._send(process, chunks, progress, with_script=spare is None)
        except _NotSent as exc:
            await _settled(process)
            if process.exit_status in (126, 127):
                raise _NoInterpreter(self._ended(process, "the remote program did not start")) from None
            if spare is not None:
                raise _SpareGone(self._ended(process, f"a warm process was gone ({exc})")) from None
            if process.exit_status is not None:
                raise _NotSent(self._ended(process, str(exc))) from None
            raise
        try:
            answer = await _read_answer(process.stdout, nonce, progress)
            await process.wait_closed()
        except (FrameError, *_TRANSPORT_ERRORS) as exc:
            await _settled(process)
            _log.debug("%s: remote standard error: %r", self.host, await _finished(diagnostics.task))
            if process.exit_status in (126, 127):
                raise _NoInterpreter(self._ended(process, "the remote program did not start")) from None
            raise self._unavailable(self._ended(process, f"the answer was lost ({_describe(exc)})"), True) from None
        if process.exit_status != 0:
            _log.debug("%s: remote standard error: %r", self.host, await _finished(diagnostics.task))
            raise self._unavailable(self._ended(process, "the remote program did not finish cleanly"), True)
        try:
            value = decode_value(answer)
        except FrameError as exc:
            raise self._unavailable(f"the answer is malformed ({exc})", True) from None
        if not isinstance(value, list) or not value:
            raise self._unavailable("the answer is not a list", True)
        return value

    async def _send(
        self, process: asyncssh.SSHClientProcess, chunks: Sequence, progress: Callable[[], None], *,
        with_script: bool = True,
    ) -> None:
        stdin = process.stdin
        try:
            pending = 0
            if with_script:
                stdin.write(self._script)
                pending = len(self._script)
            # Everything but the tail: until the tail is handed over, the
            # remote side cannot have a whole request, so nothing ran.
            for chunk in _coalesced(chunks[:-1]):
                stdin.write(chunk)
                pending += len(chunk)
                if pending >= _DRAIN_EVERY:
                    await stdin.drain()
                    progress()
                    pending = 0
            stdin.write(chunks[-1])
        except _TRANSPORT_ERRORS as exc:
            raise _NotSent(f"the request could not be sent ({_describe(exc)})") from None
        try:
            stdin.write_eof()
            await stdin.drain()
            progress()
        except _TRANSPORT_ERRORS as exc:
            raise self._unavailable(f"the connection failed while the request was sent ({_describe(exc)})", True) from None

    # -- warm processes --------------------------------------------------------

    def _take_spare(self, conn: asyncssh.SSHClientConnection) -> _Spare | None:
        """A live warm process for the current interpreter on ``conn``;
        stale ones met on the way are closed."""
        key = (self._interpreter, self._compiled)
        while self._spares:
            spare = self._spares.pop(0)
            if spare.conn is conn and spare.key == key and spare.alive():
                return spare
            spare.discard()
            if spare.key == key and spare.process.exit_status in (126, 127) and self._interpreter != self._python:
                # The cached interpreter went away while it waited.
                self._back_to_command_name()
                return None
        return None

    def _back_to_command_name(self) -> None:
        """The cached interpreter path is gone: later processes start by the
        configured command name, whose interpreter may be another version,
        so with the source bundle; warm processes of the old path go."""
        self._interpreter = self._python
        self._script, self._compiled = remote_script(), False
        self._drop_spares()

    def _refill(self, conn: asyncssh.SSHClientConnection) -> None:
        """Start warm processes up to the configured count (only once the
        root is pinned: the interpreter to start is known by then)."""
        self._rearm_idle_timer()
        if self._closed or self._identity is None:
            return
        key = (self._interpreter, self._compiled)
        script = self._script
        # A spawn that has finished has put its process among the spares
        # already, though its done callback (which forgets the task) may not
        # have run yet: counting it twice would start one replacement too few.
        spawning = sum(1 for task in self._spawning if not task.done())
        for _ in range(self._spare_count - len(self._spares) - spawning):
            task = asyncio.ensure_future(self._spawn(conn, key, script))
            self._spawning.add(task)
            task.add_done_callback(self._spawning.discard)

    async def _spawn(self, conn: asyncssh.SSHClientConnection, key: tuple[str, bool], script: bytes) -> None:
        try:
            process = await conn.create_process(remote_command(*key), encoding=None)
        except _TRANSPORT_ERRORS as exc:
            # A refused channel or a dropped connection: the next program
            # starts its own process, which reports the failure if it lasts.
            _log.debug("%s: no warm process: %s", self.host, _describe(exc))
            return
        spare = _Spare(conn, process, key, _Stderr(process))
        try:
            process.stdin.write(script)
        except _TRANSPORT_ERRORS:
            # Already gone: kept (never sent a request, since it is not
            # alive) so that the next program learns from its exit status.
            pass
        if self._closed or conn is not self._conn or key != (self._interpreter, self._compiled):
            spare.discard()
            return
        self._spares.append(spare)

    def _rearm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._spare_count and not self._closed:
            self._idle_timer = asyncio.get_running_loop().call_later(self._spare_idle, self._drop_spares)

    def _drop_spares(self) -> None:
        spares, self._spares = self._spares, []
        for spare in spares:
            spare.discard()

    def _ended(self, process: asyncssh.SSHClientProcess, what: str) -> str:
        status, signal = process.exit_status, process.exit_signal
        if status == 127:
            return f"{what}: the host has no '{self._interpreter}' command (exit status 127)"
        if status == 126:
            return f"{what}: '{self._interpreter}' cannot be run on the host (exit status 126)"
        if signal is not None and signal[0]:
            return f"{what}: the remote program was killed by SIG{signal[0]}"
        if status is None or status == -1:
            return f"{what}: the channel closed without an exit status"
        return f"{what}: exit status {status}"


def _coalesced(chunks: Sequence) -> Iterator[bytes]:
    """``chunks`` as few writes: every write is an SSH packet of its own, and
    a request's framing is many pieces of a few bytes. Small pieces are
    joined up to :data:`_JOIN_LIMIT`; a larger payload goes as it is,
    uncopied."""
    pending: list = []
    size = 0
    for chunk in chunks:
        if len(chunk) >= _JOIN_LIMIT:
            if pending:
                yield b"".join(pending)
                pending, size = [], 0
            yield chunk if isinstance(chunk, bytes) else bytes(chunk)
            continue
        pending.append(chunk)
        size += len(chunk)
        if size >= _JOIN_LIMIT:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def _stop(process: asyncssh.SSHClientProcess) -> None:
    """Kill a command that is given up on (where the server honours
    signals) and close its channel, so it does not run on unobserved."""
    try:
        process.kill()
    except (asyncssh.Error, OSError, ValueError):
        pass
    process.close()


def _unreadable_setting(exc: OSError) -> str:
    name = os.fsdecode(exc.filename)
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    if "known_hosts" in name or "known-hosts" in name:
        return (
            f"cannot read the known hosts file {name} ({why}), so the host key cannot be verified; "
            "connect once with ssh to add the host's key, or fix UserKnownHostsFile in your SSH config"
        )
    return f"cannot read {name}, which your SSH settings name ({why})"


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no attempt was made"
    if isinstance(exc, asyncio.IncompleteReadError):
        return f"the stream ended {exc.expected - len(exc.partial) if exc.expected else 0} bytes early"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    text = str(exc) or type(exc).__name__
    return text


def _reported_end(process: asyncssh.SSHClientProcess) -> bool:
    """Whether the remote side reported how the process ended."""
    return process.exit_status is not None or process.exit_signal is not None


async def _settled(process: asyncssh.SSHClientProcess) -> None:
    """Give a failed process a moment to deliver its exit status."""
    try:
        await asyncio.wait_for(process.wait_closed(), 2.0)
    except (asyncio.TimeoutError, *_TRANSPORT_ERRORS):
        pass


async def _finished(task: asyncio.Future) -> bytes:
    try:
        return await asyncio.wait_for(asyncio.shield(task), 0.5)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        return b""


async def _read_answer(stdout, nonce: bytes, progress: Callable[[], None]) -> bytes:
    """The body of the answer frame carrying ``nonce``, after skipping what a
    login script may have printed before it; ``progress`` is told of every
    piece that arrives."""
    marker = MAGIC_HEAD + nonce
    buffer = b""
    while True:
        found = buffer.find(marker)
        if found >= 0:
            buffer = buffer[found:]
            break
        if len(buffer) > _NOISE_LIMIT + len(marker):
            raise FrameError("the target printed more than 64 KiB before its answer")
        chunk = await stdout.read(65536)
        if not chunk:
            raise FrameError("the output ended before the answer began")
        progress()
        buffer += chunk
    if len(buffer) < HEAD_SIZE:
        buffer += await _read_exactly(stdout, HEAD_SIZE - len(buffer), progress)
    length = int.from_bytes(buffer[len(marker) : HEAD_SIZE], "big")
    rest = buffer[HEAD_SIZE:]
    needed = length + TAIL_SIZE - len(rest)
    if needed > 0:
        rest += await _read_exactly(stdout, needed, progress)
    elif needed < 0:
        raise FrameError("output continues after the answer")
    check_tail(rest[length:], nonce)
    return rest[:length]


async def _read_exactly(stdout, size: int, progress: Callable[[], None]) -> bytes:
    """``size`` bytes, read in pieces so that a large answer on a slow link
    shows its progress."""
    pieces = []
    left = size
    while left:
        piece = await stdout.read(min(left, _DRAIN_EVERY))
        if not piece:
            raise asyncio.IncompleteReadError(b"".join(pieces), size)
        pieces.append(piece)
        left -= len(piece)
        progress()
    return b"".join(pieces)
