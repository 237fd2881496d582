"""``mevedel/artifact/*``: the workspace artifact store, thin handlers over
:class:`~mevedel_server.artifacts.attachments.SessionArtifacts` (one per
workspace folder, made with the folder's session service on first use),
and ``mevedel/artifact/didChange`` for every change made here and, for
the items open here (read through this server) or written here, for every
change of their lease or primary file another process made
(:class:`~mevedel_server.artifacts.item_watch.ItemWatches`, reason
``elsewhere``, naming the holder), and for their holder ceasing to hold
with nothing written (its lease expired, its process on this machine
ended). The items' leases are released when the server exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from mevedel_protocol import converter, methods

from .. import artifacts, store
from ..loading import OnFirstUse
from .handlers import folder as _folder
from .handlers import register_handlers
from .handlers import registry as _registry
from .workspaces import Folder

if TYPE_CHECKING:
    from ..artifacts import Comment, SessionArtifacts, VersionEntry
    from ..store import SessionService
    from .server import MevedelLanguageServer

_log = logging.getLogger(__name__)

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.artifact")


class ArtifactStores:
    """One store per workspace folder, over the folder's session service."""

    def __init__(self, ls: MevedelLanguageServer) -> None:
        self.ls = ls
        self._stores: dict[str, SessionArtifacts] = {}
        self._watches: dict[str, artifacts.ItemWatches] = {}
        self._tasks: set[asyncio.Task] = set()

    def of(self, folder: Folder) -> SessionArtifacts:
        known = self._stores.get(folder.key)
        if known is not None:
            return known
        service: SessionService = _registry(self.ls).service(folder)
        settings = self.ls.settings
        work = artifacts.session_artifacts(
            service,
            max_versions=settings.artifact_max_versions,
            max_version_bytes=settings.artifact_max_version_bytes,
            lease_seconds=settings.lease_seconds,
        )
        work.store.leases.label = self._label()
        work.store.on_change.append(lambda item_id, reason: self._changed(folder, item_id, reason))
        self._watches[folder.key] = artifacts.ItemWatches(
            work.store,
            lambda item_id, state: self._elsewhere(folder, item_id, state),
            cadence=lambda: store.WatchCadence.from_settings(self.ls.settings.session_watch),
        )
        self._stores[folder.key] = work
        return work

    def _label(self) -> str:
        """This server for people told it holds an item: its editor and pid."""
        editor = getattr(self.ls, "client_label", None) or "mevedel language server"
        return f"{editor} (pid {os.getpid()})"

    def watches(self, folder: Folder) -> artifacts.ItemWatches:
        self.of(folder)
        return self._watches[folder.key]

    def _elsewhere(self, folder: Folder, item_id: str, state: artifacts.ItemState) -> None:
        params = wire.ArtifactDidChangeParams(
            workspace_folder=folder.uri,
            id=item_id,
            reason="deleted" if state.revision is None else "elsewhere",
            writable=state.writable,
            holder=state.holder,
            holder_host=state.holder_host,
        )
        self._notify(params)

    def configure(self) -> None:
        settings = self.ls.settings
        for work in self._stores.values():
            work.store.max_versions = settings.artifact_max_versions
            work.store.max_version_bytes = settings.artifact_max_version_bytes

    def _changed(self, folder: Folder, item_id: str, reason: str) -> None:
        if reason in ("written", "restored", "created"):
            # Written here: it may be held here now, and a hand-over request
            # for it is answered as soon as it comes (the watch sees it).
            self._spawn(self._watch_written(folder, item_id))
        self._notify(wire.ArtifactDidChangeParams(workspace_folder=folder.uri, id=item_id, reason=reason))

    async def _watch_written(self, folder: Folder, item_id: str) -> None:
        watches = self._watches.get(folder.key)
        if watches is None or watches.watching(item_id):
            return
        work = self._stores[folder.key]
        try:
            meta, _ = await work.store.meta(item_id)
            if meta.kind in artifacts.LIVE_PRIMARY:
                await watches.watch(item_id)
        except Exception as error:  # an item deleted meanwhile is not watched
            _log.debug("not watching artifact %s: %s", item_id, error)

    def _spawn(self, coroutine) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coroutine)
        except RuntimeError:
            coroutine.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notify(self, params: wire.ArtifactDidChangeParams) -> None:
        try:
            self.ls.protocol.notify(methods.ARTIFACT_DID_CHANGE, converter.unstructure(params))
        except Exception:
            _log.debug("could not send %s", methods.ARTIFACT_DID_CHANGE, exc_info=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for watches in list(self._watches.values()):
            try:
                await watches.close()
            except Exception:
                _log.warning("stopping an artifact watch failed", exc_info=True)
        for work in list(self._stores.values()):
            try:
                await work.close()
            except Exception:
                _log.warning("closing an artifact store failed", exc_info=True)


def _work(ls: MevedelLanguageServer, workspace_folder: str | None, method: str) -> tuple[SessionArtifacts, Folder]:
    folder = _folder(ls, workspace_folder, method)
    return ls.artifacts.of(folder), folder  # type: ignore[attr-defined]


def _session(ls: MevedelLanguageServer, folder, given: str | None) -> str | None:
    return given if given is not None else _registry(ls).current(folder)


def _entry(listed: artifacts.Listed) -> wire.ArtifactEntry:
    meta = listed.item.meta
    return wire.ArtifactEntry(
        id=meta.id,
        title=meta.title,
        kind=meta.kind,
        primary=meta.primary,
        attached=listed.attached,
        updated_at=meta.updated_at,
        versions=listed.item.versions,
        holder_host=listed.item.holder_host,
        holder=listed.item.holder,
    )


def _version(entry: VersionEntry) -> wire.ArtifactVersion:
    return wire.ArtifactVersion(
        number=entry.number,
        at=entry.at,
        reason=entry.reason.value,
        size=entry.size,
        revision=entry.sha256,
        session_id=entry.session_id,
        turn=entry.turn,
    )


def _comment(comment: Comment) -> wire.ArtifactComment:
    return wire.ArtifactComment(
        number=comment.number,
        at=comment.at,
        author=comment.author,
        text=comment.text,
        session_id=comment.session_id,
        delivered_in=comment.delivered_in,
    )


async def list_items(ls, params: wire.ArtifactListParams) -> wire.ArtifactListResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_LIST)
    return wire.ArtifactListResult([_entry(listed) for listed in await work.list(_session(ls, folder, params.session_id))])


async def create(ls, params: wire.ArtifactCreateParams) -> wire.ArtifactEntry:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_CREATE)
    data = None if params.content is None else artifacts.decode_payload(params.content, params.encoding, "content")
    listed = await work.create(
        _session(ls, folder, params.session_id), params.kind, params.title, data, file_name=params.file_name
    )
    return _entry(listed)


async def read(ls, params: wire.ArtifactParams) -> wire.ArtifactReadResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_READ)
    item, attached = await work.read(_session(ls, folder, params.session_id), params.id, facts=True)
    # Open in an editor: another process taking or writing it is told.
    await ls.artifacts.watches(folder).opened(item)  # type: ignore[attr-defined]
    text, encoding = artifacts.encode_for_reader(item.meta.primary, item.meta.kind, item.data)
    return wire.ArtifactReadResult(
        id=item.meta.id,
        title=item.meta.title,
        kind=item.meta.kind,
        primary=item.meta.primary,
        content=text,
        encoding=encoding,
        revision=item.revision,
        attached=attached,
        writable=item.writable,
        comments=[_comment(c) for c in item.comments],
        holder_host=item.holder_host,
        holder=item.holder,
    )


async def write(ls, params: wire.ArtifactWriteParams) -> wire.ArtifactWriteResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_WRITE)
    data = artifacts.decode_payload(params.content, params.encoding, "content")
    revision = await work.write(_session(ls, folder, params.session_id), params.id, data, base_revision=params.base_revision)
    return wire.ArtifactWriteResult(revision)


async def attach(ls, params: wire.ArtifactParams) -> wire.ArtifactAttachResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_ATTACH)
    session_id, attached = await work.attach(_session(ls, folder, params.session_id), params.id)
    return wire.ArtifactAttachResult(id=params.id, session_id=session_id, attached=attached)


async def detach(ls, params: wire.ArtifactParams) -> wire.ArtifactAttachResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_DETACH)
    session_id, attached = await work.detach(_session(ls, folder, params.session_id), params.id)
    return wire.ArtifactAttachResult(id=params.id, session_id=session_id, attached=attached)


async def duplicate(ls, params: wire.ArtifactDuplicateParams) -> wire.ArtifactEntry:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_DUPLICATE)
    return _entry(await work.duplicate(_session(ls, folder, params.session_id), params.id, params.title))


async def delete(ls, params: wire.ArtifactParams) -> wire.ArtifactDeleteResult:
    work, _folder_ = _work(ls, params.workspace_folder, methods.ARTIFACT_DELETE)
    kept = await work.delete(params.id)
    return wire.ArtifactDeleteResult(id=params.id, kept_session=kept)


async def versions(ls, params: wire.ArtifactParams) -> wire.ArtifactVersionsResult:
    work, _folder_ = _work(ls, params.workspace_folder, methods.ARTIFACT_VERSIONS)
    return wire.ArtifactVersionsResult([_version(v) for v in await work.versions(params.id)])


async def save_version(ls, params: wire.ArtifactParams) -> wire.ArtifactVersion:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_SAVE_VERSION)
    return _version(await work.save_version(_session(ls, folder, params.session_id), params.id))


async def restore(ls, params: wire.ArtifactRestoreParams) -> wire.ArtifactWriteResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_RESTORE)
    return wire.ArtifactWriteResult(await work.restore(_session(ls, folder, params.session_id), params.id, params.version))


async def comment(ls, params: wire.ArtifactCommentParams) -> wire.ArtifactComment:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_COMMENT)
    return _comment(await work.comment(_session(ls, folder, params.session_id), params.id, params.text))


async def request_handover(ls, params: wire.ArtifactParams) -> wire.ArtifactEntry:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_REQUEST_HANDOVER)
    item = await work.request_handover(params.id)
    return _entry(artifacts.Listed(item, params.id in work.attached(_session(ls, folder, params.session_id))))


async def conversation(ls, params: wire.ArtifactParams) -> wire.ArtifactConversationResult:
    work, folder = _work(ls, params.workspace_folder, methods.ARTIFACT_CONVERSATION)
    session_id, created = await work.conversation(params.id)
    return wire.ArtifactConversationResult(id=params.id, session_id=session_id, created=created)


HANDLERS = {
    methods.ARTIFACT_LIST: (list_items, None),
    methods.ARTIFACT_CREATE: (create, methods.COMMAND_ARTIFACT_CREATE),
    methods.ARTIFACT_READ: (read, None),
    methods.ARTIFACT_WRITE: (write, methods.COMMAND_ARTIFACT_WRITE),
    methods.ARTIFACT_ATTACH: (attach, methods.COMMAND_ARTIFACT_ATTACH),
    methods.ARTIFACT_DETACH: (detach, methods.COMMAND_ARTIFACT_DETACH),
    methods.ARTIFACT_DUPLICATE: (duplicate, methods.COMMAND_ARTIFACT_DUPLICATE),
    methods.ARTIFACT_DELETE: (delete, methods.COMMAND_ARTIFACT_DELETE),
    methods.ARTIFACT_VERSIONS: (versions, None),
    methods.ARTIFACT_SAVE_VERSION: (save_version, methods.COMMAND_ARTIFACT_SAVE_VERSION),
    methods.ARTIFACT_RESTORE: (restore, methods.COMMAND_ARTIFACT_RESTORE),
    methods.ARTIFACT_COMMENT: (comment, methods.COMMAND_ARTIFACT_COMMENT),
    methods.ARTIFACT_REQUEST_HANDOVER: (request_handover, methods.COMMAND_ARTIFACT_REQUEST_HANDOVER),
    methods.ARTIFACT_CONVERSATION: (conversation, methods.COMMAND_ARTIFACT_CONVERSATION),
}


def register(ls: MevedelLanguageServer) -> None:
    ls.artifacts = ArtifactStores(ls)  # type: ignore[attr-defined]
    # Made with each folder's service, before that service's first sweep of
    # expired sessions runs: the items' own conversations are exempt.
    _registry(ls).on_service.append(lambda folder, _service: ls.artifacts.of(folder))  # type: ignore[attr-defined]
    ls.on_exit.append(ls.artifacts.close)  # type: ignore[attr-defined]
    ls.on_settings_changed.append(ls.artifacts.configure)  # type: ignore[attr-defined]
    register_handlers(ls, HANDLERS)
