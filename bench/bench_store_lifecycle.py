"""Rewind, Fork and Save As on a 6,000-turn session with 200 captured files,
with 10 and with 1,000 retained publication generations.

Targets: a Rewind's prepare + commit under 1 s together; a Fork's and a Save
As's prepare + commit under 500 ms each; and each cost following the
current logical state, not the number of retained generations (the
1,000-generation median at most 1.5x the 10-generation one).

The session: 6,000 settled turns (prompt and response); turns 3,001 to
6,000 capture one of 200 project files each (``src/file-NNN.py``, about
1 KiB, a pre-turn and a post-turn content), and the working tree holds every
file's latest post-turn content. Its state is about 450 logical artifacts
(2.7 MB). The extra generations are display-only publications (renames) of
the same session, so only the number of retained manifests differs between
the two workspaces.

Each measured operation runs through the real store on a real directory
(``LocalTarget``: durable files and directories):

- Rewind: ``prepare_rewind`` then ``commit_rewind`` before turn 3,001 --
  3,000 prompts discarded, all 200 files restored (journal, 200 guarded
  replaces, one replacement publication). Every sample starts from a fresh
  copy of the workspace.
- Fork: ``prepare_fork`` + ``commit_fork`` after turn 6,000: a child with the
  whole state, published into its own directory.
- Save As: ``prepare_save_as`` + ``commit_save_as``.

The per-process caches of restored heads and plans are cleared before each
prepare, so every sample reads and restores the committed state itself.

Baselines measured in the same run, on the same filesystem:

- ``read floor``: reading and verifying the committed state
  (``read_committed`` + ``read_all``) -- what any transaction over the
  current state must do;
- ``file write floor``: one program replacing the 200 files (the restore a
  Rewind cannot avoid);
- ``publication write floor``: one program exclusively creating as many
  files as a child's publication writes, deferred to one barrier as a
  publication does (what a Fork or Save As cannot avoid with one file per
  artifact); the same creates each fsynced are shown for comparison;
- every case and floor again with ``os.fsync`` and the ``syncfs`` barrier
  stubbed out: the cost that is not the disk's.

The results hand back the replacement's (or child's) ``Conversation``
restored on first use; the ``adopt`` row is what that first use costs a
caller that makes the rewound conversation its live one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time

import msgspec

from harness import report, summarize
from mevedel_server.store import (
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
    read_committed,
)
from mevedel_server.store.authority.workspace import ensure_workspace_id
from mevedel_server.store.content.sidecar import (
    SIDECAR_PATH,
    NamingState,
    encode_sidecar,
)
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.content.turns import Conversation
from mevedel_server.store.transactions import in_place as in_place_module
from mevedel_server.store.transactions import snapshot_cut
from mevedel_server.store.transactions.fork import commit_fork, prepare_fork
from mevedel_server.store.transactions.rewind import commit_rewind, prepare_rewind
from mevedel_server.store.transactions.save_as import commit_save_as, prepare_save_as
from mevedel_server.store.transactions.snapshot_cut import Boundary
from mevedel_server.targets import (
    Barrier,
    ControlProgram,
    CreateExclusive,
    LocalTarget,
    MakeDirs,
    Replace,
    executor,
    read_target_clock,
)

SAMPLES = int(os.environ.get("MEVEDEL_BENCH_SAMPLES", "5"))
TURNS = 6000
FILES = 200
FIRST_CAPTURE = 3001
GENERATIONS = (10, 1000)
ME = ClientIdentity("bench-client", "bench-host")
SESSION_ID = "2026-07-19T09-47-00000000beef"


def _path(index: int) -> str:
    return f"src/file-{index:03d}.py"


def _content(index: int, version: str) -> bytes:
    return (f"# file {index} {version}\n" + "x = 1\n" * 170).encode()


class _Fsync:
    """Stub the disk flushes (``os.fsync`` and the executor's ``syncfs``
    barrier) out (``skip``) while building or for the rows that show the
    cost without durability."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self._real = os.fsync
        self._real_syncfs = executor.sync_filesystem

    def __call__(self, fd: int) -> None:
        if not self.skip:
            self._real(fd)

    def _syncfs(self, fd: int) -> bool:
        return True if self.skip else self._real_syncfs(fd)

    def __enter__(self) -> _Fsync:
        os.fsync = self
        executor.sync_filesystem = self._syncfs
        return self

    def __exit__(self, *exc: object) -> None:
        os.fsync = self._real
        executor.sync_filesystem = self._real_syncfs


async def build(root: str, generations: int) -> int:
    """The session, published, plus display-only publications up to
    ``generations`` retained ones. Returns its artifact count."""
    target = LocalTarget(root)
    workspace_id = await ensure_workspace_id(target)
    at = await read_target_clock(target, ".mevedel")
    conversation = Conversation.new(session_id=SESSION_ID, workspace_id=workspace_id, at=at)
    stride = (TURNS - FIRST_CAPTURE + 1) // FILES
    for n in range(1, TURNS + 1):
        turn_id = conversation.begin_turn(f"{n} please continue", at=at)
        current = {}
        if n >= FIRST_CAPTURE and (n - FIRST_CAPTURE) % stride == 0 and (n - FIRST_CAPTURE) // stride < FILES:
            index = (n - FIRST_CAPTURE) // stride
            conversation.capture_file(_path(index), _content(index, "before"))
            current[_path(index)] = _content(index, "after")
        conversation.append(Response(turn_id=turn_id, text="continued"))
        conversation.settle(Outcome.COMPLETED, at=at, current=current)
    for index in range(FILES):
        full = os.path.join(root, _path(index))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(_content(index, "after"))
    candidate = conversation.artifacts_for_save()
    await materialize_session(target, SESSION_ID)
    lease = await acquire_lease(target, SESSION_ID, ME, duration_seconds=3600)
    publisher = Publisher(lease)
    await publisher.publish(dict(candidate.artifacts))
    sidecar = candidate.sidecar
    for n in range(generations - 1):
        renamed = msgspec.structs.replace(sidecar, display_name=f"name {n}", naming_state=NamingState.EXPLICIT)
        await publisher.publish({SIDECAR_PATH: encode_sidecar(renamed)})
    await lease.release()
    return len(candidate.artifacts)


def _clear_caches() -> None:
    snapshot_cut._states.clear()
    in_place_module._plans.clear()


async def _open(root: str):
    target = LocalTarget(root)
    lease = await acquire_lease(target, SESSION_ID, ME, duration_seconds=3600)
    return target, lease, Publisher(lease)


async def rewind_sample(template: str, scratch: str) -> tuple[float, float, float]:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(template, scratch, symlinks=True)
    # The copy is the benchmark's scaffolding, written a moment ago: flushed
    # here, or the Rewind's first barrier (syncfs: the whole filesystem)
    # flushes it inside the timed region -- a 1,000-generation copy is the
    # larger one, which made Rewind look dependent on the generation count.
    # A real session's older generations were flushed when they were
    # published.
    os.sync()
    target, lease, publisher = await _open(scratch)
    _clear_caches()
    start = time.perf_counter()
    impact = await prepare_rewind(target, SESSION_ID, Boundary.before(FIRST_CAPTURE))
    prepared = time.perf_counter()
    result = await commit_rewind(publisher, impact.token)
    done = time.perf_counter()
    assert len(result.written) == FILES and len(impact.discarded) == TURNS - FIRST_CAPTURE + 1
    # What a caller adopting the result pays on first use (not part of the
    # transaction: the Conversation is restored lazily).
    adopt = time.perf_counter()
    assert result.conversation.sidecar.total_turn_count == FIRST_CAPTURE - 1
    adopted = time.perf_counter()
    await lease.release()
    return prepared - start, done - prepared, adopted - adopt


async def fork_sample(root: str) -> tuple[float, float]:
    target = LocalTarget(root)
    _clear_caches()
    start = time.perf_counter()
    impact = await prepare_fork(target, SESSION_ID, TURNS)
    prepared = time.perf_counter()
    result = await commit_fork(target, impact.token, ME)
    done = time.perf_counter()
    assert result.turns == TURNS
    shutil.rmtree(os.path.join(root, ".mevedel", "sessions", result.child.session_id))
    return prepared - start, done - prepared


async def save_as_sample(root: str) -> tuple[float, float]:
    target = LocalTarget(root)
    _clear_caches()
    start = time.perf_counter()
    impact = await prepare_save_as(target, SESSION_ID, "The copy")
    prepared = time.perf_counter()
    child = await commit_save_as(target, impact.token, ME)
    done = time.perf_counter()
    shutil.rmtree(os.path.join(root, ".mevedel", "sessions", child.session_id))
    return prepared - start, done - prepared


async def read_floor(root: str) -> float:
    target = LocalTarget(root)
    start = time.perf_counter()
    snapshot = await read_committed(target, SESSION_ID)
    await snapshot.read_all()
    return time.perf_counter() - start


async def file_write_floor(root: str, n: int) -> float:
    target = LocalTarget(root)
    ops = [Replace(_path(index), _content(index, f"floor {n}")) for index in range(FILES)]
    start = time.perf_counter()
    await target.run(ControlProgram(ops))
    return time.perf_counter() - start


async def publication_write_floor(root: str, artifacts: int, n: int, deferred: bool = True) -> float:
    target = LocalTarget(root)
    directory = f"floor-{n}"
    ops = [MakeDirs(directory, deferred=deferred)]
    ops += [CreateExclusive(f"{directory}/{k:06d}.data", b"x" * 6000, deferred=deferred) for k in range(artifacts)]
    ops += [Barrier()] if deferred else []
    start = time.perf_counter()
    await target.run(ControlProgram(ops))
    took = time.perf_counter() - start
    shutil.rmtree(os.path.join(root, directory))
    return took


async def measure(templates: dict[int, str], scratch: str, artifacts: int, samples: int) -> dict[str, list[float]]:
    """Every case and floor, samples taken in turn so load on the shared disk
    moves them alike."""
    times: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        times.setdefault(key, []).append(value)

    for n in range(samples):
        add("read floor", await read_floor(templates[10]))
        add("file write floor", await file_write_floor(templates[10], n))
        add("publication write floor", await publication_write_floor(templates[10], artifacts, n))
        add("fsynced creates", await publication_write_floor(templates[10], artifacts, n, deferred=False))
        for generations, template in templates.items():
            prepare, commit, adopt = await rewind_sample(template, scratch)
            add(f"adopt {generations}", adopt)
            add(f"rewind prepare {generations}", prepare)
            add(f"rewind commit {generations}", commit)
            add(f"rewind {generations}", prepare + commit)
            prepare, commit = await fork_sample(template)
            add(f"fork prepare {generations}", prepare)
            add(f"fork commit {generations}", commit)
            add(f"fork {generations}", prepare + commit)
            prepare, commit = await save_as_sample(template)
            add(f"save as prepare {generations}", prepare)
            add(f"save as commit {generations}", commit)
            add(f"save as {generations}", prepare + commit)
    return times


async def main() -> None:
    # The machine is shared: say how busy it was, since the disk's flushes
    # and creates slow down with everyone else's writes.
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lifecycle-") as base:
        templates = {}
        with _Fsync(skip=True):
            for generations in GENERATIONS:
                root = os.path.join(base, f"gen-{generations}")
                os.makedirs(root)
                artifacts = await build(root, generations)
                templates[generations] = root
        scratch = os.path.join(base, "scratch")
        durable = await measure(templates, scratch, artifacts, SAMPLES)
        with _Fsync(skip=True):
            cpu = await measure(templates, scratch, artifacts, SAMPLES)

    rows = []
    floors = {key: summarize(durable[key]) for key in ("read floor", "file write floor", "publication write floor", "fsynced creates")}
    cpu_floors = {key: summarize(cpu[key]) for key in floors}
    names = {
        "read floor": "read floor: read + verify the state",
        "file write floor": f"file write floor: replace {FILES} files",
        "publication write floor": f"publication write floor: create {artifacts} files, one barrier",
        "fsynced creates": f"for comparison: create {artifacts} files, each fsynced",
    }
    for key, name in names.items():
        rows.append({"case": name, **floors[key]})
        rows.append({"case": f"{name}, fsync skipped", **cpu_floors[key]})
    for generations in GENERATIONS:
        rows.append({"case": f"adopt: restore the rewound Conversation, {generations} generations", **summarize(durable[f"adopt {generations}"])})
    verdicts = {}
    for label, key, target_ms, floor_keys in (
        ("Rewind", "rewind", 1000, ("read floor", "file write floor")),
        ("Fork", "fork", 500, ("read floor", "publication write floor")),
        ("Save As", "save as", 500, ("read floor", "publication write floor")),
    ):
        floor_ms = sum(floors[k]["median_ms"] for k in floor_keys)
        ten = summarize(durable[f"{key} 10"])
        for generations in GENERATIONS:
            stats = summarize(durable[f"{key} {generations}"])
            rows.append(
                {
                    "case": f"{label} prepare+commit, {generations} generations",
                    "prepare_median_ms": summarize(durable[f"{key} prepare {generations}"])["median_ms"],
                    "commit_median_ms": summarize(durable[f"{key} commit {generations}"])["median_ms"],
                    **stats,
                    "ratio_vs_floors": round(stats["median_ms"] / floor_ms, 2),
                    "ratio_vs_10_generations": round(stats["median_ms"] / ten["median_ms"], 2),
                }
            )
        cpu_ten = summarize(cpu[f"{key} 10"])
        for generations in GENERATIONS:
            stats = summarize(cpu[f"{key} {generations}"])
            rows.append(
                {
                    "case": f"{label}, {generations} generations, fsync skipped",
                    "prepare_median_ms": summarize(cpu[f"{key} prepare {generations}"])["median_ms"],
                    "commit_median_ms": summarize(cpu[f"{key} commit {generations}"])["median_ms"],
                    **stats,
                    "ratio_vs_10_generations": round(stats["median_ms"] / cpu_ten["median_ms"], 2),
                }
            )
        worst = max(summarize(durable[f"{key} {g}"])["median_ms"] for g in GENERATIONS)
        ratio = summarize(durable[f"{key} 1000"])["median_ms"] / ten["median_ms"]
        verdicts[f"{key}_under_{target_ms}_ms"] = worst < target_ms
        verdicts[f"{key}_generation_independent"] = ratio <= 1.5
    notes = {
        "target": "Rewind prepare+commit < 1000 ms; Fork, Save As < 500 ms each; 1000-generation median <= 1.5x 10-generation",
        **verdicts,
        "session": f"{TURNS} turns, {FILES} captured files, {artifacts} logical artifacts",
        "rewind": f"before turn {FIRST_CAPTURE}: {TURNS - FIRST_CAPTURE + 1} prompts discarded, {FILES} files restored",
        "samples": SAMPLES,
        "load_average_1m": f"{load_at_start:.2f} at start, {os.getloadavg()[0]:.2f} at end ({os.cpu_count()} cores)",
        "fsync skipped rows": "the same operations with os.fsync and the syncfs barrier stubbed out: the cost that is not the disk's",
    }
    report("store_lifecycle", rows, notes)


if __name__ == "__main__":
    asyncio.run(main())
