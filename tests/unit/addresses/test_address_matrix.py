"""The per-form operation matrix against the spec's family table."""

from __future__ import annotations

import pytest

from mevedel_server.addresses import (
    RULES,
    Family,
    Form,
    LocatorClass,
    Operation,
    parse_address,
)

R, G, S, P = Operation.READ, Operation.GLOB, Operation.GREP, Operation.APPLY_PATCH
DIGEST = "ab" * 32


def test_every_form_has_exactly_one_rule():
    assert set(RULES) == set(Form)
    assert all(rule.form is form for form, rule in RULES.items())


@pytest.mark.parametrize(
    ("text", "allowed", "locator"),
    [
        ("work://", {R, G, S}, LocatorClass.DISCOVERY),
        ("work://shared", {R, G, S}, LocatorClass.EXACT),
        ("work://shared/a.md", {R, G, S, P}, LocatorClass.EXACT),
        ("work://a.md", {R, G, S, P}, LocatorClass.SESSION_RELATIVE),
        ("work://plans/p.md", {R, G, S, P}, LocatorClass.SESSION_RELATIVE),
        ("artifact://", {R, G, S}, LocatorClass.DISCOVERY),
        ("artifact://executions/x.log", {R, G, S}, LocatorClass.SESSION_RELATIVE),
        ("skill://", {R, G, S}, LocatorClass.DISCOVERY),
        (f"skill://s@{DIGEST}", {R, G, S}, LocatorClass.EXACT),
        ("skill://bundled/s/SKILL.md", {R, G, S}, LocatorClass.EXACT),
        ("agent://", {R}, LocatorClass.DISCOVERY),
        ("agent://root/a#/x", {R}, LocatorClass.SESSION_RELATIVE),
        ("history://", {R}, LocatorClass.DISCOVERY),
        ("history://root", {R, S}, LocatorClass.SESSION_RELATIVE),
        ("history://root/a", {R, S}, LocatorClass.SESSION_RELATIVE),
        ("history://saved", {R, G, S}, LocatorClass.DISCOVERY),
        ("history://saved/s", {R, G, S}, LocatorClass.EXACT),
        ("history://saved/s/segment-0002.chat.jsonl", {R, G, S}, LocatorClass.EXACT),
        ("memory://root", {R, G, S}, LocatorClass.DISCOVERY),
        ("memory://local-mevedel", {R, G, S}, LocatorClass.EXACT),
        ("memory://local-mevedel/t.md", {R, G, S, P}, LocatorClass.EXACT),
        ("memory://journal/", {R, G, S}, LocatorClass.DISCOVERY),
        ("memory://journal/e.md", {R, G, S}, LocatorClass.EXACT),
        ("mcp://", {R}, LocatorClass.DISCOVERY),
        ("mcp://s", {R}, LocatorClass.EXACT),
        ("mcp://s/u", {R}, LocatorClass.EXACT),
        ("shared://", {R}, LocatorClass.DISCOVERY),
        ("shared://b", {R, S}, LocatorClass.SESSION_RELATIVE),
        ("shared://b/view.png", {R}, LocatorClass.SESSION_RELATIVE),
        ("shared://b/images/k", {R}, LocatorClass.SESSION_RELATIVE),
        ("shared://library/sheet.png", {R}, LocatorClass.EXACT),
        ("mevedel://", {R, G, S}, LocatorClass.DISCOVERY),
        ("mevedel://a.md", {R, G, S}, LocatorClass.EXACT),
    ],
)
def test_form_operations_and_locator_class(text, allowed, locator):
    address = parse_address(text)
    assert set(address.operations) == allowed
    assert address.locator_class is locator
    assert address.is_discovery is (locator is LocatorClass.DISCOVERY)


def test_apply_patch_only_on_explicit_writable_descendants():
    writable = {
        parse_address(text).family
        for text in ("work://a", "work://shared/a", "memory://global-agents/a")
        if parse_address(text).allows(P)
    }
    assert writable == {Family.WORK, Family.MEMORY}
    for text in ("work://", "work://shared", "memory://root", "memory://global-agents", "memory://journal/e.md"):
        assert not parse_address(text).allows(P), text
