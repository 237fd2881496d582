"""Hover on an address: what it is and what it names now (metadata only,
never a backing path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import resources as core
from ..addresses import AddressError
from . import document_addresses
from .errors import answers_errors
from .opened_documents import text_document
from .workspaces import document_scope

if TYPE_CHECKING:
    from ..resources import Description
    from .server import MevedelLanguageServer

_FAMILY_TITLES = {
    "work": "working files",
    "artifact": "persisted tool output",
    "skill": "skill package",
    "agent": "retained agent",
    "history": "conversation history",
    "memory": "persistent memory",
    "journal": "workspace journal",
    "mcp": "MCP resource",
    "shared": "shared item",
    "mevedel": "packaged documentation",
}


def _status(found: Description) -> str:
    words = found.status
    if found.status == "exists":
        words = f"exists ({found.kind}" + (f", {found.size} bytes)" if found.size is not None else ")")
    elif found.status == "discovery":
        words = f"discovery query ({found.kind})"
    if found.reason:
        words += f" — {found.reason}"
    if found.detail:
        words += f" — {found.detail}"
    return words


def _code(text: str) -> str:
    # Address text never holds a literal backtick (it would be %60), but
    # authored text might: a longer fence keeps it literal.
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def describe_lines(authored: str, found: Description) -> list[str]:
    family = found.family.value
    lines = [f"**{_FAMILY_TITLES.get(family, family)}** address {_code(found.canonical)}", ""]
    if authored != found.canonical:
        lines.append(f"- authored: {_code(authored)}")
    operations = ", ".join(operation.value for operation in found.operations) or "none"
    lines += [
        f"- canonical: {_code(found.canonical)}",
        f"- family: {family}",
        f"- locator class: {found.locator_class.value}",
        f"- operations: {operations}",
        f"- status: {_status(found)}",
    ]
    return lines


def _problem_lines(error: AddressError) -> list[str]:
    return [f"**{error.kind.value}** {_code(error.authored)}", "", error.reason]


def _markup_kind(ls: MevedelLanguageServer) -> types.MarkupKind:
    text_document = ls.client_capabilities.text_document
    hover = text_document.hover if text_document else None
    formats = hover.content_format if hover and hover.content_format else [types.MarkupKind.Markdown]
    return types.MarkupKind.Markdown if types.MarkupKind.Markdown in formats else types.MarkupKind.PlainText


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_HOVER)
    @answers_errors(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: MevedelLanguageServer, params: types.HoverParams) -> types.Hover | None:
        document = text_document(ls, params.text_document.uri)
        span = document_addresses.address_at_position(document, params.position)
        if span is None:
            return None
        classified = document_addresses.classify(span.text, ls.settings.diagnostics.unknown_schemes)
        if classified is None:
            return None
        if isinstance(classified, AddressError):
            lines = _problem_lines(classified)
        else:
            context = document_scope(ls, document.uri).context
            try:
                lines = describe_lines(span.text, await core.describe(span.text, context))
            except AddressError as error:  # containment is only known once resolved
                lines = _problem_lines(error)
        kind = _markup_kind(ls)
        if kind is types.MarkupKind.PlainText:
            lines = [line.replace("**", "").replace("`", "") for line in lines]
        return types.Hover(contents=types.MarkupContent(kind=kind, value="\n".join(lines)), range=span.range)
