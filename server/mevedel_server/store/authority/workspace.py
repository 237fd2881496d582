"""Workspace identity and session identities.

The workspace identity is 64 lowercase hex digits in the JSON record
``.mevedel/workspace-id``, created by exclusive creation together with the
first session; whoever loses a creation race adopts the winner's value. A
malformed identity is an error and is never overwritten.

Session IDs look like ``2026-07-19T09-47-bf87b5dd793a``: the local minute of
creation (for people; it is never an authority time) and 12 random lowercase
hex digits. A new ID is checked against the saved session directories and
the caller's live IDs; materialization creates the session directory
exclusively, so an occupied directory is refused rather than reused.

The spec's generated-state entries are appended to ``.git/info/exclude``
through the target (:func:`ensure_generated_excludes`), which the session
service does the first time it writes a workspace (``git_excludes``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Container, Sequence
from datetime import datetime

from ...targets import (
    ControlProgram,
    CreateExclusive,
    ListDir,
    MakeDirs,
    Operation,
    OpResult,
    Read,
    Stat,
    Status,
    Target,
    Verify,
    WriteProject,
    raise_for_result,
)
from ..content.remembered import Remembered
from ..errors import InvalidSessionId, SessionOccupied
from ..layout import SESSIONS_DIR, STATE_DIR, WORKSPACE_ID_PATH, SessionPaths
from .records import WorkspaceIdentity, decode_record, encode_record

SESSION_ID_PATTERN = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2})-([0-9]{2})-([0-9a-f]{12})\Z")
_WORKSPACE_LABEL = "workspace: .mevedel/workspace-id"


def check_session_id(text: str) -> str:
    """Return ``text`` if it is a well-formed session ID, else raise."""
    if not isinstance(text, str):
        raise InvalidSessionId(repr(text), "not a string")
    match = SESSION_ID_PATTERN.match(text)
    if match is None:
        raise InvalidSessionId(text, "expected YYYY-MM-DDTHH-MM- and 12 lowercase hex digits")
    # Remembered by minute: the sessions of a workspace share few, and
    # building the date was most of a first listing's name check.
    minute = text[:16]
    if _possible_minutes.values.get(minute) is None:
        try:
            # The fields' places are fixed: read from the text, not the groups.
            datetime(int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]))
        except ValueError as exc:
            raise InvalidSessionId(text, f"impossible date or time ({exc})") from None
        _possible_minutes.keep(minute, True)
    return text


_possible_minutes = Remembered(4096)


def is_session_id(text: str) -> bool:
    if not isinstance(text, str):
        return False
    # Remembered: a listing asks this of every session directory each time
    # it lists, and the date check is most of a session's name check.
    known = _session_ids.values.get(text)
    if known is None:
        try:
            check_session_id(text)
            known = True
        except InvalidSessionId:
            known = False
        _session_ids.keep(text, known)
    return known


_session_ids = Remembered(8192)


def _random_suffix() -> str:
    return os.urandom(6).hex()


def new_session_id(
    now: datetime | None = None,
    taken: Container[str] = (),
    suffix: Callable[[], str] = _random_suffix,
) -> str:
    """A fresh session ID not in ``taken``."""
    stamp = (now or datetime.now()).strftime("%Y-%m-%dT%H-%M")
    for _ in range(64):
        candidate = f"{stamp}-{suffix()}"
        check_session_id(candidate)
        if candidate not in taken:
            return candidate
    raise RuntimeError("could not draw an unused session ID")  # 64 collisions of 48 random bits


def sessions_listing() -> ListDir:
    """What :func:`saved_session_ids` runs (to run in another program)."""
    return ListDir(SESSIONS_DIR, optional=True)


async def saved_session_ids(target: Target, *, listed: OpResult | None = None) -> list[str]:
    """The session IDs with a directory under ``.mevedel/sessions/``
    (``listed``: :func:`sessions_listing`'s result, already run)."""
    op = sessions_listing()
    result = listed if listed is not None else (await target.run(ControlProgram([op])))[0]
    if result.status is Status.ABSENT:
        return []
    raise_for_result(op, result)
    return [name for name in result.value if is_session_id(name)]


async def allocate_session_id(
    target: Target,
    live_ids: Container[str] = (),
    now: datetime | None = None,
    suffix: Callable[[], str] = _random_suffix,
    *,
    listed: OpResult | None = None,
) -> str:
    """A session ID used neither by a saved session nor by a live one
    (``listed``: :func:`sessions_listing`'s result, already run)."""
    saved = set(await saved_session_ids(target, listed=listed))

    class _Taken:
        def __contains__(self, candidate: object) -> bool:
            return candidate in saved or candidate in live_ids

    return new_session_id(now, _Taken(), suffix)


async def read_workspace_id(target: Target, *, excludes: ExcludesProbe | None = None) -> str | None:
    """The workspace identity, or ``None`` when none was created yet. With
    ``excludes``, the probe :func:`ensure_generated_excludes` starts with
    runs in the same program (filled in for it)."""
    ops = workspace_id_reads(excludes)
    return workspace_id_from(ops, (await target.run(ControlProgram(ops))).results, excludes)


def workspace_id_reads(excludes: ExcludesProbe | None = None) -> list[Operation]:
    """The reads of :func:`read_workspace_id`, to run inside another
    program (all optional: they never stop it); judge their results with
    :func:`workspace_id_from`."""
    return [Read(WORKSPACE_ID_PATH, optional=True), *(excludes.ops if excludes is not None else ())]


def workspace_id_from(ops: Sequence[Operation], results: Sequence[OpResult], excludes: ExcludesProbe | None = None) -> str | None:
    """The identity :func:`workspace_id_reads`' ``results`` hold (and the
    excludes probe's, filled in)."""
    if excludes is not None and len(results) == len(ops):  # else the excludes are read on their own
        excludes.found = tuple(results[1:])
    result = results[0]
    if result.status is Status.ABSENT:
        return None
    raise_for_result(ops[0], result)
    return decode_record(WorkspaceIdentity, result.value, _WORKSPACE_LABEL).workspace_id


async def ensure_workspace_id(target: Target) -> str:
    """Read the workspace identity, creating it exclusively if absent."""
    return (await ensure_workspace_id_with(target, ()))[0]


def _identity_ops() -> list[Operation]:
    fresh = encode_record(WorkspaceIdentity(workspace_id=os.urandom(32).hex()))
    return [MakeDirs(STATE_DIR, optional=True), CreateExclusive(WORKSPACE_ID_PATH, fresh, optional=True), Read(WORKSPACE_ID_PATH)]


def _identity_of(ops: list[Operation], results) -> str:
    if results[1].status not in (Status.OK, Status.CONFLICT):
        raise_for_result(ops[1], results[1])
    raise_for_result(ops[2], results[2])
    return decode_record(WorkspaceIdentity, results[2].value, _WORKSPACE_LABEL).workspace_id


async def ensure_workspace_id_with(target: Target, also: Sequence[Operation]) -> tuple[str, tuple[OpResult, ...]]:
    """:func:`ensure_workspace_id`, with ``also`` run after it in the same
    program (one round trip for a session's creation); their results."""
    ops = _identity_ops()
    result = await target.run(ControlProgram([*ops, *also]))
    return _identity_of(ops, result.results), tuple(result.results[len(ops) :])


#: The spec's "Generated state excludes": what mevedel writes in a workspace
#: that is no project file, each anchored at the repository root; and
#: ``file-state/``, the agent engine's record of the workspace's files. The
#: spec's ``input-history.el`` is JSON here, ``input-history``, and a corrupt
#: one is renamed aside beside it (``input-history.corrupt-*``).
GENERATED_EXCLUDES = (
    "/.mevedel/sessions/",
    "/.mevedel/tool-results/",
    "/.mevedel/input-history*",
    "/.mevedel/leases/",
    "/.mevedel/state/",
    "/.mevedel/file-state/",
    # work://shared: working material between sessions (the spec: not
    # tracked in Git), unlike the artifact store, which travels.
    "/.mevedel/shared/",
)
_GIT_EXCLUDE = ".git/info/exclude"
_EXCLUDES_HEADER = "# mevedel: generated state (added by mevedel; see the mevedel docs)"


class ExcludesProbe:
    """What :func:`ensure_generated_excludes` reads first (whether ``.git``
    is a directory, the exclude file), to run inside another program."""

    def __init__(self) -> None:
        self.ops = (Stat(".git", optional=True), Read(_GIT_EXCLUDE, optional=True))
        self.found: tuple | None = None


async def ensure_generated_excludes(target: Target, probe: ExcludesProbe | None = None) -> tuple[str, ...]:
    """Append the :data:`GENERATED_EXCLUDES` missing from the workspace's
    ``.git/info/exclude`` (through ``target``: locally or on an SSH host),
    so ``git status`` does not list mevedel's state; the entries added.
    Only when ``.git`` is a directory at the workspace root; a linked
    worktree's exclude file (in its repository's common directory) is the
    main checkout's. The write is guarded by a ``Verify`` of the bytes read,
    so a concurrent edit is never overwritten (the next use tries again).
    ``probe``: its reads, already run (see :func:`read_workspace_id`)."""
    git, read = Stat(".git", optional=True), Read(_GIT_EXCLUDE, optional=True)
    found = probe.found if probe is not None and probe.found is not None else await target.run(ControlProgram([git, read]))
    if not found[0].ok or found[0].value.kind != "directory":
        return ()
    if found[1].status is Status.ABSENT:
        existing: bytes | None = None
    else:
        raise_for_result(read, found[1])
        existing = found[1].value
    text = (existing or b"").decode("utf-8", "replace")
    present = {line.strip() for line in text.splitlines()}
    missing = tuple(entry for entry in GENERATED_EXCLUDES if entry not in present)
    if not missing:
        return ()
    lines = ([_EXCLUDES_HEADER] if _EXCLUDES_HEADER not in present else []) + list(missing)
    prefix = b"" if not existing or existing.endswith(b"\n") else b"\n"
    data = (existing or b"") + prefix + ("\n".join(lines) + "\n").encode("utf-8")
    ops = [MakeDirs(".git/info", optional=True), Verify(_GIT_EXCLUDE, existing), WriteProject(_GIT_EXCLUDE, data)]
    result = await target.run(ControlProgram(ops))
    if not result.completed:
        stopped = result.stopped_at or 0
        raise_for_result(ops[stopped], result[stopped])
    return missing


async def materialize_session(target: Target, session_id: str, *, child: bool = False) -> SessionPaths:
    """Create the session directory (refusing an occupied one) with its
    control directories, after ensuring the workspace identity. ``child``:
    a Fork, Save As or Worktree Fork child, marked as unpublished
    (:data:`~.layout.UNPUBLISHED_CHILD`) right after its directory, in the
    same program, so no crash leaves it unmarked and non-empty."""
    paths = SessionPaths(check_session_id(session_id))
    await ensure_workspace_id(target)  # judged before anything of the session is made
    ops = session_directory_ops(paths, child=child)
    result = await target.run(ControlProgram(ops))
    if result[1].status is Status.CONFLICT:
        raise SessionOccupied(session_id)
    for op, op_result in zip(ops[1:], result.results[1:]):
        raise_for_result(op, op_result)
    return paths


def session_directory_ops(paths: SessionPaths, *, child: bool = False) -> list[Operation]:
    """What :func:`materialize_session` runs once the identity is judged:
    the session directory (its ``MakeDirs``, second, stops the program on an
    occupied one) and its control directories."""
    ops: list[Operation] = [MakeDirs(SESSIONS_DIR, optional=True), MakeDirs(paths.root)]
    if child:
        ops.append(CreateExclusive(paths.unpublished_child, b""))
    return ops + [MakeDirs(paths.lease_dir), MakeDirs(paths.publications_dir)]


def identity_proof(workspace_id: str) -> Verify:
    """A proof, to run before a new session's directory in the same
    program, that the workspace identity is still the record of
    ``workspace_id`` (the one :func:`ensure_workspace_id` judged), byte for
    byte: it stops the program on any other (or one written differently,
    when the caller takes the longer way)."""
    return Verify(WORKSPACE_ID_PATH, encode_record(WorkspaceIdentity(workspace_id=workspace_id)))
