"""Starting a session beside a held one (the spec's advisory): which
sessions of the workspace are held, and the words that warn of them.

Held means somebody may be changing the project's files through the
session now: it is open or joined here, or another client holds its live
lease, or another process of this client does (a ``mevedel prompt``
running its turns: the lease names that process). A lease that expired, or
whose holder process is proven to have ended, is not held -- its writer is
gone --, nor is a free one, nor this client's own lease that no live
process of it names (a CLI session between two commands): those are merely
resumable.

A new session beside a held one works on the same files, so the front ends
ask first (:meth:`.sessions.Sessions.create` raises :class:`BesideHeld`);
the person may go on, or make a Worktree Fork instead, which works in a
checkout of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from ..authority.lease import ClientIdentity, LeaseStanding
from ..content.sidecar import shown_name
from ..errors import StoreError
from .values import Access

if TYPE_CHECKING:
    from ..workspace_wide.listing import SessionSurvey
    from .open_session import OpenSession

#: Held sessions a warning names at most (the rest are counted).
NAMED_AT_MOST = 3


class HeldSession(msgspec.Struct, frozen=True):
    session_id: str
    #: What pickers call it: its display name or title, else its ID.
    name: str
    #: How it is held, for people: ``open here``, ``joined here``,
    #: ``held by HOST``, ``held by another process of yours (pid N)``.
    how: str

    @property
    def shown(self) -> str:
        return self.name if self.name == self.session_id else f'"{self.name}"'


class BesideHeld(StoreError):
    """A new session was asked for while other sessions of the workspace are
    held, and the person has not accepted that both share the project's
    files (``warn_beside_held``). Nothing was written for it."""

    def __init__(self, held: tuple[HeldSession, ...]) -> None:
        self.held = held
        self.said = advisory(held)
        super().__init__(self.said)


def advisory(held: tuple[HeldSession, ...]) -> str:
    """The warning: which sessions are held and how, that a new session
    shares the project's files with them, and where isolation is."""
    if len(held) == 1:
        [only] = held
        return (f"session {only.shown} is {only.how}: a new session would share this project's files with it "
                f"(a Worktree Fork of it works in a checkout of its own)")
    named = [f"{h.shown} ({h.how})" for h in held[:NAMED_AT_MOST]]
    more = len(held) - len(named)
    if more:
        named.append(f"{more} more")
    listed = ", ".join(named[:-1]) + " and " + named[-1]
    return (f"sessions {listed} are held: a new session would share this project's files with them "
            f"(a Worktree Fork of one works in a checkout of its own)")


def held_here(sessions: Mapping[str, OpenSession]) -> list[HeldSession]:
    """The sessions open here: writable ones are open, read-only ones joined."""
    held = []
    for session_id, session in sessions.items():
        sidecar = session.conversation.sidecar
        how = "open here" if session.access is Access.WRITABLE else "joined here"
        held.append(HeldSession(session_id, shown_name(sidecar, session_id), how))
    return held


def held_surveyed(surveys: Iterable[SessionSurvey], client: ClientIdentity, skip: Iterable[str]) -> list[HeldSession]:
    """The surveyed sessions (not in ``skip``: those open here) whose live
    lease another client holds, or another live process of ``client``."""
    left_out = set(skip)
    held = []
    for survey in surveys:
        observation = survey.observation
        if (survey.name in left_out or survey.vanished or survey.problem is not None or survey.unpublished_child
                or observation is None or observation.record is None or observation.now is None):
            continue
        record = observation.record
        # ``standing`` counts a holder process proven ended as expired.
        if observation.standing is not LeaseStanding.HELD:
            continue
        if record.client_id != client.client_id:
            how = f"held by {record.host or 'another client'}"
        elif record.holder is not None:
            how = f"held by another process of yours (pid {record.holder.pid})"
        else:
            continue  # this client's own, no process of it names it: merely resumable
        facts = survey.sidecar
        name = facts.shown_name if facts is not None and facts.shown_name else survey.name
        held.append(HeldSession(survey.name, name, how))
    return held
