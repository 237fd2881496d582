"""Work an open writable session does in the background, off the path of the
request that caused it.

Publication collection (:class:`PublicationCollector`)
------------------------------------------------------
Every committed publication, settlement and lease-acquiring open schedules
collection (:mod:`..collection`: current head, settled-turn
representatives, the newest ``keep_recent`` generations and what their
manifests name are retained; obsolete manifests go before payloads). The
job runs on the event loop after the request that scheduled it has
returned: one bounded step (at most ``max_removals`` removals, one proven
removal program) at a time, each under the publisher's lock so no step
interleaves with a publication, ``pause_seconds`` apart, until nothing
collectable remains. Scheduling while a job runs coalesces into one more
pass. A lost or released lease ends the job; a failure is logged and ends
it (the next publication plans afresh). A CLI process waits for its job,
bounded, before it exits (:meth:`PublicationCollector.finish`); its
collector is ``deferred``: what its command schedules is one job run at
that exit, not one after every publication (a prompt publishes three
times, and over SSH each job is four or five round trips). Its reads ride
the session's head commits instead (:class:`~..workspace_wide.collection.Ahead`,
starting from the listing the claim took: :meth:`PublicationCollector.listed`),
so the job at exit finds them known and runs no program but a removal.
And the removal itself rides a commit when the facts are in hand before
it (:func:`~..workspace_wide.collection.plan_riding_removal`): a commit
after the first carries what collection would remove under the head it
replaces, last in its program; once one did, the removal the job at exit
judges is left for the next command's commits, which judge it again (a
command whose commits carry none removes at its exit as before), so at
most what one command superseded waits.

Mid-turn checkpoints (:class:`TurnCheckpoints`)
------------------------------------------------
While a turn is in flight, its unfinished state is published every
``interval`` seconds (spec default 30), so a crash loses at most that much:
the timer starts when the turn begins and stops when it settles or the
session stops being writable here. A tick that finds nothing new publishes
nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from ...targets import Operation, OpResult, Status, TargetError
from ..errors import LeaseLost, StoreError
from ..layout import publication_id_of
from ..workspace_wide.collection import (
    DEFAULT_KEEP_RECENT,
    SURVEY_OPS,
    Ahead,
    CollectionCache,
    CollectionReport,
    collect,
    judge_ahead,
    opening_ops,
    plan_riding_removal,
    survey_ops,
)

_log = logging.getLogger(__name__)

#: Removals per collection step (one removal program).
COLLECTION_STEP_REMOVALS = 64
#: Pause between two collection steps of one job.
COLLECTION_PAUSE_SECONDS = 0.05


class _Background:
    """A task that runs steps and sleeps between them; stopping it never
    cuts a step short (a target program cancelled midway leaves its outcome
    unknown), only a sleep."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task | None = None
        self._sleeping = False
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _start(self, body: Callable[[], Awaitable[None]]) -> None:
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(body(), name=self._name)

    def _alive(self) -> bool:
        """The calling task is the current one and not asked to stop (a
        task replaced by a restart ends at its next check)."""
        return not self._stopping and self._task is asyncio.current_task()

    async def _pause(self, seconds: float) -> None:
        if self._stopping:
            # Stopped before its task first ran: ``cancel`` found it awake, so
            # the sleep is skipped here or ``stop`` would wait it out.
            return
        self._sleeping = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self._sleeping = False

    def cancel(self) -> None:
        """Stop at the next pause, without waiting (safe from inside the task)."""
        self._stopping = True
        task = self._task
        if task is not None and not task.done() and self._sleeping and task is not asyncio.current_task():
            task.cancel()

    async def stop(self) -> None:
        """Stop and wait for the step in progress, if any, to end."""
        self.cancel()
        task, self._task = self._task, None
        if task is None or task.done() or task is asyncio.current_task():
            return
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():  # this caller is being cancelled
                raise
        except Exception:  # the task logs its own failures
            pass


class PublicationCollector(_Background):
    """The collection job of one open writable session."""

    def __init__(
        self,
        session,
        *,
        keep_recent: int = DEFAULT_KEEP_RECENT,
        max_removals: int = COLLECTION_STEP_REMOVALS,
        pause_seconds: float = COLLECTION_PAUSE_SECONDS,
        deferred: bool = False,
    ) -> None:
        super().__init__(f"collect {session.session_id}")
        #: Scheduling only marks a job due; :meth:`finish` runs it.
        self.deferred = deferred
        self._due = False
        self._session = session
        self.keep_recent = keep_recent
        self.max_removals = max_removals
        self.pause_seconds = pause_seconds
        self._again = False
        #: What earlier steps learnt (generations are immutable).
        self._cache = CollectionCache()
        #: Steps run and publications removed so far (for tests and the log).
        self.steps = 0
        self.removed = 0
        self.last: CollectionReport | None = None
        #: A deferred collector's opening reads ride the session's head
        #: commits (:func:`opening_ops`): the lease carrying them, and its rider.
        self._riding = None
        #: The publications' names last listed, and what the commit
        #: running now reads ahead of the step.
        self._listed: tuple[str, ...] = ()
        self._planned: Ahead | None = None
        #: The removal the commit running now carries (its operations, the
        #: directories whose surveys follow them, the report it plans);
        #: and the lease generation whose commit last carried one, every
        #: operation done (the job at exit leaves its removal for later).
        self._removing: tuple[list[Operation], list[str], CollectionReport] | None = None
        self._rode_at: int | None = None
        #: What the removals that rode did (for tests and the log).
        self.rode: list[CollectionReport] = []

    def schedule(self) -> None:
        """Collect soon (coalesced with a job already running); a deferred
        collector at :meth:`finish`."""
        if self.deferred:
            self._due = True
            self._ride()
            return
        if self.running and not self._stopping:
            self._again = True
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._again = False
        self._start(self._run)

    def _ride(self) -> None:
        """Have the session's head commits run the step's reads, so the
        step at :meth:`finish` starts from the last commit's and reads only
        what no commit read ahead (:class:`~..workspace_wide.collection.Ahead`)."""
        lease = self._session.lease
        if lease is not None and (self._riding is None or self._riding[0] is not lease):
            self._riding = (lease, lease.ride(opening_ops(lease.paths), every=True, delivered=self._read_ahead, compose=self._ahead))
            lease.ride((), every=True, delivered=self._removed_ahead, compose=self._removal, last=True)

    def listed(self, listing: OpResult, kept: OpResult | None = None) -> None:
        """What another program of this holder read (the claim's): the
        publications' listing, which the next commit surveys, and the turn
        states :data:`~..workspace_wide.collection.KEPT_TURN_STATES` holds."""
        lease = self._session.lease
        if lease is not None:
            self._cache.hold(lease)
            if kept is not None:
                self._cache.read_kept(lease.paths, kept)
        if listing.ok:
            self._listed = tuple(listing.value)

    def _ahead(self, changes: Mapping[str, object]) -> tuple[Operation, ...]:
        lease, publisher = self._session.lease, self._session.publisher
        manifests, publishing = {}, None
        if publisher is not None:
            if publisher.known_head is not None:
                head, manifest = publisher.known_head
                manifests[publication_id_of(head)] = manifest
            if publisher.committing is not None and publisher.committing[0] == changes.get("publication_head"):
                head, manifest = publisher.committing
                publishing = publication_id_of(head)
                manifests[publishing] = manifest
        self._cache.hold(lease)
        listed = self._listed
        self._removing = planned = None
        # A commit that moves the head to a manifest not known here carries
        # no removal: what that manifest names could not be retained.
        moving = "publication_head" in changes and changes["publication_head"] != lease.publication_head
        if publishing is not None or not moving:
            try:
                planned = plan_riding_removal(
                    lease, self._cache, listed, manifests.get(publishing) if publishing else None,
                    keep_recent=self.keep_recent, max_removals=self.max_removals,
                )
            except LeaseLost:
                planned = None
        if planned is not None:
            ops, report = planned
            touched = {*report.removed, *report.trimmed}
            # What it touches is surveyed after it, not before.
            listed = tuple(n for n in listed if n not in touched)
            resurveyed = sorted(report.trimmed)
            self._removing = (ops, resurveyed, report)
        self._planned, ops = Ahead.plan(lease.paths, self._cache, listed, manifests, publishing)
        return tuple(ops)

    def _removal(self, changes: Mapping[str, object]) -> tuple[Operation, ...]:
        if self._removing is None:
            return ()
        ops, resurveyed, _report = self._removing
        return (*ops, *(op for pid in resurveyed for op in survey_ops(self._session.lease.paths, pid)))

    def _removed_ahead(self, results: tuple[OpResult, ...]) -> None:
        removing, self._removing = self._removing, None
        if removing is None:
            return
        ops, resurveyed, report = removing
        lease = self._session.lease
        if any(not r.ok for r in results[: len(ops)]) or any(r.status is Status.SKIPPED for r in results):
            self._rode_at = None  # the job at exit judges afresh
            return
        gone = {op.path.rsplit("/", 1)[1] for op in ops if op.path.rsplit("/", 1)[0] == lease.paths.publications_dir}
        self._listed = tuple(n for n in self._listed if n not in gone)
        at = len(ops)
        for pid in resurveyed:
            self._cache.absorb(lease.paths, pid, list(results[at : at + SURVEY_OPS]), quiesced=True)
            at += SURVEY_OPS
        self._rode_at = lease.generation
        self.rode.append(report)

    def _read_ahead(self, results: tuple[OpResult, ...]) -> None:
        planned, self._planned = self._planned, None
        if planned is None or any(r.status is Status.SKIPPED for r in results):
            return
        lease = self._session.lease
        planned.absorb(lease.paths, self._cache, results)
        if results[1].ok:
            self._listed = tuple(results[1].value)
        if planned.read:
            judge_ahead(lease.paths, self._cache)

    def _leaves_removal(self, lease) -> bool:
        """Whether the job at exit leaves what it would remove for the
        next command: a commit of this command carried a removal, and
        everything the step judges is in hand (nothing to read, no pack
        due), so the next command's commits will carry this one too."""
        if not self.deferred or self._rode_at is None or self._rode_at != lease.generation:
            return False
        planned = plan_riding_removal(lease, self._cache, self._listed, None, keep_recent=self.keep_recent, max_removals=self.max_removals)
        if planned is None:
            return False
        _log.info("session %s: collection of %d publication(s) left for the next command", lease.session_id, len(planned[1].removed))
        return True

    def _take_opened(self, lease) -> tuple | None:
        """The last commit's opening reads, once, when nothing was
        published since (:meth:`~..authority.lease.Rider.take`)."""
        if self._riding is None or self._riding[0] is not lease:
            return None
        return self._riding[1].take(lease)

    async def _run(self) -> None:
        await self._pause(0)  # after the request that scheduled it
        while self._alive():
            session = self._session
            lease, publisher = session.lease, session.publisher
            if lease is None or publisher is None or lease.lost or lease.released or session.read_only is not None:
                return
            try:
                async with publisher.serial:
                    if lease.lost or lease.released or not self._alive():
                        return
                    if self._leaves_removal(lease):
                        return
                    report = await collect(
                        lease, max_removals=self.max_removals, keep_recent=self.keep_recent, quiesced=True, cache=self._cache,
                        opened=self._take_opened(lease),
                    )
            except LeaseLost:
                return
            except (StoreError, TargetError, OSError) as error:
                _log.warning("session %s: publication collection stopped: %s", session.session_id, error)
                return
            except Exception:
                _log.exception("session %s: publication collection failed", session.session_id)
                return
            self.steps += 1
            self.removed += len(report.removed)
            self.last = report
            if report.blocked:
                _log.warning("session %s: publication collection blocked: %s", session.session_id, report.blocked)
                return
            if report.stopped:
                _log.info("session %s: a collection step stopped early: %s", session.session_id, report.stopped)
            if report.remaining == 0 or (report.stopped and not report.removed):
                if not self._again:
                    return
                self._again = False
            await self._pause(self.pause_seconds)

    async def finish(self, timeout: float) -> None:
        """Let a running job end, for at most ``timeout`` seconds (then stop
        it after its current step); a deferred collector runs the job due
        first."""
        if self.deferred and self._due and not self.running:
            self._due = False
            self._again = False
            self._start(self._run)
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            _log.info("session %s: publication collection left for later", self._session.session_id)
        except Exception:  # the job logs its own failures
            pass
        await self.stop()


class TurnCheckpoints(_Background):
    """Publishes the turn in flight every ``interval`` seconds; ``checkpoint``
    raises :data:`STOP_CHECKPOINTS` when there is no turn to checkpoint any more."""

    def __init__(self, session_id: str, checkpoint: Callable[[], Awaitable[object]], *, interval: float | None) -> None:
        super().__init__(f"checkpoint {session_id}")
        self._session_id = session_id
        self._checkpoint = checkpoint
        self.interval = interval
        self.ticks = 0

    def start(self) -> None:
        if (self.running and not self._stopping) or not self.interval:
            return
        self._start(self._run)

    async def _run(self) -> None:
        assert self.interval
        while True:
            await self._pause(self.interval)
            if not self._alive():
                return
            self.ticks += 1
            try:
                await self._checkpoint()
            except _Stop:
                return
            except Exception as error:  # a failed checkpoint is retried at the next tick
                _log.warning("session %s: mid-turn checkpoint failed: %s", self._session_id, error)


class _Stop(Exception):
    """Raised by a checkpoint callable: the turn is over, stop ticking."""


STOP_CHECKPOINTS = _Stop
