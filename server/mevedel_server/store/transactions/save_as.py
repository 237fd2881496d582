"""Save As: a new session from the source's current committed publication.

The child gets a fresh ID and the explicit name the user gave (naming is
``explicit``, the naming input dropped), and otherwise the committed state
as it is: every chat, the prompt and file-snapshot indexes, the file
history, lineage, settings and attached artifact ids. Only the manifest's
logical artifacts are copied (as the spec says): no lease, publication
history, recovery record or ``local/`` file of the source.

:func:`prepare_save_as` reads the committed head (refusing a turn in
flight, live or committed) and validates the name; its token names the
source's lease generation and head. :func:`commit_save_as` rechecks them
(:class:`~.lifecycle_token.StaleState`) and creates the child through
:func:`~.fork.publish_child`: the child's lease is acquired before any of its
bytes are written and one complete replacement publication is its commit
point, so until then no reader sees anything of it; a failure before it
removes the child and never touches the source. Work is proportional to the
current logical state, not to the source's retained generations: only the
head's manifest and the bytes it names are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...targets import Target
from ..authority.lease import DEFAULT_LEASE_SECONDS, ClientIdentity
from ..authority.publication import donors_of
from ..content.sidecar import (
    NameRefused,
    NamingState,
    agent_history_note,
    normalize_display_name,
)
from ..content.turns import Conversation
from .fork import ChildOptions, ChildSession, publish_child, recheck_lease
from .lifecycle_token import LifecycleRefused, StateToken
from .snapshot_cut import cut_snapshot, whole
from .two_phase import (
    Source,
    commit,
    committed_state,
    issue_token,
    parse_token,
    plan_time,
    prepare,
    refuse_in_flight,
    refuse_live,
)


@dataclass(frozen=True)
class SaveAsImpact:
    session_id: str
    #: The child's display name (normalized).
    name: str
    turns: int
    segments: int
    #: Chats: those closed by /clear plus the current one.
    chats: int
    #: Logical artifacts and their bytes the child's publication writes.
    artifacts: int
    size: int
    token: StateToken
    #: What happens to the agent's own history (None: there is none).
    agent_history: str | None = None


def _name(session_id: str, name: str) -> str:
    try:
        return normalize_display_name(name)
    except NameRefused as refused:
        raise LifecycleRefused(session_id, f"the new session's name: {refused}", kind="invalid-params") from None


@dataclass(frozen=True)
class SaveAs:
    """A copy of the session as a new session named ``name``, as a plan of
    the two-phase skeleton (``child``: how its commit opens the copy)."""

    op: ClassVar[str] = "save-as"
    name: str
    at: int | None = None
    child: ChildOptions | None = None

    async def prepare(self, source: Source) -> SaveAsImpact:
        sid = source.session_id
        display = _name(sid, self.name)
        refuse_live(sid, source.live, "save it as a new session")
        state = await committed_state(source)
        refuse_in_flight(state, "save it as a new session")
        sidecar = state.sidecar
        token = issue_token(self.op, state, plan_time(state, self.at), {"name": display}, {})
        entries = state.snapshot.manifest.entries if state.snapshot.manifest else {}
        return SaveAsImpact(
            sid,
            display,
            sidecar.total_turn_count,
            sidecar.current_segment,
            len(sidecar.chapters) + 1,
            len(entries),
            sum(e.size for e in entries.values()),
            token,
            agent_history_note(sidecar.engine, copy=True),
        )

    @classmethod
    def from_token(cls, token: StateToken, *, child: ChildOptions) -> SaveAs:
        name = token.subject.get("name")
        if not isinstance(name, str):
            raise LifecycleRefused(token.session_id, "the token names no new session name", kind="invalid-params")
        return cls(_name(token.session_id, name), token.at, child)

    async def commit(self, source: Source, token: StateToken) -> ChildSession:
        assert self.child is not None
        refuse_live(source.session_id, source.live, "save it as a new session")
        state = await recheck_lease(source.target, token)
        refuse_in_flight(state, "save it as a new session")
        cut = whole(state.state)
        display = self.name

        def build(child_id: str, at: int):
            changes = dict(
                session_id=child_id,
                display_name=display,
                naming_state=NamingState.EXPLICIT,
                naming_input=None,
                created_at=at,
                updated_at=at,
                # The copy keeps the attached items; the item's own
                # conversation stays the original.
                dedicated_artifact=None,
            )
            return cut_snapshot(state.state, cut, changes)

        return await publish_child(
            source.target, self.child.client, build, at=token.at, donors=donors_of(state.snapshot),
            source=(state.session_id, "save as"), **self.child.opening,
        )


async def prepare_save_as(
    target: Target, session_id: str, name: str, *, live: Conversation | None = None, at: int | None = None
) -> SaveAsImpact:
    """The impact of saving the session as a new session named ``name``."""
    return await prepare(SaveAs(name, at), Source(target, session_id, live))


async def commit_save_as(
    target: Target,
    token: StateToken | str,
    client: ClientIdentity,
    *,
    live: Conversation | None = None,
    live_ids: Sequence[str] = (),
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    keep_lease: bool = False,
) -> ChildSession:
    """Recheck the source and create the named copy."""
    parsed = parse_token(token, (SaveAs.op,))
    child = ChildOptions(client, live_ids, lease_seconds, keep_lease)
    return await commit(SaveAs, Source(target, parsed.session_id, live), parsed, child=child)
