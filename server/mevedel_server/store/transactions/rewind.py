"""Rewind: discard everything after a boundary, in place, restoring every
captured project file to the state the boundary owned.

Two boundaries (:class:`~.snapshot_cut.Boundary`): *after* turn N's response
keeps N turns; *before* turn N's prompt keeps N - 1 (before turn 1 empties the
session). The file plan reads the checkpoints: a path a discarded turn touched
goes back to the pre-turn content of the earliest such turn; for an *after*
boundary, every path turn N captured with a known post-turn content gets that
content. A path whose earliest discarded record is a capture gap is reported,
never restored.

:class:`Rewind` is the plan the two-phase skeleton (:mod:`.two_phase`) runs.
Its prepare reads only; the :class:`RewindImpact` lists the discarded
prompts in order, every captured file to restore (with the checkpoint it
comes from and whether the working tree differs from it now), the known
capture gaps, the captured files changed externally since (the working tree
differs from their last recorded post-turn content) and the files whose Git
index entry will differ from the restored working tree; its ``token`` names
the lease generation, the head and the content hash of every file in the
plan. Its commit is the in-place transaction (:mod:`.in_place`).

The sidecar holds no goal, tasks, queues or pending inputs, so there is none
to clear; the reconciliation reminder is recomputed from what survives (set
when the last kept turn was interrupted). Refused while a turn is in flight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...targets import Target
from ..authority.publication import Publisher
from ..content.sidecar import agent_history_note
from ..content.transcript import AgentTask, Outcome
from ..content.turns import Conversation
from .in_place import (
    FROM_TARGET,
    ExternalChange,
    FileRestore,
    InPlacePlan,
    InPlaceResult,
    KnownGap,
    commit_in_place,
    contents,
    files_at,
    index_git_for,
    plan_for,
    remember_plan,
    survey_files,
)
from .lifecycle_token import InvalidToken, StateToken
from .project_files import GitCheck
from .recovery import artifacts_digest
from .snapshot_cut import (
    Boundary,
    CommittedState,
    SessionState,
    Side,
    cut_snapshot,
    kept_outcome,
    locate,
    whole,
)
from .two_phase import (
    Source,
    TurnLabel,
    commit,
    committed_state,
    issue_token,
    plan_time,
    prepare,
    refuse_in_flight,
    refuse_live,
)


@dataclass(frozen=True)
class RewindImpact:
    session_id: str
    boundary: Boundary
    kept_turns: int
    #: The prompts discarded, in order.
    discarded: tuple[TurnLabel, ...]
    #: The transcript changes (prompts discarded, or a compaction or /clear
    #: after the boundary undone).
    transcript_changes: bool
    restores: tuple[FileRestore, ...]
    gaps: tuple[KnownGap, ...]
    externally_modified: tuple[ExternalChange, ...]
    git: GitCheck
    token: StateToken
    #: What happens to the agent's own history (None: there is none).
    agent_history: str | None = None

    @property
    def empty(self) -> bool:
        """Nothing would be discarded and no file would change."""
        return not self.transcript_changes and not any(r.changes for r in self.restores)

    @property
    def coverage_complete(self) -> bool:
        return not self.gaps


def plan_rewind(committed: CommittedState, boundary: Boundary, at: int) -> InPlacePlan:
    refuse_in_flight(committed, "rewind")
    state = committed.state
    cut = locate(state, boundary)
    if cut == whole(state):
        # Nothing after the boundary: the snapshot stays exactly as it is
        # (only restored files, if any, make the commit publish).
        artifacts: Mapping[str, bytes] = state.artifacts
    else:
        outcome = kept_outcome(state, cut)
        changes = dict(updated_at=max(at, state.sidecar.updated_at), reconciliation_pending=outcome is Outcome.INTERRUPTED)
        artifacts = cut_snapshot(state, cut, changes)
    planned, gaps = files_at(state.files, cut.kept_turns, boundary.side)
    wanted = contents(planned, state, committed.session_id)
    assert committed.head is not None
    return InPlacePlan(committed.session_id, committed.head, artifacts, wanted, planned, gaps, artifacts_digest(artifacts))


@dataclass(frozen=True)
class Rewind:
    """The Rewind to ``boundary`` as a plan of the two-phase skeleton.
    ``at``: the target time to stamp; ``workspace_root``: a local directory
    for Git to run in (None: skip the Git check; by default the git where
    the target keeps its files)."""

    op: ClassVar[str] = "rewind"
    boundary: Boundary
    at: int | None = None
    workspace_root: Path | None = FROM_TARGET

    async def prepare(self, source: Source) -> RewindImpact:
        sid = source.session_id
        refuse_live(sid, source.live, "rewind")
        state = await committed_state(source)
        when = plan_time(state, self.at)
        plan = plan_rewind(state, self.boundary, when)
        git = index_git_for(source.target, self.workspace_root)
        survey = await survey_files(source, plan, state.state, git)
        subject = {"side": self.boundary.side.value, "turn": self.boundary.turn}
        token = issue_token(self.op, state, when, subject, survey.hashes)
        remember_plan(token, plan, survey if source.at_once else None)
        by_agents = changed_by_agents(state.state, self.boundary.kept_turns)
        rows = tuple(dataclasses.replace(row, agents=by_agents[row.path]) if row.path in by_agents else row for row in survey.rows)
        discarded = tuple(TurnLabel.of(e) for e in state.state.prompts[self.boundary.kept_turns :])
        gaps = tuple(plan.gaps[p] for p in sorted(plan.gaps))
        changes_transcript = plan.artifacts is not state.artifacts
        note = agent_history_note(state.sidecar.engine, copy=False)
        kept = self.boundary.kept_turns
        return RewindImpact(
            sid, self.boundary, kept, discarded, changes_transcript, rows, gaps, survey.external, survey.git, token, note
        )

    @classmethod
    def from_token(cls, token: StateToken) -> Rewind:
        side, turn = token.subject.get("side"), token.subject.get("turn")
        try:
            return cls(Boundary(Side(side), turn), token.at)  # type: ignore[arg-type]
        except ValueError:
            raise InvalidToken("it names no rewind boundary") from None

    async def commit(self, source: Source, token: StateToken) -> InPlaceResult:
        publisher = _held(source)

        async def replan(state: CommittedState) -> InPlacePlan:
            return plan_rewind(state, self.boundary, token.at)

        plan = await plan_for(publisher, token, replan)
        return await commit_in_place(publisher, token, plan, operation="rewind", source=source)


def changed_by_agents(state: SessionState, kept_turns: int) -> dict[str, tuple[str, ...]]:
    """Which retained agents changed each path in the turns after
    ``kept_turns``: the paths their tasks' records name (only the turns of
    segments that hold an agent's task are decoded)."""
    found: dict[str, list[str]] = {}
    holds_tasks: dict[int, bool] = {}
    for entry in state.prompts[kept_turns:]:
        if entry.segment not in holds_tasks:
            holds_tasks[entry.segment] = any(_AGENT_TASK in part for part in state.segment_parts(entry.segment))
        if not holds_tasks[entry.segment]:
            continue
        for _index, record in state.turn_records(entry):
            if isinstance(record, AgentTask):
                for path in record.paths:
                    names = found.setdefault(path, [])
                    if record.path not in names:
                        names.append(record.path)
    return {path: tuple(names) for path, names in found.items()}


#: How an agent's task record starts (msgspec writes the tag first).
_AGENT_TASK = b'{"kind":"agent_task"'


def _held(source: Source) -> Publisher:
    assert source.publisher is not None, "an in-place commit needs the held lease's publisher"
    return source.publisher


async def prepare_rewind(
    target: Target,
    session_id: str,
    boundary: Boundary,
    *,
    live: Conversation | None = None,
    at: int | None = None,
    workspace_root: Path | None = FROM_TARGET,
    recovery_checked: bool = False,
) -> RewindImpact:
    """The impact of rewinding to ``boundary`` and the token to commit it
    (:class:`Rewind`'s prepare, for a caller that holds no lease)."""
    return await prepare(Rewind(boundary, at, workspace_root), Source(target, session_id, live, recovery_checked=recovery_checked))


async def commit_rewind(publisher: Publisher, token: StateToken | str, *, live: Conversation | None = None) -> InPlaceResult:
    """Recheck what :func:`prepare_rewind` saw and rewind (see the module)."""
    lease = publisher.lease
    return await commit(Rewind, Source(lease.target, lease.session_id, live, publisher), token)
