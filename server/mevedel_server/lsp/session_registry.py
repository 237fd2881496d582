"""The server's sessions: one ``SessionService`` per workspace folder, all
as one client of the store (this server process), and the folder's current
session.

Creating or opening a session makes it the folder's current session: the
session-relative addresses (``work://`` descendants, ``artifact://``,
``history://root``) of requests and documents in that folder resolve against
it, and ``history://root`` reads its live conversation. Closing it clears
the choice (the ``currentSession`` setting applies again). Changes of an open
session's committed or access state are sent as ``mevedel/session/didChange``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from mevedel_protocol import converter, methods

from .. import store, targets
from ..loading import OnFirstUse
from .errors import failure
from .follow import FollowManager
from .kept_saves import tell_kept_save
from .workspaces import Folder

if TYPE_CHECKING:
    from ..store import LiveHistory, SessionChange, SessionControl
    from ..targets import Target
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: The session messages, made by the first one sent.
wire = OnFirstUse("mevedel_protocol.session")

class SessionRegistry:
    def __init__(self, ls: MevedelLanguageServer, client: store.ClientIdentity | None = None) -> None:
        self.ls = ls
        self._client = client
        # Keyed by Folder.key: a local root or a remote address.
        self._services: dict[str, tuple[Folder, store.SessionService]] = {}
        self._current: dict[str, str] = {}
        #: Called with every new folder service (features attach to it).
        self.on_service: list[Callable[[Folder, store.SessionService], None]] = []
        #: Each folder's control transfer (``lsp/control.py`` attaches it).
        self.controls: dict[str, SessionControl] = {}
        #: Session watchers and the following of read-only sessions.
        self.follow = FollowManager(ls)
        ls.on_settings_changed.append(self._apply_settings)

    @property
    def client(self) -> store.ClientIdentity:
        """This server process, as one client of every workspace's store:
        made with the first service (the store's records load with it)."""
        if self._client is None:
            self._client = store.ClientIdentity.generate()
        return self._client

    def start(self, folders: list[Folder]) -> None:
        """The server started (``initialized``): each local folder's service
        exists, and its expired sessions are swept in the background. A
        remote folder's waits for its first use (no connection at start)."""
        for folder in folders:
            if folder.remote is None:
                try:
                    self.service(folder)
                except Exception as error:  # a folder that cannot hold sessions says so when used
                    _log.warning("workspace folder %s: %s", folder.uri, error)

    def service(self, folder: Folder) -> store.SessionService:
        known = self._services.get(folder.key)
        if known is not None:
            return known[1]
        try:
            target = targets.workspace_target(folder.remote or folder.root)
        except targets.TargetError as error:
            raise failure("unavailable", folder.uri, f"the workspace folder cannot hold sessions: {error.reason}") from None
        settings = self.ls.settings
        service = store.SessionService(
            target,
            self.client,
            lease_seconds=settings.lease_seconds,
            git_excludes=store.PRODUCT_STORAGE["git_excludes"],
            # The spool the mevedel command shares: a save the SSH host could
            # not record outlives this process, whoever resumes next.
            pending_spool=store.workspace_spool(folder.remote or folder.root),
            stopped_turn_changes=functools.partial(self._stopped_turn_changes, target),
            **_storage(settings),
        )
        service.on_change.append(lambda change: self._changed(folder, change))
        service.on_spool.append(lambda notice: tell_kept_save(self.ls, folder, notice))
        service.sessions.sweep_expired_soon()
        self.follow.attach(folder, service)
        self._services[folder.key] = (folder, service)
        for attach in self.on_service:
            attach(folder, service)
        return service

    async def _stopped_turn_changes(self, target: Target, session_id: str, turn_id: str, working: str, max_file_bytes: int):
        """What a turn a stopped server left in flight changed, under this
        server's ``checkpointExclude``."""
        from ..agents import stopped_turn_changes

        exclude = tuple(self.ls.settings.checkpoint_exclude)
        return await stopped_turn_changes(target, session_id, turn_id, working, max_file_bytes=max_file_bytes, checkpoint_exclude=exclude)

    def _apply_settings(self) -> None:
        for _folder, service in self._services.values():
            service.sessions.configure(**_storage(self.ls.settings))

    def target(self, folder: Folder | None) -> Target | None:
        known = self._services.get(folder.key) if folder is not None else None
        return known[1].target if known is not None else None

    # The current session ------------------------------------------------------

    def current(self, folder: Folder) -> str | None:
        return self._current.get(folder.key)

    def make_current(self, folder: Folder, session_id: str) -> None:
        self._current[folder.key] = session_id

    def forget(self, folder: Folder, session_id: str) -> None:
        if self._current.get(folder.key) == session_id:
            del self._current[folder.key]

    def live_history(self, folder: Folder | None, session_id: str | None) -> LiveHistory | None:
        """The live conversation of ``session_id`` when it is open here."""
        if folder is None or session_id is None:
            return None
        known = self._services.get(folder.key)
        if known is None or not known[1].is_open(session_id):
            return None
        return known[1].live_history(session_id)

    # Lifetime -------------------------------------------------------------------

    async def close_all(self) -> None:
        """Save and release every open session (the server shuts down). The
        folders close together, so one that hangs (an unreachable SSH host)
        does not hold back the others; one that fails is logged."""
        for control in list(self.controls.values()):
            try:
                await control.stop()
            except Exception:
                _log.exception("stopping a control transfer at exit")
        folders = list(self._services.values())
        outcomes = await asyncio.gather(*(self._close_folder(service) for _, service in folders), return_exceptions=True)
        for (folder, _service), outcome in zip(folders, outcomes):
            if isinstance(outcome, BaseException):
                _log.error("closing the sessions of %s failed", folder.uri, exc_info=outcome)
        await self.follow.stop_all()

    @staticmethod
    async def _close_folder(service: store.SessionService) -> None:
        await service.sessions.close_all()
        close = getattr(service.target, "close", None)
        if close is not None:  # an SSH target's connection
            await close()

    def _changed(self, folder: Folder, change: SessionChange) -> None:
        if change.reason == "closed":
            self.forget(folder, change.session_id)
        params = wire.SessionDidChangeParams(
            workspace_folder=folder.uri,
            session_id=change.session_id,
            display_name=change.display_name or change.session_id,
            reason=change.reason,
            settled_turns=change.settled_turns,
            access=change.access.value,
        )
        try:
            self.ls.protocol.notify(methods.SESSION_DID_CHANGE, converter.unstructure(params))
        except Exception:  # a notification that cannot be sent must not fail the save
            _log.exception("could not send %s", methods.SESSION_DID_CHANGE)


def _storage(settings) -> dict:
    """The service options the storage settings give (0 disables)."""
    return {
        "publication_keep_recent": store.PRODUCT_STORAGE["publication_keep_recent"],
        "checkpoint_seconds": settings.checkpoint_interval_seconds or None,
        "session_max_age_days": settings.session_max_age_days or None,
        "session_keep_recent": settings.session_keep_recent,
    }
