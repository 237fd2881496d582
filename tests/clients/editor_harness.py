"""What the editor-client tests share: the workspace they build, the server
command, and a runner that shows the editor's own output when it fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from deadlines import ticks
from mevedel_server.store import ClientIdentity, LeaseStanding, observe_lease
from mevedel_server.store.transactions.recovery import find_recovery
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.targets import FaultInjectingTarget, LocalTarget, SimulatedCrash

REPOSITORY = Path(__file__).resolve().parents[2]
CLIENTS = REPOSITORY / "clients"

#: The document the editors open; its addresses are what the tests point at.
DOCUMENT_LINES = [
    "See work://shared/notes.md for the notes.",
    "Plans live in work://shared/plans/ now.",
    "",
]

#: A line longer than one Read page width, so clients must continue it.
LONG_LINE = "".join(f"{i:05d} " for i in range(900))


@dataclass(frozen=True)
class Workspace:
    root: Path
    document: Path

    @property
    def notes(self) -> Path:
        return self.root / ".mevedel" / "shared" / "notes.md"


#: The host the other client's lease records name (the picker shows it).
OTHER_HOST = "old-laptop"
#: A directory under .mevedel/sessions/ that is no session (an Inspect row).
NOT_A_SESSION = "junk dir"


@dataclass(frozen=True)
class ForeignSessions:
    """Sessions another client left in the workspace."""

    #: Its holder stopped without releasing; the lease has expired (Take over).
    expired: str
    #: Another such session, for a second takeover.
    also_expired: str
    #: Its holder still has a live lease (Join).
    held: str

    def environment(self) -> dict[str, str]:
        return {
            "MEVEDEL_TEST_EXPIRED_SESSION": self.expired,
            "MEVEDEL_TEST_ALSO_EXPIRED_SESSION": self.also_expired,
            "MEVEDEL_TEST_HELD_SESSION": self.held,
            "MEVEDEL_TEST_OTHER_HOST": OTHER_HOST,
            "MEVEDEL_TEST_NOT_A_SESSION": NOT_A_SESSION,
        }


async def _left_behind(root: Path, client: str, name: str, prompt: str, lease_seconds: int) -> str:
    other = SessionService(LocalTarget(root), ClientIdentity(client, OTHER_HOST), lease_seconds=lease_seconds)
    sid = (await other.sessions.create(name)).session_id
    await other.turns.begin_turn(sid, prompt)
    await other.turns.append(sid, EvidenceInput("response", text=f"answer to {prompt}"))
    await other.turns.settle(sid)
    # Stops without releasing: the lease stays until it expires.
    await other.sessions.detach()
    return sid


async def _foreign_sessions(root: Path) -> ForeignSessions:
    expired = await _left_behind(root, "stopped-client", "Left behind", "expired prompt", lease_seconds=1)
    also_expired = await _left_behind(root, "stopped-too", "Also left", "also expired prompt", lease_seconds=1)
    held = await _left_behind(root, "live-client", "Held elsewhere", "held prompt", lease_seconds=3600)
    for sid in (expired, also_expired):
        for _ in ticks():
            if (await observe_lease(LocalTarget(root), sid)).standing is LeaseStanding.EXPIRED:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the other client's lease never expired")
    (root / ".mevedel" / "sessions" / NOT_A_SESSION).mkdir()
    return ForeignSessions(expired=expired, also_expired=also_expired, held=held)


def foreign_sessions(root: Path) -> ForeignSessions:
    """Leave in ROOT what another client would: a session whose lease expired,
    one whose lease is live, and a directory that is no session."""
    return asyncio.run(_foreign_sessions(root))


@dataclass(frozen=True)
class RecoverySessions:
    """Sessions whose Rewind crashed after its recovery journal was written:
    each has a real `.recovery/` marker and a released lease."""

    #: The one the client retries, and the file its Rewind was restoring.
    retry: str
    retry_file: str
    #: The one the client abandons.
    abandon: str
    abandon_file: str
    #: One whose file the user edited after the crash: a retry leaves that
    #: file as it is and names it.
    edited: str
    edited_file: str

    def environment(self) -> dict[str, str]:
        return {
            "MEVEDEL_TEST_RECOVERY_RETRY": self.retry,
            "MEVEDEL_TEST_RECOVERY_RETRY_FILE": self.retry_file,
            "MEVEDEL_TEST_RECOVERY_ABANDON": self.abandon,
            "MEVEDEL_TEST_RECOVERY_ABANDON_FILE": self.abandon_file,
            "MEVEDEL_TEST_RECOVERY_EDITED": self.edited,
            "MEVEDEL_TEST_RECOVERY_EDITED_FILE": self.edited_file,
        }


_CRASHED = ClientIdentity("crashed-client", "crash-host")


async def _crashed_rewind(root: Path, name: str, tracked: str, crash_at: int | None) -> tuple[str, int]:
    """Two turns that edit TRACKED, then a Rewind to before turn 1 whose
    process dies at write CRASH_AT of its commit (None: no crash). Returns
    the session and how many writes the commit made."""
    (root / tracked).write_text("before the session\n")
    target = FaultInjectingTarget(LocalTarget(root))
    service = SessionService(target, _CRASHED, lease_seconds=3600)
    sid = (await service.sessions.create(name)).session_id
    for n in (1, 2):
        await service.turns.begin_turn(sid, f"{name} step {n}")
        await service.turns.capture_file(sid, tracked)
        (root / tracked).write_text(f"{name} v{n}\n")
        await service.turns.append(sid, EvidenceInput("response", text=f"{name} answer {n}"))
        await service.turns.settle(sid)
    impact = await service.history.prepare_rewind(sid, "before", 1)
    target.arm(crash_at, "crash")
    try:
        await service.history.commit_rewind(sid, impact.token)
    except SimulatedCrash:
        pass
    await service.sessions.detach()
    return sid, target.writes


async def _first_crash_leaving_recovery(scratch: Path) -> int:
    """The first write index of the commit at which a crash leaves a marker
    (found on a throwaway workspace: the commit's writes are the same)."""
    point = 1
    while True:
        root = scratch / f"probe-{point}"
        root.mkdir(parents=True)
        sid, writes = await _crashed_rewind(root, "Probe", "probe.txt", point)
        if (await find_recovery(LocalTarget(root), sid)).pending:
            return point
        if writes < point:
            raise AssertionError("no crash point of a Rewind commit leaves a recovery marker")
        point += 1


async def _recovery_sessions(root: Path, scratch: Path) -> RecoverySessions:
    point = await _first_crash_leaving_recovery(scratch)
    made = {}
    for role in ("retry", "abandon", "edited"):
        tracked = f"recovery-{role}.txt"
        sid, _ = await _crashed_rewind(root, f"Crashed {role}", tracked, point)
        if role == "edited":
            (root / tracked).write_text("edited by hand after the crash\n")
        # The restarted client releases its lease; the marker stays.
        service = SessionService(LocalTarget(root), _CRASHED)
        opened = await service.sessions.open(sid)
        assert opened.info.recovery_pending, f"{sid} has no recovery marker"
        await service.sessions.close(sid)
        made[role] = (sid, tracked)
    return RecoverySessions(*made["retry"], *made["abandon"], *made["edited"])


def recovery_sessions(root: Path, scratch: Path) -> RecoverySessions:
    """Leave in ROOT three sessions blocked by a real interrupted Rewind: one
    to retry, one to abandon, and one whose file was edited by hand since."""
    return asyncio.run(_recovery_sessions(root, scratch))


def git_repository(root: Path) -> None:
    """Make ROOT a Git work tree with one commit (Worktree Fork branches from
    HEAD), with the real git."""
    git = ["git", "-c", "user.name=mevedel tests", "-c", "user.email=tests@localhost", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text(".mevedel/\n.worktrees/\n")
    (root / "lifecycle.txt").write_text("committed\n")
    subprocess.run([*git, "add", ".gitignore", "lifecycle.txt"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "initial"], cwd=root, check=True)


def server_command() -> list[str]:
    """The installed console script of the Python running the tests, else the
    module form of the same installation."""
    script = Path(sys.executable).parent / "mevedel-lsp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mevedel_server"]


def make_workspace(base: Path) -> Workspace:
    root = base / "project"
    shared = root / ".mevedel" / "shared"
    (shared / "plans").mkdir(parents=True)
    (shared / "notes.md").write_text("# Shared notes\n\nalpha beta\n")
    (shared / "plans" / "first.md").write_text("first plan\n")
    (shared / "plans" / "second.md").write_text("second plan\n")
    (shared / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 2501)) + LONG_LINE + "\nlast\n")
    document = root / "doc.txt"
    document.write_text("\n".join(DOCUMENT_LINES) + "\n")
    return Workspace(root=root.resolve(), document=document.resolve())


def editor(name: str) -> str:
    """The editor binary, or skip the test saying which one is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/setup --test installs it)")
    return found


def run_editor(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 240) -> str:
    """Run an editor headless; on failure the assertion message carries its
    whole output, which is where the failing check says what it saw."""
    completed = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = f"$ {' '.join(argv)}\n--- stdout ---\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    assert completed.returncode == 0, f"editor exited with {completed.returncode}\n{output}"
    return output


def cli_command() -> list[str]:
    """The `mevedel` CLI of the Python running the tests: another client of
    the same workspace (its own identity), which the editors' tests use as
    the other side of a control transfer."""
    return [sys.executable, "-m", "mevedel_server.cli"]


def editor_environment(workspace: Workspace) -> dict[str, str]:
    return {
        "MEVEDEL_CLI_COMMAND": json.dumps(cli_command()),
        "MEVEDEL_TEST_WORKSPACE": str(workspace.root),
        "MEVEDEL_TEST_DOCUMENT": str(workspace.document),
        "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
        "MEVEDEL_TEST_LONG_LINE": LONG_LINE,
    }


def server_processes(root: Path) -> list[int]:
    """The mevedel-lsp processes working in ROOT (the editor's of this test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            here = os.readlink(entry / "cwd") == str(root)
        except OSError:
            continue
        if here and any(part.endswith((b"mevedel-lsp", b"mevedel_server")) for part in command):
            found.append(int(entry.name))
    return found


