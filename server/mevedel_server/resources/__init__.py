"""The resolver of resource addresses: ``prepare`` -> ``Attempt`` -> ``execute``,
one module per family, plus completion and describe for the editor features.

Every file-backed family reads and writes through a ``Target`` (see
``places``): one implementation for this machine and SSH workspaces.
Backing paths never leave this package in a result or an error; the one
exception is ``backing_file``, which exists to hand a contained file to
go-to-definition. Who may write a session's files is ``authority``.
"""

from .engine.attempt import Attempt, AuthorityFacts
from .engine.authority import require_writable_session, writable_sessions
from .navigation.completion import Candidate, complete
from .engine.context import MemoryRoot, ResolverContext, SkillRoot
from .navigation.describe import Description, backing_file, describe
from .engine.docs_root import find_docs_root
from .engine.options import GlobOptions, GrepOptions, PatchOptions, ReadOptions
from .patch import FileChange, PatchResult
from .engine.resolver import execute, prepare
from .engine.results import GlobResult, GrepMatch, GrepResult, ReadResult

__all__ = [
    "Attempt",
    "AuthorityFacts",
    "Candidate",
    "Description",
    "FileChange",
    "GlobOptions",
    "GlobResult",
    "GrepMatch",
    "GrepOptions",
    "GrepResult",
    "MemoryRoot",
    "PatchOptions",
    "PatchResult",
    "ReadOptions",
    "ReadResult",
    "ResolverContext",
    "SkillRoot",
    "backing_file",
    "complete",
    "describe",
    "execute",
    "find_docs_root",
    "prepare",
    "require_writable_session",
    "writable_sessions",
]
