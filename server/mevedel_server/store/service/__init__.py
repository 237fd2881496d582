"""The session service: one facade over the store for the LSP server and the
CLI (:class:`SessionService`), with the open-session machinery it drives.

- :mod:`.sessions` -- ``SessionService``: list, create (lazy), open
  (resume / join / take over), close, rename, turns, saves, compaction
  and /clear.
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
- :mod:`.errors` -- the service's refusals and :func:`error_kind`.
"""

from __future__ import annotations

from ...lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: importing one
#: submodule (``errors``, say) does not load every other.
_EXPORTS = {
    '.errors': ('KINDS', 'InvalidSessionInput', 'NoPendingPublication', 'NoSuchTurn', 'SessionConflict', 'SessionIncompatible', 'SessionNotOpen', 'SessionReadOnly', 'TurnStateConflict', 'error_kind', 'is_refusal'),
    '.evidence': ('EVIDENCE_KINDS', 'EvidenceInput', 'make_evidence'),
    '.live_history': ('LiveHistory',),
    '.open_session': ('Access', 'OpenSession', 'PendingSave', 'SaveResult'),
    '.saved_history': ('SavedCatalog', 'SavedSession', 'SavedSource', 'read_agent_tasks', 'read_sources', 'saved_catalog', 'saved_session'),
    '.values': ('ABORT_REASON', 'DEFAULT_MAX_SNAPSHOT_BYTES', 'PRODUCT_STORAGE', 'CaptureResult', 'OpenMode', 'OpenResult', 'SegmentRotation', 'SessionChange', 'SessionInfo', 'SessionListing', 'TurnStarted'),
    '.front': ('SessionService',),
    '..content.diff': ('DiffSide', 'PathDiff', 'TreeDiff', 'describe', 'stat_lines'),
    '.file_restore': ('FileRestore',),
    '.turn_views': ('TurnDetail', 'TurnItem', 'TurnSummary'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
