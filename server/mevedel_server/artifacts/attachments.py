"""The artifact store as the sessions of one workspace use it: what ties an
item to a session, for the LSP server and the CLI alike.

A session attaches to an item when it creates, writes, restores,
duplicates or comments on it, or attaches it explicitly; only while this
client holds the session writable (a session joined read-only attaches
nothing, and the item is still written). The session keeps the ids in its
sidecar (one metadata publication). A write during the session's turn in
flight makes that item's ``turn`` version when the turn settles.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable

import msgspec

from ..store import Access, SessionChange, SessionService, StoreError
from .errors import ArtifactError
from .records import Comment, VersionEntry
from .store import ArtifactStore, Editor, ItemContent, ItemSummary, check_item_id

_log = logging.getLogger(__name__)


class Listed(msgspec.Struct, frozen=True):
    item: ItemSummary
    attached: bool


class SessionArtifacts:
    def __init__(self, store: ArtifactStore, service: SessionService) -> None:
        self.store = store
        self.service = service
        self._settling: set[asyncio.Task] = set()
        service.on_change.append(self._session_changed)
        service.sessions.expiry_exemptions = self._expiry_exemptions

    # Sessions ---------------------------------------------------------------------

    def _writable(self, session_id: str | None) -> bool:
        if session_id is None or not self.service.is_open(session_id):
            return False
        return self.service.info(session_id).access is Access.WRITABLE

    def attached(self, session_id: str | None) -> frozenset[str]:
        if session_id is None or not self.service.is_open(session_id):
            return frozenset()
        return frozenset(self.service.sessions.attached_artifacts(session_id))

    def editor(self, session_id: str | None) -> Editor | None:
        if not self._writable(session_id):
            return None
        return Editor(session_id, self.service.turns.turn_in_flight(session_id))  # type: ignore[arg-type]

    async def attach_for_work(self, session_id: str | None, item_id: str) -> None:
        """Attach as a side effect of working on the item: never fails the
        work itself (a session that cannot be written keeps its list)."""
        if not self._writable(session_id) or item_id in self.attached(session_id):
            return
        try:
            await self._set(session_id, [*self.service.sessions.attached_artifacts(session_id), item_id])  # type: ignore[arg-type]
        except Exception as exc:  # the item is written; the attachment can be redone
            _log.warning("could not attach %s to session %s: %s", item_id, session_id, exc)

    async def _set(self, session_id: str, ids: Iterable[str]) -> tuple[str, ...]:
        return await self.service.sessions.set_attached_artifacts(session_id, list(ids))

    def _require_session(self, session_id: str | None, doing: str) -> str:
        if session_id is None:
            raise ArtifactError("owner-missing", "session", f"none is current here; open or create one (or name it) to {doing}")
        if not self.service.is_open(session_id):
            raise ArtifactError("owner-missing", session_id, f"the session is not open here; open it to {doing}")
        if not self._writable(session_id):
            raise ArtifactError("read-only", session_id, f"the session is open read-only here; take control of it to {doing}")
        return session_id

    async def attach(self, session_id: str | None, item_id: str) -> tuple[str, bool]:
        sid = self._require_session(session_id, "attach an item")
        await self.store.meta(item_id)  # the item must exist
        if item_id not in self.attached(sid):
            await self._set(sid, [*self.service.sessions.attached_artifacts(sid), item_id])
            self.store.notify(item_id, "attached")
        return sid, True

    async def detach(self, session_id: str | None, item_id: str) -> tuple[str, bool]:
        """Detach an id (also one whose item was deleted meanwhile)."""
        sid = self._require_session(session_id, "detach an item")
        check_item_id(item_id)
        if item_id in self.attached(sid):
            await self._set(sid, [i for i in self.service.sessions.attached_artifacts(sid) if i != item_id])
            self.store.notify(item_id, "detached")
        return sid, False

    # Items --------------------------------------------------------------------------

    async def list(self, session_id: str | None) -> list[Listed]:
        attached = self.attached(session_id)
        return [Listed(item, item.item_id in attached) for item in await self.store.list()]

    async def create(
        self, session_id: str | None, kind: str, title: str, data: bytes | None, *, file_name: str | None = None
    ) -> Listed:
        editor = self.editor(session_id)
        item = await self.store.create(kind, title, data, file_name=file_name, editor=editor)
        await self.attach_for_work(session_id, item.item_id)
        return Listed(item, item.item_id in self.attached(session_id))

    async def read(self, session_id: str | None, item_id: str, *, facts: bool = False) -> tuple[ItemContent, bool]:
        item = await self.store.read(item_id, facts=facts)
        return item, item_id in self.attached(session_id)

    async def write(self, session_id: str | None, item_id: str, data: bytes, *, base_revision: str | None = None) -> str:
        revision = await self.store.write(item_id, data, base_revision=base_revision, editor=self.editor(session_id))
        await self.attach_for_work(session_id, item_id)
        return revision

    async def restore(self, session_id: str | None, item_id: str, number: int) -> str:
        revision = await self.store.restore(item_id, number, editor=self.editor(session_id))
        await self.attach_for_work(session_id, item_id)
        return revision

    async def save_version(self, session_id: str | None, item_id: str) -> VersionEntry:
        return await self.store.save_version(item_id, editor=self.editor(session_id))

    async def versions(self, item_id: str) -> list[VersionEntry]:
        await self.settled()  # a turn that just settled has its version listed
        return await self.store.versions(item_id)

    async def duplicate(self, session_id: str | None, item_id: str, title: str | None) -> Listed:
        copy = await self.store.duplicate(item_id, title, editor=self.editor(session_id))
        await self.attach_for_work(session_id, copy.item_id)
        return Listed(copy, copy.item_id in self.attached(session_id))

    async def comment(self, session_id: str | None, item_id: str, text: str) -> Comment:
        """A comment reaches the session working on the item: the writing
        session when it has the item attached, else the item's dedicated
        session (when the pair agrees)."""
        meta, _ = await self.store.meta(item_id)
        routed = session_id if session_id is not None and item_id in self.attached(session_id) else None
        if routed is None and meta.dedicated_session is not None:
            routed = meta.dedicated_session
        comment = await self.store.comment(item_id, text, author="user", routed_to=routed)
        await self.attach_for_work(session_id, item_id)
        return comment

    async def delete(self, item_id: str) -> str | None:
        """Delete the item, and its dedicated session with it (closed here
        first) unless a turn runs there: that one stays as an ordinary
        session. Returns the session kept."""
        meta, _ = await self.store.meta(item_id)
        sid = meta.dedicated_session
        running = sid is not None and self.service.is_open(sid) and self.service.turns.turn_in_flight(sid) is not None
        await self.store.delete(item_id)
        if sid is None or not await self._names_back(sid, item_id):
            return None
        if running:
            try:
                await self.service.sessions.set_dedicated_artifact(sid, None)
            except Exception as exc:
                _log.warning("session %s stays named as %s's conversation: %s", sid, item_id, exc)
            return sid
        try:
            await self.service.sessions.delete_session(sid)
        except Exception as exc:
            _log.warning("could not delete %s's conversation %s: %s", item_id, sid, exc)
            return sid
        return None

    # Dedicated sessions ---------------------------------------------------------------

    async def conversation(self, item_id: str) -> tuple[str, bool]:
        """The item's own conversation, open here: the session the item
        names when that session names the item back, else a new one (its
        title is the item's). Returns (session id, created)."""
        meta, _ = await self.store.meta(item_id)
        named = meta.dedicated_session
        if named is not None and await self._names_back(named, item_id):
            return named, False
        info = await self.service.sessions.create(meta.title)
        new = info.session_id
        # The session is saved naming the item before the item names it, so
        # a pair is never named from one side only by this process.
        await self.service.sessions.set_dedicated_artifact(new, item_id)
        await self._set(new, [item_id])
        if await self.store.set_dedicated_session(item_id, new, expected=named):
            return new, True
        # Another process made the item's conversation meanwhile: ours
        # becomes an ordinary session, and the winner's is opened.
        await self.service.sessions.set_dedicated_artifact(new, None)
        await self.service.sessions.close(new)
        meta, _ = await self.store.meta(item_id)
        if meta.dedicated_session is None or not await self._names_back(meta.dedicated_session, item_id):
            raise ArtifactError("conflict", item_id, "its conversation changed while it was being opened; try again")
        return meta.dedicated_session, False

    async def _names_back(self, session_id: str, item_id: str) -> bool:
        try:
            if not self.service.is_open(session_id):
                await self.service.sessions.open(session_id)
            return self.service.sessions.dedicated_artifact(session_id) == item_id
        except StoreError:
            return False

    async def hidden_sessions(self, rows: Iterable) -> frozenset[str]:
        """The listed sessions that are an item's own conversation (the
        session names the item and the item names it back): session lists
        leave them out. Costs nothing when no row names an item."""
        claims = {row.session_id: row.dedicated_artifact for row in rows if getattr(row, "dedicated_artifact", None)}
        if not claims:
            return frozenset()
        named = {item.item_id: item.meta.dedicated_session for item in await self.store.list()}
        return frozenset(sid for sid, item_id in claims.items() if named.get(item_id) == sid)

    async def _expiry_exemptions(self) -> dict[str, str]:
        """Every session an existing item names as its conversation is kept
        (a superset of the agreeing pairs: keeping errs safe)."""
        return {
            item.meta.dedicated_session: f"the conversation of artifact {item.meta.title!r} ({item.item_id}), which still exists"
            for item in await self.store.list()
            if item.meta.dedicated_session
        }

    async def request_handover(self, item_id: str) -> ItemSummary:
        return await self.store.request_handover(item_id)

    # Turns --------------------------------------------------------------------------

    def _session_changed(self, change: SessionChange) -> None:
        if change.reason != "settled":
            return
        task = asyncio.get_running_loop().create_task(self.store.settle_turn(change.session_id, change.settled_turns))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def settled(self) -> None:
        """Wait for the versions of turns that already settled."""
        while self._settling:
            await asyncio.gather(*list(self._settling), return_exceptions=True)

    async def close(self) -> None:
        await self.settled()
        await self.store.close()


_PER_SERVICE: weakref.WeakKeyDictionary[SessionService, SessionArtifacts] = weakref.WeakKeyDictionary()


def session_artifacts(service: SessionService, **store_options) -> SessionArtifacts:
    """The one :class:`SessionArtifacts` of ``service`` (made on the first
    call, with ``store_options`` for its :class:`ArtifactStore`): a second one
    would settle every turn twice and install its own expiry exemptions."""
    work = _PER_SERVICE.get(service)
    if work is None:
        work = _PER_SERVICE[service] = SessionArtifacts(ArtifactStore(service.target, service.client, **store_options), service)
    return work
