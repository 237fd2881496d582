"""The chat input's history of one workspace (the spec's input ring).

Every editor's chat input and the CLI's ``mevedel prompt`` line editor
recall the prompts sent in this workspace from one file, through the
workspace's target (so an SSH workspace's history lives on its host)::

    .mevedel/input-history      {"version": 1, "entries": [oldest, ..., newest]}

The rules, from the spec's "Input history":

- A prompt is recorded when it is sent to a session this client holds
  writable, whether or not the agent then runs it (a refused prompt can be
  recalled and sent again). Blank text is not recorded.
- At most :data:`MAX_ENTRIES` (the spec's 500); the oldest go first.
- Text already in the history moves to the newest place instead of being
  kept twice, so stepping back never shows the same prompt two times.
- A missing file is an empty history. A file that cannot be read as a
  history is renamed aside (``input-history.corrupt-<hex>``, its bytes
  kept) and the history starts empty; the reader that renamed it gets one
  warning naming both files, and later readers find no such file.

A write is a compare-and-set (``Verify`` of the bytes read, then
``Replace``, one program holding the ``.mevedel`` directory's lock),
retried when another process wrote between, so two front ends recording at
once lose neither prompt.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    CreateExclusive,
    MakeDirs,
    Operation,
    OpResult,
    Read,
    Remove,
    Replace,
    Status,
    Target,
    Verify,
    raise_for_result,
)
from ..layout import STATE_DIR

HISTORY_PATH = f"{STATE_DIR}/input-history"
#: The spec's ``mevedel-view-input-history-size`` default.
MAX_ENTRIES = 500
#: Compare-and-set attempts before a write gives up (each lost only to
#: another writer's success).
_ATTEMPTS = 64


class _HistoryFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    version: Literal[1]
    entries: list[str]


_encoder = msgspec.json.Encoder()
_decoder = LazyDecoder(msgspec.json.Decoder, _HistoryFile)


class HistoryRead(msgspec.Struct, frozen=True):
    """The history, oldest first; ``warning`` once, when a corrupt file was
    renamed aside by this read."""

    entries: tuple[str, ...]
    warning: str | None = None


def _clean(text: str) -> str:
    # A lone surrogate (possible in JSON text) cannot be stored as UTF-8.
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _decode(data: bytes) -> list[str]:
    history = _decoder.decode(data)
    if not all(isinstance(e, str) and e.strip() for e in history.entries):
        raise ValueError("an entry is blank")
    return history.entries[-MAX_ENTRIES:]


def with_entry(entries: list[str] | tuple[str, ...], text: str) -> list[str]:
    """``entries`` with ``text`` recorded as the newest (moved there when
    already present), at most :data:`MAX_ENTRIES`."""
    out = [e for e in entries if e != text]
    out.append(text)
    return out[-MAX_ENTRIES:]


def history_read() -> Operation:
    """The read a :meth:`InputHistory.record` starts from, to run in a
    program that makes or needs ``.mevedel`` anyway (a session's creation
    or resume); its result is ``record``'s ``read``."""
    return Read(HISTORY_PATH, optional=True)


def record_ops(read: OpResult, text: str) -> list[Operation] | None:
    """The guarded write recording ``text`` over what :func:`history_read`
    found (``read``), to run in another program holding the ``.mevedel``
    lock; None when that read cannot be written over (unreadable, corrupt,
    blank text): :meth:`InputHistory.record` then judges it."""
    if not isinstance(text, str) or not text.strip() or read.status not in (Status.OK, Status.ABSENT):
        return None
    data = read.value if read.ok else None
    try:
        entries = _decode(data) if data is not None else []
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None
    return _write_ops(data, with_entry(entries, _clean(text)))


def _write_ops(data: bytes | None, entries: list[str]) -> list[Operation]:
    """The history written as ``entries`` over the bytes ``data`` it was
    read as (None: absent), only while they are still those."""
    return [Verify(HISTORY_PATH, data), Replace(HISTORY_PATH, _encoder.encode(_HistoryFile(version=1, entries=entries)))]


def recorded(results: Sequence[OpResult]) -> bool:
    """Whether :func:`record_ops` wrote (their results, in order)."""
    return len(results) == 2 and all(result.ok for result in results)


class InputHistory:
    """The input history of the workspace at ``target``'s root."""

    def __init__(self, target: Target) -> None:
        self.target = target

    async def _load(self, *, for_write: bool = False, read: OpResult | None = None) -> tuple[bytes | None, list[str], str | None]:
        """The file's bytes (None: absent), its entries, and the warning of
        a corrupt file renamed aside here. ``for_write``: the directory of
        the write's lock is made in the same program (a workspace's first
        record would otherwise pay a round trip for it). ``read``: the
        result of :func:`history_read`, run already (first attempt only)."""
        for _ in range(_ATTEMPTS):
            op = history_read()
            if read is not None:
                result, read = read, None
            else:
                lead = [MakeDirs(STATE_DIR, optional=True)] if for_write else []
                result = (await self.target.run(ControlProgram([*lead, op])))[len(lead)]
            if result.status is Status.ABSENT:
                return None, [], None
            if not result.ok:
                # Not a regular file (a directory, a link): unreadable, but
                # never removed or followed.
                raise_for_result(op, result)
            data = result.value
            try:
                return data, _decode(data), None
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as error:
                reason = str(error)
            aside = f"{HISTORY_PATH}.corrupt-{os.urandom(6).hex()}"
            ops = [Verify(HISTORY_PATH, data), CreateExclusive(aside, data), Remove(HISTORY_PATH)]
            done = await self.target.run(ControlProgram(ops, lock=STATE_DIR))
            if done[0].status is Status.MISMATCH:
                continue  # another process replaced or renamed it meanwhile: look again
            for step, outcome in zip(ops, done):
                raise_for_result(step, outcome)
            return None, [], (
                f"the input history {HISTORY_PATH} could not be read ({reason}); it was renamed to {aside} "
                "and the history starts empty"
            )
        raise RuntimeError(f"{HISTORY_PATH} kept changing while it was read")

    async def read(self) -> HistoryRead:
        _, entries, warning = await self._load()
        return HistoryRead(tuple(entries), warning)

    async def record(self, text: str, *, read: OpResult | None = None) -> HistoryRead:
        """Record ``text`` as the newest entry (nothing for blank text);
        the history as written. ``read``: the result of
        :func:`history_read`, run in a program that left ``.mevedel`` in
        place (the write's ``Verify`` proves it still current)."""
        if not isinstance(text, str) or not text.strip():
            return await self.read()
        text = _clean(text)
        warning = None
        for _ in range(_ATTEMPTS):
            data, entries, said = await self._load(for_write=True, read=read)
            read = None
            warning = warning or said
            new = with_entry(entries, text)
            ops = _write_ops(data, new)
            done = await self.target.run(ControlProgram(ops, lock=STATE_DIR))
            if done[0].status is Status.MISMATCH:
                continue  # another writer came between: record over its entries
            for step, outcome in zip(ops, done):
                raise_for_result(step, outcome)
            return HistoryRead(tuple(new), warning)
        raise RuntimeError(f"{HISTORY_PATH} kept changing while the prompt was recorded")
