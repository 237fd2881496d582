"""The file-state record's entries in columns, one row a path: its facts,
the digest of its content and where that content lies in a pack -- the
packed index's own columns (:mod:`.file_state_index`), taken as they are.

A new process loads 100,000 paths from the index at every ``mevedel
prompt``: a dict of their digests, one of the digests' pack locations and
the counts of each digest's paths cost more than the walk they save. Here
a load builds one dict (path -> row) and keeps the rows' packed facts as
the index's column (compared with a walk's in C: whole, when the walk meets
the paths in the rows' order; else joined in the walk's order from a list
made then); a digest or a location is looked up for the few paths a sync
touches, in the columns. A digest's other paths (blobs are
kept once per digest) are found by a search of the digest column, or,
past :data:`SEARCHES` searches, by an index of it built then.

Row 0 holds no path: a walked path the record does not hold is looked up
as row 0 in C (``map(rows.get, paths, repeat(0))``), whose facts match no
walk's. A dropped path's row is emptied, not reused, so that the rows
dict's order is the rows' order (a whole save compacts them).
"""

from __future__ import annotations

import itertools
import operator
import struct
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator

from ..targets import SCAN_FACTS

DIGEST = 32
_NO_DIGEST = bytes(DIGEST)
#: The bytes of one row's packed facts.
FACTS = struct.calcsize(SCAN_FACTS)
_NO_FACTS = b"\xff" * FACTS
_FACTS_RECORD = struct.Struct(f"{FACTS}s")
_DIGEST_RECORD = struct.Struct(f"{DIGEST}s")
_FIRST = operator.itemgetter(0)
#: Searches of the digest column before it is indexed.
SEARCHES = 64
#: Paths set since the load that a walk may meet anywhere among the
#: others and still be lined up with the record by :meth:`RecordTable.
#: walk_rows` (each is looked for in the walk's names).
MOVED = 64


def _counts(numbers: array, below: int) -> Counter[int]:
    """How many of ``numbers`` are each number from 1 to ``below`` - 1.
    Counted in C on their bytes: a Counter of 100,000 numbers makes a
    Python integer of each, a tenth of a load's time."""
    raw = numbers.tobytes()
    size = numbers.itemsize
    low = 0 if sys.byteorder == "little" else size - 1
    lows = raw[low::size]
    if below > 256 or len(lows) * (size - 1) != sum(raw[at::size].count(0) for at in range(size) if at != low):
        counts = Counter(numbers)  # a number past a byte (no packs are that many)
    else:
        counts = Counter({number: lows.count(number) for number in range(1, below)})
    counts.pop(0, None)
    return +counts


class RecordTable:
    """path -> (packed facts, digest, pack location), in columns."""

    def __init__(
        self,
        paths: list[str] = (),  # type: ignore[assignment]
        facts: Iterable[bytes] | bytes | memoryview = (),
        digests: bytes = b"",
        captured: bytes = b"",
        numbers: array | None = None,
        offsets: array | None = None,
        packs: Iterable[str] = (),
        joined: str | None = None,
    ) -> None:
        #: path -> its row (1 on: row 0 holds no path).
        self.rows: dict[str, int] = dict(zip(paths, itertools.count(1)))
        #: ``paths`` joined by NULs as the index held them (``joined``,
        #: given with them): what a walk that lines up meets, compared as
        #: it is rather than joined again from the rows while no loaded
        #: row is emptied.
        self._loaded_names = joined
        #: The rows' packed facts in one column, row r's at r * FACTS (row
        #: 0's match no walk's: a flags byte no walk sends), as the index
        #: keeps them: a load makes no object per row. An emptied row's
        #: stay, unread.
        self._column = bytearray(_NO_FACTS)
        self._column += facts if isinstance(facts, (bytes, bytearray, memoryview)) else b"".join(facts)
        self._emptied: set[int] = set()
        #: The column as a list (b"" for an emptied row), and the live
        #: rows' facts joined, made when asked.
        self._list: list[bytes] | None = None
        self._joined: bytes | None = None
        #: row -> the sha256 of its content (raw; zeros when not captured).
        self.digests = bytearray(_NO_DIGEST) + digests
        self.captured = bytearray(1) + captured
        #: row -> 1 + the number of its blob's pack (0: none, or a loose
        #: blob ``blobs/<digest>`` of an earlier version), and the offset.
        self.numbers = array("I", [0])
        self.offsets = array("Q", [0])
        if numbers is not None:
            self.numbers += numbers
            self.offsets += offsets
        self.packs: list[str | None] = [None, *packs]
        self._numbered = {pack: number for number, pack in enumerate(self.packs) if pack is not None}
        #: pack number -> live rows whose blob lies in it.
        self.pack_rows: Counter[int] = _counts(self.numbers, len(self.packs))
        #: How many rows are captured (have a digest).
        self.captured_count = self.captured.count(1)
        self._searches = 0
        #: Once the digest column is indexed: digest -> a row holding it,
        #: and how many live rows do.
        self._digest_row: dict[bytes, int] | None = None
        self._digest_rows: Counter[bytes] | None = None
        #: Rows from here on were added since the load (a delta's new
        #: paths, a sync's): a walk meets them where their directory is.
        self._loaded = len(self._column) // FACTS

    # -- reading -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, path: object) -> bool:
        return path in self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def walk_facts(self, names: str) -> bytes | None:
        """The recorded facts of a walk's ``names`` (each path followed by
        a NUL), joined in the walk's order, when they are the recorded
        paths, each once, in the rows' order -- a walk of a tree as the
        index was saved from a walk of it -- but for the (few) paths added
        since the load, which may stand anywhere; else None. Compared as
        whole strings in C: no lookup of 100,000 paths in the rows dict (a
        tenth of a new process's first refresh)."""
        rows = self.rows
        moved: list[tuple[str, int]] = []
        for path, row in reversed(rows.items()):
            if row < self._loaded:
                break
            if len(moved) == MOVED:
                return None
            moved.append((path, row))
        if self._loaded_names is not None and not any(row < self._loaded for row in self._emptied):
            recorded = self._loaded_names  # the loaded rows, none dropped since
        else:
            recorded = "\0".join(itertools.islice(rows, len(rows) - len(moved)))
        if len(rows) > len(moved):
            recorded += "\0"
        if not moved:
            # The rows' order is the dict's; an emptied row's facts are b"".
            return self.joined_facts() if names == recorded else None
        # Where each added path stands in the walk (a NUL before and after
        # it: the whole path), then the walk without them.
        bounded = "\0" + names
        places = []
        for path, row in moved:
            at = bounded.find(f"\0{path}\0")
            if at < 0:
                return None
            places.append((at, len(path) + 1, row))
        places.sort()
        pieces = []
        last = 0
        for at, length, _row in places:
            pieces.append(names[last:at])
            last = at + length
        pieces.append(names[last:])
        if "".join(pieces) != recorded:
            return None
        # The rows from the load in their order, each added one's facts
        # cut in where the walk met it.
        loaded = self._live(self._loaded)
        column = self._column
        pieces = []
        last = 0
        for before, (at, _length, row) in enumerate(places):
            upto = (names.count("\0", 0, at) - before) * FACTS
            pieces += (loaded[last:upto], column[row * FACTS : (row + 1) * FACTS])
            last = upto
        pieces.append(loaded[last:])
        return b"".join(pieces)

    def joined_facts(self) -> bytes:
        """Every recorded path's facts joined in the rows dict's order,
        made once until a row changes (a new process's first refresh takes
        them twice)."""
        if self._joined is None:
            self._joined = self._live(len(self._column) // FACTS)
        return self._joined

    def _live(self, end: int) -> bytes:
        """The facts of the live rows from 1 to ``end`` - 1, in order (the
        rows dict's: an emptied row's path is out of it), cut from the
        column in C (through a view released before the column grows)."""
        emptied = sorted(row for row in self._emptied if row < end)
        starts = [1, *(row + 1 for row in emptied)]
        ends = [*emptied, end]
        with memoryview(self._column) as column:
            return b"".join([column[start * FACTS : stop * FACTS] for start, stop in zip(starts, ends)])

    @property
    def facts(self) -> list[bytes]:
        """row -> packed facts (b"" for an emptied row), made once until a
        row changes: for lookups of every walked path by row."""
        if self._list is None:
            self._list = list(map(_FIRST, _FACTS_RECORD.iter_unpack(self._column)))
            for row in self._emptied:
                self._list[row] = b""
        return self._list

    def facts_of(self, path: str) -> bytes | None:
        row = self.rows.get(path)
        return None if row is None else bytes(self._column[row * FACTS : (row + 1) * FACTS])

    def digest_of(self, path: str) -> str | None:
        """The hex digest of ``path``'s content (None: not captured)."""
        row = self.rows.get(path)
        if row is None or not self.captured[row]:
            return None
        return self.digests[row * DIGEST : (row + 1) * DIGEST].hex()

    def location_of(self, path: str) -> tuple[str, int] | None:
        """(pack, offset) of ``path``'s blob (None: loose, or none)."""
        row = self.rows.get(path)
        return None if row is None else self._location(row)

    def _location(self, row: int) -> tuple[str, int] | None:
        number = self.numbers[row]
        return (self.packs[number], self.offsets[row]) if number else None  # type: ignore[return-value]

    def captured_paths(self) -> Iterator[str]:
        captured = self.captured
        return (path for path, row in self.rows.items() if captured[row])

    def digest_location(self, digest: str) -> tuple[str, int] | None:
        """Where the blob of ``digest`` lies, when a recorded path names it."""
        row = self._row_with(bytes.fromhex(digest))
        return self._location(row) if row else None

    def names(self, digest: str) -> bool:
        """Whether a recorded path names ``digest``."""
        return bool(self._row_with(bytes.fromhex(digest)))

    def pack_live(self, pack: str) -> bool:
        """Whether a recorded path's blob lies in ``pack``."""
        number = self._numbered.get(pack)
        return bool(number and self.pack_rows.get(number))

    def live_packs(self) -> list[str]:
        return [self.packs[number] for number, count in self.pack_rows.items() if count]  # type: ignore[misc]

    def located(self) -> Iterator[tuple[str, str, str, int]]:
        """(path, digest, pack, offset) of every path whose blob is in a pack."""
        numbers, offsets, digests, packs = self.numbers, self.offsets, self.digests, self.packs
        for path, row in self.rows.items():
            number = numbers[row]
            if number:
                yield path, digests[row * DIGEST : (row + 1) * DIGEST].hex(), packs[number], offsets[row]  # type: ignore[misc]

    def columns(self, packs: list[str], paths: list[str] | None = None) -> tuple[list[str], bytes, bytes, bytes, array, array]:
        """``(paths, facts, captured, digests, pack numbers, offsets)`` of
        ``paths`` (None: every path), packed as the index keeps them, the
        pack numbers counted from 1 in ``packs`` (a blob in a pack not
        among them lies nowhere: 0)."""
        number = {pack: n for n, pack in enumerate(packs, 1)}
        renumber = array("I", [number.get(pack, 0) if pack is not None else 0 for pack in self.packs])  # type: ignore[arg-type]
        if paths is None and not self._emptied:
            # No row emptied: the columns as they are, in C.
            return (list(self.rows), self.joined_facts(), bytes(self.captured[1:]), bytes(self.digests[DIGEST:]),
                    array("I", map(renumber.__getitem__, self.numbers[1:])), self.offsets[1:])
        names = list(self.rows) if paths is None else paths
        rows = list(map(self.rows.__getitem__, names))
        if len(rows) > MOVED:  # every path, or many
            digests = list(map(_FIRST, _DIGEST_RECORD.iter_unpack(self.digests)))
            digest_column = b"".join(map(digests.__getitem__, rows))
            facts_column = b"".join(map(self.facts.__getitem__, rows))
        else:  # a few (a delta): cut from the columns, not a list of every row's facts made for them
            digest_column = b"".join([self.digests[row * DIGEST : (row + 1) * DIGEST] for row in rows])
            facts_column = b"".join([self._column[row * FACTS : (row + 1) * FACTS] for row in rows])
        return (
            names,
            facts_column,
            bytes(map(self.captured.__getitem__, rows)),
            digest_column,
            array("I", map(renumber.__getitem__, map(self.numbers.__getitem__, rows))),
            array("Q", map(self.offsets.__getitem__, rows)),
        )

    # -- changing ----------------------------------------------------------

    def set(self, path: str, facts: bytes, digest: str | None, landed: tuple[str, int] | None, *, share: bool = True) -> str | None:
        """Record ``path`` with ``facts`` and ``digest``; its blob lies
        where another path naming ``digest`` has it (``share``: a blob is
        kept once per digest), else at ``landed`` (where this sync's
        snapshot put it). The blob no path names any more (a pack, or a
        loose blob's digest: to remove), or None."""
        if len(facts) != FACTS:
            raise ValueError("a row's facts are one packed record")
        self._list = self._joined = None
        row = self.rows.get(path)
        if row is None:
            row = self.rows[path] = len(self._column) // FACTS
            self._column += facts
            self.digests += _NO_DIGEST
            self.captured.append(0)
            self.numbers.append(0)
            self.offsets.append(0)
        else:
            self._column[row * FACTS : (row + 1) * FACTS] = facts
        raw = bytes.fromhex(digest) if digest is not None else _NO_DIGEST
        start = row * DIGEST
        old = bytes(self.digests[start : start + DIGEST]) if self.captured[row] else None
        if old == raw and digest is not None:
            return None  # the same bytes: as they were
        gone = self._clear(row, old)
        if digest is not None:
            other = self._row_with(raw) if share else 0
            where = self._location(other) if other else landed
            self.digests[start : start + DIGEST] = raw
            self.captured[row] = 1
            self.captured_count += 1
            self._count(raw, row, 1)
            if where is not None:
                number = self._number(where[0])
                self.numbers[row], self.offsets[row] = number, where[1]
                self.pack_rows[number] += 1
        return gone

    def drop(self, path: str) -> str | None:
        """Forget ``path``: the blob no path names any more, or None."""
        row = self.rows.pop(path)
        self._list = self._joined = None
        self._emptied.add(row)
        start = row * DIGEST
        return self._clear(row, bytes(self.digests[start : start + DIGEST]) if self.captured[row] else None)

    def relocate(self, moved: dict[str, tuple[str, int] | None]) -> None:
        """Move the blobs of digests (hex) to (pack, offset); None: lost."""
        raws = {bytes.fromhex(digest): where for digest, where in moved.items()}
        digests = self.digests
        for row in self.rows.values():
            if not self.numbers[row]:
                continue
            where = raws.get(bytes(digests[row * DIGEST : (row + 1) * DIGEST]), False)
            if where is False:
                continue
            self.pack_rows[self.numbers[row]] -= 1
            if where is None:
                self.numbers[row] = self.offsets[row] = 0
            else:
                number = self._number(where[0])
                self.numbers[row], self.offsets[row] = number, where[1]
                self.pack_rows[number] += 1
        self.pack_rows = +self.pack_rows

    def forget_packs(self, kept: set[str]) -> None:
        """Blobs in packs not among ``kept`` (gone since) lie nowhere."""
        for number, pack in enumerate(self.packs):
            if pack is not None and pack not in kept and self.pack_rows.get(number):
                for row in self.rows.values():
                    if self.numbers[row] == number:
                        self.numbers[row] = self.offsets[row] = 0
                del self.pack_rows[number]

    def _clear(self, row: int, old: bytes | None) -> str | None:
        """Empty ``row``'s digest and location; the blob left unnamed."""
        if old is None:
            return None
        start = row * DIGEST
        self.digests[start : start + DIGEST] = _NO_DIGEST
        self.captured[row] = 0
        self.captured_count -= 1
        self._count(old, row, -1)
        number = self.numbers[row]
        if not number:
            return None if self._row_with(old) else old.hex()  # a loose blob of an earlier version
        self.numbers[row] = self.offsets[row] = 0
        left = self.pack_rows[number] - 1
        if left:
            self.pack_rows[number] = left
            return None
        del self.pack_rows[number]
        return self.packs[number]

    def _number(self, pack: str) -> int:
        number = self._numbered.get(pack)
        if number is None:
            number = self._numbered[pack] = len(self.packs)
            self.packs.append(pack)
        return number

    # -- the digest column -------------------------------------------------

    def _row_with(self, raw: bytes) -> int:
        """A live row holding digest ``raw`` (0: none)."""
        if self._digest_row is None:
            self._searches += 1
            if self._searches <= SEARCHES:
                return self._search(raw)
            self._index_digests()
        return self._digest_row.get(raw, 0)  # type: ignore[union-attr]

    def _search(self, raw: bytes, skip: int = 0) -> int:
        digests, captured = self.digests, self.captured
        at = digests.find(raw, DIGEST)
        while at >= 0:
            row, misaligned = divmod(at, DIGEST)
            if not misaligned and row != skip and captured[row]:
                return row
            at = digests.find(raw, at + 1)
        return 0

    def _index_digests(self) -> None:
        rows = [row for row in self.rows.values() if self.captured[row]]
        keys = [bytes(self.digests[row * DIGEST : (row + 1) * DIGEST]) for row in rows]
        self._digest_rows = Counter(keys)
        self._digest_row = dict(zip(keys, rows))

    def _count(self, raw: bytes, row: int, step: int) -> None:
        """Keep the digest column's index (when built) as ``row`` takes
        (``step`` 1) or gives up ``raw``."""
        if self._digest_rows is None or self._digest_row is None:
            return
        left = self._digest_rows[raw] + step
        if left <= 0:
            del self._digest_rows[raw]
            self._digest_row.pop(raw, None)
            return
        self._digest_rows[raw] = left
        if step > 0:
            self._digest_row.setdefault(raw, row)
        elif self._digest_row.get(raw) == row:
            self._digest_row[raw] = self._search(raw, skip=row)
