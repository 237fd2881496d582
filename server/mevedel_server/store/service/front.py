"""``SessionService``: the one front the LSP server, the CLI, the agent
engine and the resolver call -- one client (``ClientIdentity``) of one
workspace's session store (``Target``).

The front is thin: it builds one :class:`~.table.SessionTable` (the
sessions open here, the target clock, the admission gate) and the
capabilities over it, each in its own module and given what it depends on:

- ``service.sessions`` (:class:`~.sessions.Sessions`) -- list, create, open,
  save, rename, close, delete, storage settings, expired-session sweep,
  artifact attachments, input history;
- ``service.turns`` (:class:`~.turns.Turns`) -- the turn in flight and its
  checkpoint (begin, capture, ``record_pre_state``, append, settle, abort,
  checkpoint), compaction and /clear, turn views, the transcript;
- ``service.history`` (:class:`~.lifecycle.History`) -- Rewind, Redo, Fork,
  Worktree Fork, Save As and recovery;
- ``service.agents`` (:class:`~.agents.Agents`) -- the external agent, agent
  choices, the retained-agent registry and their tasks;
- ``service.following`` (:class:`~.following.Following`) -- sessions owned
  elsewhere, advanced through their owner's publications.

Control transfer (:class:`~.control.SessionControl`) is built over a
service by the front end that runs it. The front itself keeps only what
every caller needs whatever it does: the target and client, the change
listeners, and the look-ups of a session open here (``session``, ``info``,
``is_open``, ``open_sessions``, ``live_history``).

Times written into records are target seconds (:mod:`.clock`); authority
decisions are the lease layer's, against the target clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...targets import Target
from ..authority.lease import DEFAULT_LEASE_SECONDS, ClientIdentity
from .following import Following
from .renewal import renewal_interval
from .sessions import Sessions
from .table import SessionTable
from .values import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    DEFAULT_SESSION_KEEP_RECENT,
    SessionChange,
    SessionInfo,
    SpoolNotice,
)

if TYPE_CHECKING:
    from ..transactions.pending_publication import PendingSpool
    from .agents import Agents
    from .lifecycle import History
    from .live_history import LiveHistory
    from .open_session import OpenSession
    from .turns import StoppedTurnLookup, Turns


class SessionService:
    def __init__(
        self,
        target: Target,
        client: ClientIdentity,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        renew_every: float | None = None,
        max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        publication_keep_recent: int | None = None,
        checkpoint_seconds: float | None = None,
        session_max_age_days: int | None = None,
        session_keep_recent: int = DEFAULT_SESSION_KEEP_RECENT,
        git_excludes: bool = False,
        one_command: bool = False,
        pending_spool: PendingSpool | None = None,
        stopped_turn_changes: StoppedTurnLookup | None = None,
        leases_outlive_process: bool = False,
    ) -> None:
        """``pending_spool``: a target on this machine where a save whose
        host could not be reached to record it pending is kept until a
        client on this machine next resumes the session
        (:func:`~..transactions.pending_publication.workspace_spool`).
        ``stopped_turn_changes``: the front end's file-state record, asked
        what a turn a stopped process left in flight changed in the tree
        before it is settled as interrupted
        (:meth:`~.turns.Turns.fold_stopped_turn`).
        ``leases_outlive_process``: this process detaches at its end, leaving
        the leases it holds to its client's next process (a CLI command): its
        lease generations name it as their holder only while an agent turn it
        runs is open, or, in a process that runs turns
        (:attr:`~.sessions.Sessions.opens_for_turn`), from the claim until it
        detaches, so that its ending counts as its death only then; a
        server's (the default) name it always, since it releases them when it
        ends well."""
        self.target = target
        self.client = client
        #: The open sessions every capability works on (store-internal:
        #: :class:`~.control.SessionControl` changes them too).
        self.table = table = SessionTable(
            target,
            client,
            lease_seconds=lease_seconds,
            renew_every=renew_every if renew_every is not None else renewal_interval(lease_seconds),
            publication_keep_recent=publication_keep_recent,
            checkpoint_seconds=checkpoint_seconds,
            one_command=one_command,
            pending_spool=pending_spool,
            leases_outlive_process=leases_outlive_process,
        )
        self.following = Following(table)
        self.sessions = Sessions(
            table,
            self.following,
            session_max_age_days=session_max_age_days,
            session_keep_recent=session_keep_recent,
            git_excludes=git_excludes,
        )
        self._max_snapshot_bytes = max_snapshot_bytes
        self._stopped_turn_changes = stopped_turn_changes
        # A mid-turn checkpoint is the turn capability's; the table's timer runs it.
        table.checkpoint_tick = lambda session: self.turns.checkpoint_tick(session)
        if stopped_turn_changes is not None:
            table.fold_stopped_turn = lambda session: self.turns.fold_stopped_turn(session)
        #: Called with every :class:`SessionChange`.
        self.on_change: list[Callable[[SessionChange], None]] = table.on_change
        #: Called with every :class:`SpoolNotice` (a save kept on this
        #: machine because its host could not record it, and its arrival there).
        self.on_spool: list[Callable[[SpoolNotice], None]] = table.on_spool
        #: Whether a control transfer of the session is in flight here
        #: (:class:`~.control.SessionControl` installs the real answer).
        self.transfer_in_flight: Callable[[str], bool] = lambda _session_id: False

    # The capabilities that work on open sessions are built (and their
    # modules imported, an open session's machinery with them) at their
    # first use: a listing uses none of them.

    @functools.cached_property
    def turns(self) -> Turns:
        from .turns import Turns

        return Turns(self.table, self.following, max_snapshot_bytes=self._max_snapshot_bytes,
                     stopped_turn_changes=self._stopped_turn_changes)

    @functools.cached_property
    def history(self) -> History:
        from .lifecycle import History

        return History(self.table)

    @functools.cached_property
    def agents(self) -> Agents:
        from .agents import Agents

        return Agents(self.table)

    def open_sessions(self) -> list[str]:
        return list(self.table.sessions)

    def is_open(self, session_id: str) -> bool:
        return session_id in self.table.sessions

    def session(self, session_id: str) -> OpenSession:
        """The open session (raises SessionNotOpen)."""
        return self.table.get(session_id, "use it")

    def info(self, session_id: str) -> SessionInfo:
        return self.table.info_of(self.table.get(session_id, "ask about it"))

    def live_history(self, session_id: str) -> LiveHistory:
        return self.table.get(session_id, "read its history").history
