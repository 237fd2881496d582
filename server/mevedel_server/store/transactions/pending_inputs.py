"""The durable record of a session's pending input: prompts queued behind
the running turn (follow-ups) and steering (sent at once, cancelling it).

The spec keeps pending input beside the session, never in a transcript
save: queued text keeps its attribution, agent and attachments, and a
restart never resends it on its own. Each entry is one file inside the
session directory, written through the target behind the lease proof (only
the owner of the current generation changes it), the way
``.pending-publication/`` journals a failed save::

    <session>/.pending-input/
      <32 hex>.json        one entry (:class:`InputRecord`), replaced whole

One file per entry makes every change one operation on one file (add:
``CreateExclusive``; edit or a state change: ``Replace``, atomic; cancel or
delivery: ``Remove``), so no change rewrites another entry. The directory is
no part of any publication: a Fork, a Worktree Fork or Save As starts with
no pending input, as the spec's fork projection says.

States: ``queued`` waits for delivery; ``dispatching`` is the one durable
mark written before the prompt is sent (the turn's own saves then record
it, and the entry is removed once the turn is published); ``review`` needs
the person: a restart turns a ``dispatching`` entry (it may have reached
the transcript) and undelivered steering into ``review``, and automatic
delivery waits while any entry needs review.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    CreateExclusive,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    ProcessIdentity,
    Read,
    Remove,
    Replace,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from ..authority.lease import LeaseHandle
from ..layout import SessionPaths
from .recovery import run_guarded

INPUT_DIR = ".pending-input"
INPUT_FORMAT_VERSION = 1
#: The longest text one entry keeps (a prompt longer than this is refused
#: with a message; the spec sets no cap on the number of entries).
MAX_TEXT_BYTES = 1024 * 1024
_ENTRY_NAME = re.compile(r"^([0-9a-f]{32})\.json\Z")

Kind = Literal["follow-up", "steer"]
State = Literal["queued", "dispatching", "review"]


class InputRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format_version: int = INPUT_FORMAT_VERSION
    entry_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
    session_id: str
    kind: Kind
    state: State
    #: Delivery order: the lowest first (steering goes before every follow-up).
    order: int
    text: str
    agent: str | None = None
    attachments: tuple[str, ...] = ()
    #: Who queued it (shown to people; not authority).
    client_id: str
    host: Annotated[str, msgspec.Meta(max_length=255)]
    #: Target seconds when it was queued.
    queued_at: int
    #: Why it needs review (state ``review``).
    reason: Annotated[str, msgspec.Meta(max_length=4096)] | None = None


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = LazyDecoder(msgspec.json.Decoder, InputRecord)


def encode(record: InputRecord) -> bytes:
    return _encoder.encode(record)


def _root(paths: SessionPaths) -> str:
    return paths.inside(INPUT_DIR)


def _entry(paths: SessionPaths, entry_id: str) -> str:
    return f"{_root(paths)}/{entry_id}.json"


def input_listing(paths: SessionPaths) -> ListDir:
    """The listing :func:`load_inputs` starts with (to run in another program)."""
    return ListDir(_root(paths), optional=True)


async def load_inputs(target: Target, paths: SessionPaths, *, listed: OpResult | None = None) -> tuple[list[InputRecord], list[str]]:
    """The session's entries by delivery order, and one problem line per
    entry file that cannot be used (left in place, named, never guessed at).
    ``listed``: the result of :func:`input_listing`, already run."""
    listing = input_listing(paths)
    if listed is None:
        listed = (await target.run(ControlProgram([listing])))[0]
    if listed.status is Status.ABSENT:
        return [], []
    raise_for_result(listing, listed)
    ids = sorted(m.group(1) for m in map(_ENTRY_NAME.match, listed.value) if m)
    if not ids:
        return [], []
    reads = [Read(_entry(paths, entry_id), optional=True) for entry_id in ids]
    # Each read on its own: one unreadable entry must not hide the others.
    results = []
    for read in reads:
        results.append((await target.run(ControlProgram([read])))[0])
    records: list[InputRecord] = []
    problems: list[str] = []
    for entry_id, got in zip(ids, results):
        if got.status is Status.ABSENT:
            continue  # removed meanwhile (delivered or cancelled)
        if not got.ok:
            problems.append(f"queued input {entry_id} of session {paths.session_id} cannot be read ({got.reason or got.status.value})")
            continue
        try:
            record = _decoder.decode(got.value)
        except msgspec.DecodeError as error:
            problems.append(f"queued input {entry_id} of session {paths.session_id} is not a queued prompt ({error}); it is left in {INPUT_DIR}/")
            continue
        if record.entry_id != entry_id or record.session_id != paths.session_id:
            problems.append(f"queued input {entry_id} of session {paths.session_id} names another entry or session; it is left in {INPUT_DIR}/")
            continue
        records.append(record)
    records.sort(key=lambda r: (r.order, r.queued_at, r.entry_id))
    return records, problems


async def write_inputs(lease: LeaseHandle, records: Sequence[InputRecord], *, new: Sequence[str] = ()) -> None:
    """Write ``records`` (those whose id is in ``new`` created exclusively,
    the others replaced whole) in one program behind the lease proof.
    Raises LeaseLost when this client no longer owns the session, a
    TargetError when the target refuses."""
    paths = lease.paths
    ops: list = [MakeDirs(_root(paths), optional=True)]
    for record in records:
        path = _entry(paths, record.entry_id)
        data = encode(record)
        ops.append(CreateExclusive(path, data) if record.entry_id in new else Replace(path, data))
    result, skip = await run_guarded(lease, ops)
    for op, op_result in zip(ops, result.results[skip:]):
        if not (op is ops[0] and op_result.status is Status.CONFLICT):
            raise_for_result(op, op_result)


async def remove_input(lease: LeaseHandle, entry_id: str) -> None:
    """Remove one entry (delivered or cancelled), and the directory once
    empty; an entry already gone is not an error."""
    paths = lease.paths
    ops = [Remove(_entry(paths, entry_id), optional=True), Remove(_root(paths), optional=True)]
    result, skip = await run_guarded(lease, ops)
    op_result = result.results[skip]
    if op_result.status is not Status.ABSENT:
        raise_for_result(ops[0], op_result)


async def add_foreign_input(target: Target, paths: SessionPaths, record: InputRecord) -> None:
    """Queue ``record`` from another process of the client that holds the
    lease (the CLI while its own turn runs in an earlier ``mevedel
    prompt``): created exclusively, never replacing anything, and picked up
    by the holder when its turn settles. The caller checked the holder."""
    ops = [MakeDirs(_root(paths), optional=True), CreateExclusive(_entry(paths, record.entry_id), encode(record))]
    result = await target.run(ControlProgram(ops))
    for op, op_result in zip(ops, result.results):
        if not (op is ops[0] and op_result.status is Status.CONFLICT):
            raise_for_result(op, op_result)


# The process running the session's agent turns ----------------------------------------

RUNNER_NAME = "runner.json"


class RunnerRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Which process of the lease holder runs the session's agent turns
    (``mevedel prompt``): another process of the same client queues behind
    it instead of taking the lease from under its turn. Shown to people
    and checked against the running system; never authority by itself."""

    client_id: str
    host: Annotated[str, msgspec.Meta(max_length=255)]
    pid: Annotated[int, msgspec.Meta(gt=0)]
    #: The machine's boot (``/proc/sys/kernel/random/boot_id``): a pid of an
    #: earlier boot names nothing.
    boot: Annotated[str, msgspec.Meta(max_length=64)]
    #: The process as this machine's ``/proc`` saw it when it wrote the
    #: record (start time, PID namespace): what proves a PID that another
    #: process took since names an ended runner. None: a record of an older
    #: version, or a ``/proc`` that could not say.
    process: ProcessIdentity | None = None


_runner_decoder = LazyDecoder(msgspec.json.Decoder, RunnerRecord)


def runner_ops(paths: SessionPaths, written: bytes) -> list[Operation]:
    """The writes recording a runner's bytes ``written``, to run behind
    the lease proof (judged by :func:`runner_recorded`)."""
    return [MakeDirs(_root(paths), optional=True), Replace(f"{_root(paths)}/{RUNNER_NAME}", written)]


def runner_recorded(ops: Sequence[Operation], results: Sequence[OpResult]) -> None:
    """Raise unless :func:`runner_ops` did what they were asked."""
    for op, op_result in zip(ops, results, strict=True):
        if not (op is ops[0] and op_result.status is Status.CONFLICT):
            raise_for_result(op, op_result)


async def record_runner(lease: LeaseHandle, runner: RunnerRecord) -> bytes:
    """Record ``runner``; the bytes written (see :func:`clear_runner`)."""
    written = encode_runner(runner)
    ops = runner_ops(lease.paths, written)
    result, skip = await run_guarded(lease, ops)
    runner_recorded(ops, result.results[skip:])
    return written


def encode_runner(runner: RunnerRecord) -> bytes:
    return _encoder.encode(runner)


def runner_read(paths: SessionPaths) -> Read:
    """The read of :func:`read_runner`, to run in another program (judged
    by :func:`runner_from`)."""
    return Read(f"{_root(paths)}/{RUNNER_NAME}", optional=True)


def runner_from(got: OpResult) -> RunnerRecord | None:
    """The runner :func:`runner_read`'s result holds, or None."""
    if not got.ok:
        return None
    try:
        return _runner_decoder.decode(got.value)
    except msgspec.DecodeError:
        return None


async def read_runner(target: Target, paths: SessionPaths) -> RunnerRecord | None:
    """The recorded runner, or None (none, or a record that is not one)."""
    return runner_from((await target.run(ControlProgram([runner_read(paths)])))[0])


async def clear_runner(lease: LeaseHandle, pid: int, *, written: bytes | None = None) -> None:
    """Remove the runner record if it is still ``pid``'s. ``written``: the
    bytes ``pid`` recorded (:func:`encode_runner`), proven still there in
    the removal's own program instead of read first."""
    if written is None:
        runner = await read_runner(lease.target, lease.paths)
        if runner is None or runner.pid != pid:
            return
    await run_guarded(lease, runner_clear_ops(lease.paths, written))


def runner_clear_ops(paths: SessionPaths, written: bytes | None) -> list[Operation]:
    """The removal of the runner record (and of the input directory, when
    that leaves it empty), to run behind the lease proof. ``written``: the
    bytes this runner recorded, proven still there first (another runner's
    record stops the program: nothing removed); None when the caller read
    the record as its own."""
    path = f"{_root(paths)}/{RUNNER_NAME}"
    lead: list[Operation] = [] if written is None else [Verify(path, written)]
    return [*lead, Remove(path, optional=True), Remove(_root(paths), optional=True)]
