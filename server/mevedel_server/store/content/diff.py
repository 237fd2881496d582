"""What turns did to the tree, from their checkpoints alone.

A turn's checkpoint (:class:`~.sidecar.TurnFiles`) holds, for every path the
turn changed -- through ``fs/*``, ApplyPatch or a shell command alike -- the
state before its first change (``pre``, or a capture gap with its reason)
and the state at settlement (``post``). A diff of turns ``first..last``
compares, per path, the ``pre`` of the earliest turn of the range that
touched it with the ``post`` of the latest one, so a range composes across
any number of turns and needs neither git nor the workspace.

Pure: states and bytes in, :class:`TreeDiff` out. The bytes of a file come
from ``content(sha256)`` (the session's file history).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .sidecar import Absent, Directory, FileState, Present, Symlink, TurnFiles

#: Files larger than this are named and measured, never diffed line by line.
DIFF_MAX_BYTES = 2 * 1024 * 1024

#: The kinds of change, as the CLI, the LSP and the editors name them.
ADDED = "added"
DELETED = "deleted"
MODIFIED = "modified"
MODE_CHANGED = "mode changed"
RENAMED = "renamed"
DIRECTORY_CREATED = "directory created"
DIRECTORY_REMOVED = "directory removed"
LINK_CREATED = "link created"
LINK_RETARGETED = "link retargeted"
LINK_REMOVED = "link removed"
TYPE_CHANGED = "type changed"
UNCHANGED = "unchanged"
#: The state before (or after) is not known: a capture gap, or a turn not
#: settled yet. Always named, never skipped.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class DiffSide:
    """One side of a path's change. ``kind`` is ``absent``, ``file``,
    ``directory``, ``symlink`` or ``unknown`` (then ``why`` says why)."""

    kind: str
    mode: int | None = None
    size: int | None = None
    sha256: str | None = None
    target: str | None = None
    why: str | None = None

    @property
    def known(self) -> bool:
        return self.kind != "unknown"


@dataclass(frozen=True)
class PathDiff:
    path: str
    change: str
    before: DiffSide
    after: DiffSide
    #: The first and last turn of the range that touched the path.
    first_turn: int
    last_turn: int
    #: For a rename: the path the same bytes left.
    renamed_from: str | None = None
    #: A regular file that is not UTF-8 text (or holds a NUL) on either side.
    binary: bool = False
    #: Why there is no line diff of a file whose bytes changed (too large,
    #: bytes no longer kept), or None.
    no_text: str | None = None
    #: The unified diff (``a/PATH`` -> ``b/PATH``), empty when there is none.
    text: str = ""
    insertions: int = 0
    deletions: int = 0
    #: Each side's whole text (asked with ``contents``; text files only,
    #: "" for an absent side).
    before_text: str | None = None
    after_text: str | None = None


@dataclass(frozen=True)
class TreeDiff:
    first: int
    last: int
    files: tuple[PathDiff, ...]

    @property
    def insertions(self) -> int:
        return sum(f.insertions for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions for f in self.files)


def _side(state: FileState | None, why: str) -> DiffSide:
    if state is None:
        return DiffSide("unknown", why=why)
    if isinstance(state, Absent):
        return DiffSide("absent")
    if isinstance(state, Present):
        return DiffSide("file", mode=state.mode, size=state.size, sha256=state.sha256)
    if isinstance(state, Directory):
        return DiffSide("directory", mode=state.mode)
    if isinstance(state, Symlink):
        return DiffSide("symlink", target=state.target)
    raise TypeError(f"not a file state: {state!r}")


def _change(before: DiffSide, after: DiffSide) -> str:
    if not before.known or not after.known:
        return UNKNOWN
    kinds = (before.kind, after.kind)
    if before == after:
        return UNCHANGED
    if kinds == ("absent", "file"):
        return ADDED
    if kinds == ("file", "absent"):
        return DELETED
    if kinds == ("file", "file"):
        return MODIFIED if before.sha256 != after.sha256 else MODE_CHANGED
    if kinds == ("absent", "directory"):
        return DIRECTORY_CREATED
    if kinds == ("directory", "absent"):
        return DIRECTORY_REMOVED
    if kinds == ("directory", "directory"):
        return MODE_CHANGED
    if kinds == ("absent", "symlink"):
        return LINK_CREATED
    if kinds == ("symlink", "absent"):
        return LINK_REMOVED
    if kinds == ("symlink", "symlink"):
        return LINK_RETARGETED
    return TYPE_CHANGED


def _text(data: bytes) -> list[str] | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _line_diff(
    path: str, before: DiffSide, after: DiffSide, content: Callable[[str], bytes | None], source: str, contents: bool
) -> dict:
    """The line diff of a path whose sides are files or absent."""
    sides = []
    for side in (before, after):
        if side.kind != "file":
            sides.append(b"")
            continue
        assert side.sha256 is not None and side.size is not None
        if side.size > DIFF_MAX_BYTES:
            return {"no_text": f"larger than {DIFF_MAX_BYTES} bytes: sizes and digests only"}
        data = content(side.sha256)
        if data is None:
            return {"no_text": "its bytes are no longer kept in the session's file history"}
        sides.append(data)
    old, new = (_text(data) for data in sides)
    if old is None or new is None:
        return {"binary": True}
    fromfile = f"a/{source}" if before.kind == "file" else "/dev/null"
    tofile = f"b/{path}" if after.kind == "file" else "/dev/null"
    lines = _unified(old, new, fromfile, tofile)
    insertions = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    deletions = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    # A last line without its newline is marked as git marks it.
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    found = {"text": text, "insertions": insertions, "deletions": deletions}
    if contents:
        found.update(before_text="".join(old), after_text="".join(new))
    return found


class _Trimmed(difflib.SequenceMatcher):
    """A matcher that leaves the lines both sides share at their start and
    end out of the search (a turn changes a few lines of a file: the search,
    quadratic at worst, then runs on those alone) and reports them as equal."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        limit = min(len(a), len(b))
        head = 0
        while head < limit and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
            tail += 1
        self._whole = (a, b, head, tail)
        super().__init__(None, a[head : len(a) - tail], b[head : len(b) - tail], autojunk=False)

    def get_opcodes(self):
        a, b, head, tail = self._whole
        codes = [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in super().get_opcodes()]
        if head:
            codes.insert(0, ("equal", 0, head, 0, head))
        if tail:
            codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
        merged: list = []
        for code in codes:  # neighbouring equal runs are one, as difflib's own are
            if merged and code[0] == "equal" and merged[-1][0] == "equal":
                merged[-1] = ("equal", merged[-1][1], code[2], merged[-1][3], code[4])
            else:
                merged.append(code)
        return merged or [("equal", 0, 0, 0, 0)]


def _span(start: int, stop: int) -> str:
    """A hunk header's range, as ``diff -u`` writes it."""
    length = stop - start
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


def _unified(a: list[str], b: list[str], fromfile: str, tofile: str, context: int = 3) -> list[str]:
    """``difflib.unified_diff`` of ``a`` and ``b``, its search confined to
    what lies between their common first and last lines."""
    lines: list[str] = []
    for group in _Trimmed(a, b).get_grouped_opcodes(context):
        if not lines:
            lines += [f"--- {fromfile}\n", f"+++ {tofile}\n"]
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_span(first[1], last[2])} +{_span(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + line for line in a[i1:i2]]
                continue
            lines += ["-" + line for line in a[i1:i2]]
            lines += ["+" + line for line in b[j1:j2]]
    return lines


def tree_diff(
    records: Sequence[TurnFiles],
    first: int,
    last: int,
    content: Callable[[str], bytes | None],
    *,
    contents: bool = False,
) -> TreeDiff:
    """What turns ``first..last`` (inclusive) did to every path they touched.

    ``records`` are the session's turn checkpoints; ``content(sha256)``
    gives a stored file's bytes (None when no longer kept); ``contents``
    adds each text file's whole text on both sides. Paths whose
    state ends where it began (written and put back) are left out; a path
    whose state before or after is unknown is always listed, with why."""
    earliest: dict[str, tuple[int, FileState | None, str | None]] = {}
    latest: dict[str, tuple[int, FileState | None]] = {}
    for record in sorted(records, key=lambda r: r.turn):
        if not first <= record.turn <= last:
            continue
        for path, snapshot in record.files.items():
            if path not in earliest:
                earliest[path] = (record.turn, snapshot.pre, snapshot.gap)
            latest[path] = (record.turn, snapshot.post)
    found: dict[str, PathDiff] = {}
    for path in sorted(earliest):
        first_turn, pre, gap = earliest[path]
        last_turn, post = latest[path]
        before = _side(pre, f"not recorded before turn {first_turn}: {gap or 'capture gap'}")
        after = _side(post, f"not recorded at the end of turn {last_turn} (it has not settled)")
        change = _change(before, after)
        if change != UNCHANGED:
            found[path] = PathDiff(path, change, before, after, first_turn, last_turn)
    _pair_renames(found)
    return TreeDiff(first, last, tuple(_with_lines(found[path], content, contents) for path in sorted(found)))


def _with_lines(item: PathDiff, content: Callable[[str], bytes | None], contents: bool) -> PathDiff:
    if item.change not in (ADDED, DELETED, MODIFIED, RENAMED):
        return item
    extra = _line_diff(item.path, item.before, item.after, content, item.renamed_from or item.path, contents)
    return replace(item, **extra)


def path_diff(
    path: str, before: FileState, after: FileState, content: Callable[[str], bytes | None], *, turn: int
) -> PathDiff:
    """One path going from ``before`` to ``after`` (both known states), as
    a range of turns would show it (``turn`` names both ends): what a
    restore of one file will do."""
    item = PathDiff(path, UNCHANGED, _side(before, ""), _side(after, ""), turn, turn)
    return _with_lines(replace(item, change=_change(item.before, item.after)), content, False)


def _pair_renames(found: dict[str, PathDiff]) -> None:
    """A file deleted at one path whose very bytes were added at another
    moved: one ``renamed`` entry at the new path (empty files are not paired:
    their bytes say nothing of where they came from)."""
    gone: dict[tuple[str, int], list[str]] = {}
    for path, item in found.items():
        if item.change == DELETED and item.before.size:
            gone.setdefault((item.before.sha256 or "", item.before.size), []).append(path)
    for path in sorted(found):
        item = found.get(path)  # a source paired earlier is gone
        if item is None or item.change != ADDED or not item.after.size:
            continue
        candidates = gone.get((item.after.sha256 or "", item.after.size))
        if not candidates:
            continue
        source = candidates.pop(0)
        old = found.pop(source)
        found[path] = PathDiff(
            path,
            RENAMED,
            old.before,
            item.after,
            min(old.first_turn, item.first_turn),
            max(old.last_turn, item.last_turn),
            renamed_from=source,
        )


def mode_text(mode: int | None) -> str:
    return "?" if mode is None else f"{mode:o}"


def describe(item: PathDiff) -> str:
    """One line for a person: what happened to the path."""
    before, after = item.before, item.after
    if item.change == UNKNOWN:
        why = before.why if not before.known else after.why
        return f"{item.path}: unknown ({why})"
    if item.change == RENAMED:
        line = f"{item.renamed_from} -> {item.path}: renamed"
        if before.mode != after.mode and before.mode is not None and after.mode is not None:
            line += f", mode {mode_text(before.mode)} -> {mode_text(after.mode)}"
        return line
    line = f"{item.path}: {item.change}"
    if item.change == MODE_CHANGED:
        line += f" ({mode_text(before.mode)} -> {mode_text(after.mode)})"
    elif item.change == MODIFIED and before.mode != after.mode and None not in (before.mode, after.mode):
        line += f", mode {mode_text(before.mode)} -> {mode_text(after.mode)}"
    elif item.change in (ADDED, DIRECTORY_CREATED) and after.mode is not None:
        line += f" (mode {mode_text(after.mode)})"
    elif item.change == LINK_CREATED:
        line += f" -> {after.target}"
    elif item.change == LINK_RETARGETED:
        line += f": {before.target} -> {after.target}"
    elif item.change == TYPE_CHANGED:
        line += f": {before.kind} -> {after.kind}"
    return line


def stat_lines(diff: TreeDiff, width: int = 60) -> list[str]:
    """``git diff --stat`` for a person: one line per path, then totals."""
    if not diff.files:
        return []
    names = [(f"{f.renamed_from} => {f.path}" if f.renamed_from else f.path) for f in diff.files]
    pad = min(max(len(n) for n in names), 50)
    biggest = max((f.insertions + f.deletions for f in diff.files), default=0)
    scale = min(1.0, width / biggest) if biggest else 1.0
    lines = []
    for name, item in zip(names, diff.files):
        count = item.insertions + item.deletions
        if item.binary or item.no_text:
            sizes = f"{item.before.size or 0} -> {item.after.size or 0} bytes"
            detail = f"Bin {sizes}" if item.binary else sizes
        elif item.text:
            plus = max(1, round(item.insertions * scale)) if item.insertions else 0
            minus = max(1, round(item.deletions * scale)) if item.deletions else 0
            detail = f"{count:>4} {'+' * plus}{'-' * minus}"
        else:
            detail = describe(item).split(": ", 1)[-1] if item.change != RENAMED else "renamed"
        lines.append(f" {name:<{pad}} | {detail}")
    files = len(diff.files)
    lines.append(
        f" {files} path{'s' if files != 1 else ''} changed, "
        f"{diff.insertions} insertion{'s' if diff.insertions != 1 else ''}(+), "
        f"{diff.deletions} deletion{'s' if diff.deletions != 1 else ''}(-)"
    )
    return lines
