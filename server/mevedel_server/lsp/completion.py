"""Address completion: the address-like token ending at the cursor is
completed by the resolver's side-effect-free completion, and every item
inserts plain canonical text over the typed token."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .. import resources as core
from . import document_addresses
from .errors import answers_errors
from .opened_documents import text_document
from .workspaces import document_scope

if TYPE_CHECKING:
    from ..resources import Candidate
    from .server import MevedelLanguageServer

TRIGGER_CHARACTERS = ["/", ":", "@"]

_KINDS = {
    "scheme": types.CompletionItemKind.Module,
    "discovery": types.CompletionItemKind.Reference,
    "directory": types.CompletionItemKind.Folder,
    "file": types.CompletionItemKind.File,
    "skill": types.CompletionItemKind.Module,
    "memory-root": types.CompletionItemKind.Folder,
}
_KIND_VALUES = {name: kind.value for name, kind in _KINDS.items()}
_TEXT_KIND = types.CompletionItemKind.Text.value
_PLAIN_TEXT = types.InsertTextFormat.PlainText.value


def _item(candidate: Candidate, index: int, replace: dict[str, Any] | None, plain: bool) -> dict[str, Any]:
    """One ``CompletionItem`` as JSON. Built directly: converting hundreds of
    lsprotocol objects per keystroke costs more than finding the candidates.

    ``replace`` and ``plain`` are left out when the list's ``itemDefaults``
    carries them (``editRange``, ``insertTextFormat``): the label is then the
    inserted text, and each of hundreds of items stays small."""
    detail = f"{candidate.kind}: {candidate.detail}"
    if not candidate.available:
        detail += " (not available now)"
    item: dict[str, Any] = {
        "label": candidate.label,
        "kind": _KIND_VALUES.get(candidate.kind, _TEXT_KIND),
        "detail": detail,
        # The resolver's order (schemes first, then sorted descendants) is the order shown.
        "sortText": f"{index:05d}",
    }
    if replace is not None:
        item["textEdit"] = {"range": replace, "newText": candidate.label}
    if plain:
        item["insertTextFormat"] = _PLAIN_TEXT
    return item


def _item_defaults(ls: MevedelLanguageServer) -> frozenset[str]:
    """The ``CompletionList.itemDefaults`` fields the client understands."""
    text_document = ls.client_capabilities.text_document
    completion = text_document.completion if text_document else None
    completion_list = completion.completion_list if completion else None
    return frozenset(completion_list.item_defaults or ()) if completion_list else frozenset()


def _json_range(span: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": span.start.line, "character": span.start.character},
        "end": {"line": span.end.line, "character": span.end.character},
    }


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS))
    @answers_errors(types.TEXT_DOCUMENT_COMPLETION)
    async def completion(ls: MevedelLanguageServer, params: types.CompletionParams) -> dict[str, Any] | None:
        document = text_document(ls, params.text_document.uri)
        token = document_addresses.token_before(document, params.position)
        if token is None:
            return None
        triggered = params.context is not None and params.context.trigger_kind is types.CompletionTriggerKind.TriggerCharacter
        if triggered and not token.text:
            return None
        limit = ls.settings.completion_limit
        context = document_scope(ls, document.uri).context
        # One more than the bound tells whether the bound cut the list.
        candidates = core.complete(token.text, dataclasses.replace(context, completion_limit=limit + 1))
        replace = _json_range(token.range)
        supported = _item_defaults(ls)
        defaults: dict[str, Any] = {}
        if "editRange" in supported:
            defaults["editRange"] = replace
        if "insertTextFormat" in supported:
            defaults["insertTextFormat"] = _PLAIN_TEXT
        item_range = None if "editRange" in defaults else replace
        plain = "insertTextFormat" not in defaults
        items = [_item(candidate, index, item_range, plain) for index, candidate in enumerate(candidates[:limit])]
        result: dict[str, Any] = {"isIncomplete": len(candidates) > limit, "items": items}
        if defaults:
            result["itemDefaults"] = defaults
        return result
