"""The agent's file access (ACP ``fs/read_text_file`` and
``fs/write_text_file``), on the workspace's ``Target``.

An agent names files by absolute path; only paths below the workspace root
it was given are served, and never mevedel's own ``.mevedel/`` state. Reads
and writes go through the target like every durable byte, so the same code
serves an SSH workspace, and the target's rules (no symbolic link followed,
regular files only, never a blocking open) hold for agents too. A write
reads the file's prior state (bytes and mode) in the same control program,
so its pre-turn state enters the checkpoint exactly as it was when it was
replaced; the file keeps its mode, and a directory the write has to make is
made with the default mode and reported, so it enters the checkpoint as
absent.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from acp import RequestError

from ..store import STATE_DIR
from ..targets import (
    ControlProgram,
    Entry,
    Operation,
    OpResult,
    PutEntry,
    Read,
    ReadEntry,
    Status,
    Target,
    WriteProject,
)

#: A read larger than this is refused (an agent reads source text, not
#: disk images; the whole answer travels in one JSON message).
MAX_READ_BYTES = 16 * 1024 * 1024


def shown(text: str) -> str:
    """``text`` as it can travel in an answer: a lone surrogate is spelt
    ``\\udcff``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


#: Why a name that is not Unicode text is refused. mevedel's paths are
#: UTF-8 text everywhere (the transcript, the checkpoint, addresses); a name
#: an agent spells with a lone surrogate (JSON ``"\\udcff"``) names no such
#: file, so it is refused at the door, for every route an agent has.
NOT_UNICODE = "is not valid Unicode text (it holds a lone surrogate); paths are UTF-8 text"


def require_unicode(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def refused(path: str, reason: str) -> RequestError:
    return RequestError.invalid_params({"path": shown(path), "reason": reason})


def _prior(result: OpResult, path: str) -> Entry | None:
    """A path's whole state before a write (``None``: nothing there), from
    an optional ``ReadEntry`` of it; a refusal naming ``path`` when it
    cannot be read (a FIFO, a device, ...)."""
    if result.status is Status.OK:
        return result.value
    if result.status is Status.ABSENT:
        return None
    raise refused(path, result.reason or "cannot be read before writing")


def _ancestors(relative: str) -> list[str]:
    """The directories above ``relative``, outermost first."""
    parts = relative.split("/")[:-1]
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def _made_directory(directory: str) -> PutEntry:
    # Made with the default mode (never owner-only), and only if absent: a
    # path already there answers "mismatch" and is left alone.
    return PutEntry(directory, None, Entry.directory(None), optional=True)


@dataclass(frozen=True)
class WriteOutcome:
    relative: str
    #: The state replaced (None: nothing there), when it was read.
    before: Entry | None
    read_before: bool
    #: The directories this write made (absent before it), outermost first.
    made: tuple[str, ...] = ()
    #: The results of the operations run after the write (``then``).
    then: tuple[OpResult, ...] = ()


class WorkspaceFiles:
    def __init__(self, target: Target, root: str, *, open_document: Callable[[str], str | None] | None = None,
                 base: str = "") -> None:
        self.target = target
        self.root = posixpath.normpath(root)
        #: The working directory the agent is contained in, workspace-relative
        #: ("" for the root; a Worktree Fork's checkout otherwise).
        self.base = base.strip("/")
        #: Where an agent's relative path starts and its paths must lie.
        self.top = posixpath.join(self.root, self.base) if self.base else self.root
        #: An editor's unsaved text for a workspace-relative path, if any.
        self.open_document = open_document

    def relative(self, path: str) -> str:
        """The workspace-relative spelling of an agent's path, or a refusal
        naming it."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise refused(str(path), "is not a file path")
        if not require_unicode(path):
            raise refused(path, NOT_UNICODE)
        full = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(self.top, path))
        if full == self.top or not full.startswith(self.top.rstrip("/") + "/"):
            where = f"the session's working directory {self.top}" if self.base else f"the workspace {self.root}"
            raise refused(path, f"is outside {where}")
        inside = full[len(self.top.rstrip("/")) + 1 :]
        relative = f"{self.base}/{inside}" if self.base else inside
        if inside.split("/", 1)[0] == STATE_DIR:
            raise refused(
                path,
                f"is inside {STATE_DIR}/, which holds mevedel's own state; an artifact's own files "
                f"({STATE_DIR}/artifacts/ID/FILE) are written with the mevedel ApplyPatch tool, which tells the artifact store",
            )
        return relative

    async def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        relative = self.relative(path)
        text = self.open_document(relative) if self.open_document is not None else None
        if text is None:
            result = (await self.target.run(ControlProgram([Read(relative)])))[0]
            if result.status is Status.ABSENT:
                raise RequestError.resource_not_found(path)
            if not result.ok:
                raise refused(path, result.reason or "cannot be read")
            data = result.value
            if len(data) > MAX_READ_BYTES:
                raise refused(path, f"is larger than {MAX_READ_BYTES} bytes")
            text = data.decode("utf-8", "replace")
        if line is None and limit is None:
            return text
        if (line is not None and line < 1) or (limit is not None and limit < 0):
            raise refused(path, "line counts from 1 and limit is not negative")
        lines = text.splitlines(keepends=True)
        start = (line or 1) - 1
        end = len(lines) if limit is None else start + limit
        return "".join(lines[start:end])

    async def read_before(self, paths: Sequence[str], *, first: Sequence[Operation] = ()) -> list[tuple[str, Entry | None]]:
        """The current states of files about to be written by someone else
        (an ApplyPatch of the tool server), in one program: ``(relative,
        state or None)`` per path, as :meth:`write_text` reads them, and
        ``(directory, None)`` for each missing directory above them (the
        write will make it). ``first``: operations run ahead of the reads."""
        relatives = list(dict.fromkeys(self.relative(path) for path in paths))
        if not relatives:
            return []
        above = [d for d in dict.fromkeys(d for r in relatives for d in _ancestors(r)) if d not in relatives]
        wanted = relatives + above
        ops = [*first, *(ReadEntry(relative, optional=True) for relative in wanted)]
        results = (await self.target.run(ControlProgram(ops))).results
        out = []
        for relative, result in zip(wanted, results[len(first) :]):
            state = _prior(result, relative)
            if relative in above and state is not None:
                continue
            out.append((relative, state))
        return out

    async def write_text(self, path: str, content: str, *, read_before: bool,
                         then: Sequence[Operation] = (), first: Sequence[Operation] = ()) -> WriteOutcome:
        """Replace the file with ``content`` (an existing file keeps its
        mode); with ``read_before``, its prior state is read in the same
        program (for the turn's checkpoint). Missing directories above it
        are made with the default mode and reported. ``then``: operations
        run in the same program after the write (the file-state record's
        snapshot of what was written), their results in the outcome;
        ``first``: operations run before anything else (a failure among
        them writes nothing)."""
        relative = self.relative(path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise refused(path, "content is not valid Unicode text") from None
        ops: list = list(first)
        if read_before:
            ops.append(ReadEntry(relative, optional=True))
        parents = _ancestors(relative)
        first_parent = len(ops)
        ops += [_made_directory(parent) for parent in parents]
        ops.append(WriteProject(relative, data))
        written = len(ops)
        ops += then
        results = await self.target.run(ControlProgram(ops))
        before = _prior(results[len(first)], path) if read_before and len(results) > len(first) else None
        last = results[written - 1] if len(results) >= written else None
        if last is None or not last.ok:
            failed = next((r for r in results[:written] if not r.ok and r.status not in (Status.ABSENT, Status.MISMATCH)), None)
            raise refused(path, (failed.reason if failed else None) or "cannot be written")
        made = tuple(parent for parent, result in zip(parents, results[first_parent:]) if result.ok)
        return WriteOutcome(relative, before, read_before, made, tuple(results[written:]))
