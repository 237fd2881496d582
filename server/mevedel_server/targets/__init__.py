"""Where bytes live: the ``Target`` seam and its implementations.

- :class:`Target` -- the async protocol every durable operation goes through;
  :class:`ProgramTarget` builds its single-operation methods on ``run``.
- Control programs (:mod:`.program`, which lists the operations): a
  :class:`ControlProgram` runs in one round trip, stopping at the first
  operation that does not succeed; each reports a :class:`Status`. Deferred
  writes share one flush at a :class:`Barrier`. :class:`ReadChain` follows a
  head through the JSON records it names in one operation, and
  :class:`SurveyDirs` does so below every entry of a directory (the
  session listing) from one open descriptor of it. :class:`ListTree` lists a tree's directories and regular files (links
  and special files left out) and :class:`ReadFiles` reads many files in
  one pass, both for the resolver. :class:`ScanTree` walks a tree for the
  facts that tell a file's change (``.gitignore`` applied on the target),
  :class:`ScanPaths` only the paths and subtrees a caller names;
  :class:`SnapshotFile` keeps a file's bytes as a content-addressed blob.
- :class:`LocalTarget` -- a local root reached through a pinned
  ``O_NOFOLLOW`` descriptor chain; symlinks fail closed; its programs run
  on the kept threads of :mod:`.program_threads`.
- :mod:`.local_process` -- this process (:class:`ProcessIdentity`: host,
  boot, namespaces, PID, start time) and the proof that a recorded one has
  ended, from this machine's ``/proc`` (what a lease's holder is judged by).
- The target clock (:mod:`.clock`): whole seconds of the target filesystem.
- :class:`FaultInjectingTarget` -- fails or "crashes" at the Nth write.
- :class:`SshTarget` (:mod:`.ssh`) -- the same target on an SSH host, one
  remote process per program; :func:`parse_ssh_location` reads
  ``ssh://[user@]host[:port]/path``; :class:`TargetUnavailable` is a program
  whose outcome is unknown.
- :mod:`.location` -- a workspace as written (directory, ``file:`` URI or
  ``ssh://`` address) and the target rooted there.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

#: Each public name's module, imported on first use: a command that needs
#: the local target does not load the fault injector, the SSH location
#: parser (``ipaddress``, ``urllib``) or asyncssh (``SshTarget``).
_EXPORTS = {
    '.clock': ('Clock', 'read_target_clock'),
    '.entry': ('Entry', 'same_state'),
    '.errors': ('InvalidTargetPath', 'PathAbsentError', 'PathConflictError', 'RootReplacedError', 'TargetError', 'TargetOperationError', 'UnsafePathError'),
    '.executor': ('clamp_ns', 'gitignore_ignores', 'gitignore_rules'),
    '.faults': ('FaultInjectingTarget', 'FaultMode', 'InjectedFault', 'SimulatedCrash'),
    '.inotify': ('inotify_available',),
    '.local': ('LocalTarget',),
    '.local_process': ('ProcessIdentity', 'process_end_fd', 'process_has_ended', 'process_is_here', 'this_boot', 'this_process'),
    '.loop_watch': ('InotifyWatch',),
    '.location': ('parse_workspace_location', 'workspace_target'),
    '.paths': ('join_target_path', 'parent_and_name', 'split_target_path'),
    '.process_group': ('GroupState', 'ProcessGroup', 'RemoteGroup', 'process_identity'),
    '.program': ('Barrier', 'CAPTURED', 'CAPTURE_LEFT', 'CAPTURE_NONE', 'CAPTURE_RECORD', 'Chain', 'ChainHop', 'ChainLink', 'ChainSpec', 'ClockStamp', 'ControlProgram', 'CreateExclusive', 'CreateInPlace', 'CreateLinked', 'DirSurvey', 'FileRead', 'FileScan', 'FileStat', 'ListDir', 'ListTree', 'MakeDirs', 'NewestIs', 'OpResult', 'Operation', 'ProgramResult', 'PutEntry', 'Read', 'ReadChain', 'ReadEntry', 'ReadFiles', 'ReadNewest', 'ReadSlice', 'Remove', 'Replace', 'SCAN_DIR', 'SCAN_FACTS', 'SCAN_IGNORED', 'SCAN_IGNORED_REASON', 'SCAN_LINK', 'ScanFacts', 'ScanPaths', 'ScanTree', 'Snapshot', 'SnapshotFile', 'StampedCreate', 'StampedCreateInPlace', 'StampedWrite', 'Stat', 'Status', 'SurveyDirs', 'SurveyedDir', 'TreeListing', 'Verify', 'WriteProject', 'differing_records'),
    '.remote_errors': ('HostKeyRefused', 'SshLocationError', 'TargetUnavailable', 'WorkspaceLocationError'),
    '.ssh': ('SshTarget',),
    '.ssh_config': ('SshLocation', 'parse_ssh_location'),
    '.target': ('ProgramTarget', 'Target', 'raise_for_result'),
    '.tree_watch': ('TreeWatch', 'WatchUnavailable', 'unwatchable'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
