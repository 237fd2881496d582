"""Durable sessions: workspace identity, lease generations and immutable
publications, all through a :class:`~mevedel_server.targets.Target`.

On-disk layout (paths relative to the workspace root, which is the target
root)::

    .mevedel/
      workspace-id                      JSON {format_version, workspace_id: 64 hex};
                                        exclusive-created with the first session,
                                        never overwritten
      sessions/
        2026-07-19T09-47-bf87b5dd793a/  one session (ID: local minute + 12 hex)
          .lease/
            generation-00000000000000000001.json   immutable lease generations;
            generation-00000000000000000002.json   the highest one is the head
            requests/                   control transfer (:mod:`.transfer`), made by
              request-<20 digits>.json  the first request only; per transfer generation:
              decision-<20 digits>.json the request, the owner's answer, and the
              fence-<20 digits>.json    requester-only fence of a granted release
          .pending-input/               queued prompts and steering, one
            <32 hex>.json               file per entry (:mod:`.pending_inputs`)
          .publications/
            <32 hex>/                   one immutable publication, never rewritten
              000001.data               artifact bytes written by this publication
              manifest.json             written last: logical path ->
                                        {published, sha256, size}

The head lease generation's ``publication_head`` (for example
``.publications/<32 hex>/manifest.json``) is the session's only commit point:
readers follow it, validate the manifest and verify every byte they consume.
Lease protocol: :mod:`.lease`; publication protocol: :mod:`.publication`;
record schema: :mod:`.records`. Names in ``.lease/`` other than
``generation-<20 digits>.json`` (temporary files, clock probes) are not
generations and are ignored; so is any publication directory no head names.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: importing one
#: submodule (``errors``, say) does not load every other.
_EXPORTS = {
    '.errors': ('ClaimRaced', 'InvalidSessionId', 'LeaseHeld', 'LeaseLost', 'LeaseObservationError', 'LeaseUnavailable', 'PublicationFailed', 'PublicationPending', 'SessionMissing', 'SessionOccupied', 'StoreError', 'TakeoverNeedsConfirmation', 'IdentityNeedsConfirmation'),
    '.layout': ('SessionPaths',),
    '.authority.lease': ('DEFAULT_LEASE_SECONDS', 'ClientIdentity', 'LeaseHandle', 'LeaseObservation', 'LeaseStanding', 'acquire_lease', 'describe_target_time', 'observe_lease', 'read_lease_head'),
    '.authority.publication': ('CommittedSnapshot', 'PendingPublication', 'Publisher', 'PublishOutcome', 'load_manifest', 'read_committed'),
    '.authority.records': ('LeaseRecord', 'LeaseState', 'ManifestEntry', 'PublicationManifest', 'RecordError', 'RecordErrorKind', 'WorkspaceIdentity', 'decode_record', 'encode_record'),
    '.authority.workspace': ('allocate_session_id', 'check_session_id', 'ensure_workspace_id', 'is_session_id', 'materialize_session', 'new_session_id', 'read_workspace_id', 'saved_session_ids'),
    '.transactions.fork': ('ChildSession', 'ForkImpact', 'ForkResult', 'Variant', 'VariantGroup', 'commit_fork', 'fork_variants', 'prepare_fork'),
    '.transactions.lifecycle_token': ('InvalidToken', 'LifecycleError', 'LifecycleRefused', 'StaleState', 'StateToken'),
    '.transactions.recovery': ('RecoveryOutcome', 'RecoveryPending', 'RecoveryState', 'abandon_recovery', 'find_recovery', 'retry_recovery'),
    '.transactions.redo': ('RedoImpact', 'RedoStates', 'TurnState', 'commit_redo', 'prepare_redo', 'redo_states'),
    '.transactions.rewind': ('FileRestore', 'InPlaceResult', 'KnownGap', 'RewindImpact', 'TurnLabel', 'commit_rewind', 'prepare_rewind'),
    '.transactions.save_as': ('SaveAsImpact', 'commit_save_as', 'prepare_save_as'),
    '.transactions.snapshot_cut': ('Boundary', 'Side'),
    '.transactions.worktree_fork': ('WorktreeForkFailed', 'WorktreeForkImpact', 'WorktreeForkResult', 'WorktreeTarget', 'commit_worktree_fork', 'prepare_worktree_fork'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
