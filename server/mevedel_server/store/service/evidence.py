"""Turn records a caller describes by kind and fields.

The LSP and the CLI append "a response", "a tool call"... without knowing
the turn identity or the record classes; :func:`make_evidence` checks the
fields a kind needs and builds the record for the turn in flight.
"""

from __future__ import annotations

import msgspec

from ..content.transcript import (
    AgentStep,
    Evidence,
    Mail,
    Permission,
    Plan,
    Reasoning,
    Response,
    ToolCall,
    ToolResult,
)
from .errors import InvalidSessionInput

EVIDENCE_KINDS = ("response", "reasoning", "tool_call", "tool_result", "mail")
#: Kinds only the agent engine records (a client cannot append them).
ENGINE_KINDS = ("plan", "permission")
_NAME_LIMIT = 256


class EvidenceInput(msgspec.Struct, frozen=True):
    """One record to append. ``kind`` decides which fields are required:

    - ``response`` / ``reasoning``: ``text``
    - ``tool_call``: ``call_id``, ``name``, ``arguments`` (JSON text, may be empty)
    - ``tool_result``: ``call_id``, ``output``, optional ``is_error``
    - ``mail``: ``mail_id``, ``sender``, ``text``
    """

    kind: str
    text: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    is_error: bool = False
    #: ``tool_call``: the agent's tool kind (optional).
    tool_kind: str | None = None
    mail_id: str | None = None
    sender: str | None = None


def _text(value: str | None, field: str, kind: str) -> str:
    if value is None:
        raise InvalidSessionInput(f"a {kind} record", f"needs {field}")
    if not isinstance(value, str):
        raise InvalidSessionInput(f"a {kind} record", f"{field} must be text")
    return value


def _name(value: str | None, field: str, kind: str) -> str:
    text = _text(value, field, kind)
    if not text or len(text) > _NAME_LIMIT:
        raise InvalidSessionInput(f"a {kind} record", f"{field} must be 1-{_NAME_LIMIT} characters")
    return text


def make_evidence(item: EvidenceInput, turn_id: str) -> Evidence:
    kind = item.kind
    if kind == "response":
        return Response(turn_id=turn_id, text=_text(item.text, "text", kind))
    if kind == "reasoning":
        return Reasoning(turn_id=turn_id, text=_text(item.text, "text", kind))
    if kind == "tool_call":
        arguments = item.arguments if item.arguments is not None else ""
        return ToolCall(
            turn_id=turn_id,
            call_id=_name(item.call_id, "call_id", kind),
            name=_name(item.name, "name", kind),
            arguments=_text(arguments, "arguments", kind),
            tool_kind=None if item.tool_kind is None else _name(item.tool_kind, "tool_kind", kind),
        )
    if kind == "tool_result":
        return ToolResult(
            turn_id=turn_id,
            call_id=_name(item.call_id, "call_id", kind),
            output=_text(item.output, "output", kind),
            is_error=bool(item.is_error),
        )
    if kind == "mail":
        return Mail(
            turn_id=turn_id,
            mail_id=_name(item.mail_id, "mail_id", kind),
            sender=_name(item.sender, "sender", kind),
            text=_text(item.text, "text", kind),
        )
    if kind == "plan":
        return Plan(turn_id=turn_id, text=_text(item.text, "text", kind))
    if kind == "permission":
        return Permission(
            turn_id=turn_id,
            call_id=_name(item.call_id, "call_id", kind),
            question=_text(item.text, "text", kind),
            decision=_text(item.output, "output", kind),
            allowed=not item.is_error,
        )
    raise InvalidSessionInput(repr(kind), f"is not a record kind (use one of {', '.join(EVIDENCE_KINDS)})")


#: The kinds of a retained agent's own records (``AgentStep``).
AGENT_STEP_KINDS = ("response", "reasoning", "tool_call", "tool_result", "plan", "permission")


def agent_step(item: EvidenceInput) -> AgentStep:
    """A retained agent's record as its task's step (the same fields the
    root's record of that kind keeps)."""
    if item.kind == "permission":
        return AgentStep(kind="permission", call_id=item.call_id, text=item.text, output=item.output, is_error=item.is_error)
    return AgentStep(kind=item.kind, text=item.text, call_id=item.call_id, name=item.name, arguments=item.arguments,  # type: ignore[arg-type]
                     output=item.output, is_error=item.is_error)
