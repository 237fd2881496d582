"""Sessions with real turns and real project files for the lifecycle
transaction tests (Rewind, Redo, Fork, Save As): built through the content
model and the real Publisher, with the project files on disk."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mevedel_server.store import (
    ClientIdentity,
    Publisher,
    acquire_lease,
    materialize_session,
    read_committed,
)
from mevedel_server.store.authority.lease import LeaseHandle
from mevedel_server.store.authority.workspace import (
    allocate_session_id,
    ensure_workspace_id,
)
from mevedel_server.store.content.transcript import Outcome, Response
from mevedel_server.store.content.turns import Conversation
from mevedel_server.targets import LocalTarget, Target

ME = ClientIdentity("txn-client", "workstation")
AT = 1_800_000_000

DELETE = object()


@dataclass
class Session:
    """One open session: its conversation, lease and publisher."""

    root: Path
    target: Target
    session_id: str
    conversation: Conversation
    lease: LeaseHandle
    publisher: Publisher
    at: int = AT

    async def turn(
        self,
        prompt: str,
        edits: dict | None = None,
        *,
        gaps: dict[str, str] | None = None,
        outcome: Outcome = Outcome.COMPLETED,
        answer: str | None = None,
    ) -> int:
        """One settled turn: capture each edited file, change it on disk
        (``DELETE`` removes it), answer, settle and publish."""
        self.at += 1
        c = self.conversation
        turn_id = c.begin_turn(prompt, at=self.at)
        edits = edits or {}
        for path in edits:
            c.capture_file(path, read(self.root, path))
        for path, reason in (gaps or {}).items():
            c.capture_gap(path, reason)
        for path, content in edits.items():
            write(self.root, path, None if content is DELETE else content)
        c.append(Response(turn_id=turn_id, text=answer or f"answer to {prompt}"))
        c.settle(outcome, at=self.at, current={p: read(self.root, p) for p in edits})
        await self.save()
        return c.sidecar.total_turn_count

    async def save(self) -> None:
        candidate = self.conversation.artifacts_for_save()
        await self.publisher.publish(candidate.changed)
        self.conversation.mark_committed(candidate)

    def adopt(self, conversation: Conversation) -> None:
        self.conversation = conversation


def read(root: Path, path: str) -> bytes | None:
    try:
        return (root / path).read_bytes()
    except FileNotFoundError:
        return None


def write(root: Path, path: str, content: bytes | None) -> None:
    full = root / path
    if content is None:
        full.unlink(missing_ok=True)
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(content)


def snapshot_files(root: Path, paths) -> dict[str, bytes | None]:
    return {p: read(root, p) for p in paths}


async def open_session(
    root: Path,
    *,
    target: Target | None = None,
    name: str | None = None,
    settings: dict | None = None,
    attached_artifacts: tuple[str, ...] = (),
) -> Session:
    root.mkdir(parents=True, exist_ok=True)
    target = target or LocalTarget(root)
    workspace_id = await ensure_workspace_id(target)
    session_id = await allocate_session_id(target)
    conversation = Conversation.new(
        session_id=session_id,
        workspace_id=workspace_id,
        at=AT,
        display_name=name,
        settings=settings,
        attached_artifacts=attached_artifacts,
    )
    await materialize_session(target, session_id)
    lease = await acquire_lease(target, session_id, ME, duration_seconds=3600)
    return Session(root, target, session_id, conversation, lease, Publisher(lease))


async def reopen(session: Session, target: Target) -> Session:
    """The same client again (after a crash) on ``target``: reclaims its own
    lease and restores the committed conversation."""
    lease = await acquire_lease(target, session.session_id, ME, duration_seconds=3600)
    snapshot = await read_committed(target, session.session_id)
    conversation = Conversation.restore(await snapshot.read_all())
    return Session(session.root, target, session.session_id, conversation, lease, Publisher(lease), session.at + 10)


async def committed_view(root: Path, session_id: str) -> tuple[int, list[str]] | None:
    """(settled turns, prompt previews) a fresh reader sees, or None."""
    snapshot = await read_committed(LocalTarget(root), session_id)
    if snapshot.manifest is None:
        return None
    conversation = Conversation.restore(await snapshot.read_all())
    return conversation.sidecar.total_turn_count, [e.preview for e in conversation.prompt_index()]


async def read_committed_head(root: Path, session_id: str) -> str | None:
    return (await read_committed(LocalTarget(root), session_id)).head


def git(root: Path, *args: str) -> str:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_SYSTEM="/dev/null",
    )
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def init_repo(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".mevedel/\n.worktrees/\n")
