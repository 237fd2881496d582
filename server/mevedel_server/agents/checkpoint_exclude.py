"""Paths a turn's checkpoint leaves out: editors' own files, and what the
``checkpointExclude`` setting names.

An editor working alongside the agent makes files of its own while a turn
runs -- Emacs lock links (``.#name``), backups (``name~``) and auto-saves
(``#name#``), Vim swap files (``.name.swp``, ``.name.swo``...) and its
write probe ``4913`` -- which are not the agent's changes: they are neither
recorded, nor restored, nor reported as capture gaps. ``checkpointExclude``
adds patterns in gitignore syntax (matched as a ``.gitignore`` at the
workspace root would match them, with the rule implementation the target
uses for ``.gitignore`` files).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..targets import gitignore_ignores, gitignore_rules

_EDITOR_FILE = re.compile(
    r"""\A(?:
        \.\#.+              # Emacs lock link
      | \#.+\#              # Emacs auto-save
      | .+~                 # Emacs (and others') backup
      | \..+\.sw[a-p]       # Vim swap files
      | 4913                # Vim's write-permission probe
    )\Z""",
    re.VERBOSE | re.DOTALL,
)


def is_editor_file(path: str) -> bool:
    """Whether the last component of ``path`` names an editor's own file."""
    return bool(_EDITOR_FILE.match(path.rsplit("/", 1)[-1]))


class CheckpointExclude:
    """The ``checkpointExclude`` patterns (gitignore syntax)."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.patterns = tuple(patterns)
        text = "\n".join(self.patterns).encode("utf-8", "surrogateescape")
        self._rules = gitignore_rules(text) if text.strip() else None

    @classmethod
    def of(cls, patterns: Sequence[str]) -> CheckpointExclude:
        """The (cached) matcher of ``patterns``."""
        key = tuple(patterns)
        found = _cache.get(key)
        if found is None:
            if len(_cache) > 16:
                _cache.clear()
            found = _cache[key] = cls(key)
        return found

    def __call__(self, path: str, is_dir: bool = False) -> bool:
        """Whether ``path`` (workspace-relative) or a directory above it is
        excluded."""
        rules = self._rules
        if rules is None:
            return False
        parts = path.split("/")
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            if gitignore_ignores(rules, name, is_dir or not last):
                return True
            if last:
                break
            rules = rules.child(name)
            if rules is None:
                return False
        return False


_cache: dict[tuple[str, ...], CheckpointExclude] = {}
