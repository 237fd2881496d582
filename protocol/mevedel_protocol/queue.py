"""Queued prompts and steering: ``mevedel/queue/*`` and the
``mevedel/queue/didChange`` notification.

A prompt sent while a session's agent turn runs is queued (sent when the
turn settles); steering cancels the running turn and sends its text at
once. Entries are kept durably beside the session; ``docs/protocol.md``
documents every field.
"""

from typing import Literal, Optional

import attrs

QueueEntryKind = Literal["follow-up", "steer"]
QueueEntryState = Literal["queued", "sending", "review"]


@attrs.define
class QueueParams:
    """The queue of a session (default: the folder's current session)."""

    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class QueueAddParams:
    """Queue ``text`` behind the session's running turn; sent at once when
    no turn runs and nothing waits for review."""

    text: str
    agent: Optional[str] = None
    attachments: list[str] = attrs.Factory(list)
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class QueueEditParams:
    entry_id: str
    text: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class QueueEntryParams:
    entry_id: str
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class QueueSteerParams:
    """Send ``text``, or the queued entry ``entryId``, now: the running turn
    is cancelled and this is the next turn. Exactly one of the two."""

    text: Optional[str] = None
    entry_id: Optional[str] = None
    agent: Optional[str] = None
    attachments: list[str] = attrs.Factory(list)
    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None


@attrs.define
class QueueEntry:
    """One queued prompt. ``state``: ``queued`` (waits for the running turn
    to settle), ``sending`` (its turn is starting), ``review`` (not sent on
    its own: ``reason`` says why)."""

    entry_id: str
    kind: QueueEntryKind
    state: QueueEntryState
    text: str
    queued_at: int
    host: str
    agent: Optional[str] = None
    attachments: list[str] = attrs.Factory(list)
    reason: Optional[str] = None


@attrs.define
class QueueState:
    """A session's queue, in delivery order. ``paused``: automatic delivery
    waits, an entry needs review. ``problems``: entry files that cannot be
    read (named; left in place)."""

    session_id: str
    entries: list[QueueEntry]
    paused: bool
    problems: list[str] = attrs.Factory(list)


@attrs.define
class QueueDidChangeParams:
    """The queue of a session changed here (an entry queued, edited,
    cancelled, sent, or marked for review)."""

    workspace_folder: str
    session_id: str
    entries: list[QueueEntry]
    paused: bool
    problems: list[str] = attrs.Factory(list)
