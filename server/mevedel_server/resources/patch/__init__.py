"""ApplyPatch: parse the ``apply_patch`` envelope, plan every file change in
memory, and apply them as one journalled transaction on a target.

The resolver parses with ``parse_patch``, maps every authored target to a
target-relative path, and hands ``ResolvedOperation`` values to
``apply_patch`` (:mod:`.transaction`; the journal and its recovery are
:mod:`.journal`). Messages and results name only the authored addresses
(``display``), never the backing paths.
"""

from .apply import FileChange, PatchResult, ResolvedOperation, plan_patch
from .format import FileOperation, Hunk, Patch, parse_patch
from .journal import recover
from .transaction import apply_patch

__all__ = [
    "FileChange",
    "FileOperation",
    "Hunk",
    "Patch",
    "PatchResult",
    "ResolvedOperation",
    "apply_patch",
    "parse_patch",
    "plan_patch",
    "recover",
]
