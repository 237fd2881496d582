"""The token of a two-phase whole-session transaction, and its refusals.

Every lifecycle transaction (Rewind, Redo, Fork, Worktree Fork, Save As) is
split in two: ``prepare_*`` only reads and returns the impact together with a
:class:`StateToken` naming exactly the state it saw -- the lease generation
and its client, the committed publication head, the time the plan was made
for, what the transaction is about (boundary, publication, fork point) and
the content hash of every file it will touch. ``commit_*`` takes the token
back, rechecks each of those facts and refuses with :class:`StaleState`
(naming what moved) before it changes anything.

The token travels as opaque text (:meth:`StateToken.text`), so a prepare in
one process (``mevedel ... prepare``) can be committed by another. It is not
a capability: a commit never trusts the plan a token implies, it recomputes
the plan from the immutable head the token names and compares every fact
against the target again. A token another transaction made, or text that is
not a token, is refused as :class:`InvalidToken`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Annotated

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import Entry
from ..errors import SessionRefusal, StoreError

TOKEN_FORMAT_VERSION = 1
_PREFIX = "mevedel-txn-1."
#: What a file's content hash is when the file does not exist.
ABSENT = "absent"

SubjectValue = str | int | bool | None


class LifecycleError(StoreError):
    """Base of the lifecycle transactions' refusals. ``kind`` is the stable
    error kind a client sees (the ``data.kind`` of an LSP error)."""

    kind = "conflict"


class InvalidToken(LifecycleError):
    kind = "invalid-params"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the transaction token is not usable: {reason}")
        self.reason = reason


class StaleState(LifecycleError, SessionRefusal):
    """Something the prepare saw has moved: prepare again and re-confirm."""

    kind = "stale-head"

    def __init__(self, session_id: str, moved: list[str]) -> None:
        listed = "; ".join(moved)
        SessionRefusal.__init__(self, session_id, f"the state changed since the impact was prepared ({listed}); prepare again")
        self.moved = tuple(moved)


class LifecycleRefused(LifecycleError, SessionRefusal):
    """The session's state does not allow the transaction (a turn in flight,
    a boundary that does not exist, an unsafe path...)."""

    def __init__(self, session_id: str, reason: str, kind: str = "conflict") -> None:
        SessionRefusal.__init__(self, session_id, reason)
        self.reason = reason
        self.kind = kind


class _Body(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    v: int = TOKEN_FORMAT_VERSION
    op: Annotated[str, msgspec.Meta(pattern=r"^[a-z-]{1,32}\Z")]
    session_id: str
    lease_generation: Annotated[int, msgspec.Meta(ge=0)]
    lease_client: str | None
    head: str | None
    at: Annotated[int, msgspec.Meta(ge=0)]
    subject: dict[str, SubjectValue]
    files: dict[str, str]


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = LazyDecoder(msgspec.json.Decoder, _Body)


def content_hash(content: Entry | bytes | None) -> str:
    """What a token remembers of a path: the SHA-256 of a file's bytes
    (with its mode, when known), of a link's target, a directory's mode, or
    :data:`ABSENT` for nothing there."""
    if content is None:
        return ABSENT
    if isinstance(content, (bytes, bytearray)):
        return hashlib.sha256(content).hexdigest()
    if content.kind == Entry.DIRECTORY:
        return f"directory:{content.mode:04o}" if content.mode is not None else "directory"
    digest = hashlib.sha256(content.data or b"").hexdigest()
    if content.kind == Entry.SYMLINK:
        return f"symlink:{digest}"
    return digest if content.mode is None else f"{digest}:{content.mode:04o}"


class StateToken:
    """What a prepare saw. Build with :meth:`make`; read back with
    :meth:`parse`."""

    __slots__ = ("_body", "_text")

    def __init__(self, body: _Body) -> None:
        self._body = body
        self._text = _PREFIX + base64.urlsafe_b64encode(_encoder.encode(body)).decode("ascii").rstrip("=")

    @classmethod
    def make(
        cls,
        *,
        op: str,
        session_id: str,
        lease_generation: int,
        lease_client: str | None,
        head: str | None,
        at: int,
        subject: Mapping[str, SubjectValue],
        files: Mapping[str, str],
    ) -> StateToken:
        return cls(
            _Body(
                op=op,
                session_id=session_id,
                lease_generation=lease_generation,
                lease_client=lease_client,
                head=head,
                at=at,
                subject=dict(sorted(subject.items())),
                files=dict(sorted(files.items())),
            )
        )

    @classmethod
    def parse(cls, token: StateToken | str, op: str | tuple[str, ...]) -> StateToken:
        """The token of an ``op`` transaction (or of one of several), from
        itself or its text."""
        if isinstance(token, StateToken):
            parsed = token
        elif isinstance(token, str) and token.startswith(_PREFIX):
            payload = token[len(_PREFIX) :]
            try:
                raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
                parsed = cls(_decoder.decode(raw))
            except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
                raise InvalidToken(f"it does not decode ({exc})") from None
        else:
            raise InvalidToken("it is not a mevedel transaction token")
        ops = (op,) if isinstance(op, str) else op
        if parsed.op not in ops:
            raise InvalidToken(f"it was prepared for {parsed.op}, not {' or '.join(ops)}")
        return parsed

    @property
    def text(self) -> str:
        """The opaque form handed to a client."""
        return self._text

    @property
    def op(self) -> str:
        return self._body.op

    @property
    def session_id(self) -> str:
        return self._body.session_id

    @property
    def lease_generation(self) -> int:
        return self._body.lease_generation

    @property
    def lease_client(self) -> str | None:
        return self._body.lease_client

    @property
    def head(self) -> str | None:
        return self._body.head

    @property
    def at(self) -> int:
        return self._body.at

    @property
    def subject(self) -> Mapping[str, SubjectValue]:
        return self._body.subject

    @property
    def files(self) -> Mapping[str, str]:
        """Every file the transaction touches -> its content hash then."""
        return self._body.files

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateToken) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __repr__(self) -> str:
        return f"StateToken({self.op} of session {self.session_id} at head {self.head})"


def moved_files(expected: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The reasons naming each file whose hash differs from the token's."""
    moved = []
    for path, seen in expected.items():
        now = current.get(path)
        if now != seen:
            if now == ABSENT:
                moved.append(f"{path} was removed")
            elif seen == ABSENT:
                moved.append(f"{path} was created")
            else:
                moved.append(f"{path} changed")
    return moved
