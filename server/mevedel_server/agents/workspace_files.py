"""The agent's file access (ACP ``fs/read_text_file`` and
``fs/write_text_file``), on the workspace's ``Target``.

An agent names files by absolute path; only paths below the workspace root
it was given are served, and never mevedel's own ``.mevedel/`` state. Reads
and writes go through the target like every durable byte, so the same code
serves an SSH workspace, and the target's rules (no symbolic link followed,
regular files only, never a blocking open) hold for agents too. A write
reads the file's prior bytes in the same control program, so its pre-turn
state enters the checkpoint exactly as it was when it was replaced.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from acp import RequestError

from ..store.layout import STATE_DIR
from ..targets import ControlProgram, MakeDirs, OpResult, Read, Status, Target, WriteProject

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


def _prior(result: OpResult, path: str) -> bytes | None:
    """A file's bytes before a write (``None``: it did not exist), from an
    optional ``Read`` of it; a refusal naming ``path`` when it cannot be
    read (a directory, a link, ...)."""
    if result.status is Status.OK:
        return result.value
    if result.status is Status.ABSENT:
        return None
    raise refused(path, result.reason or "cannot be read before writing")


@dataclass(frozen=True)
class WriteOutcome:
    relative: str
    #: The bytes replaced (None: the file did not exist), when they were read.
    before: bytes | None
    read_before: bool


class WorkspaceFiles:
    def __init__(self, target: Target, root: str, *, open_document: Callable[[str], str | None] | None = None) -> None:
        self.target = target
        self.root = posixpath.normpath(root)
        #: An editor's unsaved text for a workspace-relative path, if any.
        self.open_document = open_document

    def relative(self, path: str) -> str:
        """The workspace-relative spelling of an agent's path, or a refusal
        naming it."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise refused(str(path), "is not a file path")
        if not require_unicode(path):
            raise refused(path, NOT_UNICODE)
        full = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(self.root, path))
        if full == self.root or not full.startswith(self.root.rstrip("/") + "/"):
            raise refused(path, f"is outside the workspace {self.root}")
        relative = full[len(self.root.rstrip("/")) + 1 :]
        if relative.split("/", 1)[0] == STATE_DIR:
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

    async def read_before(self, paths: Sequence[str]) -> list[tuple[str, bytes | None]]:
        """The current bytes of files about to be written by someone else
        (an ApplyPatch of the tool server), in one program: ``(relative,
        bytes or None)`` per path, as :meth:`write_text` reads them."""
        relatives = [self.relative(path) for path in paths]
        if not relatives:
            return []
        results = await self.target.run(ControlProgram([Read(relative, optional=True) for relative in relatives]))
        if len(results) < len(relatives):
            failed = next((r for r in results if not r.ok and r.status is not Status.ABSENT), None)
            raise refused(paths[len(results) - 1], (failed.reason if failed else None) or "cannot be read before writing")
        return [(relative, _prior(result, path)) for relative, result, path in zip(relatives, results, paths)]

    async def write_text(self, path: str, content: str, *, read_before: bool) -> WriteOutcome:
        """Replace the file with ``content``; with ``read_before``, its prior
        bytes are read in the same program (for the turn's checkpoint)."""
        relative = self.relative(path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise refused(path, "content is not valid Unicode text") from None
        ops = []
        if read_before:
            ops.append(Read(relative, optional=True))
        parent = posixpath.dirname(relative)
        if parent:
            ops.append(MakeDirs(parent, optional=True))
        ops.append(WriteProject(relative, data))
        results = await self.target.run(ControlProgram(ops))
        before = _prior(results[0], path) if read_before else None
        last = results[len(ops) - 1] if len(results) >= len(ops) else None
        failed = next((r for r in results if not r.ok and r.status is not Status.ABSENT), None)
        if last is None or not last.ok:
            raise refused(path, (failed.reason if failed else None) or "cannot be written")
        return WriteOutcome(relative, before, read_before)
