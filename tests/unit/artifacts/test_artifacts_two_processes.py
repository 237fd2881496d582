"""Two server processes -- real OS processes, each with its own
``ArtifactStore`` on its own ``LocalTarget`` over one workspace, or (the
one-writer and publication tests, as two machines would) each on its own
``SshTarget`` through a loopback sshd -- editing one document.

Each process runs ``DRIVER`` (``python -c``): a short script of store calls
given as JSON, reporting every call's outcome as a JSON line with the lease
generation it wrote and wall-clock times. The test reads both reports and
the records on disk:

- one writer at every instant: while one process holds a live lease, every
  write of the other is refused (``item-held``) and writes nothing; every
  successful write's generation is unique and strictly increasing per
  process, and a change of writer follows a release or an expiry;
- a late write from a holder whose expired lease was taken over is fenced
  (``item-lease-lost``) and writes nothing;
- hand-over happens once the holder is asked and its item has had no edit
  for the idle time, not while it is being edited (fast: 1 s; and once at
  the real 10 s);
- takeover of an expired lease by the next edit;
- two publishers in two processes never lose a version.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mevedel_server.artifacts.layout import ItemPaths
from mevedel_server.artifacts.records import (
    ItemLeaseRecord,
    ItemLeaseState,
    decode_record,
)
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.artifacts.versions import parse_version_file
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.targets import LocalTarget

ROOT = Path(__file__).resolve().parents[3]
ITEM = "shared01"

DRIVER = r'''
import asyncio, json, sys, time
from mevedel_server.artifacts.errors import ArtifactError
from mevedel_server.artifacts.store import ArtifactStore
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.targets import LocalTarget

config = json.loads(sys.argv[1])
ITEM = config["item"]


def emit(**event):
    event.setdefault("t", time.time())
    print(json.dumps(event), flush=True)


async def main():
    options = {k: config[k] for k in ("lease_seconds", "renew_every", "handover_idle_seconds", "max_versions") if k in config}
    if config.get("ssh"):
        from mevedel_server.targets.ssh import SshTarget

        target = await SshTarget.connect(config["ssh"]["url"], **config["ssh"]["options"])
    else:
        target = LocalTarget(config["root"])
    store = ArtifactStore(target, ClientIdentity(config["client"], config["client"] + "-host"), **options)
    store.leases.on_change.append(lambda item, reason: emit(op="lease", reason=reason))
    loop = asyncio.get_running_loop()

    async def write(data):
        t0 = time.time()
        try:
            await store.write(ITEM, data.encode())
        except ArtifactError as exc:
            emit(op="write", ok=False, kind=exc.kind, data=data, t0=t0, t1=time.time())
            return False
        held = store.leases._held.get(ITEM)
        record = json.loads(held.raw) if held else None
        emit(op="write", ok=True, data=data, gen=held.generation if held else None, record=record, t0=t0, t1=time.time())
        return True

    for step in config["steps"]:
        name, *args = step
        if name == "write":
            await write(args[0])
        elif name == "loop_write":  # write as fast as possible for a while
            seconds, pause = args
            deadline = time.time() + seconds
            n = 0
            while time.time() < deadline:
                await write(f"{config['client']} #{n}")
                n += 1
                await asyncio.sleep(pause)
        elif name == "write_until_ok":
            timeout, pause = args
            deadline = time.time() + timeout
            while time.time() < deadline and not await write(f"{config['client']} after waiting"):
                await asyncio.sleep(pause)
        elif name == "plan":  # observe now, write later with what was seen
            stale = await store.leases.observe(ITEM)
            observe = store.leases.observe

            async def once(item_id):
                store.leases.observe = observe
                return stale

            store.leases.observe = once
            emit(op="planned", gen=stale.generation)
        elif name == "wait":  # until the test says go (renewals stopped: a suspended laptop)
            task = store.leases._renewal
            if task is not None:
                task.cancel()
            emit(op="waiting")
            await loop.run_in_executor(None, sys.stdin.readline)
        elif name == "stay":  # alive and renewing, until the test says go
            await loop.run_in_executor(None, sys.stdin.readline)
        elif name == "request_handover":
            summary = await store.request_handover(ITEM)
            emit(op="asked", holder=summary.holder_host)
        elif name == "sleep":
            await asyncio.sleep(args[0])
        elif name == "publish":
            # ARGS[0] versions, then on until the two processes' numbers
            # overlap, as the index shows them (a save is quick enough for
            # one process to finish any fixed count before the other, slower
            # to start on a loaded machine, begins); bounded by a deadline,
            # past which the test's overlap check fails.
            mine = []
            deadline = time.time() + 120
            while True:
                entry = await store.save_version(ITEM)
                mine.append(entry.number)
                emit(op="published", number=entry.number)
                if len(mine) < args[0]:
                    continue
                others = {v.number for v in await store.versions(ITEM)} - set(mine) - {1}
                if (others and min(others) < max(mine) and min(mine) < max(others)) or time.time() > deadline:
                    break
        elif name == "close":
            await store.close()
            emit(op="closed")
    if config.get("ssh"):
        await target.close()
    emit(op="done")


asyncio.run(main())
'''


def start(root: Path, client: str, steps: list, ssh=None, **options) -> subprocess.Popen:
    """``ssh``: the throwaway sshd to reach the workspace through (each
    process its own ``SshTarget``, as two machines would), else ``LocalTarget``."""
    config = {"root": str(root), "client": client, "item": ITEM, "steps": steps, **options}
    if ssh is not None:
        config["ssh"] = {"url": ssh.url(root), "options": ssh.options()}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "server"), str(ROOT / "protocol")]))
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(config)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True,
    )


def next_event(process: subprocess.Popen, op: str) -> dict:
    """Read the process's report up to the event ``op`` (the events before it
    are kept on the process)."""
    events = process.__dict__.setdefault("events", [])
    for line in process.stdout:
        event = json.loads(line)
        events.append(event)
        if event["op"] == op:
            return event
    raise AssertionError(f"the driver ended before {op!r}: {process.stderr.read()}")


def finish(process: subprocess.Popen, timeout: float = 120) -> list[dict]:
    out, err = process.communicate(timeout=timeout)
    events = process.__dict__.setdefault("events", [])
    events += [json.loads(line) for line in out.splitlines() if line.strip()]
    assert process.returncode == 0 and events and events[-1]["op"] == "done", err
    return events


def created(root: Path) -> None:
    """The shared document, made here as a third process would (and left,
    its renewals stopped): what is under test is the two processes after
    it, so it costs no process start or SSH connection of its own."""

    async def create() -> None:
        store = ArtifactStore(LocalTarget(root), ClientIdentity("creator", "creator-host"))
        await store.create("document", "Shared", b"start", item_id=ITEM)
        if store.leases._renewal is not None:
            store.leases._renewal.cancel()

    asyncio.run(create())


@pytest.fixture(params=["local", "ssh"])
def transport(request):
    """None: each process on a ``LocalTarget``; else the sshd both reach the
    workspace through."""
    if request.param == "local":
        return None
    return request.getfixturevalue("openssh_server")


def writes(events: list[dict], ok: bool | None = None) -> list[dict]:
    return [e for e in events if e["op"] == "write" and (ok is None or e["ok"] is ok)]


def primary(root: Path) -> bytes:
    return (root / ItemPaths(ITEM).file("document.md")).read_bytes()


def lease_head(root: Path) -> ItemLeaseRecord:
    names = sorted(os.listdir(root / ItemPaths(ITEM).lease_dir))
    head = [n for n in names if n.startswith("generation-")][-1]
    record = decode_record(ItemLeaseRecord, (root / ItemPaths(ITEM).lease_dir / head).read_bytes(), head)
    assert head == f"generation-{record.generation:020d}.json"
    return record


def check_one_writer(*reports: tuple[str, list[dict]]) -> list[dict]:
    """Every successful write's generation is unique and strictly increasing
    per process; when the writer changes, the previous writer's lease had
    ended (it handed the item over or closed, or its lease expired) before
    the new writer's write. Returns the successful writes by generation."""
    done = []
    for client, events in reports:
        gens = [e["gen"] for e in writes(events, True)]
        assert gens == sorted(gens) and len(set(gens)) == len(gens), f"{client}: {gens}"
        for e in writes(events, True):
            assert e["record"]["client_id"] == client and e["record"]["state"] == "active"
            done.append({**e, "client": client, "events": events})
    done.sort(key=lambda e: e["gen"])
    assert len({e["gen"] for e in done}) == len(done), "two writes wrote one generation"
    for before, after in zip(done, done[1:]):
        if before["client"] == after["client"]:
            continue
        ended = [
            e["t"] for e in before["events"]
            if e["op"] in ("lease", "closed") and before["t1"] <= e["t"] <= after["t1"]
        ]
        last_expiry = max(e["record"]["expires_at"] for e in done if e["client"] == before["client"] and e["gen"] < after["gen"])
        assert ended or after["t0"] >= last_expiry - 1, (
            f"{after['client']} wrote generation {after['gen']} while {before['client']}'s lease "
            f"(generation {before['gen']}, expiring at {last_expiry}) was live"
        )
    return done


def test_two_processes_writing_at_once_have_one_writer(tmp_path, transport):
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    options = {"lease_seconds": 30}
    # Neither releases at the end (a release would free the item for the
    # other's last attempts): the winner's lease is still live when both end.
    # Both loaded (and connected), then told to go together: no fixed wait
    # that a slow start on a busy machine could outlast.
    one = start(root, "one", [["wait"], ["loop_write", 3.0, 0.0]], transport, **options)
    two = start(root, "two", [["wait"], ["loop_write", 3.0, 0.0]], transport, **options)
    for process in (one, two):
        next_event(process, "waiting")
    for process in (one, two):
        process.stdin.write("go\n")
        process.stdin.flush()
    reports = [("one", finish(one)), ("two", finish(two))]
    done = check_one_writer(*reports)
    # Both raced for the free item; exactly one won it and kept it: the
    # other's every attempt was refused as held, with nothing written.
    winners = {client for client, events in reports if writes(events, True)}
    assert len(winners) == 1, winners
    (winner,) = winners
    loser, lost = next((c, e) for c, e in reports if c != winner)
    assert len(writes(lost)) >= 3 and {e["kind"] for e in writes(lost)} == {"item-held"}
    assert len(done) >= 3
    gens = [e["gen"] for e in done]
    assert gens == list(range(gens[0], gens[0] + len(gens)))  # one generation per write, none foreign between
    assert primary(root) == done[-1]["data"].encode()
    head = lease_head(root)
    assert head.client_id == winner and head.state is ItemLeaseState.ACTIVE and head.generation == gens[-1]


def test_a_late_write_after_a_takeover_is_fenced_and_writes_nothing(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    options = {"lease_seconds": 3, "renew_every": 3600}
    # Two is started (and has loaded) before one takes the lease: its too
    # early write falls well inside one's 3 s, however long a process takes
    # to start on a loaded machine.
    # Two stays alive after its takeover: a holder proven dead would leave
    # the item to one's next write at once.
    two = start(root, "two", [["wait"], ["write", "two too early"], ["wait"], ["write", "two took over"], ["stay"]], **options)
    next_event(two, "waiting")
    # One writes, plans its next write, then is suspended (stops renewing).
    one = start(root, "one", [["write", "one wrote"], ["plan"], ["wait"], ["write", "one late"], ["write", "one again"]], **options)
    planned = next_event(one, "planned")
    next_event(one, "waiting")
    two.stdin.write("go\n")
    two.stdin.flush()
    held = next_event(two, "write")
    assert (held["ok"], held.get("kind")) == (False, "item-held")
    assert primary(root) == b"one wrote"
    next_event(two, "waiting")
    time.sleep(3.5)  # one's lease expires
    two.stdin.write("go\n")
    two.stdin.flush()
    takeover = next_event(two, "write")
    assert takeover["ok"] and takeover["gen"] == planned["gen"] + 1
    one.stdin.write("go\n")
    one.stdin.flush()
    events = finish(one)
    two.stdin.write("go\n")
    two.stdin.flush()
    took = finish(two)
    assert writes(took, ok=True) == [takeover]
    late, again = writes(events)[1:]
    assert not late["ok"] and late["kind"] == "item-lease-lost"
    assert [e["reason"] for e in events if e["op"] == "lease"] == ["fenced"]
    assert not again["ok"] and again["kind"] == "item-held"  # read-only here now
    assert primary(root) == b"two took over"
    head = lease_head(root)
    assert head.generation == takeover["gen"] and head.client_id == "two"
    check_one_writer(("one", events), ("two", took))


@pytest.mark.parametrize("idle", [1.0, 10.0], ids=["idle-1s", "idle-10s-real"])
def test_the_holder_hands_over_only_once_idle(tmp_path, idle):
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    options = {"lease_seconds": 3, "renew_every": 0.3, "handover_idle_seconds": idle}
    editing = idle + 5.0  # one keeps editing, then stops; it stays alive, renewing
    one = start(root, "one", [["loop_write", editing, idle / 4], ["stay"], ["close"]], **options)
    first = next_event(one, "write")
    assert first["ok"]
    two = start(
        root, "two",
        [["request_handover"], ["write_until_ok", editing + idle + 4.0, 0.2], ["close"]],
        **options,
    )
    two_events = finish(two)
    # One stayed alive until two got the item: the hand-over came from its
    # idleness, not from its end. It ends now, not after a fixed sleep.
    one.stdin.write("go\n")
    one.stdin.flush()
    one_events = finish(one)
    asked = next(e for e in two_events if e["op"] == "asked")
    assert asked["holder"] == "one-host"
    (handed,) = [e for e in one_events if e["op"] == "lease"]
    assert handed["reason"] == "handed-over"
    one_writes = writes(one_events)
    assert all(e["ok"] for e in one_writes) and len(one_writes) >= 6
    last_edit = one_writes[-1]["t1"]
    # Asked while editing: kept until the item had no edit for the idle time
    # (it renewed every 0.3 s meanwhile), then handed over within a renewal.
    assert asked["t"] < last_edit - idle
    assert handed["t"] >= one_writes[-1]["t0"] + idle
    got = writes(two_events, True)
    assert len(got) == 1 and got[0]["t1"] >= handed["t"]
    refused = writes(two_events, False)
    assert refused and {e["kind"] for e in refused} == {"item-held"}
    assert primary(root) == b"two after waiting"
    check_one_writer(("one", one_events), ("two", two_events))
    assert lease_head(root).client_id == "two"


def test_two_publishing_processes_lose_no_version(tmp_path, transport):
    root = tmp_path / "ws"
    root.mkdir()
    created(root)
    count = 15
    options = {"max_versions": 1000}
    # Both loaded, then told to go together: a start time on the clock let a
    # process that took longer to load on a busy machine begin after the other ended.
    processes = [start(root, name, [["wait"], ["publish", count]], transport, **options) for name in ("one", "two")]
    for process in processes:
        next_event(process, "waiting")
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    numbers = [[e["number"] for e in finish(p) if e["op"] == "published"] for p in processes]
    for mine in numbers:
        assert len(mine) >= count and mine == sorted(mine)
    every = numbers[0] + numbers[1]
    total = len(every)
    assert len(set(every)) == total  # every publish got its own number
    blobs = sorted(os.listdir(root / ItemPaths(ITEM).versions_dir))
    assert blobs == [f"{n:010d}.version" for n in range(1, total + 2)]
    newest = (root / ItemPaths(ITEM).version_file(total + 1)).read_bytes()
    index, _ = parse_version_file(newest, total + 1)
    assert [v.number for v in index.versions] == list(range(1, total + 2))  # the created one, then all of them
    assert index.next_number == total + 2
    # They really interleaved (else this proves nothing about concurrency).
    assert min(numbers[1]) < max(numbers[0]) and min(numbers[0]) < max(numbers[1])
