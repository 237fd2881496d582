"""The resolver of resource addresses: ``prepare`` -> ``Attempt`` -> ``execute``,
one module per family, plus completion and describe for the editor features.

Every file-backed family reads and writes through a ``Target`` (see
``places``): one implementation for this machine and SSH workspaces.
Backing paths never leave this package in a result or an error; the one
exception is ``backing_file``, which exists to hand a contained file to
go-to-definition. Who may write a session's files is ``authority``.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: a command that
#: reads an address never loads completion, describe or ApplyPatch.
_EXPORTS = {
    '.engine.attempt': ('Attempt', 'AuthorityFacts'),
    '.engine.authority': ('require_writable_session', 'writable_sessions'),
    '.engine.context': ('MemoryRoot', 'ResolverContext', 'SkillRoot'),
    '.engine.counts': ('counted',),
    '.engine.docs_root': ('find_docs_root',),
    '.engine.guidance': ('listing_of', 'next_step'),
    '.engine.options': ('GlobOptions', 'GrepOptions', 'PatchOptions', 'ReadOptions'),
    '.engine.places': ('Places',),
    '.engine.resolver': ('SESSION_FAMILIES', 'execute', 'prepare', 'reaches_mcp', 'reads_session'),
    '.engine.results': ('GlobResult', 'GrepMatch', 'GrepResult', 'ReadResult'),
    '.families.artifact_output': ('EXECUTIONS', 'TOOL_RESULTS', 'save_artifact'),
    '.families.project': ('is_project_path',),
    '.families.shared': ('has_items',),
    '.navigation.completion': ('Candidate', 'address_available', 'complete'),
    '.navigation.describe': ('Description', 'backing_file', 'describe'),
    '.patch': ('FileChange', 'PatchResult'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
