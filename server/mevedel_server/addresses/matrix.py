"""The operation matrix, one row per address *form*.

The spec's "Supported families" table gives one row per family; the grammar
distinguishes the forms inside a family (a bare listing, a scope root, an
explicit descendant...) because they differ in what they allow. ``Form``
names each one; ``RULES`` gives its operations and locator class. The grammar
looks a form up once per parse, so the sets are built here, once.

Refinements of the family table, and why:

- ``work://`` and ``work://shared`` allow Read/Glob/Grep but not ApplyPatch:
  a patch needs an explicit file, never a scope root.
- ``memory://ROOT-KEY`` (a root on its own) is searchable but not writable;
  ``memory://ROOT-KEY/PATH`` is the only writable memory form.
- ``history://`` is Read-only discovery; the concrete ``history://root[/PATH]``
  adds Grep; every ``history://saved`` form allows Read/Glob/Grep.
- ``shared://`` forms are Read-only except text views, which add Grep: an
  item overview, ``discussions``, ``history``, ``elements/E``, the library
  listing and one library. Images (``view.png``, ``images/K``, ``sheet.png``)
  and the bare listing are Read only.
- ``shared://library[/NAME]`` is EXACT: the spec makes items (whiteboards and
  documents) the session's, but says nothing that scopes the element library to
  one session.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .model import LocatorClass, Operation


class Form(enum.Enum):
    WORK_LISTING = "work://"
    WORK_SHARED_ROOT = "work://shared"
    WORK_SHARED = "work://shared/PATH"
    WORK_SESSION = "work://PATH"
    ARTIFACT_LISTING = "artifact://"
    ARTIFACT_HANDLE = "artifact://HANDLE"
    SKILL_LISTING = "skill://"
    SKILL_EXACT = "skill://NAME@SOURCE-KEY[/PATH]"
    SKILL_ALIAS = "skill://ORIGIN/SKILL[/PATH]"
    AGENT_LISTING = "agent://"
    AGENT_ROOT = "agent://root/PATH[#POINTER]"
    HISTORY_LISTING = "history://"
    HISTORY_ROOT = "history://root[/PATH]"
    HISTORY_SAVED_LISTING = "history://saved"
    HISTORY_SAVED = "history://saved/SESSION[/SEGMENT]"
    MEMORY_UNION = "memory://root"
    MEMORY_ROOT = "memory://ROOT-KEY"
    MEMORY_FILE = "memory://ROOT-KEY/PATH"
    JOURNAL_LISTING = "memory://journal/"
    JOURNAL_ENTRY = "memory://journal/FILE"
    MCP_LISTING = "mcp://"
    MCP_SERVER = "mcp://SERVER"
    MCP_RESOURCE = "mcp://SERVER/URI"
    SHARED_LISTING = "shared://"
    SHARED_TEXT = "shared:// text view"
    SHARED_IMAGE = "shared:// image"
    SHARED_LIBRARY_TEXT = "shared://library[/NAME]"
    SHARED_LIBRARY_IMAGE = "shared://library[/NAME]/sheet.png"
    MEVEDEL_LISTING = "mevedel://"
    MEVEDEL_DOC = "mevedel://PATH"


@dataclass(frozen=True, slots=True)
class FormRule:
    operations: frozenset[Operation]
    locator_class: LocatorClass


_R, _G, _S, _P = Operation.READ, Operation.GLOB, Operation.GREP, Operation.APPLY_PATCH
READ_ONLY = frozenset({_R})
READ_GREP = frozenset({_R, _S})
DISCOVER = frozenset({_R, _G, _S})
ALL = frozenset({_R, _G, _S, _P})

_EXACT = LocatorClass.EXACT
_SESSION = LocatorClass.SESSION_RELATIVE
_DISCOVERY = LocatorClass.DISCOVERY

RULES: dict[Form, FormRule] = {
    Form.WORK_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.WORK_SHARED_ROOT: FormRule(DISCOVER, _EXACT),
    Form.WORK_SHARED: FormRule(ALL, _EXACT),
    Form.WORK_SESSION: FormRule(ALL, _SESSION),
    Form.ARTIFACT_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.ARTIFACT_HANDLE: FormRule(DISCOVER, _SESSION),
    Form.SKILL_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.SKILL_EXACT: FormRule(DISCOVER, _EXACT),
    Form.SKILL_ALIAS: FormRule(DISCOVER, _EXACT),
    Form.AGENT_LISTING: FormRule(READ_ONLY, _DISCOVERY),
    Form.AGENT_ROOT: FormRule(READ_ONLY, _SESSION),
    Form.HISTORY_LISTING: FormRule(READ_ONLY, _DISCOVERY),
    Form.HISTORY_ROOT: FormRule(READ_GREP, _SESSION),
    Form.HISTORY_SAVED_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.HISTORY_SAVED: FormRule(DISCOVER, _EXACT),
    Form.MEMORY_UNION: FormRule(DISCOVER, _DISCOVERY),
    Form.MEMORY_ROOT: FormRule(DISCOVER, _EXACT),
    Form.MEMORY_FILE: FormRule(ALL, _EXACT),
    Form.JOURNAL_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.JOURNAL_ENTRY: FormRule(DISCOVER, _EXACT),
    Form.MCP_LISTING: FormRule(READ_ONLY, _DISCOVERY),
    Form.MCP_SERVER: FormRule(READ_ONLY, _EXACT),
    Form.MCP_RESOURCE: FormRule(READ_ONLY, _EXACT),
    Form.SHARED_LISTING: FormRule(READ_ONLY, _DISCOVERY),
    Form.SHARED_TEXT: FormRule(READ_GREP, _SESSION),
    Form.SHARED_IMAGE: FormRule(READ_ONLY, _SESSION),
    Form.SHARED_LIBRARY_TEXT: FormRule(READ_GREP, _EXACT),
    Form.SHARED_LIBRARY_IMAGE: FormRule(READ_ONLY, _EXACT),
    Form.MEVEDEL_LISTING: FormRule(DISCOVER, _DISCOVERY),
    Form.MEVEDEL_DOC: FormRule(DISCOVER, _EXACT),
}


def rule(form: Form) -> FormRule:
    return RULES[form]
