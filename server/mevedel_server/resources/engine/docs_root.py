"""Where ``mevedel://`` finds the packaged documentation.

A wheel carries the repository's ``docs/`` inside the package as
``mevedel_server/docs``; an editable checkout has no such directory, so the
repository's ``docs/`` beside ``server/`` is the documentation root instead.
"""

from __future__ import annotations

from pathlib import Path

#: mevedel_server/ (this module is mevedel_server/resources/engine/docs_root.py).
_PACKAGE_DIR = Path(__file__).resolve().parents[2]


def find_docs_root() -> Path:
    """The installed documentation directory, else the checkout's ``docs/``.

    When neither exists the installed location is returned, so a read reports
    the documentation as unavailable rather than silently using another tree.
    """
    installed = _PACKAGE_DIR / "docs"
    if installed.is_dir():
        return installed
    checkout = _PACKAGE_DIR.parent.parent / "docs"
    if checkout.is_dir() and (_PACKAGE_DIR.parent.name == "server"):
        return checkout
    return installed
