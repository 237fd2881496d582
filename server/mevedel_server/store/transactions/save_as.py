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

from ...targets import Target
from ..authority.lease import DEFAULT_LEASE_SECONDS, ClientIdentity
from ..authority.publication import donors_of
from ..authority.workspace import check_session_id
from ..content.sidecar import (
    NameRefused,
    NamingState,
    agent_history_note,
    normalize_display_name,
)
from ..content.turns import Conversation
from .fork import ChildSession, publish_child, recheck_lease
from .lifecycle_token import LifecycleRefused, StateToken
from .rewind import plan_time, refuse_in_flight, refuse_live
from .snapshot_cut import cut_snapshot, load_committed_state, whole


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


async def prepare_save_as(
    target: Target, session_id: str, name: str, *, live: Conversation | None = None, at: int | None = None
) -> SaveAsImpact:
    check_session_id(session_id)
    display = _name(session_id, name)
    refuse_live(session_id, live, "save it as a new session")
    state = await load_committed_state(target, session_id)
    refuse_in_flight(state, "save it as a new session")
    sidecar = state.sidecar
    token = StateToken.make(
        op="save-as",
        session_id=session_id,
        lease_generation=state.snapshot.lease_generation,
        lease_client=state.lease_client,
        head=state.head,
        at=plan_time(state, at),
        subject={"name": display},
        files={},
    )
    entries = state.snapshot.manifest.entries if state.snapshot.manifest else {}
    return SaveAsImpact(
        session_id,
        display,
        sidecar.total_turn_count,
        sidecar.current_segment,
        len(sidecar.chapters) + 1,
        len(entries),
        sum(e.size for e in entries.values()),
        token,
        agent_history_note(sidecar.engine, copy=True),
    )


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
    parsed = StateToken.parse(token, "save-as")
    name = parsed.subject.get("name")
    if not isinstance(name, str):
        raise LifecycleRefused(parsed.session_id, "the token names no new session name", kind="invalid-params")
    display = _name(parsed.session_id, name)
    refuse_live(parsed.session_id, live, "save it as a new session")
    state = await recheck_lease(target, parsed)
    refuse_in_flight(state, "save it as a new session")
    cut = whole(state.state)

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
        target,
        client,
        build,
        at=parsed.at,
        live_ids=live_ids,
        lease_seconds=lease_seconds,
        keep_lease=keep_lease,
        donors=donors_of(state.snapshot),
    )
