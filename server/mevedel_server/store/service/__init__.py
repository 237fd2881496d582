"""The session service: one thin front over the store for the LSP server,
the CLI, the agent engine and the resolver (:class:`SessionService`), the
capabilities it is built from, and the open-session machinery they drive.

- :mod:`.front` -- ``SessionService``: builds the table and the
  capabilities; keeps only ``target``, ``client``, ``on_change`` and the
  look-ups of a session open here.
- :mod:`.table` -- ``SessionTable``: the open sessions, the target clock,
  change listeners and the admission gate every capability shares.
- :mod:`.sessions` (``service.sessions``) -- list, create (lazy), open
  (resume / join / take over), save, rename, close, delete, settings,
  expired-session sweep, artifact attachments, input history.
- :mod:`.turns` (``service.turns``) -- the turn in flight and its
  checkpoint, compaction and /clear, turn views, file restores.
- :mod:`.lifecycle` (``service.history``) -- Rewind, Redo, Fork, Worktree
  Fork, Save As and recovery.
- :mod:`.agents` (``service.agents``) -- the recorded agent, agent
  choices, retained agents and their tasks.
- :mod:`.following` (``service.following``) -- sessions owned elsewhere,
  advanced through the owner's publications.
- :mod:`.control` -- ``SessionControl``, control transfer over a service.
- :mod:`.values` -- the values the capabilities return; :mod:`.checks` --
  the turn refusals they share.
- :mod:`.open_session` -- one open session: lease, publisher, pending
  publication, background renewal.
- :mod:`.background` -- an open session's background storage work:
  publication collection after commits and lease-acquiring opens, and
  mid-turn checkpoints while a turn is in flight.
- :mod:`.live_history` / :mod:`.saved_history` -- what ``history://root`` and
  ``history://saved`` read.
- :mod:`.turn_views` -- turn summaries, one turn's records, and what turns
  changed in the tree (the diff of their checkpoints, ``content/diff.py``).
- :mod:`.file_restore` -- one file back to its state before a turn, as a
  turn of its own.
- :mod:`.held_beside` -- which sessions are held beside a new one, and
  the advisory that names them.
- :mod:`.errors` -- the service's refusals and :func:`error_kind`.
"""

from __future__ import annotations

from ...lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: importing one
#: submodule (``errors``, say) does not load every other.
_EXPORTS = {
    '.errors': ('KINDS', 'InvalidSessionInput', 'NoPendingPublication', 'NoSessionOpen', 'NoSuchTurn', 'SessionConflict', 'SessionIncompatible', 'SessionNotOpen', 'SessionReadOnly', 'TurnStateConflict', 'error_kind', 'is_refusal'),
    '.held_beside': ('BesideHeld', 'HeldSession'),
    '.evidence': ('EVIDENCE_KINDS', 'EvidenceInput', 'make_evidence'),
    '.live_history': ('LiveHistory',),
    '.open_session': ('OpenSession', 'PendingSave'),
    '.saved_history': ('SavedCatalog', 'SavedSession', 'SavedSource', 'read_agent_tasks', 'read_sources', 'saved_catalog', 'saved_session'),
    '.values': ('ABORT_REASON', 'CHANGES_UNKNOWN', 'StoppedTurnChanges', 'Access', 'SaveResult', 'DEFAULT_MAX_SNAPSHOT_BYTES', 'PRODUCT_STORAGE', 'CaptureResult', 'OpenMode', 'OpenResult', 'SegmentRotation', 'SessionChange', 'SessionInfo', 'SessionListing', 'SpoolNotice', 'TurnStarted'),
    '.front': ('SessionService',),
    '..content.diff': ('DiffSide', 'PathDiff', 'TreeDiff', 'describe', 'stat_lines'),
    '.file_restore': ('FileRestore',),
    '.turn_views': ('TurnDetail', 'TurnItem', 'TurnSummary'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
