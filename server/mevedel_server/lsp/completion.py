"""Address completion: the address-like token ending at the cursor is
completed by the resolver's side-effect-free completion, and every item
inserts plain canonical text over the typed token."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ..resources import Candidate, complete
from . import document_addresses
from .errors import answers_errors
from .workspaces import document_scope

if TYPE_CHECKING:
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


def _item(candidate: Candidate, index: int, replace: dict[str, Any]) -> dict[str, Any]:
    """One ``CompletionItem`` as JSON. Built directly: converting hundreds of
    lsprotocol objects per keystroke costs more than finding the candidates."""
    detail = f"{candidate.kind}: {candidate.detail}"
    if not candidate.available:
        detail += " (not available now)"
    return {
        "label": candidate.label,
        "kind": _KINDS.get(candidate.kind, types.CompletionItemKind.Text).value,
        "detail": detail,
        # The resolver's order (schemes first, then sorted descendants) is the order shown.
        "sortText": f"{index:05d}",
        "textEdit": {"range": replace, "newText": candidate.label},
        "insertTextFormat": types.InsertTextFormat.PlainText.value,
    }


def _json_range(span: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": span.start.line, "character": span.start.character},
        "end": {"line": span.end.line, "character": span.end.character},
    }


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS))
    @answers_errors(types.TEXT_DOCUMENT_COMPLETION)
    async def completion(ls: MevedelLanguageServer, params: types.CompletionParams) -> dict[str, Any] | None:
        document = ls.workspace.get_text_document(params.text_document.uri)
        token = document_addresses.token_before(document, params.position)
        if token is None:
            return None
        triggered = params.context is not None and params.context.trigger_kind is types.CompletionTriggerKind.TriggerCharacter
        if triggered and not token.text:
            return None
        limit = ls.settings.completion_limit
        context = document_scope(ls, document.uri).context
        # One more than the bound tells whether the bound cut the list.
        candidates = complete(token.text, dataclasses.replace(context, completion_limit=limit + 1))
        replace = _json_range(token.range)
        items = [_item(candidate, index, replace) for index, candidate in enumerate(candidates[:limit])]
        return {"isIncomplete": len(candidates) > limit, "items": items}
