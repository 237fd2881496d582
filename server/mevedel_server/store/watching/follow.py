"""What a new committed publication changed, in whole turns.

A follower holds the conversation of the last publication it adopted and
reads the owner's newer one; :func:`diff_conversations` says which *settled*
turns are new or replaced, which settled turns the newer publication no
longer has (a Rewind), and whether the display name changed. A turn still in
flight is never part of the answer: updates are per whole turn, so a mid-turn
checkpoint that settles nothing changes no turn here, and the turn is
reported once, when a publication carries its settlement.

A settled turn is identified by its number; it is *replaced* when the same
number now has another turn identity (a Rewind followed by a new turn) or
other records (a Redo restoring a different history), and unchanged when
its records are equal. Pure: conversations in, a value out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..content.sidecar import shown_name
from ..content.transcript import Prompt, Record, Settle, TurnBegin
from ..content.turns import Conversation

NEW = "new"
REPLACED = "replaced"


@dataclass(frozen=True)
class SettledTurn:
    turn: int
    turn_id: str
    segment: int
    #: ``completed``, ``errored`` or ``interrupted``.
    state: str
    preview: str
    records: tuple[Record, ...]


@dataclass(frozen=True)
class TurnChange:
    turn: int
    turn_id: str
    segment: int
    #: ``new`` or ``replaced``.
    change: str
    state: str
    preview: str


@dataclass(frozen=True)
class PublicationChange:
    #: New or replaced settled turns, by turn number.
    turns: tuple[TurnChange, ...]
    #: Numbers of settled turns the older publication had and this one has not.
    removed: tuple[int, ...]
    renamed: bool
    display_name: str
    named: bool
    settled_turns: int

    @property
    def changes_turns(self) -> bool:
        return bool(self.turns or self.removed)


def settled_turns(conversation: Conversation) -> dict[int, SettledTurn]:
    """Every settled turn of the conversation, by number (a turn in flight
    is left out)."""
    previews = {entry.turn_id: entry.preview for entry in conversation.prompt_index()}
    out: dict[int, SettledTurn] = {}
    for segment in range(1, conversation.current_segment + 1):
        begin: TurnBegin | None = None
        records: list[Record] = []
        for record in conversation.records(segment):
            if isinstance(record, TurnBegin):
                begin, records = record, [record]
            elif begin is not None:
                records.append(record)
                if isinstance(record, Settle):
                    preview = previews.get(begin.turn_id) or _prompt_text(records)
                    out[begin.turn] = SettledTurn(begin.turn, begin.turn_id, segment, record.outcome.value, preview, tuple(records))
                    begin, records = None, []
    return out


def diff_conversations(old: Conversation | None, new: Conversation) -> PublicationChange:
    """What ``new`` changed relative to ``old`` (None: nothing was known)."""
    before = settled_turns(old) if old is not None else {}
    after = settled_turns(new)
    changes = []
    for number in sorted(after):
        turn = after[number]
        known = before.get(number)
        if known is not None and known.turn_id == turn.turn_id and known.records == turn.records:
            continue
        kind = NEW if known is None else REPLACED
        changes.append(TurnChange(turn.turn, turn.turn_id, turn.segment, kind, turn.state, turn.preview))
    removed = tuple(number for number in sorted(before) if number not in after)
    sidecar = new.sidecar
    old_name = old.sidecar.display_name if old is not None else None
    return PublicationChange(
        turns=tuple(changes),
        removed=removed,
        renamed=old is not None and old_name != sidecar.display_name,
        display_name=shown_name(sidecar, new.session_id),
        named=sidecar.display_name is not None,
        settled_turns=len(after),
    )


def _prompt_text(records: list[Record]) -> str:
    return next((r.text for r in records if isinstance(r, Prompt)), "")
