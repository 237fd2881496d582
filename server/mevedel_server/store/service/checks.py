"""Checks of a turn in flight shared by the turn and agent capabilities
(:mod:`.turns`, :mod:`.agents`): one wording of each refusal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..content.transcript import Outcome
from ..content.turns import ConversationError
from .errors import InvalidSessionInput, SessionConflict, TurnStateConflict
from .open_session import OpenSession


def require_turn(session: OpenSession, action: str):
    """The open turn of ``session`` (refused when none is in flight)."""
    opened = session.conversation.open_turn
    if opened is None:
        raise TurnStateConflict(session.session_id, f"has no turn in flight; begin one before you {action}")
    return opened


@contextlib.contextmanager
def refused_in(session: OpenSession) -> Iterator[None]:
    """A refusal of the turn in flight names its session, not the request."""
    try:
        yield
    except SessionConflict:
        raise
    except ConversationError as refused:
        raise SessionConflict(session.session_id, str(refused)) from None


def outcome_of(outcome: Outcome | str) -> Outcome:
    try:
        return Outcome(outcome)
    except ValueError:
        choices = ", ".join(o.value for o in Outcome)
        raise InvalidSessionInput(f"outcome {outcome!r}", f"is not one of {choices}") from None
