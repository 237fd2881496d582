"""Inspection without resumption: classify a sidecar, enumerate and read a
snapshot's transcript segments, never synthesizing a session.

:func:`classify_sidecar` turns any byte string into either the current
:class:`~.sidecar.Sidecar` or an :class:`InspectRow` carrying the rejection
reason and the version the bytes claimed: a listing shows the row, and no
minimal session is guessed from it. :func:`list_segments` works from the
logical paths of a validated manifest alone, so a session whose sidecar is
unreadable can still be inspected segment by segment; gaps stay visible.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from .sidecar import (
    Sidecar,
    SidecarError,
    SidecarErrorKind,
    load_sidecar,
    preview_of,
    read_sidecar,
)
from .transcript import (
    Prompt,
    Record,
    SegmentClose,
    SegmentError,
    decode_segment,
    parse_segment_part,
    segment_name,
)


class InspectRow(msgspec.Struct, frozen=True):
    """Why a session directory is listed for inspection only."""

    kind: SidecarErrorKind
    reason: str
    #: The ``format_version`` the sidecar claimed (None when it claimed none).
    observed_version: object = None


def classify_sidecar(data: bytes | None, *, read_only: bool = False) -> Sidecar | InspectRow:
    """The current sidecar, or the Inspect row that replaces it. ``None``
    means the snapshot holds no sidecar. ``read_only``: the caller only
    reads its fields, and it is decoded once (:func:`.sidecar.read_sidecar`)."""
    if data is None:
        return InspectRow(SidecarErrorKind.MISSING, "the session has no sidecar")
    try:
        return read_sidecar(data) if read_only else load_sidecar(data)
    except SidecarError as exc:
        return InspectRow(exc.kind, exc.reason, exc.observed_version)


class SegmentSource(msgspec.Struct, frozen=True):
    """The stored parts of one segment, as a manifest names them."""

    number: int
    parts: tuple[str, ...]
    #: False when a part number is missing (parts 1..N must all exist).
    contiguous: bool

    @property
    def name(self) -> str:
        return segment_name(self.number)


def list_segments(logical_paths: Iterable[str]) -> list[SegmentSource]:
    """Every segment the paths name, in segment order; a missing segment
    number is simply absent from the list (the gap stays visible)."""
    found: dict[int, dict[int, str]] = {}
    for logical in logical_paths:
        parsed = parse_segment_part(logical)
        if parsed is not None:
            found.setdefault(parsed[0], {})[parsed[1]] = logical
    sources = []
    for number in sorted(found):
        parts = found[number]
        ordered = tuple(parts[k] for k in sorted(parts))
        sources.append(SegmentSource(number, ordered, sorted(parts) == list(range(1, len(parts) + 1))))
    return sources


def read_segment(source: SegmentSource, parts: Sequence[bytes]) -> list[Record]:
    """Decode a segment from its parts' bytes (in ``source.parts`` order)."""
    if not source.contiguous:
        raise SegmentError(source.name, None, "a stored part of this segment is missing")
    if len(parts) != len(source.parts):
        raise SegmentError(source.name, None, f"expected {len(source.parts)} parts, got {len(parts)}")
    for index, data in enumerate(parts, start=1):
        if not data.endswith(b"\n"):
            raise SegmentError(source.name, None, f"part {index} does not end with a complete line: it is truncated")
    return decode_segment(b"".join(parts), label=source.name, expected=source.number)


class SegmentRow(msgspec.Struct, frozen=True):
    """One row of a segment picker."""

    number: int
    name: str
    #: "readable", "missing" or "unreadable".
    status: str
    latest_prompt: str | None = None
    turns: int = 0
    closed_by: str | None = None
    reason: str | None = None


def describe_segment(number: int, records: Sequence[Record] | None = None, error: str | None = None) -> SegmentRow:
    """A picker row from decoded records, a read error, or neither (missing)."""
    name = segment_name(number)
    if error is not None:
        return SegmentRow(number, name, "unreadable", reason=error)
    if records is None:
        return SegmentRow(number, name, "missing", reason=f"{name} is not in the snapshot")
    prompts = [r for r in records if isinstance(r, Prompt)]
    last = records[-1] if records else None
    closed_by = last.reason.value if isinstance(last, SegmentClose) else None
    latest = preview_of(prompts[-1].text) if prompts else None
    return SegmentRow(number, name, "readable", latest, len(prompts), closed_by)
