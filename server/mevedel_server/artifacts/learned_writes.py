"""What the artifact store learns from a committed ApplyPatch of authored
files, ``.mevedel/artifacts/ID/FILE`` (``spec/adr-workspace-artifact-store.md``:
"A write into a new id directory creates the artifact; a turn that wrote its
primary file records one version when it settles").

Called after the patch committed, with the workspace-relative paths it
touched, by every front end that runs a model's ApplyPatch: the agents'
tool context (LSP server and ``mevedel prompt``), ``mevedel mcp``
standalone, and ``mevedel/resource/applyPatch``.

- An id directory the store does not know becomes an artifact: its primary
  file is the first written file directly in the directory that an
  artifact may hold (Markdown, HTML, SVG, an image; Markdown first), and
  the item is titled by that file name (:meth:`ArtifactStore.adopt`). A new
  directory with no such file creates nothing, and the note says why.
- The writing session attaches every item it wrote (only while this
  client holds it writable), and an existing item whose primary file was
  written during the session's turn in flight gets that turn's version
  when the turn settles (:meth:`ArtifactStore.note_edit`).

Never raises: the files are written; what the store could not learn is
reported in the returned notes (and logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .attachments import SessionArtifacts
from .errors import ArtifactError
from .layout import ARTIFACT_SUFFIXES, artifact_item, check_file_name

_log = logging.getLogger(__name__)


def written_items(paths: Iterable[str]) -> dict[str, list[str]]:
    """The authored files of each item among workspace-relative ``paths``
    (item id -> paths inside the item, in order, without repeats)."""
    items: dict[str, list[str]] = {}
    for path in paths:
        found = artifact_item(path)
        if found is None:
            continue
        item_id, inside = found
        files = items.setdefault(item_id, [])
        if inside not in files:
            files.append(inside)
    return items


def _primary_candidates(files: list[str]) -> list[str]:
    """Files directly in the item directory that can be an artifact's
    primary file, Markdown and HTML before SVG and images."""
    direct = [name for name in files if "/" not in name and check_file_name(name) is None]
    return sorted(direct, key=lambda name: next(i for i, s in enumerate(ARTIFACT_SUFFIXES) if name.lower().endswith(s)))


async def hold_written_items(work: SessionArtifacts, paths: Iterable[str]) -> None:
    """Before a patch writes ``paths``: take the item lease of every live
    item among them (the one rule every whole-item write follows), so a
    document another process is editing is never written behind its back.
    Raises the store's ``item-held`` :class:`ArtifactError` (naming the
    holder's host); nothing is written then."""
    for item_id in written_items(paths):
        await work.store.hold(item_id)


def held_refusal(error: ArtifactError) -> str:
    """A refused :func:`hold_written_items` as one line for the model."""
    return f".mevedel/artifacts/{error.authored}: {error.kind}: {error.reason}; nothing was changed"


async def learn_shell_writes(work: SessionArtifacts, session_id: str, paths: Iterable[str]) -> list[str]:
    """:func:`learn` for what an agent's shell command wrote (found after
    the fact): the command could not be asked first, so each live item it
    wrote is taken under its lease now, and one another process holds is
    refused -- the write is not taken as the session's edit (no version,
    no attachment), and the note names the holder."""
    notes: list[str] = []
    paths = list(paths)
    refused: set[str] = set()
    for item_id, files in written_items(paths).items():
        try:
            await work.store.hold(item_id)
        except ArtifactError as error:
            refused.add(item_id)
            notes.append(
                f"artifact {item_id}: a shell command wrote {', '.join(files)} while {error.reason.split(';')[0]}; "
                "the write was not taken as this session's edit"
            )
    kept = [path for path in paths if (artifact_item(path) or (None,))[0] not in refused]
    return notes + await learn_patch_writes(work, session_id, kept)


async def learn_patch_writes(work: SessionArtifacts, session_id: str | None, paths: Iterable[str]) -> list[str]:
    """Tell the store about a committed patch of ``paths``; notes for the model."""
    notes: list[str] = []
    items = written_items(paths)
    if not items:
        return notes
    editor = work.editor(session_id)
    for item_id, files in items.items():
        try:
            notes += await _learn_item(work, session_id, editor, item_id, files)
        except ArtifactError as error:
            _log.warning("the artifact store did not learn of the write to %s: %s", item_id, error)
            notes.append(f"artifact {item_id}: the store could not record this write ({error.reason})")
        except Exception:
            _log.exception("the artifact store did not learn of the write to %s", item_id)
            notes.append(f"artifact {item_id}: the store could not record this write (internal error)")
    return notes


async def _learn_item(work: SessionArtifacts, session_id: str | None, editor, item_id: str, files: list[str]) -> list[str]:
    store = work.store
    try:
        meta, _raw = await store.meta(item_id)
    except ArtifactError as error:
        if error.kind != "missing-target":
            raise
        meta = None
    if meta is None:
        adopted = None
        for name in _primary_candidates(files):
            try:
                adopted = await store.adopt(item_id, name, editor=editor)
            except ArtifactError as error:
                if error.kind == "missing-target":
                    continue  # the patch deleted or moved it away
                raise
            if adopted is not None:
                break
            # Another writer made the item meanwhile: it is an existing item now.
            meta, _raw = await store.meta(item_id)
            break
        if adopted is None and meta is None:
            return [
                f"no artifact was created for .mevedel/artifacts/{item_id}/: a new artifact needs its primary file "
                f"directly in that directory ({', '.join(ARTIFACT_SUFFIXES)})"
            ]
        if adopted is not None:
            await work.attach_for_work(session_id, item_id)
            return [f"created artifact {item_id} ({adopted.meta.primary})" + _attached(work, session_id, item_id)]
    assert meta is not None
    await work.attach_for_work(session_id, item_id)
    if editor is not None and meta.primary in files:
        store.note_edit(item_id, editor)
    store.notify(item_id, "written")  # editors showing the item reload it
    return []


def _attached(work: SessionArtifacts, session_id: str | None, item_id: str) -> str:
    return f", attached to session {session_id}" if session_id is not None and item_id in work.attached(session_id) else ""
