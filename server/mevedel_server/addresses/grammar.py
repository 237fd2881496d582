"""Parse authored address text into a canonical ``Address``.

``parse_address`` is pure and raises only ``AddressError``. The steps, in
order: recognise the scheme, cut an ``agent://`` fragment at the first literal
``#``, split the rest on literal ``/``, decode each component once
(``encoding.decode_component``), then let the family give the components their
meaning and canonical spelling.

Decisions recorded here:

- Schemes are lowercase only. ``WORK://x`` is a malformed address ("scheme
  must be lowercase: work://") rather than an alias, so one resource has one
  spelling in transcripts, bindings and results. Any other
  ``SCHEME://`` prefix is an unknown-scheme error listing the known prefixes.
- One trailing ``/`` is accepted and dropped from the canonical form, except
  ``memory://journal/`` whose root spelling keeps it (``memory://journal`` is
  accepted and canonicalised to it).
- A literal ``#`` is a fragment delimiter and only ``agent://`` has
  fragments; anywhere else it must be spelled ``%23``.
- An ``agent://`` fragment is canonicalised by re-serialising the decoded
  JSON pointer and encoding it with the component encoding while keeping
  ``/`` literal (``encoding.encode_fragment``).
- ``history://saved`` segments are named ``segment-NNNN.chat.jsonl``: our
  transcripts are JSON Lines records, not the spec's Org files
  (``segment-NNNN.chat.org``). This is a recorded deviation from the spec.
- A skill's exact key is split at the *last* literal ``@`` of its first
  component, before decoding (the digest never contains ``@``, so a name may
  spell one as ``%40`` or literally).
- ``.`` and ``..`` are refused in every family, MCP included, after decoding,
  so ``%2E%2E`` is a traversal too.
- A component longer than 255 bytes once decoded (UTF-8) is malformed in
  every family: no filesystem holds such a name, and the address must say
  so before anything tries (it was an ``internal`` error).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from . import matrix
from .encoding import decode_component, encode_component, encode_fragment
from .matrix import FormRule
from .model import SCHEMES, Address, AddressError, ErrorKind

_MALFORMED = ErrorKind.MALFORMED_ADDRESS
_SCHEME_SET = frozenset(SCHEMES)
_SCHEME_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*").fullmatch
KNOWN_PREFIXES = ", ".join(f"{scheme}://" for scheme in SCHEMES)

_PLAIN = re.compile(r"[A-Za-z0-9._~/-]*").fullmatch
#: The longest component (decoded, UTF-8 bytes): a file name's limit
#: (``NAME_MAX``) on every filesystem a workspace lives on.
MAX_COMPONENT_BYTES = 255
#: Components that never name anything: empty (from "//"), "." and "..".
_NOT_NAMES = frozenset({"", ".", ".."})
_PLAIN_COMPONENT = re.compile(r"[A-Za-z0-9._~-]+").fullmatch
_DIGEST = re.compile(r"[0-9a-f]{64}").fullmatch
_ANY_CASE_DIGEST = re.compile(r"[0-9a-fA-F]{64}").fullmatch
_SHARED_ID = re.compile(r"[A-Za-z0-9_-]{1,80}").fullmatch
_SEGMENT = re.compile(r"segment-[0-9]{4}\.chat\.jsonl").fullmatch

#: Skill origins with a readable alias, in the spec's order; ``plugin`` takes
#: an extra PLUGIN component.
SKILL_ORIGINS: tuple[str, ...] = (
    "local-mevedel",
    "local-agents",
    "global-mevedel",
    "global-agents",
    "bundled",
    "managed",
)
_SKILL_ORIGIN_SET = frozenset(SKILL_ORIGINS)
#: Readable memory root keys; any other root uses its 64-hex digest.
MEMORY_KEYS: tuple[str, ...] = ("local-mevedel", "local-agents", "global-mevedel", "global-agents")
_MEMORY_KEY_SET = frozenset(MEMORY_KEYS)
SHARED_ITEM_PARTS: tuple[str, ...] = ("view.png", "discussions", "history", "elements/ELEMENT", "images/KEY")
_SHARED_TEXT_PARTS = frozenset({"discussions", "history"})


def _fail(authored: str, reason: str) -> AddressError:
    return AddressError(_MALFORMED, authored, reason)


def _address(
    authored: str,
    rule: FormRule,
    canonical: str,
    scope: str,
    path: tuple[str, ...] = (),
    key: str | None = None,
    name: str | None = None,
    pointer: tuple[str, ...] | None = None,
) -> Address:
    return Address(authored, rule.family, canonical, rule.locator_class, rule.operations, scope, path, key, name, pointer)


def parse_address(text: str) -> Address:
    """Validate ``text`` and return its canonical ``Address``.

    Raises ``AddressError`` (malformed-address or unknown-scheme) naming the
    authored text and the reason; never anything else.
    """
    if not isinstance(text, str):
        raise _fail(repr(text), "an address must be text")
    cut = text.find("://")
    scheme = text[:cut] if cut > 0 else ""
    if scheme not in _SCHEME_SET:
        _refuse_scheme(text, scheme)
    rest = text[cut + 3 :]
    fragment: str | None = None
    if "#" in rest:
        if scheme != "agent":
            raise _fail(
                text,
                "a '#' fragment is only valid in agent://root/PATH#POINTER; spell a literal '#' as %23",
            )
        rest, _sep, fragment = rest.partition("#")
    if rest[:1] == "/":
        raise _fail(text, f"absolute component after {scheme}://: a path is relative to the family's root")
    if rest[-1:] == "/":
        rest = rest[:-1]
    if _PLAIN(rest):
        # Common case: nothing to decode, every component already canonical.
        parts = rest.split("/") if rest else []
        if not _NOT_NAMES.isdisjoint(parts):
            _refuse_components(text, parts, parts)
        if len(rest) > MAX_COMPONENT_BYTES:  # ASCII: characters are bytes
            for index, part in enumerate(parts, 1):
                _refuse_long(text, index, part)
        spelled = parts
    else:
        # skill:// respells its first component itself (NAME@DIGEST or an origin).
        parts, spelled = _components(text, rest, scheme == "mcp", scheme != "skill")
    return _PARSERS[scheme](text, parts, spelled, fragment)


def _components(text: str, rest: str, separators: bool, spell_first: bool) -> tuple[list[str], list[str]]:
    """Decoded components and their canonical spellings (the first one left
    as authored unless ``spell_first``)."""
    raws = rest.split("/")
    parts: list[str] = []
    spelled: list[str] = []
    for index, raw in enumerate(raws, 1):
        if _PLAIN_COMPONENT(raw):
            value = spelling = raw
        else:
            if not raw:
                _refuse_components(text, [raw], [raw], index)
            value = decode_component(raw, text, index=index, separators=separators)
            spelling = encode_component(value) if spell_first or index > 1 else raw
        if value == "." or value == "..":
            _refuse_components(text, [raw], [value], index)
        _refuse_long(text, index, value)
        parts.append(value)
        spelled.append(spelling)
    return parts, spelled


def _refuse_long(text: str, index: int, value: str) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_COMPONENT_BYTES:
        raise _fail(
            text,
            f"component {index} is {size} bytes long (decoded, in UTF-8); "
            f"a name is at most {MAX_COMPONENT_BYTES} bytes, as on every filesystem",
        )


def _refuse_components(text: str, raws: list[str], parts: list[str], first: int = 1) -> None:
    for index, (raw, value) in enumerate(zip(raws, parts), first):
        if not value:
            raise _fail(text, f"component {index} is empty ('//' inside the address)")
        if value == ".." or value == ".":
            what = "a '..' traversal" if value == ".." else "a '.' component"
            raise _fail(text, f"component {index} {raw!r} is {what}, which addresses never contain")


def _refuse_scheme(text: str, scheme: str) -> None:
    if scheme:
        lowered = scheme.lower()
        if lowered in _SCHEME_SET:
            raise _fail(text, f"scheme must be lowercase: {lowered}://")
        if _SCHEME_SHAPE(scheme):
            raise AddressError(
                ErrorKind.UNKNOWN_SCHEME,
                text,
                f"unknown scheme {scheme}://; the address schemes are {KNOWN_PREFIXES}",
            )
    raise _fail(text, f"not a resource address: expected one of {KNOWN_PREFIXES}")


def _work(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.WORK_LISTING, "work://", "listing")
    if parts[0] == "shared":
        path = tuple(parts[1:])
        if not path:
            return _address(text, matrix.WORK_SHARED_ROOT, "work://shared", "shared")
        return _address(text, matrix.WORK_SHARED, "work://shared/" + "/".join(spelled[1:]), "shared", path)
    return _address(text, matrix.WORK_SESSION, "work://" + "/".join(spelled), "session", tuple(parts))


def _artifact(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.ARTIFACT_LISTING, "artifact://", "listing")
    return _address(text, matrix.ARTIFACT_HANDLE, "artifact://" + "/".join(spelled), "handle", tuple(parts))


def _skill(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.SKILL_LISTING, "skill://", "listing")
    head = parts[0]
    if head in _SKILL_ORIGIN_SET:
        if len(parts) < 2:
            raise _fail(text, f"name a skill: skill://{head}/SKILL")
        name, path = parts[1], tuple(parts[2:])
        canonical = f"skill://{head}/" + "/".join(spelled[1:])
        return _address(text, matrix.SKILL_ALIAS, canonical, "alias", path, head, name)
    if head == "plugin":
        if len(parts) < 3:
            raise _fail(text, "name a plugin skill: skill://plugin/PLUGIN/SKILL")
        plugin, name, path = parts[1], parts[2], tuple(parts[3:])
        canonical = "skill://plugin/" + "/".join(spelled[1:])
        return _address(text, matrix.SKILL_ALIAS, canonical, "alias", path, "plugin/" + plugin, name)
    raw = text[8:].partition("/")[0]  # the authored first component, after "skill://"
    raw_name, at, raw_digest = raw.rpartition("@")
    if not at:
        origins = ", ".join(f"{origin}/SKILL" for origin in SKILL_ORIGINS)
        raise _fail(
            text,
            f"unknown skill origin {head!r}: use skill://NAME@SOURCE-KEY or one of skill://{origins}, plugin/PLUGIN/SKILL",
        )
    if not raw_name:
        raise _fail(text, "the skill name before '@' is empty: use skill://NAME@SOURCE-KEY")
    name = raw_name if _PLAIN_COMPONENT(raw_name) else decode_component(raw_name, text, index=1)
    if name in (".", ".."):
        raise _fail(text, f"the skill name {name!r} is a traversal, which addresses never contain")
    digest = raw_digest if _DIGEST(raw_digest) else decode_component(raw_digest, text, index=1)
    if not _DIGEST(digest):
        raise _fail(text, _digest_problem("skill source key", digest))
    path = tuple(parts[1:])
    canonical = f"skill://{encode_component(name)}@{digest}" + ("/" + "/".join(spelled[1:]) if path else "")
    return _address(text, matrix.SKILL_EXACT, canonical, "exact", path, f"{name}@{digest}", name)


def _digest_problem(what: str, digest: str) -> str:
    if _ANY_CASE_DIGEST(digest):
        return f"the {what} {digest!r} must be lowercase hexadecimal"
    return f"the {what} {digest!r} must be the full lowercase SHA-256 digest (64 hexadecimal digits)"


def _agent(text: str, parts: list[str], spelled: list[str], fragment: str | None) -> Address:
    if not parts:
        if fragment is not None:
            raise _fail(text, "a JSON pointer needs an agent: use agent://root/PATH#POINTER")
        return _address(text, matrix.AGENT_LISTING, "agent://", "listing")
    if parts[0] != "root" or len(parts) < 2:
        raise _fail(text, "name a retained agent as agent://root/PATH (its path without the leading slash)")
    path = tuple(parts[1:])
    canonical = "agent://root/" + "/".join(spelled[1:])
    pointer: tuple[str, ...] | None = None
    if fragment is not None:
        pointer = _pointer(text, fragment)
        # A fragment with nothing to escape re-serialises to itself (RFC 6901
        # token escaping is a bijection on valid tokens).
        canonical += "#" + (fragment if _PLAIN(fragment) else encode_fragment(_pointer_text(pointer)))
    return _address(text, matrix.AGENT_ROOT, canonical, "root", path, pointer=pointer)


def _pointer(text: str, fragment: str) -> tuple[str, ...]:
    """RFC 6901 tokens of a fragment decoded once as UTF-8 URI data."""
    decoded = decode_component(fragment, text, separators=True) if fragment else ""
    if not decoded:
        return ()
    if decoded[0] != "/":
        raise _fail(text, f"the JSON pointer {decoded!r} must be empty or start with '/'")
    tokens = decoded[1:].split("/")
    for token in tokens:
        if "~" in token:
            position = token.find("~")
            while position != -1:
                if token[position + 1 : position + 2] not in ("0", "1"):
                    raise _fail(
                        text,
                        f"the JSON pointer token {token!r} has a '~' not followed by 0 or 1 (spell '~' as ~0, '/' as ~1)",
                    )
                position = token.find("~", position + 2)
    return tuple(token.replace("~1", "/").replace("~0", "~") if "~" in token else token for token in tokens)


def _pointer_text(pointer: tuple[str, ...]) -> str:
    return "".join(["/" + token.replace("~", "~0").replace("/", "~1") for token in pointer])


def _history(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.HISTORY_LISTING, "history://", "listing")
    head = parts[0]
    if head == "root":
        path = tuple(parts[1:])
        canonical = "history://root" + ("/" + "/".join(spelled[1:]) if path else "")
        return _address(text, matrix.HISTORY_ROOT, canonical, "root", path)
    if head == "saved":
        path = tuple(parts[1:])
        if not path:
            return _address(text, matrix.HISTORY_SAVED_LISTING, "history://saved", "saved")
        if len(path) > 2:
            raise _fail(text, "history://saved takes at most SESSION/SEGMENT")
        if len(path) == 2 and not _SEGMENT(path[1]):
            raise _fail(text, f"the saved segment {path[1]!r} must be named segment-NNNN.chat.jsonl")
        return _address(text, matrix.HISTORY_SAVED, "history://saved/" + "/".join(spelled[1:]), "saved", path)
    raise _fail(text, f"unknown history branch {head!r}: use history://root[/PATH] or history://saved[/SESSION[/SEGMENT]]")


def _memory(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        raise _fail(
            text,
            "bare memory:// names nothing: use memory://root (all roots), memory://journal/ or memory://ROOT-KEY/PATH",
        )
    head = parts[0]
    if head == "journal":
        if len(parts) == 1:
            return _address(text, matrix.JOURNAL_LISTING, "memory://journal/", "listing")
        if len(parts) > 2:
            raise _fail(text, "a journal entry is one file name: memory://journal/FILE (no nested names)")
        canonical = "memory://journal/" + spelled[1]
        return _address(text, matrix.JOURNAL_ENTRY, canonical, "entry", (parts[1],))
    if head == "root":
        if len(parts) > 1:
            raise _fail(text, "memory://root is the union of all roots; name a file as memory://ROOT-KEY/PATH")
        return _address(text, matrix.MEMORY_UNION, "memory://root", "union")
    if head not in _MEMORY_KEY_SET and not _DIGEST(head):
        if _ANY_CASE_DIGEST(head):
            raise _fail(text, _digest_problem("memory root key", head))
        keys = ", ".join(MEMORY_KEYS)
        raise _fail(
            text,
            f"unknown memory root key {head!r}: use one of {keys}, a root's 64-digit lowercase SHA-256 digest,"
            " memory://root or memory://journal/",
        )
    path = tuple(parts[1:])
    if not path:
        return _address(text, matrix.MEMORY_ROOT, f"memory://{head}", "root", key=head)
    return _address(text, matrix.MEMORY_FILE, f"memory://{head}/" + "/".join(spelled[1:]), "root", path, head)


def _mcp(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.MCP_LISTING, "mcp://", "listing")
    if len(parts) > 2:
        raise _fail(
            text,
            "an MCP address has at most two components, mcp://SERVER/URI: encode the native URI as one component"
            " (its '/' as %2F)",
        )
    server = parts[0]
    if len(parts) == 1:
        return _address(text, matrix.MCP_SERVER, "mcp://" + spelled[0], "server", key=server)
    uri = parts[1]
    canonical = f"mcp://{spelled[0]}/{spelled[1]}"
    return _address(text, matrix.MCP_RESOURCE, canonical, "resource", key=server, name=uri)


def _shared_identity(text: str, what: str, value: str) -> str:
    if not _SHARED_ID(value):
        raise _fail(text, f"the shared {what} {value!r} must match [a-zA-Z0-9_-]{{1,80}}")
    return value


def _shared(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.SHARED_LISTING, "shared://", "listing")
    count = len(parts)
    if parts[0] == "library":
        if count == 1:
            return _address(text, matrix.SHARED_LIBRARY_TEXT, "shared://library", "library")
        if count == 2 and parts[1] == "sheet.png":
            return _address(text, matrix.SHARED_LIBRARY_IMAGE, "shared://library/sheet.png", "library", ("sheet.png",)
            )
        name = _shared_identity(text, "library name", parts[1])
        if count == 2:
            return _address(text, matrix.SHARED_LIBRARY_TEXT, f"shared://library/{name}", "library", key=name)
        if count == 3 and parts[2] == "sheet.png":
            canonical = f"shared://library/{name}/sheet.png"
            return _address(text, matrix.SHARED_LIBRARY_IMAGE, canonical, "library", ("sheet.png",), name)
        raise _fail(text, "a library address is shared://library[/NAME][/sheet.png]")
    item = _shared_identity(text, "item id", parts[0])
    base = f"shared://{item}"
    if count == 1:
        return _address(text, matrix.SHARED_TEXT, base, "item", key=item)
    part = parts[1]
    if count == 2:
        if part == "view.png":
            return _address(text, matrix.SHARED_IMAGE, base + "/view.png", "item", ("view.png",), item)
        if part in _SHARED_TEXT_PARTS:
            return _address(text, matrix.SHARED_TEXT, f"{base}/{part}", "item", (part,), item)
    if count == 3 and part in ("elements", "images"):
        what = "element id" if part == "elements" else "image key"
        identity = _shared_identity(text, what, parts[2])
        form = matrix.SHARED_TEXT if part == "elements" else matrix.SHARED_IMAGE
        return _address(text, form, f"{base}/{part}/{identity}", "item", (part, identity), item)
    if count == 2 and part in ("elements", "images"):
        raise _fail(text, f"name one: shared://{item}/{part}/{'ELEMENT' if part == 'elements' else 'KEY'}")
    parts_text = ", ".join(SHARED_ITEM_PARTS)
    raise _fail(text, f"unknown shared item part {'/'.join(parts[1:])!r}: an item's parts are {parts_text}")


def _mevedel(text: str, parts: list[str], spelled: list[str], _fragment: str | None) -> Address:
    if not parts:
        return _address(text, matrix.MEVEDEL_LISTING, "mevedel://", "listing")
    return _address(text, matrix.MEVEDEL_DOC, "mevedel://" + "/".join(spelled), "doc", tuple(parts))


_PARSERS: dict[str, Callable[[str, list[str], list[str], str | None], Address]] = {
    "work": _work,
    "artifact": _artifact,
    "skill": _skill,
    "agent": _agent,
    "history": _history,
    "memory": _memory,
    "mcp": _mcp,
    "shared": _shared,
    "mevedel": _mevedel,
}
