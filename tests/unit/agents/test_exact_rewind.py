"""Exact Rewind: random sequences of changes inside one turn -- through the
agent's ``fs/write_text_file``, the tool server's ApplyPatch seam and shell
commands alike -- and afterwards ``rewind --before`` gives back the tree as
it was (every path's kind, permission bits, bytes, link target, empty
directories included), Redo the tree as the turn left it. On a local
workspace and on an SSH one (a real sshd on loopback).

The writers are driven as the agent engine drives them: the fs write is
``WorkspaceFiles.write_text`` and the record of what it replaced, ApplyPatch
is ``AgentEngine.record_before_writes`` before the write, and a shell
command is the engine's record of changes before and after it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from mevedel_server.agents.config import AgentConfig
from mevedel_server.agents.engine import AgentEngine
from mevedel_server.store.authority.lease import ClientIdentity
from mevedel_server.store.service import SessionService
from mevedel_server.targets import LocalTarget

ME = ClientIdentity("client-me", "workstation")
#: Small, so that "large" files are cheap: a file the turn creates over it
#: is still removed by Rewind; only previous content over it is a gap.
LIMIT = 64 * 1024

FILES = ["a.txt", "run.sh", "secret.txt", "d/x.txt", "d/e/y.bin", "new/deep/z.txt", "olddir/f.txt", "empty/g.txt"]
DIRS = ["d", "d/e", "new", "new/deep", "olddir", "empty", "fresh"]
LINKS = ["link", "d/l2"]
PATHS = st.sampled_from(FILES + DIRS + LINKS)
FILE_MODES = st.sampled_from([0o600, 0o644, 0o755, 0o700, 0o640, 0o4755])
DIR_MODES = st.sampled_from([0o700, 0o755, 0o750, 0o1777])
DATA = st.one_of(st.binary(max_size=40), st.text(max_size=20).map(lambda t: t.encode()))

OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["fs", "patch", "shell"]), st.sampled_from(FILES), DATA),
    st.tuples(st.just("truncate"), st.sampled_from(["fs", "patch", "shell"]), st.sampled_from(FILES), st.none()),
    st.tuples(st.just("delete"), st.sampled_from(["patch", "shell"]), st.sampled_from(FILES + LINKS), st.none()),
    st.tuples(st.just("rename"), st.just("shell"), PATHS, PATHS),
    st.tuples(st.just("chmod"), st.just("shell"), PATHS, FILE_MODES),
    st.tuples(st.just("chmod-dir"), st.just("shell"), st.sampled_from(DIRS), DIR_MODES),
    st.tuples(st.just("mkdir"), st.just("shell"), st.sampled_from(DIRS), st.none()),
    st.tuples(st.just("rmdir"), st.just("shell"), st.sampled_from(DIRS), st.none()),
    st.tuples(st.just("rmtree"), st.just("shell"), st.sampled_from(DIRS), st.none()),
    st.tuples(st.just("symlink"), st.just("shell"), st.sampled_from(LINKS + FILES), st.sampled_from(["a.txt", "../outside", "d", "nowhere"])),
    st.tuples(st.just("large"), st.sampled_from(["shell", "patch"]), st.sampled_from(FILES), st.integers(LIMIT + 1, 3 * LIMIT)),
    st.tuples(st.just("binary"), st.just("shell"), st.sampled_from(FILES), st.binary(min_size=1, max_size=300)),
)


def initial_tree(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "secret.txt").write_text("s3cret\n")
    os.chmod(root / "secret.txt", 0o600)
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "x.txt").write_bytes(b"\x00\x01binary\xff")
    os.chmod(root / "d" / "e", 0o750)
    (root / "olddir").mkdir()
    (root / "olddir" / "f.txt").write_text("old\n")
    (root / "empty").mkdir()
    os.chmod(root / "empty", 0o711)
    os.symlink("a.txt", root / "link")


def tree_digest(root: Path) -> dict[str, tuple]:
    """Every path below ``root`` but mevedel's own state: kind, permission
    bits, bytes or link target; directories (empty ones too) by their mode."""
    found: dict[str, tuple] = {}
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            dirs[:] = [d for d in dirs if d != ".mevedel"]
        for name in dirs + files:
            full = os.path.join(directory, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st_ = os.lstat(full)
            mode = stat.S_IMODE(st_.st_mode)
            if stat.S_ISLNK(st_.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st_.st_mode):
                found[rel] = ("dir", oct(mode))
            else:
                found[rel] = ("file", oct(mode), Path(full).read_bytes())
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
    return found


def _quietly(action) -> None:
    try:
        action()
    except OSError:
        pass  # the command failed (a missing path, a directory in the way): nothing changed


def _shell(root: Path, kind: str, path: str, arg) -> None:
    """What a shell command does (run where the workspace is: on loopback,
    this machine)."""
    full = root / path
    if kind in ("write", "truncate", "binary", "large"):
        data = b"" if kind == "truncate" else os.urandom(arg) if kind == "large" else arg
        _quietly(lambda: full.write_bytes(data))
    elif kind == "delete":
        _quietly(lambda: os.unlink(full))
    elif kind == "rename":
        _quietly(lambda: os.rename(full, root / arg))
    elif kind in ("chmod", "chmod-dir"):
        if os.path.exists(full) and not os.path.islink(full):
            _quietly(lambda: os.chmod(full, arg))
    elif kind == "mkdir":
        _quietly(lambda: os.makedirs(full, exist_ok=True))
    elif kind == "rmdir":
        _quietly(lambda: os.rmdir(full))
    elif kind == "rmtree":
        if full.is_dir() and not full.is_symlink():
            shutil.rmtree(full)
    elif kind == "symlink":
        _quietly(lambda: os.symlink(arg, full))


def _patch_refuses(root: Path, path: str) -> bool:
    """Whether ApplyPatch refuses to write ``path``: a directory or a link
    there, or a file or a link in place of any directory above it (a
    rename can leave a file where ``new`` was, below which ``new/deep``
    cannot be made)."""
    full = root / path
    if full.is_dir() or full.is_symlink():
        return True
    for parent in Path(path).parents:
        above = root / parent
        if above != root and (above.is_symlink() or (above.exists() and not above.is_dir())):
            return True
    return False


async def run_turn(target, root: Path, ops: list) -> None:
    svc = SessionService(target, ME, max_snapshot_bytes=LIMIT)
    sid = (await svc.sessions.create()).session_id
    engine = AgentEngine(svc, root=str(root), config=lambda: AgentConfig(), front=None, log_dir=root.parent / "logs")  # type: ignore[arg-type]
    try:
        await svc.turns.begin_turn(sid, "change things")
        await engine.file_state.refresh()
        before = tree_digest(root)
        for kind, writer, path, arg in ops:
            full = str(root / path)
            if writer == "fs":
                text = (arg or b"").decode("utf-8", "replace")
                need = not svc.turns.captured(sid, path)
                try:
                    outcome = await engine.files.write_text(full, text, read_before=need)
                except Exception:  # refused (a directory or a link in the way): nothing written
                    continue
                for directory in outcome.made:
                    engine.record_pre_state(sid, directory, None)
                if outcome.read_before:
                    engine.record_pre_state(sid, outcome.relative, outcome.before)
            elif writer == "patch":
                if _patch_refuses(root, path):
                    continue
                if kind == "delete" and not os.path.isfile(full):
                    continue
                await engine.record_before_writes(sid, [full])
                if kind == "delete":
                    os.unlink(full)
                else:
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                    data = b"" if kind == "truncate" else os.urandom(arg) if kind == "large" else arg
                    Path(full).write_bytes(data)
            else:
                await engine.capture_changes(sid)  # before the command
                _shell(root, kind, path, arg)
                await engine.capture_changes(sid)  # after it
        await svc.turns.settle(sid)
        after = tree_digest(root)

        impact = await svc.history.prepare_rewind(sid, "before", 1)
        assert not impact.gaps, impact.gaps
        await svc.history.commit_rewind(sid, impact.token.text)
        assert tree_digest(root) == before

        states = await svc.history.redo_states(sid)
        head = next(s for s in states.states if s.turn_count == 1)
        redo = await svc.history.prepare_redo(sid, head.publication_id)
        # The only thing Redo may not give back: a file the turn left over
        # the snapshot limit (its bytes were never kept), shown as a gap.
        unknown = {gap.path for gap in redo.gaps}
        assert all(after[path][0] == "file" and len(after[path][2]) > LIMIT for path in unknown), redo.gaps
        await svc.history.commit_redo(sid, redo.token.text)
        assert {p: v for p, v in tree_digest(root).items() if p not in unknown} == {p: v for p, v in after.items() if p not in unknown}
    finally:
        engine.file_state.close()
        await svc.sessions.close_all()


@settings(max_examples=25)
@given(ops=st.lists(OPS, min_size=1, max_size=10))
# A file removed and a directory renamed to its name: Redo reads the moved
# files below what Rewind made a file again (they are absent, not unreadable).
@example(ops=[("delete", "patch", "a.txt", None), ("write", "fs", "run.sh", b""), ("rename", "shell", "d", "a.txt")])
# A file renamed to a directory's name and a patch writing below that
# directory: ApplyPatch refuses (a file is in the way), so nothing changed.
@example(ops=[("rename", "shell", "a.txt", "new"), ("write", "patch", "new/deep/z.txt", b"")])
def test_rewind_and_redo_give_back_the_exact_tree_locally(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("exact") / "ws"
    initial_tree(root)
    asyncio.run(run_turn(LocalTarget(root), root, ops))


@pytest.fixture(scope="module")
def sshd(request):
    return request.getfixturevalue("openssh_server")


# No shrinking over SSH: each step is a whole turn, Rewind and Redo over a
# new connection (seconds on a loaded machine), so shrinking a real failure
# ran into the test's time limit and buried it under a "flaky" report. The
# local variant runs the same turn and shrinks; a failure here is reported
# as found.
@settings(max_examples=8, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(ops=st.lists(OPS, min_size=1, max_size=8))
def test_rewind_and_redo_give_back_the_exact_tree_over_ssh(tmp_path_factory, sshd, ops):
    from mevedel_server.targets.ssh import SshTarget

    root = tmp_path_factory.mktemp("exact-ssh") / "ws"
    initial_tree(root)

    async def run() -> None:
        target = await SshTarget.connect(sshd.url(root), **sshd.options())
        try:
            await run_turn(target, root, ops)
        finally:
            await target.close()

    asyncio.run(run())


async def test_editor_files_and_checkpoint_exclude_are_neither_recorded_restored_nor_gaps(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("v1\n")
    (root / "keep.log").write_text("kept\n")
    svc = SessionService(LocalTarget(root), ME, max_snapshot_bytes=LIMIT)
    sid = (await svc.sessions.create()).session_id
    config = AgentConfig(checkpoint_exclude=("*.log", "!keep.log", "scratch/"))
    engine = AgentEngine(svc, root=str(root), config=lambda: config, front=None, log_dir=tmp_path / "logs")  # type: ignore[arg-type]
    try:
        await svc.turns.begin_turn(sid, "edit notes")
        await engine.file_state.refresh()
        await engine.capture_changes(sid)
        # What an editor open on notes.md makes while the turn runs, and
        # what the setting excludes, next to the agent's own change.
        os.symlink("user@host.1234:1700000000", root / ".#notes.md")
        (root / "notes.md~").write_text("backup\n")
        (root / "#notes.md#").write_text("autosave\n")
        (root / ".notes.md.swp").write_bytes(b"\x00swap")
        (root / "4913").write_text("")
        (root / "debug.log").write_text("log\n")
        (root / "keep.log").write_text("changed\n")
        (root / "scratch").mkdir()
        (root / "scratch" / "tmp.txt").write_text("t\n")
        (root / "notes.md").write_text("v2\n")
        await engine.capture_changes(sid)
        await svc.turns.settle(sid)
        impact = await svc.history.prepare_rewind(sid, "before", 1)
        assert not impact.gaps
        assert {r.path: r.action for r in impact.restores} == {"notes.md": "restore", "keep.log": "restore"}
        await svc.history.commit_rewind(sid, impact.token.text)
        assert (root / "notes.md").read_text() == "v1\n" and (root / "keep.log").read_text() == "kept\n"
        assert os.path.islink(root / ".#notes.md") and (root / "notes.md~").exists() and (root / "debug.log").exists()
        assert (root / "scratch" / "tmp.txt").exists()
    finally:
        engine.file_state.close()
        await svc.sessions.close_all()


def test_checkpoint_exclude_is_read_from_the_cli_config_and_a_bad_one_is_refused():
    from mevedel_server.agents.config import config_from_settings
    from mevedel_server.agents.errors import AgentError

    assert config_from_settings({"checkpointExclude": ["*.log"]}, where="config.json").checkpoint_exclude == ("*.log",)
    with pytest.raises(AgentError, match="checkpointExclude"):
        config_from_settings({"checkpointExclude": "*.log"}, where="config.json")


async def test_a_checkpoint_written_before_modes_restores_with_the_mode_the_file_has_or_the_default(tmp_path):
    """Old checkpoints hold bare contents (no mode, no directories): Rewind
    still restores them, a file with the mode it has now, a file it creates
    with 0644 less the umask -- never owner-only."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "tool.sh").write_text("v1\n")
    os.chmod(root / "tool.sh", 0o755)
    (root / "gone.txt").write_text("g\n")
    svc = SessionService(LocalTarget(root), ME)
    sid = (await svc.sessions.create()).session_id
    try:
        await svc.turns.begin_turn(sid, "old style")
        # What the code before modes recorded: the bytes only.
        svc.turns.record_pre_state(sid, "tool.sh", (root / "tool.sh").read_bytes())
        svc.turns.record_pre_state(sid, "gone.txt", (root / "gone.txt").read_bytes())
        (root / "tool.sh").write_text("v2\n")
        (root / "gone.txt").unlink()
        await svc.turns.settle(sid)
        from mevedel_server.store.content.sidecar import Present, encode_index_line

        assert b"mode" not in encode_index_line(Present(sha256="0" * 64, size=1))  # the old on-disk form
        impact = await svc.history.prepare_rewind(sid, "before", 1)
        await svc.history.commit_rewind(sid, impact.token.text)
        umask = os.umask(0o022)
        os.umask(umask)
        assert (root / "tool.sh").read_text() == "v1\n" and os.stat(root / "tool.sh").st_mode & 0o7777 == 0o755
        assert (root / "gone.txt").read_text() == "g\n" and os.stat(root / "gone.txt").st_mode & 0o7777 == 0o644 & ~umask
    finally:
        await svc.sessions.close_all()
