"""mcp:// -- resources of the configured MCP servers (spec: "mcp://").

``mcp://`` lists the configured servers (the ``mcpServers`` setting and the
workspace's ``.mcp.json``) and their availability; ``mcp://SERVER`` lists
what the server advertises (resources and resource templates);
``mcp://SERVER/URI`` reads the native URI, fresh on every call, through
:mod:`mevedel_server.mcp_client`. Only Read is supported (the matrix).

A server starts on the first operation that needs it, never from
completion or hover (:func:`complete` and :func:`describe` use only what the
connections already know). Failures keep the server's reason and name the
authored address, with these kinds: a server that is not configured is
``owner-missing``; a workspace server not approved is ``unavailable``; a
resource the server says does not exist is ``missing-target``; a server
that could not be started, died, timed out or answered an error is
``unreadable``.

Text content is read as it is (at most 64 MiB, the file bound) and paged
like any virtual text; binary content is described (URI, MIME type, size,
SHA-256), never dumped.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...addresses import Address, AddressError, ErrorKind, encode_component
from ..engine.attempt import Prepared, Request
from ..engine.context import ResolverContext
from ..engine.options import ReadOptions
from ..engine.projection import page_lines, split_lines
from ..engine.results import ReadResult
from ..engine.runners import fail, later
from ..engine.text_source import MAX_FILE_BYTES, too_large

if TYPE_CHECKING:
    from ...mcp_client import McpAccess, McpClientError, ServerEntry

BASE = "mcp://"

_KINDS = {
    "not-configured": ErrorKind.OWNER_MISSING,
    "needs-approval": ErrorKind.UNAVAILABLE,
    "missing": ErrorKind.MISSING_TARGET,
    "failed": ErrorKind.UNREADABLE,
}

NOT_CONFIGURED = (
    "no MCP server is configured: add one to the mcpServers setting ({NAME: {command, args, env}}), "
    "or to the workspace's .mcp.json (which runs only once you approve it)"
)


def _error(error: McpClientError, authored: str) -> AddressError:
    return AddressError(_KINDS[error.kind], authored, error.reason)


def server_address(name: str) -> str:
    return BASE + encode_component(name)


def resource_address(server: str, uri: str) -> str:
    return f"{server_address(server)}/{encode_component(uri)}"


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    access = context.mcp
    assert isinstance(request.options, ReadOptions)
    if access is None:
        if address.scope == "listing":
            return Prepared("virtual", later(_nothing, request.options, address.authored, address.canonical))
        return Prepared("virtual", fail(AddressError(ErrorKind.OWNER_MISSING, address.authored, NOT_CONFIGURED)))
    if address.scope == "listing":
        return Prepared("virtual", later(_servers, access, request.options, address.authored, address.canonical))
    assert address.key is not None
    if address.scope == "server":
        return Prepared("virtual", later(_server, access, address.key, request.options, address.authored, address.canonical))
    assert address.name is not None
    return Prepared(
        "virtual", later(_resource, access, address.key, address.name, request.options, address.authored, address.canonical)
    )


# -- mcp:// ---------------------------------------------------------------------


def _standing(access: McpAccess, entry: ServerEntry) -> str:
    if entry.standing == "invalid":
        return f"cannot be used: {entry.problem}"
    if entry.standing == "needs-approval":
        return "needs approval before it runs: " + access.how_to_approve.format(name=entry.name)
    known = access.known(entry)
    if known is None or known.state == "not connected":
        return "not connected (starts on its first read)"
    return known.state


def _server_line(access: McpAccess, entry: ServerEntry) -> str:
    origin = "mcpServers setting" if entry.origin == "settings" else "workspace .mcp.json"
    command = f"; runs {entry.spec.runs}" if entry.spec is not None else ""
    return f"{server_address(entry.name)} -- {origin}; {_standing(access, entry)}{command}"


async def _nothing(options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    return page_lines([], options, authored, canonical, "listing", NOT_CONFIGURED)


async def _servers(access: McpAccess, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    entries, file_problem = await access.servers()
    lines = [_server_line(access, entry) for entry in entries]
    notes = []
    if not entries:
        notes.append(NOT_CONFIGURED)
    if file_problem:
        notes.append(file_problem)
    if entries:
        notes.append("read mcp://SERVER for a server's resources")
    return page_lines(lines, options, authored, canonical, "listing", "; ".join(notes) or None)


# -- mcp://SERVER -----------------------------------------------------------------


def _described(resource: Any) -> str:
    words = resource.name
    if getattr(resource, "title", None) and resource.title != resource.name:
        words += f" ({resource.title})"
    if resource.mimeType:
        words += f" [{resource.mimeType}]"
    if getattr(resource, "size", None) is not None:
        words += f" {resource.size} bytes"
    if resource.description:
        words += ": " + " ".join(resource.description.split())
    return words


async def _server(access: McpAccess, name: str, options: ReadOptions, authored: str, canonical: str) -> ReadResult:
    from ...mcp_client import McpClientError

    try:
        listing = await access.list(name)
    except McpClientError as error:
        raise _error(error, authored) from None
    lines = [f"{resource_address(name, str(r.uri))} -- {_described(r)}" for r in listing.resources]
    lines += [f"template {t.uriTemplate} -- {_described(t)}" for t in listing.templates]
    if listing.unsupported:
        notice = f"{canonical}: the server offers no resources (it has tools or prompts only)"
    else:
        notice = f"{len(listing.resources)} resources, {len(listing.templates)} resource templates"
        if listing.templates:
            notice += (
                f"; read a template's resource as {canonical}/ENCODED-URI once its {{variables}} are filled in"
                " (the URI percent-encoded as one component)"
            )
        if listing.truncated:
            notice += "; the server listed more than is shown"
    return page_lines(lines, options, authored, canonical, "listing", notice)


# -- mcp://SERVER/URI ---------------------------------------------------------------


def _blob_line(content: Any, authored: str) -> str:
    encoded = content.blob
    if len(encoded) > (MAX_FILE_BYTES * 4) // 3 + 4:
        raise too_large(authored)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise AddressError(ErrorKind.UNREADABLE, authored, "the server sent binary content that is not valid base64") from None
    mime = content.mimeType or "unknown type"
    return (
        f"[binary content {content.uri}: {mime}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()};"
        " not shown as text]"
    )


async def _resource(
    access: McpAccess, name: str, uri: str, options: ReadOptions, authored: str, canonical: str
) -> ReadResult:
    from ...mcp_client import McpClientError

    try:
        result = await access.read(name, uri)
    except McpClientError as error:
        raise _error(error, authored) from None
    contents = list(result.contents)
    if not contents:
        return page_lines([], options, authored, canonical, "file", f"{canonical}: the server returned no content")
    texts = [c for c in contents if getattr(c, "text", None) is not None]
    total = sum(len(c.text.encode("utf-8", "surrogatepass")) for c in texts)
    if total > MAX_FILE_BYTES:
        raise too_large(authored)
    if len(contents) == 1 and texts:
        notice = None if texts[0].text else f"{canonical}: the server returned empty text"
        return page_lines(split_lines(texts[0].text), options, authored, canonical, "file", notice)
    lines: list[str] = []
    for content in contents:
        if getattr(content, "text", None) is not None:
            if len(contents) > 1:
                lines.append(f"--- {content.uri}" + (f" [{content.mimeType}]" if content.mimeType else ""))
            lines += split_lines(content.text)
        else:
            lines.append(_blob_line(content, authored))
    notice = None if texts else f"{canonical}: the server returned no text (binary content only)"
    return page_lines(lines, options, authored, canonical, "file", notice)


# -- completion and hover: what the connections already know -------------------------


@dataclass(frozen=True, slots=True)
class Suggestion:
    label: str
    kind: str  # "discovery" (a server) or "file" (a resource)
    detail: str
    available: bool


def complete(tail: str, access: McpAccess | None, limit: int) -> list[Suggestion]:
    """Servers, then a server's resources, from metadata already held:
    never reads ``.mcp.json``, never connects, never lists."""
    if access is None or limit <= 0:
        return []
    server_part, slash, partial = tail.partition("/")
    entries = access.known_servers()
    if not slash:
        found = []
        for entry in entries:
            label = server_address(entry.name)
            if label.startswith(BASE + server_part):
                state = _standing(access, entry)
                found.append(Suggestion(label, "discovery", f"MCP server ({state})", entry.standing == "ready"))
        return sorted(found, key=lambda s: s.label)[:limit]
    entry = next((e for e in entries if encode_component(e.name) == server_part or e.name == server_part), None)
    if entry is None:
        return []
    known = access.known(entry)
    if known is None or known.listing is None:
        return []
    found = []
    for resource in known.listing.resources:
        encoded = encode_component(str(resource.uri))
        if encoded.startswith(partial) or str(resource.uri).startswith(partial):
            found.append(Suggestion(resource_address(entry.name, str(resource.uri)), "file", _described(resource), True))
            if len(found) >= limit:
                break
    return sorted(found, key=lambda s: s.label)


@dataclass(frozen=True, slots=True)
class Facts:
    status: str  # "exists", "unavailable", "discovery"
    kind: str  # "listing", "virtual"
    reason: str | None = None
    detail: str | None = None


def describe(address: Address, context: ResolverContext) -> Facts:
    """What hover says of an mcp:// address: configuration and what the
    connection already knows. Starts nothing, reads nothing."""
    access = context.mcp
    if address.scope == "listing":
        count = 0 if access is None else len(access.known_servers())
        return Facts("discovery", "listing", detail=f"{count} configured MCP servers known" if count else None,
                     reason=None if count else NOT_CONFIGURED)
    entries = [] if access is None else access.known_servers()
    entry = next((e for e in entries if e.name == address.key), None)
    if entry is None or access is None:
        return Facts("unavailable", "virtual", reason=f"no MCP server named {address.key!r} is configured (as far as is known without reading)")
    state = _standing(access, entry)
    if address.scope == "server":
        return Facts("exists", "listing", detail=f"MCP server: {state}")
    known = access.known(entry)
    listed = None
    if known is not None and known.listing is not None:
        listed = next((r for r in known.listing.resources if str(r.uri) == address.name), None)
    if listed is not None:
        return Facts("exists", "virtual", detail=f"{_described(listed)}; server {state}")
    return Facts("exists", "virtual", detail=f"not in the server's last listing; server {state} (read to fetch it)")
