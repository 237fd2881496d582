"""What a shell command changed among the store's authored files.

The ADR keeps authored files writable "with ApplyPatch and confined shell
commands", and a write into a new id directory creates the artifact
whichever tool made it. An ApplyPatch names its paths; a command does not,
and the workspace file record (:mod:`mevedel_server.agents.file_state`)
never walks ``.mevedel/``. So around every command of a turn the agent
engine takes the facts of ``.mevedel/artifacts/`` (``.state/`` and
``.library/`` left out): one :class:`~mevedel_server.targets.ScanTree`
program before, one after, compared. The changed paths go to the same
learning as a patch's (:func:`.learned_writes.learn_patch_writes`).
The engine has the scan ride in the workspace file record's walk, which it
takes at those same moments: one program for both.

Facts are ``lstat``'s (size, times, inode), which cannot tell a rewrite
within one timestamp tick of the scan: a file the earlier scan found racy
is reported as changed when it is still there (at worst one turn version
of unchanged bytes). Everything goes through the ``Target``; an absent
directory is an empty store, and a linked one is refused by the target
(reported, never followed).
"""

from __future__ import annotations

import time

from ..targets import (
    ControlProgram,
    FileScan,
    OpResult,
    ScanTree,
    Status,
    Target,
    raise_for_result,
)
from .layout import ARTIFACTS_DIR, STATE_SUBDIR

#: Subtrees of the store that are not authored files.
_NOT_AUTHORED = (STATE_SUBDIR, ".library")
#: More entries than this and the scan stops: the store is not followed.
SCAN_LIMIT = 200_000
#: Facts this close to the scan's start may hide a same-tick change.
RACY_NS = 2_000_000_000
#: A scan that rode in a file record's walk stands for a look this soon after.
RIDE_FRESH_SECONDS = 2.0


class AuthoredFacts:
    """The facts of the authored files at the last look, for one workspace."""

    def __init__(self, target: Target, *, racy_ns: int = RACY_NS) -> None:
        self.target = target
        self.racy_ns = racy_ns
        self._facts: dict[str, tuple] | None = None
        self._racy: frozenset[str] = frozenset()
        self._landed: tuple[OpResult, float] | None = None

    def ride_op(self) -> ScanTree:
        """The scan, to run in another program taken at the same moment
        (the workspace file record's walk: see ``FileStateRecord.riders``)."""
        return ScanTree(ARTIFACTS_DIR, skip_paths=_NOT_AUTHORED, limit=SCAN_LIMIT, racy_ns=self.racy_ns, optional=True)

    def landed(self, result: OpResult) -> None:
        """The result of :meth:`ride_op`: the next look or comparison uses
        it instead of scanning again, when it comes right after (the engine
        looks as soon as the walk answered; a ride older than
        :data:`RIDE_FRESH_SECONDS`, a walk nobody looked after, is not used)."""
        self._landed = (result, time.monotonic())

    async def _scan(self) -> tuple[dict[str, tuple], frozenset[str]]:
        op = self.ride_op()
        ride, self._landed = self._landed, None
        landed = ride[0] if ride is not None and time.monotonic() - ride[1] < RIDE_FRESH_SECONDS else None
        if landed is None or not (landed.ok or landed.status is Status.ABSENT):
            landed = (await self.target.run(ControlProgram([op])))[0]
        if landed.status is Status.ABSENT:
            return {}, frozenset()
        raise_for_result(op, landed)
        scan: FileScan = landed.value
        if scan.truncated:
            raise ValueError(f"{ARTIFACTS_DIR} holds more than {SCAN_LIMIT} entries; shell writes there are not followed")
        return scan.entries(), frozenset(scan.racy)

    async def look(self) -> None:
        """Take the facts the next :meth:`changes` compares with."""
        self._facts, self._racy = await self._scan()

    async def changes(self) -> list[str]:
        """Workspace-relative paths created, changed or deleted since the
        last look (none when there was no look), and look again."""
        before, racy = self._facts, self._racy
        after, self._racy = await self._scan()
        self._facts = after
        if before is None:
            return []
        changed = {path for path in after.keys() | before.keys() if after.get(path) != before.get(path)}
        changed |= racy & after.keys()
        return [f"{ARTIFACTS_DIR}/{path}" for path in sorted(changed)]
