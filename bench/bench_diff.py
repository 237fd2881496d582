"""A turn's diff from its checkpoints vs ``git diff`` of the same change.

Builds a git repository of 200 text files (40 lines each), commits them,
then records one turn through ``SessionService`` that changes every file
(a few lines each) and settles it, as an agent's turn is recorded. Times,
interleaved in the same run:

- ``git diff`` of the working tree against the index (a process start, a
  stat of every file, a read of the changed ones and the line diff);
- ``SessionService.turns.diff`` of that turn by a fresh reader (its committed
  snapshot read through the target, the file history included, and the
  line diff of every file), the way ``mevedel diff`` and the LSP answer;
- the same diff of a session already open (the common case in an editor).

Over loopback SSH (``--ssh``, a throwaway sshd) it also counts the programs
(remote processes, one round trip each) a fresh reader's diff costs.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import CountingTarget, report, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mevedel_server.store import ClientIdentity  # noqa: E402
from mevedel_server.store.service import SessionService  # noqa: E402
from mevedel_server.targets import LocalTarget  # noqa: E402

FILES = 200
ROUNDS = 15


def build(root: Path) -> None:
    for n in range(FILES):
        (root / f"src{n // 20}").mkdir(exist_ok=True)
        (root / f"src{n // 20}" / f"f{n}.py").write_text("".join(f"line {i} of file {n}\n" for i in range(40)))
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)


async def record_turn(root: Path) -> str:
    writer = SessionService(LocalTarget(root), ClientIdentity("writer", "bench"))
    sid = (await writer.sessions.create()).session_id
    await writer.turns.begin_turn(sid, "change every file")
    for n in range(FILES):
        path = f"src{n // 20}/f{n}.py"
        await writer.turns.capture_file(sid, path)
        lines = (root / path).read_text().splitlines(keepends=True)
        lines[5] = "changed\n"
        lines[30:32] = ["new a\n", "new b\n", "new c\n"]
        (root / path).write_text("".join(lines))
    await writer.turns.settle(sid)
    await writer.sessions.close(sid)
    return sid


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ssh", action="store_true", help="also count programs over a throwaway loopback sshd")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "ws"
        root.mkdir()
        build(root)
        sid = await record_turn(root)
        open_reader = SessionService(LocalTarget(root), ClientIdentity("reader", "bench"))
        await open_reader.sessions.open(sid, "resume")
        git, fresh, opened = [], [], []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            out = subprocess.run(["git", "-C", str(root), "diff", "--no-color"], check=True, capture_output=True).stdout
            git.append(time.perf_counter() - start)
            start = time.perf_counter()
            diff = await SessionService(LocalTarget(root), ClientIdentity("fresh", "bench")).turns.diff(sid)
            fresh.append(time.perf_counter() - start)
            start = time.perf_counter()
            await open_reader.turns.diff(sid)
            opened.append(time.perf_counter() - start)
        assert len(diff.files) == FILES and out.count(b"diff --git") == FILES
        rows = [
            {"what": f"git diff, {FILES} files changed (baseline)", **summarize(git)},
            {"what": "SessionService.diff, fresh reader (committed snapshot read)", **summarize(fresh)},
            {"what": "SessionService.diff, session open", **summarize(opened)},
        ]
        base = rows[0]["median_ms"]
        notes = {
            "files": FILES,
            "ratio_fresh": round(rows[1]["median_ms"] / base, 2),
            "ratio_open": round(rows[2]["median_ms"] / base, 2),
            "target": "a 200-file turn's diff within 2x of git diff; over SSH at most 2 round trips",
        }
        await open_reader.sessions.close(sid)
        if args.ssh:
            from mevedel_server.targets.ssh import SshTarget
            from ssh_fixtures import throwaway_sshd

            with tempfile.TemporaryDirectory() as keys, throwaway_sshd(Path(keys)) as server:
                target = await SshTarget.connect(server.url(root), **server.options())
                try:
                    counted = CountingTarget(target)
                    await SessionService(counted, ClientIdentity("ssh-reader", "bench")).turns.diff(sid)
                    notes["ssh_programs_fresh_reader"] = counted.programs
                finally:
                    await target.close()
        report("diff", rows, notes)


if __name__ == "__main__":
    asyncio.run(main())
