"""The workspace artifact store (``spec/adr-workspace-artifact-store.md``):
artifacts, documents and whiteboards that sessions attach to, never own.

Knows nothing of LSP; reads and writes only through the workspace's
``Target``. ``layout.py`` says where everything lives, ``records.py`` the
closed records, ``item_lease.py`` who commits a live item, ``versions.py``
which versions stay and how one is published, ``content.py`` what a
primary file may hold, ``store.py`` the ``ArtifactStore`` facade, and
``attachments.py`` what ties items to sessions.
"""

from .errors import ArtifactError
from .store import ArtifactStore, Editor, ItemContent, ItemSummary, revision_of

__all__ = ["ArtifactError", "ArtifactStore", "Editor", "ItemContent", "ItemSummary", "revision_of"]
