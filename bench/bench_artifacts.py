"""The workspace artifact store: listing 500 items by title (target: under
200 ms) and version publication at 1 and at 20 retained versions (target:
the cost independent of the count, ratio 20/1 near 1).

Builds 500 items through the real store (``ArtifactStore.create``: a
document, whiteboard or artifact, each with its created version; every
fifth item's lease held by another process, so listing reads those lease
heads and the target clock too), then, interleaved:

- ``ArtifactStore.list()`` through ``LocalTarget`` vs the baseline
  ``os.listdir`` of ``.mevedel/artifacts/.state`` and a plain ``open`` +
  ``json.loads`` of ``meta.json`` and of the index line of the newest
  version file per item (a listing of ``versions/`` to find it), sorted by
  title -- the I/O the listing needs with none of its validation,
  descriptor pinning or lease reading;
- ``save_version`` of an 8 KiB document whose index holds 1 version
  (``max_versions=1``) and one whose index holds 20 (``max_versions=20``):
  both write one version file (the index and the bytes) and drop the
  oldest (its
  removal a program the save does not wait for, finished before the next
  measurement), so only
  the index's length differs (a later save of a store: the first read the
  item, the others prove it unchanged in the publication); vs a plain durable write of the same bytes
  (temporary file, fsync, rename, directory fsync) in the same run; and
  the 1-version save of a third item through an inline ``LocalTarget`` (a
  CLI command's: its program on the loop's thread, no hop to a worker);
  and the same durable write handed to the kept program threads a
  ``LocalTarget`` runs its programs on (``program_threads``): the floor
  of a server's save, which must not flush on its event loop, so pays
  that hop -- a thread woken, then the loop -- as every disk write of a
  server does.

``MEVEDEL_BENCH_SOURCE=DIR`` runs another checkout's code (``DIR/server``
first on the path; saved as ``artifacts_source``): the code before a change,
measured the same way, run in alternation with this one's.

The durable writes and the saves run in an order turned by one each
round: a save begins on a thread that waited since the last program
(after the listing or the durable write: a wake from idle, as a person's
saves seconds apart always are) or on one just used (after the other
save's removal), and a fixed order charged one save the first and the
other the second every round.

``--local-pace S`` waits S seconds before each measured local operation
(default 0: each right after the other).

With ``--ssh`` (default when sshd is installed) the same listing and
publications run again through ``SshTarget`` over a throwaway loopback sshd,
vs a one-operation program on the same connection, operations ``--pace``
(0.1 s) apart as in ``bench_ssh_round_trips.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if os.environ.get("MEVEDEL_BENCH_SOURCE"):  # before anything imports ours
    sys.path[:0] = [str(Path(os.environ["MEVEDEL_BENCH_SOURCE"]) / part) for part in ("server", "protocol")]

from harness import CountingTarget, report, summarize  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mevedel_server.artifacts.layout import STATE_ROOT  # noqa: E402
from mevedel_server.artifacts.store import ArtifactStore  # noqa: E402
from mevedel_server.store.authority.lease import ClientIdentity  # noqa: E402
from mevedel_server.targets import ControlProgram, LocalTarget, Stat  # noqa: E402

try:  # the code before kept threads (MEVEDEL_BENCH_SOURCE) handed programs to to_thread
    from mevedel_server.targets.program_threads import PROGRAM_THREADS  # noqa: E402

    def on_program_thread(function, argument):
        return PROGRAM_THREADS.run(function, argument)
except ImportError:  # pragma: no cover
    def on_program_thread(function, argument):
        return asyncio.to_thread(function, argument)

ITEMS = int(os.environ.get("MEVEDEL_BENCH_ITEMS", "500"))
ME = ClientIdentity("bench-client", "bench-host")
OTHER = ClientIdentity("other-client", "other-host")
#: The item saved through an inline target (a CLI command's).
INLINE_ITEM = "pub-inline"
DOC = (b"# A document\n\n" + b"Some words of the document, one line of it.\n" * 200)[: 8 * 1024]


async def build(root: str) -> tuple[str, str]:
    """500 items; returns the ids of the two publication items."""
    target = LocalTarget(root)
    store = ArtifactStore(target, ME, renew_every=3600)
    other = ArtifactStore(target, OTHER, renew_every=3600)
    for n in range(ITEMS):
        kind = ("document", "whiteboard", "artifact")[n % 3]
        title = f"Item {(n * 7919) % ITEMS:04d} of the bench"
        if kind == "artifact":
            item = await store.create(kind, title, b"<p>%d</p>" % n, file_name="page.html")
        else:
            item = await store.create(kind, title, DOC if kind == "document" else None)
        if n % 5 == 0 and kind != "artifact":
            await other.write(item.item_id, (await other.read(item.item_id)).data)
    for s in (store, other):
        task = s.leases._renewal
        if task is not None:
            task.cancel()
    one = await store.create("document", "Publication at 1", DOC, item_id="pub-one")
    await store.create("document", "Publication at 1, inline", DOC, item_id=INLINE_ITEM)
    twenty = await store.create("document", "Publication at 20", DOC, item_id="pub-twenty")
    keeper = ArtifactStore(target, ME, max_versions=20)
    for _ in range(19):
        await keeper.save_version(twenty.item_id)
    assert len(await keeper.versions(twenty.item_id)) == 20
    return one.item_id, twenty.item_id


def baseline_listing(root: str) -> int:
    state = os.path.join(root, STATE_ROOT)
    rows = []
    for name in os.listdir(state):
        if name.startswith("."):
            continue
        with open(os.path.join(state, name, "meta.json"), "rb") as f:
            meta = json.loads(f.read())
        # The newest version file's index line (the plain reader's way to
        # the count: no check of the bytes after it).
        count = 0
        directory = os.path.join(state, name, "versions")
        members = sorted(n for n in os.listdir(directory) if n.endswith(".version")) if os.path.isdir(directory) else []
        if members:
            with open(os.path.join(directory, members[-1]), "rb") as f:
                head = f.read(64 * 1024)
            count = len(json.loads(head.split(b"\n", 2)[1])["versions"])
        rows.append((meta["title"].casefold(), meta["id"], count))
    rows.sort()
    return len(rows)


def durable_write(root: str, data: bytes) -> None:
    directory = os.path.join(root, "baseline-writes")
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".blob.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, "blob"))
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)




def write_doc(root: str) -> None:
    durable_write(root, DOC)


async def removals_done(store) -> None:
    """The store's removals of dropped blobs, finished (a store from
    before they were left to run after the save has none)."""
    done = getattr(store, "removals_done", None)
    if done is not None:
        await done()


async def round_trips(target, call) -> int:
    counting = CountingTarget(target)
    await call(counting)
    return counting.programs


async def one_op(target) -> None:
    await target.run(ControlProgram([Stat(STATE_ROOT)]))


async def measure(
    target, root: str, ids: tuple[str, str], rounds: int, label: str, local: bool, pace: float = 0.0
) -> tuple[list[dict], dict]:
    lister = ArtifactStore(target, ME)
    at_one = ArtifactStore(target, ME, max_versions=1)
    at_twenty = ArtifactStore(target, ME, max_versions=20)
    listed = await lister.list()  # warm-up, and check the result
    expected = ITEMS + 3
    if len(listed) != expected or [i.meta.title.casefold() for i in listed] != sorted(i.meta.title.casefold() for i in listed):
        sys.exit(f"{label}: expected {expected} items by title, got {len(listed)}")
    held = sum(1 for i in listed if i.holder_host)
    if held != len([n for n in range(ITEMS) if n % 5 == 0 and n % 3 != 2]):
        sys.exit(f"{label}: expected the other process's leases to show, got {held}")
    await at_one.save_version(ids[0])
    await at_twenty.save_version(ids[1])
    samples: dict[str, list[float]] = {k: [] for k in ("list", "base_list", "pub1", "pub20", "pub1i", "base_write", "base_thread")}
    savers = {"pub1": (at_one, ids[0]), "pub20": (at_twenty, ids[1])}
    writes, turn = ["base_write", "pub1", "pub20"], 0
    if local:  # a CLI command's target: its programs on the loop's thread
        at_one_inline = ArtifactStore(LocalTarget(root, inline=True), ME, max_versions=1)
        await at_one_inline.save_version(INLINE_ITEM)
        savers["pub1i"] = (at_one_inline, INLINE_ITEM)
        writes += ["pub1i", "base_thread"]
    for _ in range(rounds):  # interleaved, so drift affects every side alike
        await asyncio.sleep(pace)
        start = time.perf_counter()
        if local:
            baseline_listing(root)
        else:
            await one_op(target)
        samples["base_list"].append(time.perf_counter() - start)
        await asyncio.sleep(pace)
        start = time.perf_counter()
        await lister.list()
        samples["list"].append(time.perf_counter() - start)
        # The three writes in an order turned by one each round (see the
        # module's docstring): whichever follows another's removal program
        # finds its thread awake.
        for key in writes[turn:] + writes[:turn]:
            await asyncio.sleep(pace)
            if key == "base_write":
                start = time.perf_counter()
                if local:
                    durable_write(root, DOC)
                else:
                    await one_op(target)
                samples[key].append(time.perf_counter() - start)
                continue
            if key == "base_thread":
                start = time.perf_counter()
                await on_program_thread(write_doc, root)
                samples[key].append(time.perf_counter() - start)
                continue
            store, item_id = savers[key]
            start = time.perf_counter()
            await store.save_version(item_id)
            samples[key].append(time.perf_counter() - start)
            # The dropped blob's removal, which the save does not wait
            # for, finishes before the next measurement begins.
            await removals_done(store)
        turn = (turn + 1) % len(writes)
    assert len(await at_one.versions(ids[0])) == 1 and len(await at_twenty.versions(ids[1])) == 20
    list_programs = await round_trips(target, lambda t: ArtifactStore(t, ME).list())
    first_publish_programs = await round_trips(target, lambda t: ArtifactStore(t, ME, max_versions=20).save_version(ids[1]))
    # An editor's later saves: the store has read the item before.
    counting = CountingTarget(target)
    saver = ArtifactStore(counting, ME, max_versions=20)
    await saver.save_version(ids[1])
    await removals_done(saver)
    counting.programs = 0
    await saver.save_version(ids[1])
    publish_programs = counting.programs  # the save's own, which it waits for
    await removals_done(saver)
    removal_programs = counting.programs - publish_programs
    s = {k: summarize(v) for k, v in samples.items() if v}
    # Each round's publications against that round's durable write: the
    # disk's flush cost swings several-fold within a run at load, and a
    # paired ratio follows it where a ratio of medians mixes rounds.
    paired = {
        key: sorted(p / b for p, b in zip(samples[key], samples["base_write"]) if b > 0) for key in ("pub1", "pub20", "pub1i")
    }
    # A server's saves against the floor a server has: the write on a
    # program thread, woken as the save's is.
    on_thread = {
        key: sorted(p / b for p, b in zip(samples[key], samples["base_thread"]) if b > 0) for key in ("pub1", "pub20")
    }

    def quartiles(values: list[float]) -> list[float]:
        return [round(values[int(q * (len(values) - 1))], 2) for q in (0.25, 0.5, 0.75)] if values else []
    floor = "one-operation program on the same connection" if not local else None
    rows = [
        {"what": f"{label}: " + (floor or f"os.listdir + json reads of meta.json, the newest version file's index ({expected} items; baseline)"), **s["base_list"]},
        {"what": f"{label}: ArtifactStore.list(), {expected} items", **s["list"]},
        {"what": f"{label}: " + (floor or "plain durable write of 8 KiB (tmp, fsync, rename, dir fsync; baseline)"), **s["base_write"]},
        {"what": f"{label}: save_version, index of 1 retained", **s["pub1"]},
        {"what": f"{label}: save_version, index of 20 retained", **s["pub20"]},
    ]
    if samples["pub1i"]:
        rows.append({"what": f"{label}: save_version, index of 1 retained, inline target (a CLI command's)", **s["pub1i"]})
    if samples["base_thread"]:
        rows.append({"what": f"{label}: the durable write on a program thread (a server's floor; baseline)", **s["base_thread"]})
    notes = {
        f"{label}_items": expected,
        f"{label}_list_median_ms": s["list"]["median_ms"],
        f"{label}_list_ratio_to_baseline": round(s["list"]["median_ms"] / s["base_list"]["median_ms"], 2),
        f"{label}_list_target_under_200ms_met": s["list"]["median_ms"] < 200.0,
        f"{label}_publish_1_median_ms": s["pub1"]["median_ms"],
        f"{label}_publish_20_median_ms": s["pub20"]["median_ms"],
        f"{label}_publish_ratio_20_to_1": round(s["pub20"]["median_ms"] / s["pub1"]["median_ms"], 2),
        f"{label}_publish_1_ratio_to_baseline": round(s["pub1"]["median_ms"] / s["base_write"]["median_ms"], 2),
        f"{label}_publish_20_ratio_to_baseline": round(s["pub20"]["median_ms"] / s["base_write"]["median_ms"], 2),
        f"{label}_publish_1_paired_ratio_quartiles": quartiles(paired["pub1"]),
        f"{label}_publish_20_paired_ratio_quartiles": quartiles(paired["pub20"]),
        **({f"{label}_publish_1_inline_paired_ratio_quartiles": quartiles(paired["pub1i"])} if samples["pub1i"] else {}),
        **({f"{label}_thread_write_paired_ratio_quartiles": quartiles(sorted(
            t / b for t, b in zip(samples["base_thread"], samples["base_write"]) if b > 0)),
            f"{label}_publish_1_vs_thread_write_paired_quartiles": quartiles(on_thread["pub1"]),
            f"{label}_publish_20_vs_thread_write_paired_quartiles": quartiles(on_thread["pub20"])}
           if samples["base_thread"] else {}),
        f"{label}_programs_per_listing": list_programs,
        f"{label}_programs_per_save_version": publish_programs,
        f"{label}_programs_per_save_version_not_waited_for": removal_programs,
        f"{label}_programs_per_first_save_version": first_publish_programs,
    }
    return rows, notes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-ssh", action="store_true", help="measure the local target only")
    parser.add_argument(
        "--pace", type=float, default=0.1,
        help="seconds between measured SSH operations, so warm target processes are ready as between edits (default 0.1)",
    )
    parser.add_argument(
        "--local-pace", type=float, default=0.0,
        help="seconds between measured local operations (default 0: each right after the other, so each begins "
        "as the one before left the disk and the threads; a pace as between edits lets each begin on a quiet "
        "disk, its threads idle)",
    )
    args = parser.parse_args()
    rows: list[dict] = []
    notes: dict = {"load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()), "local_pace_s": args.local_pace}
    with tempfile.TemporaryDirectory(prefix="mevedel-bench-artifacts-") as scratch:
        root = os.path.join(scratch, "workspace")
        os.mkdir(root)
        started = time.perf_counter()
        ids = await build(root)
        print(f"built {ITEMS} items in {time.perf_counter() - started:.1f} s")
        local_rows, local_notes = await measure(LocalTarget(root), root, ids, args.rounds, "local", True, args.local_pace)
        rows += local_rows
        notes.update(local_notes)
        missing = None
        if not args.no_ssh:
            from mevedel_server.targets.ssh import SshTarget
            from ssh_fixtures import sshd_missing, throwaway_sshd

            missing = sshd_missing()
            if missing is None:
                os.mkdir(os.path.join(scratch, "sshd"))
                with throwaway_sshd(Path(scratch) / "sshd") as server:
                    async with await SshTarget.connect(server.url(root), **server.options()) as target:
                        ssh_rows, ssh_notes = await measure(target, root, ids, args.rounds, "ssh", False, args.pace)
                rows += ssh_rows
                notes.update(ssh_notes)
                notes["ssh_pace_s"] = args.pace
        if args.no_ssh or missing:
            notes["ssh"] = "not measured" + (f" ({missing})" if missing else "")
    notes["target"] = "list 500 items by title in under 200 ms; publication cost independent of retained count (20/1 near 1)"
    notes["load_average_1_5_15"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if os.environ.get("MEVEDEL_BENCH_SOURCE"):
        notes["source"] = os.environ["MEVEDEL_BENCH_SOURCE"]
    report("artifacts_source" if os.environ.get("MEVEDEL_BENCH_SOURCE") else "artifacts", rows, notes)


if __name__ == "__main__":
    asyncio.run(main())
