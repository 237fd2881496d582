"""Following sessions owned elsewhere: ``mevedel/session/didPublish``, and
the ``mevedel/session/setFollow`` and ``mevedel/session/refresh`` requests.

:class:`FollowManager` keeps one :class:`~..store.watching.watch.SessionWatcher` per
open session that something here watches (shared by its subscribers), and
subscribes the follower to every session that is read-only here with
following on: a wake runs one follow step of the service, and every step
with something to tell (whichever path ran it) goes out as ``didPublish``.
Which sessions are followed is re-decided on every session change (joined,
released, lost, closed...), on ``setFollow`` and on a settings change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mevedel_protocol import converter, methods

from .. import store
from ..loading import OnFirstUse
from ..targets import TargetError
from .handlers import (
    folder as _folder,
)
from .handlers import (
    register_handlers,
)
from .handlers import (
    registry as _registry,
)
from .handlers import (
    session_id as _session_id,
)
from .workspaces import Folder

if TYPE_CHECKING:
    from mevedel_protocol.session import SessionParams

    from ..store import FollowUpdate, SessionChange, SessionService, Wake
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.follow")

Key = tuple[str, str]  # (Folder.key, session id)


class _Shared:
    def __init__(self, watcher: store.SessionWatcher) -> None:
        self.watcher = watcher
        self.callbacks: list = []


class FollowManager:
    def __init__(self, ls: MevedelLanguageServer) -> None:
        self.ls = ls
        self._watches: dict[Key, _Shared] = {}
        #: Followed sessions: key -> the follower's unsubscriber.
        self._following: dict[Key, Callable[[], None]] = {}
        self._services: dict[str, tuple[Folder, SessionService]] = {}
        self._stopping: set[asyncio.Task] = set()
        ls.on_settings_changed.append(self.settings_changed)

    # Shared watchers ------------------------------------------------------------

    def watch(self, folder: Folder, service: SessionService, session_id: str, callback) -> Callable[[], None]:
        """Subscribe ``callback(wake)`` to the session's shared watcher
        (started on first use, stopped with its last subscriber). Every
        subscriber is woken once right away, as a watcher's start wakes its
        first one."""
        key = (folder.key, session_id)
        shared = self._watches.get(key)
        fresh = shared is None
        if shared is None:
            shared = self._watches[key] = _Shared(self._new_watcher(service, session_id))
        shared.callbacks.append(callback)
        shared.watcher.subscribe(callback)
        if fresh:
            shared.watcher.start()  # its armed wake reaches the first subscriber
        else:
            # A later subscriber gets its first look too: whatever changed
            # before it subscribed raised no wake it could see.
            shared.watcher.refresh()
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            shared.callbacks.remove(callback)
            shared.watcher.unsubscribe(callback)
            if not shared.callbacks and self._watches.get(key) is shared:
                del self._watches[key]
                self._later(shared.watcher.stop())

        return release

    def _new_watcher(self, service: SessionService, session_id: str) -> store.SessionWatcher:
        return store.SessionWatcher(
            service.target,
            session_id,
            cadence=self._cadence(),
            # A poller uses the active cadence while a transfer is in flight.
            active=lambda: service.transfer_in_flight(session_id),
        )

    def watcher(self, folder: Folder, session_id: str) -> store.SessionWatcher | None:
        shared = self._watches.get((folder.key, session_id))
        return shared.watcher if shared is not None else None

    # Which sessions are followed ------------------------------------------------

    def attach(self, folder: Folder, service: SessionService) -> None:
        """A new workspace service: follow its read-only sessions."""
        self._services[folder.key] = (folder, service)
        service.following.follow_default = self.ls.settings.follow_published
        service.on_change.append(lambda change: self._changed(folder, service, change))
        service.following.on_follow.append(lambda update: self._publish(folder, update))

    def _changed(self, folder: Folder, service: SessionService, change: SessionChange) -> None:
        self.reconcile(folder, service, change.session_id)

    def reconcile(self, folder: Folder, service: SessionService, session_id: str) -> None:
        key = (folder.key, session_id)
        want = service.is_open(session_id) and service.following.active(session_id)
        if want and key not in self._following:

            async def step(_wake: Wake) -> None:
                await self._step(folder, service, session_id)

            self._following[key] = self.watch(folder, service, session_id, step)
        elif not want and key in self._following:
            self._following.pop(key)()

    def settings_changed(self) -> None:
        cadence = self._cadence()
        for (folder_key, session_id), shared in self._watches.items():
            known = self._services.get(folder_key)
            if cadence.notifications != shared.watcher.cadence.notifications and known is not None:
                self._replace(shared, known[1], session_id)
                continue
            shared.watcher.cadence = cadence
            shared.watcher.refresh()  # re-read the cadence now, not after the old wait
        for folder, service in list(self._services.values()):
            service.following.follow_default = self.ls.settings.follow_published
            for session_id in service.open_sessions():
                self.reconcile(folder, service, session_id)

    def _replace(self, shared: _Shared, service: SessionService, session_id: str) -> None:
        """Notifications turned on or off: the same subscribers, on a watcher
        of the other kind (its first wake makes them look again)."""
        old, shared.watcher = shared.watcher, self._new_watcher(service, session_id)
        for callback in shared.callbacks:
            shared.watcher.subscribe(callback)
        shared.watcher.start()
        self._later(old.stop())

    def mode(self, folder: Folder, session_id: str) -> str | None:
        if (folder.key, session_id) not in self._following:
            return None
        watcher = self.watcher(folder, session_id)
        return watcher.mode.value if watcher is not None else None

    async def _step(self, folder: Folder, service: SessionService, session_id: str) -> None:
        if not (service.is_open(session_id) and service.following.active(session_id)):
            return
        try:
            await service.following.follow(session_id)  # what it has to tell arrives through on_follow
        except (store.StoreError, TargetError) as error:
            # The next wake looks again; a session that cannot be read is
            # not advanced, and the copy here stays as it was.
            _log.warning("session %s: following it failed: %s", session_id, error)

    # The notification -------------------------------------------------------------

    def _publish(self, folder: Folder, update: FollowUpdate) -> None:
        params = did_publish_params(folder, update)
        try:
            self.ls.protocol.notify(methods.SESSION_DID_PUBLISH, converter.unstructure(params))
        except Exception:  # a notification that cannot be sent must not fail the step
            _log.exception("could not send %s", methods.SESSION_DID_PUBLISH)

    # Lifetime ----------------------------------------------------------------------

    async def stop_all(self) -> None:
        for release in list(self._following.values()):
            release()
        self._following.clear()
        watches, self._watches = list(self._watches.values()), {}
        for shared in watches:
            await shared.watcher.stop()
        for task in list(self._stopping):
            await task

    def _cadence(self) -> store.WatchCadence:
        return store.WatchCadence.from_settings(self.ls.settings.session_watch)

    def _later(self, stopping: Awaitable[None]) -> None:
        task = asyncio.ensure_future(stopping)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)


def did_publish_params(folder_uri_or_folder: Folder | str, update: FollowUpdate) -> wire.SessionDidPublishParams:
    uri = folder_uri_or_folder if isinstance(folder_uri_or_folder, str) else folder_uri_or_folder.uri
    change = update.change
    turns = [wire.PublishedTurn(t.turn, t.turn_id, t.segment, t.change, t.state, t.preview) for t in change.turns] if change else []
    return wire.SessionDidPublishParams(
        workspace_folder=uri,
        session_id=update.session_id,
        generation=update.generation,
        display_name=update.display_name,
        named=update.named,
        settled_turns=update.settled_turns,
        turns=turns,
        removed_turns=list(change.removed) if change else [],
        renamed=bool(change and change.renamed),
        holder_changed=update.holder_changed,
        holder_host=update.holder_host,
        lease_state=update.lease_state,
        held_back=update.held_back,
    )


# Requests ----------------------------------------------------------------------------


def _manager(ls: MevedelLanguageServer) -> FollowManager:
    return _registry(ls).follow


async def set_follow(ls: MevedelLanguageServer, params: wire.SetFollowParams) -> wire.FollowState:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_SET_FOLLOW)
    service = _registry(ls).service(folder)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_SET_FOLLOW)
    service.following.set_follow(sid, params.enabled)
    manager = _manager(ls)
    manager.reconcile(folder, service, sid)
    following = service.following.active(sid)
    if following:
        # Turned on: catch up now rather than at the next change.
        watcher = manager.watcher(folder, sid)
        if watcher is not None:
            watcher.refresh()
    return wire.FollowState(sid, service.following.follows(sid), following, manager.mode(folder, sid))


async def refresh(ls: MevedelLanguageServer, params: SessionParams) -> wire.SessionRefreshResult:
    folder = _folder(ls, params.workspace_folder, methods.SESSION_REFRESH)
    service = _registry(ls).service(folder)
    sid = _session_id(ls, folder, params.session_id, methods.SESSION_REFRESH)
    update = await service.following.follow(sid)
    publication = did_publish_params(folder, update) if update.status in ("advanced", "held-back") else None
    return wire.SessionRefreshResult(sid, update.status, publication)


#: request -> (handler, command name or None); its params class is the catalog's.
HANDLERS: dict[str, tuple[Callable[..., Awaitable[Any]], str | None]] = {
    methods.SESSION_SET_FOLLOW: (set_follow, methods.COMMAND_SESSION_SET_FOLLOW),
    methods.SESSION_REFRESH: (refresh, methods.COMMAND_SESSION_REFRESH),
}


def register(ls: MevedelLanguageServer) -> None:
    register_handlers(ls, HANDLERS)
