"""Where the session store keeps things, relative to the workspace (target)
root. See the package docstring for the whole tree."""

from __future__ import annotations

import re

import msgspec

from .content.remembered import Remembered

STATE_DIR = ".mevedel"
WORKSPACE_ID_PATH = f"{STATE_DIR}/workspace-id"
SESSIONS_DIR = f"{STATE_DIR}/sessions"

LEASE_DIR = ".lease"
#: Transfer requests, decisions and release fences (:mod:`.transfer`).
REQUESTS_DIR = f"{LEASE_DIR}/requests"
TRANSFER_DIGITS = 20
PUBLICATIONS_DIR = ".publications"
MANIFEST_NAME = "manifest.json"

GENERATION_DIGITS = 20
GENERATION_NAME = re.compile(rf"^generation-([0-9]{{{GENERATION_DIGITS}}})\.json\Z")
#: The lease generations as a numbered family: prefix, digits, suffix.
GENERATION_FAMILY = ("generation-", GENERATION_DIGITS, ".json")


#: A %-format, not an f-string with a nested width: a listing names each
#: session's head generation, and the nested format cost a microsecond.
_GENERATION_NAME = "generation-%%0%dd.json" % GENERATION_DIGITS


def generation_name(generation: int) -> str:
    return _GENERATION_NAME % generation


def generation_numbers(names: tuple[str, ...] | list[str]) -> list[int]:
    """Generation numbers named in a ``.lease/`` listing, ascending. Other
    names (temporary files, clock probes, later control subdirectories) are
    not generations and are ignored."""
    # Remembered by name: every session's lease directory names the same
    # few generations, and a listing reads each session's.
    known = _generations.values
    numbers = []
    for name in names:
        number = known.get(name, -1)
        if number == -1:
            number = _generation_number(name)
            _generations.keep(name, number)
        if number is not None:
            numbers.append(number)
    numbers.sort()
    return numbers


_generations = Remembered(4096)


def _generation_number(name: str) -> int | None:
    if GENERATION_NAME.match(name) is None:
        return None
    # The number is the match's one group, at a fixed place in the name.
    start = len(GENERATION_FAMILY[0])
    return int(name[start : start + GENERATION_DIGITS])


def transfer_name(kind: str, transfer_generation: int) -> str:
    return f"{kind}-{transfer_generation:0{TRANSFER_DIGITS}d}.json"


#: Created in a child session's directory (Fork, Save As, Worktree Fork)
#: before anything else is written there and removed after its one
#: publication: a child that still has it and no committed head is the
#: remains of an interrupted creation (its ``local/`` files are copies).
UNPUBLISHED_CHILD = ".unpublished-child"
#: Session-relative directory of the session's own ``work://`` files.
LOCAL_DIR = "local"


class SessionPaths(msgspec.Struct, frozen=True):
    """Target paths of one session. ``session_id`` is already validated."""

    session_id: str

    @property
    def root(self) -> str:
        return f"{SESSIONS_DIR}/{self.session_id}"

    @property
    def lease_dir(self) -> str:
        return f"{self.root}/{LEASE_DIR}"

    @property
    def publications_dir(self) -> str:
        return f"{self.root}/{PUBLICATIONS_DIR}"

    @property
    def unpublished_child(self) -> str:
        return f"{self.root}/{UNPUBLISHED_CHILD}"

    @property
    def requests_dir(self) -> str:
        return f"{self.root}/{REQUESTS_DIR}"

    def transfer_record(self, kind: str, transfer_generation: int) -> str:
        """``kind`` is ``request``, ``decision`` or ``fence``."""
        return f"{self.requests_dir}/{transfer_name(kind, transfer_generation)}"

    def transfer_label(self, kind: str, transfer_generation: int) -> str:
        return self.label(f"{REQUESTS_DIR}/{transfer_name(kind, transfer_generation)}")

    def generation(self, generation: int) -> str:
        return f"{self.lease_dir}/{generation_name(generation)}"

    def publication_dir(self, publication_id: str) -> str:
        return f"{self.publications_dir}/{publication_id}"

    def inside(self, session_relative: str) -> str:
        """Target path of a session-relative path (a head, a published file)."""
        return f"{self.root}/{session_relative}"

    def label(self, session_relative: str) -> str:
        """How errors name a session file: session ID plus relative path."""
        return f"session {self.session_id}: {session_relative}"

    def generation_label(self, generation: int) -> str:
        return self.label(f"{LEASE_DIR}/{generation_name(generation)}")


def head_path(publication_id: str) -> str:
    """Session-relative path of a publication's manifest (a publication head)."""
    return f"{PUBLICATIONS_DIR}/{publication_id}/{MANIFEST_NAME}"


def publication_id_of(head: str) -> str:
    """The publication a head (:func:`head_path`) names."""
    return head.split("/")[1]


def published_path(publication_id: str, index: int) -> str:
    return f"{PUBLICATIONS_DIR}/{publication_id}/{index:06d}.data"
