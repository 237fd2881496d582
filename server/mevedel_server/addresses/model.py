"""The vocabulary of resource addresses: families, operations, locator classes,
error kinds, and the parsed ``Address`` value.

Everything here is pure data (msgspec is the one import beyond the stdlib). Parsing lives in ``grammar.py``; the operation
matrix in ``matrix.py``. Nothing in this package performs I/O.
"""

from __future__ import annotations

import enum

import msgspec


class Family(enum.Enum):
    """One address family of the spec's "Supported families" table.

    ``JOURNAL`` is the reserved ``memory://journal/`` branch: it shares the
    ``memory`` scheme but is its own family with its own operation row.
    """

    WORK = "work"
    ARTIFACT = "artifact"
    SKILL = "skill"
    AGENT = "agent"
    HISTORY = "history"
    MEMORY = "memory"
    JOURNAL = "journal"
    MCP = "mcp"
    SHARED = "shared"
    MEVEDEL = "mevedel"

    @property
    def scheme(self) -> str:
        return "memory" if self is Family.JOURNAL else self.value


#: The nine internal ``scheme://`` prefixes, in the order completion offers them.
SCHEMES: tuple[str, ...] = (
    "work",
    "artifact",
    "skill",
    "agent",
    "history",
    "memory",
    "mcp",
    "shared",
    "mevedel",
)


class Operation(enum.Enum):
    READ = "Read"
    GLOB = "Glob"
    GREP = "Grep"
    APPLY_PATCH = "ApplyPatch"


class LocatorClass(enum.Enum):
    #: May be bound and later resolve current content (work://shared/..., skill://N@K, ...).
    EXACT = "exact"
    #: Stable only within the owning root session (work://notes.md, artifact://H, agent://root/P).
    SESSION_RELATIVE = "session-relative"
    #: A dynamic listing/union query; never bound (bare scheme://, memory://root).
    DISCOVERY = "discovery"


class ErrorKind(enum.Enum):
    """Stable error kinds. The value is what ``data.kind`` carries over LSP and
    what ``mevedel --json`` prints; never rename one."""

    # Validation: stops before permission; the authored text was wrong.
    MALFORMED_ADDRESS = "malformed-address"
    UNKNOWN_SCHEME = "unknown-scheme"
    UNSUPPORTED_OPERATION = "unsupported-operation"
    CONTAINMENT = "containment"
    #: A Read/Glob/Grep option is invalid (offset 0, a bad regex or glob).
    INVALID_OPTION = "invalid-option"
    # Execution: the address was fine, the world was not.
    MISSING_TARGET = "missing-target"
    OWNER_MISSING = "owner-missing"
    NOT_READY = "not-ready"
    UNAVAILABLE = "unavailable"
    UNREADABLE = "unreadable"
    OUT_OF_RANGE = "out-of-range"
    CONFLICT = "conflict"
    INVALID_PATCH = "invalid-patch"
    INTERNAL = "internal"


class AddressError(Exception):
    """The one exception type the address layer raises.

    ``authored`` is the text the user or model wrote; ``reason`` says what is
    wrong with it in words that never contain a backing path.
    """

    def __init__(self, kind: ErrorKind, authored: str, reason: str) -> None:
        super().__init__(f"{authored}: {reason}")
        self.kind = kind
        self.authored = authored
        self.reason = reason

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "authored": self.authored, "reason": self.reason}


class Address(msgspec.Struct, frozen=True):
    """A validated, canonicalised resource address.

    ``path`` holds the decoded components after the family's fixed head, so a
    resolver never re-parses text:

    - work: ``scope`` is ``"listing"`` (bare ``work://``), ``"shared"`` or
      ``"session"``; ``path`` is relative to that scope's root (``("plans",
      "x.md")`` for ``work://plans/x.md``; ``()`` for ``work://shared``).
    - artifact: ``scope`` ``"listing"`` or ``"handle"``; ``path`` the handle.
    - skill: ``scope`` ``"listing"``, ``"exact"`` or ``"alias"``; ``key`` is
      ``"NAME@HEX"`` for exact and the origin (``"local-mevedel"``,
      ``"plugin/PLUGIN"``...) for aliases; ``name`` the skill name; ``path``
      the descendant inside the package.
    - agent: ``scope`` ``"listing"`` or ``"root"``; ``path`` the retained
      agent path; ``pointer`` the RFC 6901 token list (``None`` without ``#``,
      ``()`` for an explicitly empty fragment -> the whole JSON value).
    - history: ``scope`` ``"listing"``, ``"root"`` or ``"saved"``; for root,
      ``path`` is the agent path; for saved, ``path`` is ``(SESSION[, SEGMENT])``.
    - memory: ``scope`` ``"union"`` (memory://root) or ``"root"``; ``key`` the
      root key (readable or 64-hex digest); ``path`` inside the root.
    - journal: ``scope`` ``"listing"`` or ``"entry"``; ``path`` ``(FILE,)``.
    - mcp: ``scope`` ``"listing"``, ``"server"`` or ``"resource"``; ``key`` the
      decoded server name; ``name`` the decoded native URI.
    - shared: ``scope`` ``"listing"``, ``"item"`` or ``"library"``; ``key`` the
      item id or library name (``None`` for the bare library); ``path`` the part
      (``("view.png",)``, ``("elements", "E")``, ``("sheet.png",)``...).
    - mevedel: ``scope`` ``"listing"`` or ``"doc"``; ``path`` relative to docs/.

    A frozen msgspec Struct rather than a frozen dataclass: construction is
    the largest single cost of canonicalisation, and a Struct builds in a
    fraction of the time.
    """

    authored: str
    family: Family
    canonical: str
    locator_class: LocatorClass
    operations: frozenset[Operation]
    scope: str
    path: tuple[str, ...] = ()
    key: str | None = None
    name: str | None = None
    pointer: tuple[str, ...] | None = None

    @property
    def is_discovery(self) -> bool:
        return self.locator_class is LocatorClass.DISCOVERY

    def allows(self, operation: Operation) -> bool:
        return operation in self.operations

    def require(self, operation: Operation) -> None:
        """Raise the unsupported-operation error (never malformed-address)."""
        if operation not in self.operations:
            allowed = ", ".join(op.value for op in Operation if op in self.operations) or "none"
            raise AddressError(
                ErrorKind.UNSUPPORTED_OPERATION,
                self.authored,
                f"{operation.value} is not supported for {self.canonical} (allowed: {allowed})",
            )
