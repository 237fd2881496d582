"""shared:// -- the workspace's whiteboards and documents, as text views
(spec: "shared://"; ``spec/adr-workspace-artifact-store.md``).

Items live in the workspace artifact store (:mod:`mevedel_server.artifacts`);
this module reads them through the workspace's target, never writing
(writes go through the store: ``mevedel/artifact/*``, or an ApplyPatch of
an authored file ``.mevedel/artifacts/ID/...``).

- ``shared://`` (Read): every document and whiteboard of the workspace, by
  title, each with its id and kind, those attached to the request's session
  marked (from the session's committed sidecar: attaching publishes it),
  then ``shared://library``. Plain artifacts are not shared items.
- ``shared://ID`` (Read, Grep): the item's overview of hashed lines. A
  document has one line per Markdown block (heading, paragraph, list item,
  fenced code, ...): the first 8 hex digits of the SHA-256 of the block's
  text, two spaces, the block on one line (its line breaks shown as
  `` ⏎ ``). A whiteboard has one line per element not deleted: its hash
  (of the element's canonical JSON), id, type and text, if any; a text
  longer than :data:`MAX_ELEMENT_TEXT` is cut and points at the element's
  full address.
- ``shared://ID/discussions``, ``shared://ID/history`` (Read, Grep): the
  comments, the kept versions (newest first).
- ``shared://ID/elements/ELEMENT`` (Read, Grep): one whiteboard element's
  JSON, pretty-printed.
- ``view.png``, ``images/KEY``, ``sheet.png``: ``unavailable`` -- this
  server renders no images (a deviation); the reason names the text view.
- ``shared://library[/NAME]`` (Read, Grep): the element libraries stored
  as ``.mevedel/artifacts/.library/NAME.excalidrawlib`` (Excalidraw
  library JSON), their items one line each.

An id the grammar accepts but the store does not hold is ``missing-target``
naming it (every item of the workspace can be read, attached or not).
Identities are checked by the grammar before any I/O.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import msgspec

from ...addresses import Address, AddressError, ErrorKind, Operation
from ...artifacts import (
    ARTIFACTS_DIR,
    STATE_ROOT,
    ArtifactError,
    ArtifactStore,
    Discussion,
    ItemMeta,
    ItemPaths,
    RecordRefused,
    VersionEntry,
    decode_record,
    is_item_id,
)
from ...store import ClientIdentity, SessionMissing, saved_session
from ...targets import ControlProgram, ListDir, Read, ReadFiles, Stat, Status, Target
from ..engine.attempt import Prepared, Request
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing
from ..engine.local_paths import open_directory
from ..engine.options import GrepOptions, ReadOptions
from ..engine.places import Place, Places
from ..engine.projection import page_lines
from ..engine.results import GrepResult, ReadResult
from ..engine.runners import fail, refusal, run_program
from ..engine.search import GrepOutcome, grep_lines, limit_notice

BASE = "shared://"
LIBRARY = "shared://library"
LIBRARY_DIR = f"{ARTIFACTS_DIR}/.library"
LIBRARY_SUFFIX = ".excalidrawlib"
#: The kinds shared:// serves (plain artifacts are files, not shared items).
SHARED_KINDS = ("document", "whiteboard")
#: A whiteboard element's text longer than this is cut in the overview.
MAX_ELEMENT_TEXT = 200
HASH_DIGITS = 8
BREAK = " \u23ce "
#: Text over this is decoded and projected in a worker thread.
_THREAD_BYTES = 256 * 1024
_LIBRARY_BUDGET = 64 * 1024 * 1024
#: The store reads here only; this identity holds no lease and takes none.
_READER = ClientIdentity("mevedel-resolver", "resolver")

NO_IMAGES = (
    "mevedel-lsp cannot render whiteboard or library images (no drawing engine runs in this server); "
    "Read {text} for its text view"
)


# -- errors ----------------------------------------------------------------------

_ARTIFACT_KINDS = {
    "missing-target": ErrorKind.MISSING_TARGET,
    "unreadable": ErrorKind.UNREADABLE,
    "containment": ErrorKind.CONTAINMENT,
    "unavailable": ErrorKind.UNAVAILABLE,
}


def _store_error(error: ArtifactError, authored: str, item_id: str | None = None) -> AddressError:
    kind = _ARTIFACT_KINDS.get(error.kind, ErrorKind.UNAVAILABLE)
    if kind is ErrorKind.MISSING_TARGET and item_id is not None:
        return _no_item(authored, item_id)
    return AddressError(kind, authored, error.reason)


def _no_item(authored: str, item_id: str) -> AddressError:
    return AddressError(
        ErrorKind.MISSING_TARGET,
        authored,
        f"no whiteboard or document {item_id} in the workspace; Read shared:// lists them",
    )


def _owner_missing(authored: str) -> AddressError:
    return AddressError(ErrorKind.OWNER_MISSING, authored, "no workspace is open; shared:// items belong to the workspace")


# -- prepare ---------------------------------------------------------------------


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored = address.authored
    text_view = _text_view_of(address)
    if text_view is not None:  # an image: nothing to read, whatever the world holds
        return Prepared("virtual", fail(AddressError(ErrorKind.UNAVAILABLE, authored, NO_IMAGES.format(text=text_view))))
    workspace = Places(context).workspace
    if workspace is None:
        return Prepared("virtual", fail(_owner_missing(authored)))
    if workspace.target is None:
        if workspace.linked:
            workspace.require(authored)
        return Prepared("virtual", fail(AddressError(ErrorKind.UNAVAILABLE, authored, "the workspace root does not exist")))
    target = workspace.target
    if address.scope == "listing":
        return Prepared("virtual", _later(_listing, target, context, request, address))
    if address.scope == "library":
        return Prepared("virtual", _later(_library, target, request, address))
    return Prepared("virtual", _later(_item, target, request, address))


def _later(function: Callable[..., Any], *args: object) -> Callable[[], Any]:
    async def run() -> object:
        return await function(*args)

    return run


def _text_view_of(address: Address) -> str | None:
    """For an image address, the text view that shows the same thing."""
    path = address.path
    if address.scope == "item" and path and path[0] in ("view.png", "images"):
        return f"{BASE}{address.key}"
    if address.scope == "library" and path == ("sheet.png",):
        return f"{LIBRARY}/{address.key}" if address.key else LIBRARY
    return None


# -- the listing -----------------------------------------------------------------


async def _listing(target: Target, context: ResolverContext, request: Request, address: Address) -> ReadResult:
    authored = address.authored
    items = await _shared_items(target, authored)
    attached, why_not = await _attached(target, context)
    lines = []
    for meta in items:
        mark = ", attached to this session" if meta.id in attached else ""
        lines.append(f"{meta.title} -- {BASE}{meta.id} ({meta.kind}{mark})")
    lines.append(f"{LIBRARY} -- element libraries")
    notes = []
    if not items:
        notes.append(
            "no whiteboards or documents in this workspace yet (plain artifacts are files: Read .mevedel/artifacts/ID/...)"
        )
    if why_not:
        notes.append(why_not)
    return read_listing(lines, request, authored, address.canonical, "\n".join(notes) or None)


async def _shared_items(target: Target, authored: str) -> list[ItemMeta]:
    try:
        listed = await ArtifactStore(target, _READER).list()
    except ArtifactError as error:
        raise _store_error(error, authored) from None
    return [summary.meta for summary in listed if summary.meta.kind in SHARED_KINDS]


async def has_items(context: ResolverContext) -> bool:
    """Whether the workspace holds at least one whiteboard or document
    (the roster's rule for advertising shared://); False when it cannot
    be read."""
    workspace = Places(context).workspace
    if workspace is None or workspace.target is None:
        return False
    try:
        return bool(await _shared_items(workspace.target, BASE))
    except Exception:
        return False


async def _attached(target: Target, context: ResolverContext) -> tuple[frozenset[str], str | None]:
    """The ids the request's session has attached, from its committed
    sidecar (attaching publishes it); a note when they cannot be known."""
    session_id = context.session_id
    if session_id is None:
        return frozenset(), "no session is bound, so no item is marked as attached"
    try:
        saved = await saved_session(target, session_id)
    except SessionMissing:  # not saved yet: nothing attached is published
        return frozenset(), None
    except Exception:
        return frozenset(), f"the attachments of session {session_id} could not be read, so no item is marked"
    if saved.sidecar is None:
        return frozenset(), None
    return frozenset(saved.sidecar.attached_artifacts), None


# -- one item ------------------------------------------------------------------------


async def _item(target: Target, request: Request, address: Address) -> ReadResult | GrepResult:
    authored, canonical = address.authored, address.canonical
    item_id = address.key
    assert item_id is not None
    if not is_item_id(item_id):  # the grammar allows a leading '_' or '-'; the store never makes one
        raise _no_item(authored, item_id)
    store = ArtifactStore(target, _READER)
    try:
        meta, _raw = await store.meta(item_id)
    except ArtifactError as error:
        raise _store_error(error, authored, item_id) from None
    if meta.kind not in SHARED_KINDS:
        raise AddressError(
            ErrorKind.MISSING_TARGET,
            authored,
            f"{item_id} is an artifact ({meta.primary}), not a whiteboard or document; "
            f"Read its file .mevedel/artifacts/{item_id}/{meta.primary}",
        )
    part = address.path
    if part == ("history",):
        try:
            versions = await store.versions(item_id)
        except ArtifactError as error:
            raise _store_error(error, authored, item_id) from None
        lines = history_lines(versions)
        notice = f"{meta.title} ({meta.kind}): {len(versions)} kept version(s), newest first"
        return _over(lines, request, authored, canonical, notice)
    paths = ItemPaths(item_id)
    if part == ("discussions",):
        data = await _read(target, paths.discussion, authored, optional=True)
        try:
            comments = decode_record(Discussion, data, f"discussion of {item_id}").comments if data is not None else []
        except RecordRefused as bad:
            raise AddressError(ErrorKind.UNREADABLE, authored, f"its discussion cannot be trusted ({bad.reason})") from None
        lines = discussion_lines(comments)
        notice = f"{meta.title} ({meta.kind}): " + (f"{len(comments)} comment(s)" if comments else "no comments yet")
        return _over(lines, request, authored, canonical, notice)
    data = await _read(target, paths.file(meta.primary), authored)
    assert data is not None
    if part and part[0] == "elements":
        element_id = part[1]
        if meta.kind != "whiteboard":
            raise AddressError(ErrorKind.MISSING_TARGET, authored, f"{item_id} is a document: it has no elements; Read {BASE}{item_id}")
        lines = await _threaded(len(data), element_lines, data, element_id, authored, item_id)
        return _over(lines, request, authored, canonical, None)
    if meta.kind == "whiteboard":
        lines = await _threaded(len(data), whiteboard_overview, data, item_id, authored)
        notice = (
            f"{meta.title} (whiteboard): one line per element -- hash, id, type, text; "
            f"{BASE}{item_id}/elements/ID shows one in full"
        )
    else:
        lines = await _threaded(len(data), document_overview, data, authored)
        notice = f"{meta.title} (document): one line per Markdown block -- hash, text (line breaks as \u23ce)"
    return _over(lines, request, authored, canonical, notice)


async def _threaded(size: int, function: Callable[..., list[str]], *args: object) -> list[str]:
    if size > _THREAD_BYTES:
        return await asyncio.to_thread(function, *args)
    return function(*args)


async def _read(target: Target, path: str, authored: str, *, optional: bool = False) -> bytes | None:
    op = Read(path, optional=optional)
    result = (await run_program(target, ControlProgram([op]), authored))[0]
    if result.status is Status.ABSENT and optional:
        return None
    if not result.ok:
        raise refusal(result, authored, missing="its file is missing from the store")
    return result.value


def _over(lines: list[str], request: Request, authored: str, canonical: str, notice: str | None) -> ReadResult | GrepResult:
    if request.operation is Operation.READ:
        assert isinstance(request.options, ReadOptions)
        return page_lines(lines, request.options, authored, canonical, "file", notice)
    if request.operation is Operation.GREP:
        assert isinstance(request.options, GrepOptions) and request.grep is not None
        outcome = GrepOutcome(files_searched=1)
        outcome.truncated = grep_lines(canonical, lines, request.grep, request.options, outcome)
        parts = [notice] if notice else []
        if outcome.truncated:
            parts.append(limit_notice(request.options.limit, "matching line", "matching lines"))
        return GrepResult(authored, canonical, tuple(outcome.matches), 1, outcome.truncated, "\n".join(parts) or None)
    raise AddressError(ErrorKind.INTERNAL, authored, f"{request.operation.value} reached a shared:// text view")


# -- text views (pure) ---------------------------------------------------------------


def block_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_DIGITS]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d{1,9}[.)])(\s|$)")
_RULE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$")


def markdown_blocks(text: str) -> list[str]:
    """The Markdown blocks of ``text``, each its source lines joined by
    ``\\n``: a heading, a thematic break, a fenced code block, a list item
    (with its continuation lines) or a paragraph (a run of other lines)."""
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None

    def close() -> None:
        if current:
            blocks.append("\n".join(line.rstrip() for line in current))
            current.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if fence is not None:
            current.append(line)
            if line.strip().startswith(fence):
                fence = None
                close()
            continue
        opening = _FENCE.match(line)
        if opening:
            close()
            fence = opening.group(1)[0] * len(opening.group(1))
            current.append(line)
            continue
        if not line.strip():
            close()
            continue
        if _HEADING.match(line) or _RULE.match(line):
            close()
            blocks.append(line.rstrip())
            continue
        if _LIST_ITEM.match(line):
            close()
            current.append(line)
            continue
        current.append(line)
    close()
    return blocks


def document_overview(data: bytes, authored: str = BASE) -> list[str]:
    text = _text(data, authored)
    return [f"{block_hash(block)}  {block.replace(chr(10), BREAK)}" for block in markdown_blocks(text)]


def _text(data: bytes, authored: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "its file is not UTF-8 text") from None


def _scene_elements(data: bytes, authored: str) -> list[Any]:
    try:
        scene = json.loads(_text(data, authored))
    except ValueError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "its scene is not JSON") from None
    if not isinstance(scene, dict) or not isinstance(scene.get("elements"), list):
        raise AddressError(ErrorKind.UNREADABLE, authored, "its scene has no elements list")
    return scene["elements"]


def element_hash(element: Any) -> str:
    canonical = json.dumps(element, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return block_hash(canonical)


def _element_text(element: dict) -> str | None:
    for key in ("text", "name", "label"):
        value = element.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def whiteboard_overview(data: bytes, item_id: str = "ID", authored: str = BASE) -> list[str]:
    lines = []
    for element in _scene_elements(data, authored):
        if not isinstance(element, dict) or element.get("isDeleted") is True:
            continue
        element_id = element.get("id") if isinstance(element.get("id"), str) else "?"
        kind = element.get("type") if isinstance(element.get("type"), str) else "?"
        line = f"{element_hash(element)}  {element_id}  {kind}"
        text = _element_text(element)
        if text is not None:
            shown = text.replace("\r\n", "\n").replace("\n", BREAK)
            if len(shown) > MAX_ELEMENT_TEXT:
                shown = f"{shown[:MAX_ELEMENT_TEXT]}... (cut; the whole element: {BASE}{item_id}/elements/{element_id})"
            line += f"  {shown}"
        lines.append(line)
    return lines


def element_lines(data: bytes, element_id: str, authored: str, item_id: str) -> list[str]:
    for element in _scene_elements(data, authored):
        if isinstance(element, dict) and element.get("id") == element_id:
            return json.dumps(element, indent=2, ensure_ascii=False).split("\n")
    raise AddressError(
        ErrorKind.MISSING_TARGET, authored, f"the whiteboard has no element {element_id}; Read {BASE}{item_id} lists them"
    )


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_lines(versions: list[VersionEntry]) -> list[str]:
    lines = []
    for entry in versions:
        line = f"version {entry.number}  {_when(entry.at)}  {entry.reason.value}  {entry.size} bytes  {entry.sha256[:12]}"
        if entry.session_id:
            line += f"  session {entry.session_id}"
            if entry.turn is not None:
                line += f" turn {entry.turn}"
        lines.append(line)
    return lines


def discussion_lines(comments: list) -> list[str]:
    lines = []
    for comment in comments:
        head = f"#{comment.number}  {_when(comment.at)}  {comment.author}"
        if comment.session_id:
            delivered = "" if comment.delivered_in is None else f", delivered in turn {comment.delivered_in}"
            head += f"  (to session {comment.session_id}{delivered})"
        lines.append(head + ":")
        lines += [f"    {line}" for line in comment.text.replace("\r\n", "\n").split("\n")]
    return lines


# -- element libraries -----------------------------------------------------------------


async def _library(target: Target, request: Request, address: Address) -> ReadResult | GrepResult:
    authored, canonical = address.authored, address.canonical
    name = address.key
    if name is not None:
        data = await _read(target, f"{LIBRARY_DIR}/{name}{LIBRARY_SUFFIX}", authored, optional=True)
        if data is None:
            raise AddressError(
                ErrorKind.MISSING_TARGET, authored, f"no element library {name} in the workspace; Read {LIBRARY} lists them"
            )
        lines = library_lines(data, authored)
        return _over(lines, request, authored, canonical, f"element library {name}: {len(lines)} item(s)")
    listing = ListDir(LIBRARY_DIR, optional=True)
    result = (await run_program(target, ControlProgram([listing]), authored))[0]
    names = []
    if result.status is not Status.ABSENT:
        if not result.ok:
            raise refusal(result, authored)
        names = [n[: -len(LIBRARY_SUFFIX)] for n in result.value if n.endswith(LIBRARY_SUFFIX)]
        names = [n for n in names if re.fullmatch(r"[A-Za-z0-9_-]{1,80}", n)]
    if not names:
        lines: list[str] = []
        notice = "no element libraries in this workspace (a library is .mevedel/artifacts/.library/NAME.excalidrawlib)"
        return _over(lines, request, authored, canonical, notice)
    files = [f"{n}{LIBRARY_SUFFIX}" for n in names]
    reads = []
    while len(reads) < len(files):
        op = ReadFiles(LIBRARY_DIR, names=tuple(files[len(reads) :]), budget=_LIBRARY_BUDGET)
        got = (await run_program(target, ControlProgram([op]), authored))[0]
        if not got.ok:
            raise refusal(got, authored)
        if not got.value:
            break
        reads += list(got.value)
    lines = []
    for name, read in zip(names, reads):
        if not read.ok or read.data is None:
            lines.append(f"{LIBRARY}/{name} -- cannot be read")
            continue
        try:
            items = library_lines(read.data, authored)
        except AddressError as bad:
            lines.append(f"{LIBRARY}/{name} -- {bad.reason}")
            continue
        lines.append(f"{LIBRARY}/{name} -- {len(items)} item(s)")
        lines += [f"  {line}" for line in items]
    return _over(lines, request, authored, canonical, None)


def library_lines(data: bytes, authored: str) -> list[str]:
    """One line per library item: its position, hash, id, name, and its
    elements (types, texts)."""
    try:
        library = json.loads(_text(data, authored))
    except ValueError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "the library is not JSON") from None
    if not isinstance(library, dict):
        raise AddressError(ErrorKind.UNREADABLE, authored, "the library is not an Excalidraw library object")
    items = library.get("libraryItems")
    if items is None and isinstance(library.get("library"), list):  # version 1: lists of elements
        items = [{"elements": elements} for elements in library["library"]]
    if not isinstance(items, list):
        raise AddressError(ErrorKind.UNREADABLE, authored, "the library has no libraryItems list")
    lines = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            continue
        elements = item.get("elements") if isinstance(item.get("elements"), list) else []
        kinds = sorted({e.get("type") for e in elements if isinstance(e, dict) and isinstance(e.get("type"), str)})
        texts = [t for e in elements if isinstance(e, dict) and (t := _element_text(e))]
        line = f"{number}. {element_hash(item)}"
        if isinstance(item.get("id"), str):
            line += f"  {item['id']}"
        if isinstance(item.get("name"), str) and item["name"]:
            line += f"  {item['name']!r}"
        line += f"  ({len(elements)} elements: {', '.join(kinds) or 'none'})"
        if texts:
            line += "  " + " | ".join(t.replace("\n", BREAK) for t in texts)[: MAX_ELEMENT_TEXT]
        lines.append(line)
    return lines


# -- completion (synchronous, local) -------------------------------------------------------

_META_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_META_BYTES = 64 * 1024
#: (item id, device, inode, mtime, size) -> (kind, title), so completion
#: reads a metadata file again only when it changed.
_META_CACHE: dict[tuple[str, int, int, int, int], tuple[str, str]] = {}
_META_CACHE_CAPACITY = 4096


def local_items(place: Place | None, prefix: str = "", limit: int = 200) -> list[tuple[str, str, str]]:
    """(id, kind, title) of the documents and whiteboards whose id starts
    with ``prefix``, from the local workspace ``place`` (nothing on an SSH
    workspace): one listing of the store's state directory and each item's
    small metadata file, opened without following a link."""
    if place is None or limit <= 0:
        return []
    fd = open_directory(place, tuple(STATE_ROOT.split("/")))
    if fd is None:
        return []
    found = []
    try:
        for name in sorted(os.listdir(fd)):
            if len(found) >= limit:
                break
            if not name.startswith(prefix) or not is_item_id(name):
                continue
            facts = _local_meta(fd, name)
            if facts is not None and facts[0] in SHARED_KINDS:
                found.append((name, facts[0], facts[1]))
    except OSError:
        return found
    finally:
        os.close(fd)
    return found


def _local_meta(state_fd: int, item_id: str) -> tuple[str, str] | None:
    try:
        item_fd = os.open(item_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state_fd)
    except OSError:
        return None
    try:
        meta_fd = os.open("meta.json", _META_FLAGS, dir_fd=item_fd)
    except OSError:
        os.close(item_fd)
        return None
    os.close(item_fd)
    try:
        info = os.fstat(meta_fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_META_BYTES:
            return None
        key = (item_id, info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        known = _META_CACHE.get(key)
        if known is not None:
            return known
        data = os.read(meta_fd, _MAX_META_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(meta_fd)
    try:
        meta = msgspec.json.decode(data, type=ItemMeta)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if meta.id != item_id:
        return None
    if len(_META_CACHE) >= _META_CACHE_CAPACITY:
        _META_CACHE.clear()
    _META_CACHE[key] = (meta.kind, meta.title)
    return meta.kind, meta.title


# -- describe (hover) ---------------------------------------------------------------------


async def describe(address: Address, context: ResolverContext) -> tuple[str, str, str | None, str | None]:
    """(status, kind, reason, detail) of a shared:// address: metadata only
    (an item's ``meta.json``; the library directory's listing)."""
    authored = address.authored
    text_view = _text_view_of(address)
    if text_view is not None:
        return "unavailable", "virtual", NO_IMAGES.format(text=text_view), None
    if address.scope == "listing":
        return "discovery", "listing", None, None
    workspace = Places(context).workspace
    if workspace is None or workspace.target is None:
        return "unavailable", "virtual", _owner_missing(authored).reason, None
    if address.scope == "library":
        if address.key is None:
            return "discovery", "listing", None, None
        probe = Stat(f"{LIBRARY_DIR}/{address.key}{LIBRARY_SUFFIX}", optional=True)
        try:
            found = (await run_program(workspace.target, ControlProgram([probe]), authored))[0]
        except AddressError as error:
            return "unavailable", "virtual", error.reason, None
        if found.status is Status.ABSENT:
            return "missing", "virtual", f"no element library {address.key} in the workspace", None
        return "exists", "virtual", None, f"element library {address.key}"
    item_id = address.key or ""
    if not is_item_id(item_id):
        return "missing", "virtual", _no_item(authored, item_id).reason, None
    try:
        meta, _raw = await ArtifactStore(workspace.target, _READER).meta(item_id)
    except ArtifactError as error:
        mapped = _store_error(error, authored, item_id)
        return ("missing" if mapped.kind is ErrorKind.MISSING_TARGET else "unavailable"), "virtual", mapped.reason, None
    if meta.kind not in SHARED_KINDS:
        return "missing", "virtual", f"{item_id} is an artifact, not a whiteboard or document", None
    return "exists", "virtual", None, f"{meta.title} ({meta.kind})"
