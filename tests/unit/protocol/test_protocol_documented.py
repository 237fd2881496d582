"""docs/protocol.md documents exactly what the server registers, with field
tables that match the message classes, and every error kind."""

import re
import typing
from pathlib import Path

import attrs
import pytest

from mevedel_protocol import COMMANDS, NOTIFICATIONS, REQUESTS, SHARED_TYPES, wire_name
from mevedel_protocol.agent import AGENT_ERROR_KINDS
from mevedel_protocol.artifact import ARTIFACT_ERROR_KINDS
from mevedel_protocol.errors import (
    KIND_INTERNAL,
    KIND_INVALID_PARAMS,
    PROTOCOL_ERROR_CODES,
    VALIDATION_KINDS,
)
from mevedel_protocol.session import SESSION_ERROR_KINDS
from mevedel_server.addresses.model import ErrorKind
from mevedel_server.lsp import FEATURES, build_server

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/protocol.md has no '## {title}' section"
    return match.group(1)


def _headings(title: str) -> set[str]:
    return set(re.findall(r"^### `([^`]+)`", _section(title), re.M))


@pytest.fixture(scope="module")
def server():
    return build_server(FEATURES)


def test_every_registered_method_is_documented_and_vice_versa(server):
    registered = {name for name in server.protocol.fm.features if name.startswith("mevedel/")}
    assert registered, "the server registers no mevedel/ method"
    documented = _headings("Requests")
    assert registered - documented == set(), "registered but not in docs/protocol.md"
    assert documented - registered == set(), "documented in docs/protocol.md but not registered"
    assert registered == set(REQUESTS)


def test_notifications_and_commands_match(server):
    assert _headings("Notifications") == set(NOTIFICATIONS)
    commands = {name for name in server.protocol.fm.commands if name.startswith("mevedel.")}
    assert _headings("Commands") == commands == set(COMMANDS)


def _table_after(label: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^(?:Params |Result )?`{re.escape(label)}`:\n\n((?:\|.*\n)+)", text, re.M)
    assert match, f"docs/protocol.md has no field table for `{label}`"
    rows = match.group(1).splitlines()[2:]  # header and rule
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]


def _documented_classes() -> set[type]:
    found: set[type] = set()

    def visit(cls: type) -> None:
        if cls in found:
            return
        found.add(cls)
        for hint in typing.get_type_hints(cls).values():
            for candidate in (hint, *typing.get_args(hint)):
                for inner in (candidate, *typing.get_args(candidate)):
                    if attrs.has(inner):
                        visit(inner)

    for message in (*REQUESTS.values(), *NOTIFICATIONS.values()):
        visit(message.params)
        if message.result is not None:
            visit(message.result)
    for cls in SHARED_TYPES.values():
        visit(cls)
    return found


@pytest.mark.parametrize("cls", sorted(_documented_classes(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_field_table_matches_class(cls):
    assert _table_after(cls.__name__) == [wire_name(field.name) for field in attrs.fields(cls)]


def test_every_error_kind_is_documented_with_its_class():
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (validation|request failed|internal) \|", _section("Errors"), re.M))
    kinds = {kind.value for kind in ErrorKind} | {KIND_INVALID_PARAMS} | set(PROTOCOL_ERROR_CODES) | SESSION_ERROR_KINDS | AGENT_ERROR_KINDS | ARTIFACT_ERROR_KINDS
    assert set(rows) == kinds
    for kind, documented_class in rows.items():
        expected = "internal" if kind == KIND_INTERNAL else "validation" if kind in VALIDATION_KINDS else "request failed"
        assert documented_class == expected, kind
