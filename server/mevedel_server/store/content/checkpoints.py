"""File checkpoints: pre-turn and post-turn content of tracked files.

Content is addressed by SHA-256 and stored once as the logical artifact
``file-history/<sha256>`` however many turns name it. A turn's capture is
taken before its first mutation of the file; later captures in the same turn
keep the first. A file that did not exist is an :class:`~.sidecar.Absent`
marker, not a blob. When something may have changed a file without a capture
(a shell command, an external tool), the turn records a *capture gap* with its
reason: Rewind reports it and never claims to restore that path.

:func:`restore_plan` is what Rewind and Redo read: the content every tracked
file must get back to for a boundary, and the known gaps.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

import msgspec

from ...targets import Entry
from .sidecar import (
    Absent,
    Directory,
    FileSnapshot,
    FileState,
    Present,
    Symlink,
    TurnFiles,
)

FILE_HISTORY_DIR = "file-history"
_HISTORY_PATH = re.compile(r"^file-history/([0-9a-f]{64})\Z")
GAP_REASON_LIMIT = 500


class CaptureError(ValueError):
    """A capture request that cannot be recorded (bad path or reason)."""


def history_path(sha256: str) -> str:
    """Logical path of the stored bytes with this digest."""
    return f"{FILE_HISTORY_DIR}/{sha256}"


def history_digest(logical: str) -> str | None:
    match = _HISTORY_PATH.match(logical)
    return match.group(1) if match else None


#: What a path held: an :class:`Entry`, bare bytes (a regular file whose
#: mode is not known) or None (nothing).
Observed = Entry | bytes | None


def file_state(content: Observed) -> FileState:
    if content is None:
        return Absent()
    if isinstance(content, (bytes, bytearray)):
        return Present(sha256=hashlib.sha256(content).hexdigest(), size=len(content))
    if content.kind == Entry.DIRECTORY:
        return Directory(mode=content.mode if content.mode is not None else 0o755)
    if content.kind == Entry.SYMLINK:
        assert content.data is not None
        return Symlink(target=content.data.decode("utf-8", "surrogateescape"))
    if content.data is None:
        raise CaptureError("a file's state needs its bytes")
    return Present(sha256=hashlib.sha256(content.data).hexdigest(), size=len(content.data), mode=content.mode)


def link_problem(content: Observed) -> str | None:
    """Why ``content`` cannot be recorded (a link target that is not
    UTF-8 text), or None."""
    if isinstance(content, Entry) and content.kind == Entry.SYMLINK:
        assert content.data is not None
        try:
            content.data.decode("utf-8")
        except UnicodeDecodeError:
            return "a symbolic link whose target is not UTF-8 text"
        if not content.data or b"\x00" in content.data or len(content.data) > 4096:
            return "a symbolic link whose target cannot be recorded"
    return None


def limit_gap(max_bytes: int) -> str:
    return f"the file is larger than the {max_bytes}-byte snapshot limit"


def capture_gap_reason(before: Observed, max_bytes: int) -> str | None:
    """The one rule of what a pre-turn state cannot be recorded as: a
    previous regular file over the snapshot limit (or whose bytes were not
    read for their size), a link whose target cannot be recorded. None:
    it can (nothing there never is a gap: Rewind removes what the turn
    made, whatever its size)."""
    if before is None:
        return None
    if isinstance(before, (bytes, bytearray)):
        return limit_gap(max_bytes) if len(before) > max_bytes else None
    if before.kind == Entry.FILE and (before.data is None or before.size > max_bytes):
        return limit_gap(max_bytes)
    return link_problem(before)


class MissingContent(LookupError):
    """A recorded file whose bytes the store no longer holds."""


def entry_of(state: FileState, content) -> Entry | None:
    """The whole state a recorded ``state`` names (None: absent);
    ``content(sha256)`` gives a file's stored bytes or None
    (:class:`MissingContent`)."""
    if isinstance(state, Present):
        data = content(state.sha256)
        if data is None:
            raise MissingContent(state.sha256)
        return Entry.file(data, state.mode)
    if isinstance(state, Directory):
        return Entry.directory(state.mode)
    if isinstance(state, Symlink):
        return Entry.symlink(state.target.encode("utf-8", "surrogateescape"))
    return None


def state_bytes(state: FileState) -> bytes | None:
    """The bytes a state names besides its content digest: a link's target."""
    return state.target.encode("utf-8", "surrogateescape") if isinstance(state, Symlink) else None


def check_tracked_path(path: str) -> str:
    if not isinstance(path, str) or not path:
        raise CaptureError("a tracked file path may not be empty")
    if "\x00" in path or "\n" in path:
        raise CaptureError(f"the tracked file path {path!r} contains a NUL or newline")
    if len(path) > 4096:
        raise CaptureError("the tracked file path is longer than 4096 characters")
    return path


class FileHistory:
    """Content-addressed bytes of tracked files, each stored once. It
    remembers which contents arrived since :meth:`take_new` last ran, so a
    save hands over only those.

    The store only grows, so the first ``count`` contents (in arrival
    order) are a stable view of it at any earlier moment: a save snapshot
    names its contents by that count instead of copying them.
    """

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._order: list[str] = []
        self._position: dict[str, int] = {}
        self._new: list[str] = []

    def store(self, content: Observed) -> FileState:
        state = file_state(content)
        if isinstance(state, Present) and state.sha256 not in self._blobs:
            data = content.data if isinstance(content, Entry) else content
            self._add(state.sha256, bytes(data))  # type: ignore[arg-type]
            self._new.append(state.sha256)
        return state

    def adopt(self, sha256: str, data: bytes) -> None:
        """Bytes already durable (restored from a snapshot): not new."""
        if sha256 not in self._blobs:
            self._add(sha256, data)

    def _add(self, sha256: str, data: bytes) -> None:
        self._blobs[sha256] = data
        self._position[sha256] = len(self._order)
        self._order.append(sha256)

    def get(self, sha256: str, count: int | None = None) -> bytes | None:
        """The content with this digest, if it arrived among the first
        ``count`` contents (default: at all)."""
        if count is not None and self._position.get(sha256, count) >= count:
            return None
        return self._blobs.get(sha256)

    def digests(self, count: int | None = None) -> list[str]:
        return self._order[:count] if count is not None else list(self._order)

    def __contains__(self, sha256: object) -> bool:
        return sha256 in self._blobs

    def __len__(self) -> int:
        return len(self._order)

    def take_new(self) -> list[tuple[str, bytes]]:
        new, self._new = self._new, []
        return [(digest, self._blobs[digest]) for digest in new]


class TurnCapture(msgspec.Struct):
    """The file checkpoint being built by the turn in flight."""

    turn: int
    turn_id: str
    files: dict[str, FileSnapshot] = msgspec.field(default_factory=dict)

    def capture(self, path: str, content: Observed, history: FileHistory) -> FileState | None:
        """Record ``path``'s pre-turn content unless the turn already has a
        capture or a gap for it. Returns the state now recorded (None for a
        gap)."""
        check_tracked_path(path)
        existing = self.files.get(path)
        if existing is not None:
            return existing.pre
        state = history.store(content)
        self.files[path] = FileSnapshot(pre=state)
        return state

    def gap(self, path: str, reason: str) -> bool:
        """Record that ``path`` may change without a capture. A path already
        captured keeps its capture (it was taken before any mutation).
        Returns whether a gap was recorded."""
        check_tracked_path(path)
        reason = " ".join(reason.split()) if isinstance(reason, str) else ""
        if not reason:
            raise CaptureError("a capture gap needs a reason")
        if len(reason) > GAP_REASON_LIMIT:
            raise CaptureError(f"a capture gap reason is longer than {GAP_REASON_LIMIT} characters")
        if path in self.files:
            return False
        self.files[path] = FileSnapshot(pre=None, gap=reason)
        return True

    def settle(self, current: Mapping[str, Observed], history: FileHistory) -> None:
        """Record post-turn content for the tracked paths ``current`` names."""
        unknown = sorted(set(current) - set(self.files))
        if unknown:
            raise CaptureError(f"post-turn content given for {', '.join(map(repr, unknown))}, which this turn does not track")
        for path, content in current.items():
            state = history.store(content)
            snapshot = self.files[path]
            self.files[path] = FileSnapshot(pre=snapshot.pre, post=state, gap=snapshot.gap)

    def record(self) -> TurnFiles:
        return TurnFiles(turn=self.turn, turn_id=self.turn_id, files=dict(sorted(self.files.items())))

    @classmethod
    def from_record(cls, record: TurnFiles) -> TurnCapture:
        return cls(record.turn, record.turn_id, dict(record.files))


def referenced_digests(record: TurnFiles) -> set[str]:
    found = set()
    for snapshot in record.files.values():
        for state in (snapshot.pre, snapshot.post):
            if isinstance(state, Present):
                found.add(state.sha256)
    return found


class RestorePlan(msgspec.Struct, frozen=True):
    #: Path -> the content it must have at the boundary.
    restore: dict[str, FileState]
    #: Path -> why its content at the boundary is unknown.
    gaps: dict[str, str]

    @property
    def complete(self) -> bool:
        return not self.gaps


def restore_plan(turn_files: Sequence[TurnFiles], keep: int) -> RestorePlan:
    """The file state after turn ``keep`` (``keep=0``: before the first
    turn). Every path a later turn touched goes back to what the earliest
    such turn found before it ran; a path whose earliest later record is a
    gap is reported, not restored."""
    restore: dict[str, FileState] = {}
    gaps: dict[str, str] = {}
    for record in sorted(turn_files, key=lambda r: r.turn):
        if record.turn <= keep:
            continue
        for path, snapshot in record.files.items():
            if path in restore or path in gaps:
                continue
            if snapshot.pre is None:
                gaps[path] = snapshot.gap or "capture gap"
            else:
                restore[path] = snapshot.pre
    return RestorePlan(restore, gaps)
