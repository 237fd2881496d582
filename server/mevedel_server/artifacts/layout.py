"""Where the artifact store keeps things, relative to the workspace root,
and the shapes of what a person or a model names in it.

::

    .mevedel/artifacts/ID/                 authored files (the primary file,
                                           any secondary files)
    .mevedel/artifacts/.state/ID/
        meta.json                          the item's metadata (title, kind...)
        versions/NNNNNNNNNN.version        version N: the version index as
                                           of N (one JSON line), then the
                                           primary file's bytes; the newest
                                           whole one is the item's index
        versions.json, versions/NNNNNNNNNN a store's layout before the version
                                           files (read, never written)
        discussion.json                    comments
        deleting                           a delete under way (or interrupted)
    .mevedel/leases/artifacts/             the store's mutation lock (flock)
        ID/generation-<20 digits>.json     the item lease's generations
        ID/handover.json                   another process asks for the item

The authored tree is the project's (whether it is committed is the
project's choice); ``.state/`` and the leases are mevedel's bookkeeping,
read-only to the model's tools.
"""

from __future__ import annotations

import posixpath
import re

import msgspec

from ..store import STATE_DIR

ARTIFACTS_DIR = f"{STATE_DIR}/artifacts"
STATE_SUBDIR = ".state"
STATE_ROOT = f"{ARTIFACTS_DIR}/{STATE_SUBDIR}"
LEASES_ROOT = f"{STATE_DIR}/leases/artifacts"
#: Every state or lease change holds this directory's flock.
LOCK_DIR = LEASES_ROOT

ITEM_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}\Z")
GENERATION_DIGITS = 20
GENERATION_FAMILY = ("generation-", GENERATION_DIGITS, ".json")
VERSION_DIGITS = 10
#: Version files, found by number: ``versions/NNNNNNNNNN.version``.
VERSION_FAMILY = ("", VERSION_DIGITS, ".version")

KINDS = ("document", "whiteboard", "artifact")
#: The primary file of a live item.
LIVE_PRIMARY = {"document": "document.md", "whiteboard": "scene.excalidraw"}
TEXT_SUFFIXES = (".md", ".markdown", ".html", ".htm", ".svg", ".excalidraw")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
ARTIFACT_SUFFIXES = (".md", ".markdown", ".html", ".htm", ".svg", *IMAGE_SUFFIXES)
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,119}\Z")

MAX_TITLE = 200
MAX_COMMENT_BYTES = 16 * 1024
#: The largest primary file the store writes (one whole-item write).
MAX_ITEM_BYTES = 32 * 1024 * 1024


def is_item_id(text: object) -> bool:
    return isinstance(text, str) and ITEM_ID.match(text) is not None


_ARTIFACT_PARTS = tuple(ARTIFACTS_DIR.split("/"))


def artifact_item(parts: tuple[str, ...] | str) -> tuple[str, str] | None:
    """``(item id, path inside the item)`` when a workspace-relative path
    (parts, or ``/``-joined text) is an authored file of the artifact
    store, ``.mevedel/artifacts/ID/RELATIVE`` (``ID`` an item id, so never
    ``.state`` or ``.library``); else None."""
    if isinstance(parts, str):
        parts = tuple(parts.split("/"))
    head = len(_ARTIFACT_PARTS)
    if len(parts) < head + 2 or parts[:head] != _ARTIFACT_PARTS or not is_item_id(parts[head]):
        return None
    return parts[head], "/".join(parts[head + 1 :])


def is_text_file(name: str) -> bool:
    return name.lower().endswith(TEXT_SUFFIXES)


def check_file_name(name: object) -> str | None:
    """Why ``name`` cannot be an artifact's primary file name (None: it can)."""
    if not isinstance(name, str) or not _FILE_NAME.match(name) or name.endswith((" ", ".")):
        return "is not a file name (letters, digits, '.', '_', '-', ' '; at most 120 characters)"
    if not name.lower().endswith(ARTIFACT_SUFFIXES):
        return "is not Markdown, HTML or an image (" + ", ".join(ARTIFACT_SUFFIXES) + ")"
    return None


def normalize_title(title: object) -> str | None:
    """The title as stored (surrounding spaces dropped, runs of spaces made
    one), or None when it is not one. A control character (a newline, a
    tab) refuses the title rather than being folded away unsaid."""
    if not isinstance(title, str) or any(ord(ch) < 32 or ord(ch) == 127 for ch in title):
        return None
    text = " ".join(title.split())
    if not text or len(text) > MAX_TITLE:
        return None
    return text


class ItemPaths(msgspec.Struct, frozen=True):
    """Target paths of one item; ``item_id`` is already validated."""

    item_id: str

    @property
    def authored(self) -> str:
        return f"{ARTIFACTS_DIR}/{self.item_id}"

    def file(self, name: str) -> str:
        return posixpath.join(self.authored, name)

    @property
    def state(self) -> str:
        return f"{STATE_ROOT}/{self.item_id}"

    @property
    def meta(self) -> str:
        return f"{self.state}/meta.json"

    @property
    def versions_index(self) -> str:
        """The index of a store made before version files (never written)."""
        return f"{self.state}/versions.json"

    @property
    def versions_dir(self) -> str:
        return f"{self.state}/versions"

    def version_blob(self, number: int) -> str:
        """Version N's bytes in a store made before version files."""
        return f"{self.versions_dir}/{number:0{VERSION_DIGITS}d}"

    def version_file(self, number: int) -> str:
        return f"{self.versions_dir}/{number:0{VERSION_DIGITS}d}{VERSION_FAMILY[2]}"

    @property
    def deleting(self) -> str:
        """Written before a delete removes ``meta.json``: an item without
        metadata that has it is a deletion to finish."""
        return f"{self.state}/deleting"

    @property
    def discussion(self) -> str:
        return f"{self.state}/discussion.json"

    @property
    def lease_dir(self) -> str:
        return f"{LEASES_ROOT}/{self.item_id}"

    def generation(self, number: int) -> str:
        return f"{self.lease_dir}/generation-{number:0{GENERATION_DIGITS}d}.json"

    @property
    def handover(self) -> str:
        return f"{self.lease_dir}/handover.json"
