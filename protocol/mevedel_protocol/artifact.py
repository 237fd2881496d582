"""Params and results of the ``mevedel/artifact/*`` requests and the
``mevedel/artifact/didChange`` notification: the workspace artifact store.

Every artifact, document and whiteboard of a workspace has a stable ``id``
and is shown by its ``title`` (two items may share a title). Sessions
attach to items; they never own them. A request that names no session uses
the folder's current session, and without one nothing is attached.

``revision`` is the lowercase SHA-256 of the item's primary file: a write
that names the revision it was based on is refused with ``conflict`` when
the item moved since.
"""

from typing import Literal, Optional

import attrs

#: ``data.kind`` values only the artifact store reports.
ARTIFACT_ERROR_KINDS = frozenset({"item-held", "item-lease-lost"})

ItemKind = Literal["document", "whiteboard", "artifact"]
ContentEncoding = Literal["utf-8", "base64"]


@attrs.define
class ArtifactParams:
    """Name one item."""

    id: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactListParams:
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactEntry:
    """One item of the store, as lists show it. ``holder_host`` is set while
    another server process holds the item's live lease (the item is then
    read-only here until it hands it over)."""

    id: str
    title: str
    kind: ItemKind
    primary: str
    attached: bool
    updated_at: int
    versions: int
    holder_host: Optional[str] = None
    #: That holder for people: its editor or process and its host
    #: (``Neovim 0.12.0 (pid 4242) on vm``), so two editors on one machine
    #: are told apart.
    holder: Optional[str] = None


@attrs.define
class ArtifactListResult:
    items: list[ArtifactEntry]


@attrs.define
class ArtifactCreateParams:
    """Create an item. A document's primary file is ``document.md``, a
    whiteboard's ``scene.excalidraw``; an artifact's is ``file_name``
    (Markdown, HTML or an image). ``content`` defaults to an empty document
    or an empty scene; for an image it is base64 (``encoding``)."""

    kind: ItemKind
    title: str
    content: Optional[str] = None
    encoding: ContentEncoding = "utf-8"
    file_name: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactComment:
    number: int
    at: int
    author: str
    text: str
    #: The session the comment was routed to, when one was.
    session_id: Optional[str] = None
    #: That session's turn whose prompt carried it to the agent, once the
    #: agent answered it.
    delivered_in: Optional[int] = None


@attrs.define
class ArtifactReadResult:
    id: str
    title: str
    kind: ItemKind
    primary: str
    content: str
    encoding: ContentEncoding
    revision: str
    attached: bool
    #: False while another server process holds the item (see ``holder_host``).
    writable: bool
    comments: list[ArtifactComment]
    holder_host: Optional[str] = None
    #: That holder for people: its editor or process and its host.
    holder: Optional[str] = None


@attrs.define
class ArtifactWriteParams:
    """Replace the item's primary file with ``content`` as one whole-item
    write (a document or whiteboard: fenced by the item lease)."""

    id: str
    content: str
    encoding: ContentEncoding = "utf-8"
    base_revision: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactWriteResult:
    revision: str


@attrs.define
class ArtifactDuplicateParams:
    id: str
    title: Optional[str] = None
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactDeleteResult:
    id: str
    #: The dedicated session was kept as an ordinary session (a turn ran there).
    kept_session: Optional[str] = None


@attrs.define
class ArtifactVersion:
    number: int
    at: int
    #: ``replaced``: the content a restore wrote over, recorded before it.
    reason: Literal["turn", "saved", "created", "restored", "replaced"]
    size: int
    revision: str
    session_id: Optional[str] = None
    turn: Optional[int] = None


@attrs.define
class ArtifactVersionsResult:
    versions: list[ArtifactVersion]


@attrs.define
class ArtifactRestoreParams:
    id: str
    version: int
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactCommentParams:
    id: str
    text: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class ArtifactAttachResult:
    id: str
    session_id: str
    attached: bool


@attrs.define
class ArtifactDidChangeParams:
    """An item changed: reload it. Through this server, ``reason`` is
    ``created``, ``written``, ``restored``, ``deleted``, ``attached``,
    ``detached``, ``commented``, ``delivered`` (comments reached an
    agent), ``versioned``, ``handed-over`` or ``fenced`` (a write of it was refused because another process now
    holds it). For an item open here (read through this server) or written
    here, another process taking its lease, writing it or handing it back
    is ``elsewhere``, with ``writable`` and, while another process holds it,
    ``holder`` and ``holder_host`` (``deleted`` when it was deleted there)."""

    workspace_folder: str
    id: str
    reason: str
    #: Set with ``elsewhere``: whether this server may write it now.
    writable: Optional[bool] = None
    #: Who holds it, for people: the editor or process and its host.
    holder: Optional[str] = None
    holder_host: Optional[str] = None


@attrs.define
class ArtifactConversationResult:
    """The item's dedicated session (created on first use; hidden from
    session lists, exempt from expiry while the item exists)."""

    id: str
    session_id: str
    created: bool
