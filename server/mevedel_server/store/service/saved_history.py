"""Saved conversations of a workspace (``history://saved``), read from
committed publications only.

A source is one transcript segment of one saved session. Discovery follows
each session's lease head to its validated manifest and sidecar (the
listing's survey); a session whose records cannot be trusted or whose sidecar
is not the current format is left out and counted, never guessed. Reading a
source follows the head afresh and verifies every part's SHA-256 before it
is decoded; nothing here takes a lease, resumes, repairs or writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...targets import Target
from ..authority.publication import CommittedSnapshot, read_committed
from ..authority.workspace import check_session_id
from ..content.inspect import (
    SegmentSource,
    classify_sidecar,
    list_segments,
    read_segment,
)
from ..content.sidecar import SIDECAR_PATH, Sidecar
from ..content.transcript import (
    AgentTask,
    Record,
    agent_part_path,
    decode_agent_transcript,
)
from ..workspace_wide.listing import InspectSessionRow, survey_sessions
from .errors import SessionIncompatible


@dataclass(frozen=True)
class SavedSource:
    session_id: str
    segment: SegmentSource

    @property
    def name(self) -> str:
        return self.segment.name


@dataclass(frozen=True)
class SavedCatalog:
    sources: tuple[SavedSource, ...]
    #: Sessions left out, and why.
    omitted: tuple[InspectSessionRow, ...]


async def saved_catalog(target: Target) -> SavedCatalog:
    """Every saved segment of every compatible saved session."""
    surveys, _now = await survey_sessions(target)
    sources: list[SavedSource] = []
    omitted: list[InspectSessionRow] = []
    for survey in sorted(surveys, key=lambda s: s.name):
        if survey.vanished:
            continue
        if survey.problem is not None:
            omitted.append(survey.problem)
            continue
        if survey.manifest is None:
            continue  # never saved: nothing to read, nothing wrong
        sources += [SavedSource(survey.name, segment) for segment in list_segments(survey.manifest.entries)]
    return SavedCatalog(tuple(sources), tuple(omitted))


@dataclass(frozen=True)
class SavedSession:
    """One session's committed snapshot, its sidecar and its segments."""

    snapshot: CommittedSnapshot
    sidecar: Sidecar | None
    sources: tuple[SavedSource, ...]

    @property
    def session_id(self) -> str:
        return self.snapshot.session_id


async def saved_session(target: Target, session_id: str) -> SavedSession:
    """A session's committed state for reading. Raises SessionMissing for
    no such session and SessionIncompatible for a sidecar that is not the
    current format; an unsaved session has no sources."""
    snapshot = await read_committed(target, check_session_id(session_id))
    if snapshot.manifest is None:
        return SavedSession(snapshot, None, ())
    data = (await snapshot.read_many([SIDECAR_PATH])).get(SIDECAR_PATH) if SIDECAR_PATH in snapshot.manifest.entries else None
    sidecar = classify_sidecar(data)
    if not isinstance(sidecar, Sidecar):
        raise SessionIncompatible(session_id, sidecar)
    sources = tuple(SavedSource(session_id, segment) for segment in list_segments(snapshot.manifest.entries))
    return SavedSession(snapshot, sidecar, sources)


async def read_sources(saved: SavedSession, sources: tuple[SavedSource, ...] | list[SavedSource]) -> list[list[Record]]:
    """The records of each source, all parts read in one program and each
    verified against the manifest before it is decoded."""
    wanted = [part for source in sources for part in source.segment.parts]
    data = await saved.snapshot.read_many(wanted)
    return [read_segment(source.segment, [data[part] for part in source.segment.parts]) for source in sources]


async def read_agent_tasks(saved: SavedSession, path: str) -> list[AgentTask]:
    """The tasks of retained agent ``path``'s own committed transcript
    (none before its first settled task), every part verified."""
    count = saved.sidecar.layout.agent_parts.get(path, 0) if saved.sidecar is not None else 0
    if not count:
        return []
    wanted = [agent_part_path(path, k) for k in range(1, count + 1)]
    data = await saved.snapshot.read_many(wanted)
    return decode_agent_transcript(b"".join(data[part] for part in wanted), label=f"agents/{path}")
