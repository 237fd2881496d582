"""Find resource addresses inside documents (transcripts, notes, prompts).

``find_address_spans`` returns every maximal ``scheme://...`` token. A token
stops at whitespace, at any of ``<>"'`` and the backtick, and at a ``)`` or
``]`` that closes nothing opened inside the token (so Markdown links and
parenthesised prose work); trailing ``.,;:!?`` are sentence punctuation, not
address text. Offsets are Python ``str`` indices into the scanned text; the
LSP layer converts them to its position encoding.

``classify_span`` decides what a token is. Ours (a known scheme in any case)
-> the parsed ``Address`` or its ``AddressError``. Anything else is left alone
(``None``) unless it is a near miss of a known scheme: within
Damerau-Levenshtein distance 2 of one, compared case-insensitively. Well-known
public URI schemes (``https``, ``ftp``, ``tcp``...) are never near misses,
although several are within distance 2 of ``mcp``: a document that mentions
``ftp://host`` is not misspelling an address. ``strict=True`` (a tool
argument, where every ``scheme://`` must be ours) reports every unknown scheme.
"""

from __future__ import annotations

from dataclasses import dataclass

from .grammar import parse_address
from .model import SCHEMES, Address, AddressError

_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_STOP = frozenset("<>\"'`")
_TRAILING = ".,;:!?"
_SCHEME_SET = frozenset(SCHEMES)

#: Public URI schemes that are never reported as a misspelt address scheme.
PUBLIC_SCHEMES = frozenset(
    {
        "http", "https", "ftp", "ftps", "sftp", "ssh", "git", "svn", "hg", "file",
        "ws", "wss", "tcp", "udp", "s3", "gs", "smb", "nfs", "ldap", "ldaps",
        "irc", "ircs", "rtsp", "rtmp", "sip", "redis", "rediss", "postgres",
        "postgresql", "mysql", "mongodb", "amqp", "amqps", "mqtt", "grpc", "jdbc",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AddressSpan:
    """One ``scheme://`` token: ``text == document[start:end]``."""

    start: int
    end: int
    text: str

    @property
    def scheme(self) -> str:
        return self.text.partition("://")[0]


def find_address_spans(text: str) -> list[AddressSpan]:
    """Every maximal ``scheme://...`` token in ``text``, in order."""
    spans: list[AddressSpan] = []
    position = 0
    while True:
        marker = text.find("://", position)
        if marker < 0:
            return spans
        start = marker
        while start > 0 and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        # A scheme begins with a letter: skip digits and +.- that precede it.
        while start < marker and text[start] not in _LETTERS:
            start += 1
        if start == marker:
            position = marker + 3
            continue
        end = _token_end(text, marker + 3)
        spans.append(AddressSpan(start, end, text[start:end]))
        position = max(end, marker + 3)


def _token_end(text: str, position: int) -> int:
    """Where the token whose address part starts at ``position`` ends."""
    depth_round = depth_square = 0
    length = len(text)
    while position < length:
        char = text[position]
        if char in _STOP or char.isspace():
            break
        if char == "(":
            depth_round += 1
        elif char == "[":
            depth_square += 1
        elif char == ")":
            if not depth_round:
                break
            depth_round -= 1
        elif char == "]":
            if not depth_square:
                break
            depth_square -= 1
        position += 1
    # The token always contains "://", whose final "/" stops this strip.
    end = position
    while text[end - 1] in _TRAILING:
        end -= 1
    return end


def classify_span(span: AddressSpan, *, strict: bool = False) -> Address | AddressError | None:
    """The parsed address, its validation error, or ``None`` for a token that
    is not ours and not a near miss of ours."""
    scheme = span.scheme
    lowered = scheme.lower()
    if lowered not in _SCHEME_SET and not strict and not is_near_miss(lowered):
        return None
    try:
        return parse_address(span.text)
    except AddressError as error:
        return error


def is_near_miss(scheme: str) -> bool:
    """Whether ``scheme`` (already lowercased) looks like a misspelt address
    scheme rather than some other URI scheme."""
    if scheme in _SCHEME_SET:
        return True
    if scheme in PUBLIC_SCHEMES:
        return False
    return any(_within_two(scheme, known) for known in SCHEMES)


def _within_two(a: str, b: str) -> bool:
    """Damerau-Levenshtein (optimal string alignment) distance <= 2."""
    if abs(len(a) - len(b)) > 2:
        return False
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            best = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                best = min(best, previous2[j - 2] + 1)
            current[j] = best
        if min(current) > 2:
            return False
        previous2, previous = previous, current
    return previous[len(b)] <= 2


def find_addresses(text: str, *, strict: bool = False) -> list[tuple[AddressSpan, Address | AddressError]]:
    """Each token that is ours (or a near miss) with its classification."""
    found: list[tuple[AddressSpan, Address | AddressError]] = []
    for span in find_address_spans(text):
        result = classify_span(span, strict=strict)
        if result is not None:
            found.append((span, result))
    return found


def address_at(text: str, offset: int) -> AddressSpan | None:
    """The token containing ``offset`` (its end offset included, so a cursor
    just after an address still finds it), or ``None``.

    Only the whitespace-delimited run around ``offset`` is scanned: a token
    never crosses whitespace, so hover stays cheap in long documents.
    """
    if offset < 0 or offset > len(text):
        return None
    low = offset
    while low > 0 and not text[low - 1].isspace():
        low -= 1
    high = offset
    length = len(text)
    while high < length and not text[high].isspace():
        high += 1
    for span in find_address_spans(text[low:high]):
        if span.start <= offset - low <= span.end:
            return AddressSpan(span.start + low, span.end + low, span.text)
    return None
