"""ApplyPatch: parse the ``apply_patch`` envelope and apply resolved file
operations as one all-or-nothing transaction.

The resolver parses with ``parse_patch``, maps every authored target to a
backing path, and hands ``ResolvedOperation`` values to
``apply_file_operations``. Messages and results name only the authored
addresses (``display``), never the backing paths.
"""

from .apply import FileChange, PatchResult, ResolvedOperation, apply_file_operations
from .format import FileOperation, Hunk, Patch, parse_patch

__all__ = [
    "FileChange",
    "FileOperation",
    "Hunk",
    "Patch",
    "PatchResult",
    "ResolvedOperation",
    "apply_file_operations",
    "parse_patch",
]
