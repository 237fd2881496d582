"""Fork variants: the fork-point group of a response, a star found from
persisted identity alone -- every session whose committed sidecar names
that source and that fork-point ID (the source stores no child list) --
listed Source first, then direct forks oldest to newest. A workspace-wide
reading: the sessions are found by :func:`~.listing.survey_sessions`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...targets import ControlProgram, Read, Target
from ..authority.publication import read_committed
from ..authority.workspace import check_session_id
from ..content.sidecar import (
    SIDECAR_PATH,
    PromptEntry,
    Sidecar,
    SidecarError,
    decode_prompt_lines,
    load_sidecar,
    prompt_page_path,
    shown_name,
)
from ..errors import StoreError
from ..transactions.lifecycle_token import LifecycleRefused
from .listing import survey_sessions


@dataclass(frozen=True)
class ForkPoint:
    source_id: str
    fork_point_id: str
    turn: int


@dataclass(frozen=True)
class Variant:
    session_id: str
    #: ``source``, or the fork type of a child (``conversation``, ``worktree``).
    role: str
    display_name: str
    created_at: int
    latest_preview: str | None
    worktree_branch: str | None
    worktree_directory: str | None
    is_current: bool


@dataclass(frozen=True)
class VariantGroup:
    point: ForkPoint
    #: None when the source is gone or no longer holds the exact point.
    source: Variant | None
    #: Direct forks, oldest first.
    forks: tuple[Variant, ...]

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Source first, then the forks oldest to newest."""
        return ((self.source,) if self.source else ()) + self.forks


async def _sidecar_and_prompts(target: Target, session_id: str) -> tuple[Sidecar, list[PromptEntry]] | None:
    """A session's committed sidecar and prompt index (not its transcript)."""
    try:
        snapshot = await read_committed(target, session_id)
    except StoreError:
        return None
    if snapshot.manifest is None or SIDECAR_PATH not in snapshot.manifest.entries:
        return None
    sidecar = load_sidecar(await snapshot.read(SIDECAR_PATH))
    pages = [prompt_page_path(k) for k in range(1, sidecar.layout.prompt_pages + 1)]
    data = await snapshot.read_many(pages)
    lines = [line + b"\n" for page in pages for line in data[page][:-1].split(b"\n")]
    return sidecar, decode_prompt_lines(lines)


def _variant(session_id: str, sidecar: Sidecar, role: str, current: str) -> Variant:
    worktree = sidecar.worktree
    return Variant(
        session_id,
        role,
        shown_name(sidecar, session_id),
        sidecar.created_at,
        sidecar.latest_user_message,
        worktree.branch if worktree else None,
        worktree.directory if worktree else None,
        session_id == current,
    )


async def fork_variants(target: Target, session_id: str, turn: int) -> VariantGroup:
    """The fork-point group of the response at ``turn`` of ``session_id``."""
    check_session_id(session_id)
    found = await _sidecar_and_prompts(target, session_id)
    if found is None:
        raise LifecycleRefused(session_id, "nothing is committed yet", kind="missing-target")
    sidecar, prompts = found
    if type(turn) is not int or not 1 <= turn <= sidecar.total_turn_count:
        raise LifecycleRefused(session_id, f"there is no settled response at turn {turn!r}", kind="invalid-params")
    point_id = prompts[turn - 1].turn_id
    owner, owner_facts = session_id, found
    # An inherited response belongs to the session it was inherited from.
    for _ in range(32):
        origin = owner_facts[0].fork if owner_facts else None
        if origin is None or turn > origin.turn:
            break
        owner = origin.session_id
        owner_facts = await _sidecar_and_prompts(target, owner)
        if owner_facts is None:
            break
    source: Variant | None = None
    if owner_facts is not None:
        owner_prompts = owner_facts[1]
        if len(owner_prompts) >= turn and owner_prompts[turn - 1].turn_id == point_id and owner_facts[0].total_turn_count >= turn:
            source = _variant(owner, owner_facts[0], "source", session_id)
    forks = await _direct_forks(target, owner, point_id, turn, session_id)
    return VariantGroup(ForkPoint(owner, point_id, turn), source, forks)


async def _direct_forks(target: Target, source_id: str, point_id: str, turn: int, current: str) -> tuple[Variant, ...]:
    surveys, _now = await survey_sessions(target)
    wanted = [
        s for s in surveys if s.manifest is not None and s.paths is not None and SIDECAR_PATH in s.manifest.entries and s.name != source_id
    ]
    forks: list[tuple[int, str, Variant]] = []
    for start in range(0, len(wanted), 64):
        chunk = wanted[start : start + 64]
        reads = await target.run(
            ControlProgram([Read(s.paths.inside(s.manifest.entries[SIDECAR_PATH].published), optional=True) for s in chunk])  # type: ignore[union-attr]
        )
        for survey, read in zip(chunk, reads):
            entry = survey.manifest.entries[SIDECAR_PATH]  # type: ignore[union-attr]
            if not read.ok or len(read.value) != entry.size or hashlib.sha256(read.value).hexdigest() != entry.sha256:
                continue
            try:
                sidecar = load_sidecar(read.value)
            except SidecarError:
                continue
            origin = sidecar.fork
            if origin is None or origin.session_id != source_id or origin.fork_point_id != point_id or origin.turn != turn:
                continue
            if sidecar.total_turn_count < turn:
                continue  # rewound past its fork point
            variant = _variant(survey.name, sidecar, origin.fork_type.value, current)
            forks.append((sidecar.created_at, survey.name, variant))
    return tuple(v for _c, _n, v in sorted(forks, key=lambda f: (f[0], f[1])))
