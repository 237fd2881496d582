"""The workspace artifact store (``spec/adr-workspace-artifact-store.md``):
artifacts, documents and whiteboards that sessions attach to, never own.

Knows nothing of LSP; reads and writes only through the workspace's
``Target``. ``layout.py`` says where everything lives, ``records.py`` the
closed records, ``item_lease.py`` who commits a live item, ``versions.py``
which versions stay and how one is published, ``content.py`` what a
primary file may hold, ``store.py`` the ``ArtifactStore`` facade, and
``attachments.py`` what ties items to sessions.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

#: Each exported name's module, imported on first use: importing one
#: submodule (``errors``, say) does not load every other.
_EXPORTS = {
    '.attachments': ('Listed', 'SessionArtifacts', 'session_artifacts'),
    '.authored_scan': ('AuthoredFacts',),
    '.content': ('decode_payload', 'encode_for_reader'),
    '.errors': ('ArtifactError',),
    '.item_watch': ('ItemState', 'ItemWatches'),
    '.layout': ('ARTIFACTS_DIR', 'ItemPaths', 'LIVE_PRIMARY', 'STATE_ROOT', 'artifact_item', 'is_item_id', 'is_text_file'),
    '.learned_writes': ('held_refusal', 'hold_written_items', 'learn_patch_writes', 'learn_shell_writes', 'written_items'),
    '.mail': ('Mail', 'mail_text', 'mark_delivered', 'pending_mail'),
    '.records': ('Comment', 'Discussion', 'ItemMeta', 'RecordRefused', 'VersionEntry', 'decode_record'),
    '.store': ('ArtifactStore', 'Editor', 'ItemContent', 'ItemSummary', 'revision_of'),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
