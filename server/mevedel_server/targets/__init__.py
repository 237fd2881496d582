"""Where bytes live: the ``Target`` seam and its implementations.

- :class:`Target` -- the async protocol every durable operation goes through;
  :class:`ProgramTarget` builds its single-operation methods on ``run``.
- Control programs (:mod:`.program`, which lists the operations): a
  :class:`ControlProgram` runs in one round trip, stopping at the first
  operation that does not succeed; each reports a :class:`Status`. Deferred
  writes share one flush at a :class:`Barrier`. :class:`ReadChain` follows a
  head through the JSON records it names in one operation.
  :class:`ListTree` lists a tree's directories and regular files (links
  and special files left out) and :class:`ReadFiles` reads many files in
  one pass, both for the resolver. :class:`ScanTree` walks a tree for the
  facts that tell a file's change (``.gitignore`` applied on the target),
  :class:`ScanPaths` only the paths and subtrees a caller names;
  :class:`SnapshotFile` keeps a file's bytes as a content-addressed blob.
- :class:`LocalTarget` -- a local root reached through a pinned
  ``O_NOFOLLOW`` descriptor chain; symlinks fail closed.
- The target clock (:mod:`.clock`): whole seconds of the target filesystem.
- :class:`FaultInjectingTarget` -- fails or "crashes" at the Nth write.
- :class:`SshTarget` (:mod:`.ssh`) -- the same target on an SSH host, one
  remote process per program; :func:`parse_ssh_location` reads
  ``ssh://[user@]host[:port]/path``; :class:`TargetUnavailable` is a program
  whose outcome is unknown.
- :mod:`.location` -- a workspace as written (directory, ``file:`` URI or
  ``ssh://`` address) and the target rooted there.
"""

from .clock import Clock, read_target_clock
from .entry import same_state
from .errors import (
    InvalidTargetPath,
    PathAbsentError,
    PathConflictError,
    RootReplacedError,
    TargetError,
    TargetOperationError,
    UnsafePathError,
)
from .faults import FaultInjectingTarget, FaultMode, InjectedFault, SimulatedCrash
from .local import LocalTarget
from .paths import join_target_path, parent_and_name, split_target_path
from .program import (
    Barrier,
    Chain,
    ChainHop,
    ChainLink,
    ControlProgram,
    CreateExclusive,
    CreateLinked,
    Entry,
    FileRead,
    FileScan,
    FileStat,
    ListDir,
    ListTree,
    MakeDirs,
    Operation,
    OpResult,
    ProgramResult,
    PutEntry,
    Read,
    ReadChain,
    ReadEntry,
    ReadFiles,
    ReadSlice,
    Remove,
    Replace,
    ScanPaths,
    ScanTree,
    Snapshot,
    SnapshotFile,
    Stat,
    Status,
    TreeListing,
    Verify,
    WriteProject,
)
from .remote_errors import (
    HostKeyRefused,
    SshLocationError,
    TargetUnavailable,
    WorkspaceLocationError,
)
from .ssh_config import SshLocation, parse_ssh_location
from .target import ProgramTarget, Target, raise_for_result


def __getattr__(name: str):
    # SshTarget pulls in asyncssh, which takes a noticeable time to import;
    # load it when first asked for, not with every use of the package.
    if name == "SshTarget":
        from .ssh import SshTarget

        return SshTarget
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Entry",
    "PutEntry",
    "ReadEntry",
    "same_state",
    "Barrier",
    "Chain",
    "ChainHop",
    "ChainLink",
    "Clock",
    "ControlProgram",
    "CreateExclusive",
    "CreateLinked",
    "FaultInjectingTarget",
    "FaultMode",
    "FileRead",
    "FileScan",
    "FileStat",
    "HostKeyRefused",
    "InjectedFault",
    "InvalidTargetPath",
    "ListDir",
    "ListTree",
    "LocalTarget",
    "MakeDirs",
    "OpResult",
    "Operation",
    "PathAbsentError",
    "PathConflictError",
    "ProgramResult",
    "ProgramTarget",
    "Read",
    "ReadChain",
    "ReadFiles",
    "Remove",
    "Replace",
    "WriteProject",
    "ScanPaths",
    "ScanTree",
    "SimulatedCrash",
    "Snapshot",
    "SnapshotFile",
    "ReadSlice",
    "SshLocation",
    "SshLocationError",
    "SshTarget",
    "Stat",
    "Status",
    "Target",
    "TargetError",
    "TargetOperationError",
    "TargetUnavailable",
    "TreeListing",
    "RootReplacedError",
    "UnsafePathError",
    "Verify",
    "WorkspaceLocationError",
    "join_target_path",
    "parent_and_name",
    "parse_ssh_location",
    "raise_for_result",
    "read_target_clock",
    "split_target_path",
]
