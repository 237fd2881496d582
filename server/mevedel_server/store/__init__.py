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

The logical snapshot a manifest names: ``session.json`` (the sidecar, small:
counters, names, lineage, layout; :mod:`.content.sidecar`), transcript
segments stored as append-only parts ``segment-NNNN/part-NNNNNN.chat.jsonl``
(a part closes at 64 KiB and is never rewritten; :mod:`.content.transcript`),
each retained agent's own transcript stored the same way
``agents/PATH/part-NNNNNN.chat.jsonl`` (one ``agent_task`` line per settled
task; the sidecar's ``layout.agent_parts`` names the parts), append-only
index pages ``index/prompts-NNNNNN.jsonl`` and
``index/files-NNNNNN.jsonl``, and ``file-history/<sha256>`` blobs
(:mod:`.content.checkpoints`). A settle therefore publishes only the parts
and pages that changed plus the sidecar: its cost follows the change, not
the session's length.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

#: The store's front door: every name the rest of the server uses, each
#: with its module, imported on first use (importing one submodule --
#: ``errors``, say -- does not load every other). Nothing outside ``store/``
#: imports ``store.<sub>`` (a layout test holds it); a new name the rest of
#: the server needs is added here.
_EXPORTS = {
    '.errors': ('ClaimRaced', 'ConversationError', 'IdentityNeedsConfirmation', 'InvalidSessionId', 'KindedRefusal', 'LeaseHeld', 'LeaseLost', 'LeaseObservationError', 'LeaseUnavailable', 'OutcomeUnknown', 'PublicationFailed', 'PublicationPending', 'PublicationUnknown', 'SessionMissing', 'SessionOccupied', 'SessionRefusal', 'StoreError', 'TakeoverNeedsConfirmation', 'TransferReserved', 'naming_session'),
    '.layout': ('STATE_DIR', 'SessionPaths'),
    '.authority.lease': ('ClientIdentity', 'DEFAULT_LEASE_SECONDS', 'LeaseHandle', 'LeaseObservation', 'LeaseStanding', 'acquire_lease', 'describe_target_time', 'observe_lease', 'read_lease_head', 'stamped_record'),
    '.authority.publication': ('CommittedSnapshot', 'PendingPublication', 'Publisher', 'PublishOutcome', 'load_manifest', 'read_committed'),
    '.authority.records': ('LeaseRecord', 'LeaseState', 'ManifestEntry', 'PublicationManifest', 'RecordError', 'RecordErrorKind', 'WorkspaceIdentity', 'decode_record', 'encode_record'),
    '.authority.workspace': ('SESSION_ID_PATTERN', 'allocate_session_id', 'check_session_id', 'ensure_generated_excludes', 'ensure_workspace_id', 'is_session_id', 'materialize_session', 'new_session_id', 'read_workspace_id', 'saved_session_ids'),
    '.transactions.fork': ('ChildSession', 'ForkImpact', 'ForkResult', 'commit_fork', 'prepare_fork'),
    '.workspace_wide.fork_variants': ('Variant', 'VariantGroup', 'fork_variants'),
    '.transactions.lifecycle_token': ('InvalidToken', 'LifecycleError', 'LifecycleRefused', 'StaleState', 'StateToken'),
    '.transactions.pending_publication': ('PendingSpool', 'workspace_spool'),
    '.transactions.recovery': ('RecoveryOutcome', 'RecoveryPending', 'RecoveryState', 'abandon_recovery', 'find_recovery', 'retry_recovery'),
    '.transactions.redo': ('RedoImpact', 'RedoStates', 'TurnState', 'commit_redo', 'prepare_redo', 'redo_states'),
    '.transactions.in_place': ('ExternalChange', 'FileRestore', 'InPlaceResult', 'KnownGap'),
    '.transactions.rewind': ('RewindImpact', 'commit_rewind', 'prepare_rewind'),
    '.transactions.two_phase': ('TurnLabel', 'parse_token'),
    '.transactions.save_as': ('SaveAsImpact', 'commit_save_as', 'prepare_save_as'),
    '.transactions.snapshot_cut': ('Boundary', 'Side'),
    '.transactions.worktree_fork': ('WorktreeForkFailed', 'WorktreeForkImpact', 'WorktreeForkResult', 'WorktreeTarget', 'commit_worktree_fork', 'prepare_worktree_fork'),
    '.content.transcript': ('AgentTask', 'Outcome', 'Prompt', 'Response', 'SegmentError', 'Settle', 'Summary', 'ToolCall', 'ToolResult', 'TurnBegin'),
    '.service': ('ABORT_REASON', 'BesideHeld', 'CHANGES_UNKNOWN', 'Access', 'DiffSide', 'EVIDENCE_KINDS', 'EvidenceInput', 'LiveHistory', 'OpenMode', 'PRODUCT_STORAGE', 'PathDiff', 'SaveResult', 'SavedSource', 'SegmentRotation', 'SessionChange', 'SessionIncompatible', 'SessionInfo', 'SessionService', 'StoppedTurnChanges', 'SpoolNotice', 'TreeDiff', 'TurnDetail', 'TurnSummary', 'describe', 'error_kind', 'is_refusal', 'read_agent_tasks', 'read_sources', 'saved_catalog', 'saved_session', 'stat_lines'),
    '.content.sidecar': ('AgentActivity', 'AgentChoice', 'AgentResult', 'EngineRef', 'EngineState', 'ForkType', 'MAX_CONFIG_CHOICES', 'RESULT_TEXT_LIMIT', 'RetainedAgent', 'TurnFiles', 'agent_result', 'final_message'),
    '.transactions.project_files': ('GitCheck', 'WORKTREES_DIR'),
    '.content.checkpoints': ('MissingContent', 'entry_of'),
    '.transactions.pending_inputs': ('InputRecord', 'MAX_TEXT_BYTES', 'RunnerRecord', 'add_foreign_input', 'clear_runner', 'encode_runner', 'input_listing', 'load_inputs', 'read_runner', 'record_runner', 'remove_input', 'runner_clear_ops', 'runner_from', 'runner_ops', 'runner_read', 'runner_recorded', 'write_inputs'),
    '.workspace_wide.listing': ('InspectSessionRow', 'SessionAction'),
    '.watching.watch': ('LEASE', 'SessionWatcher', 'Wake', 'WatchCadence'),
    '.service.control': ('ControlEvent', 'ControlStatus', 'ReleaseFailed', 'SessionControl'),
    '.service.following': ('FollowUpdate',),
    '.watching.follow': ('diff_conversations',),
    '.content.inspect': ('list_segments',),
    '.content.projection': ('agent_lines', 'project', 'retained_tasks'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
