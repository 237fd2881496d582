"""The operation matrix, one row per address *form*.

The spec's "Supported families" table gives one row per family; the grammar
distinguishes the forms inside a family (a bare listing, a scope root, an
explicit descendant...) because they differ in what they allow. ``Form``
names each one; its ``FormRule`` (a module constant of the same name, and
``RULES[form]``) gives the family, operations and locator class. The grammar
refers to the constants directly, so nothing is built or hashed per parse.

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

from .model import Family, LocatorClass, Operation


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
    form: Form
    family: Family
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

WORK_LISTING = FormRule(Form.WORK_LISTING, Family.WORK, DISCOVER, _DISCOVERY)
WORK_SHARED_ROOT = FormRule(Form.WORK_SHARED_ROOT, Family.WORK, DISCOVER, _EXACT)
WORK_SHARED = FormRule(Form.WORK_SHARED, Family.WORK, ALL, _EXACT)
WORK_SESSION = FormRule(Form.WORK_SESSION, Family.WORK, ALL, _SESSION)
ARTIFACT_LISTING = FormRule(Form.ARTIFACT_LISTING, Family.ARTIFACT, DISCOVER, _DISCOVERY)
ARTIFACT_HANDLE = FormRule(Form.ARTIFACT_HANDLE, Family.ARTIFACT, DISCOVER, _SESSION)
SKILL_LISTING = FormRule(Form.SKILL_LISTING, Family.SKILL, DISCOVER, _DISCOVERY)
SKILL_EXACT = FormRule(Form.SKILL_EXACT, Family.SKILL, DISCOVER, _EXACT)
SKILL_ALIAS = FormRule(Form.SKILL_ALIAS, Family.SKILL, DISCOVER, _EXACT)
AGENT_LISTING = FormRule(Form.AGENT_LISTING, Family.AGENT, READ_ONLY, _DISCOVERY)
AGENT_ROOT = FormRule(Form.AGENT_ROOT, Family.AGENT, READ_ONLY, _SESSION)
HISTORY_LISTING = FormRule(Form.HISTORY_LISTING, Family.HISTORY, READ_ONLY, _DISCOVERY)
HISTORY_ROOT = FormRule(Form.HISTORY_ROOT, Family.HISTORY, READ_GREP, _SESSION)
HISTORY_SAVED_LISTING = FormRule(Form.HISTORY_SAVED_LISTING, Family.HISTORY, DISCOVER, _DISCOVERY)
HISTORY_SAVED = FormRule(Form.HISTORY_SAVED, Family.HISTORY, DISCOVER, _EXACT)
MEMORY_UNION = FormRule(Form.MEMORY_UNION, Family.MEMORY, DISCOVER, _DISCOVERY)
MEMORY_ROOT = FormRule(Form.MEMORY_ROOT, Family.MEMORY, DISCOVER, _EXACT)
MEMORY_FILE = FormRule(Form.MEMORY_FILE, Family.MEMORY, ALL, _EXACT)
JOURNAL_LISTING = FormRule(Form.JOURNAL_LISTING, Family.JOURNAL, DISCOVER, _DISCOVERY)
JOURNAL_ENTRY = FormRule(Form.JOURNAL_ENTRY, Family.JOURNAL, DISCOVER, _EXACT)
MCP_LISTING = FormRule(Form.MCP_LISTING, Family.MCP, READ_ONLY, _DISCOVERY)
MCP_SERVER = FormRule(Form.MCP_SERVER, Family.MCP, READ_ONLY, _EXACT)
MCP_RESOURCE = FormRule(Form.MCP_RESOURCE, Family.MCP, READ_ONLY, _EXACT)
SHARED_LISTING = FormRule(Form.SHARED_LISTING, Family.SHARED, READ_ONLY, _DISCOVERY)
SHARED_TEXT = FormRule(Form.SHARED_TEXT, Family.SHARED, READ_GREP, _SESSION)
SHARED_IMAGE = FormRule(Form.SHARED_IMAGE, Family.SHARED, READ_ONLY, _SESSION)
SHARED_LIBRARY_TEXT = FormRule(Form.SHARED_LIBRARY_TEXT, Family.SHARED, READ_GREP, _EXACT)
SHARED_LIBRARY_IMAGE = FormRule(Form.SHARED_LIBRARY_IMAGE, Family.SHARED, READ_ONLY, _EXACT)
MEVEDEL_LISTING = FormRule(Form.MEVEDEL_LISTING, Family.MEVEDEL, DISCOVER, _DISCOVERY)
MEVEDEL_DOC = FormRule(Form.MEVEDEL_DOC, Family.MEVEDEL, DISCOVER, _EXACT)

_ALL_RULES = (
    WORK_LISTING,
    WORK_SHARED_ROOT,
    WORK_SHARED,
    WORK_SESSION,
    ARTIFACT_LISTING,
    ARTIFACT_HANDLE,
    SKILL_LISTING,
    SKILL_EXACT,
    SKILL_ALIAS,
    AGENT_LISTING,
    AGENT_ROOT,
    HISTORY_LISTING,
    HISTORY_ROOT,
    HISTORY_SAVED_LISTING,
    HISTORY_SAVED,
    MEMORY_UNION,
    MEMORY_ROOT,
    MEMORY_FILE,
    JOURNAL_LISTING,
    JOURNAL_ENTRY,
    MCP_LISTING,
    MCP_SERVER,
    MCP_RESOURCE,
    SHARED_LISTING,
    SHARED_TEXT,
    SHARED_IMAGE,
    SHARED_LIBRARY_TEXT,
    SHARED_LIBRARY_IMAGE,
    MEVEDEL_LISTING,
    MEVEDEL_DOC,
)
RULES: dict[Form, FormRule] = {rule.form: rule for rule in _ALL_RULES}


def rule(form: Form) -> FormRule:
    return RULES[form]
