"""SshTarget.run_command on a real OpenSSH server: arguments reach the
program exactly as given (no remote shell interpretation), the command runs
in a directory below the pinned root, and a missing program, a failing one
and a directory outside the root are told apart."""

from __future__ import annotations

import asyncio

import pytest

from mevedel_server.targets import InvalidTargetPath, TargetOperationError
from mevedel_server.targets.remote_errors import TargetUnavailable
from mevedel_server.targets.ssh import SshTarget


@pytest.fixture
async def ssh_target(openssh_server, tmp_path):
    target = await SshTarget.connect(openssh_server.url(tmp_path), **openssh_server.options())
    yield target
    await target.close()


async def test_arguments_pass_unchanged(ssh_target):
    words = ["two words", "it's", '"double"', "$HOME", "*", "a;b && c", "back\\slash", "", "tab\there", "new\nline", "ünï"]
    done = await ssh_target.run_command(["printf", "<%s>", *words])
    assert done.exit_status == 0 and done.stderr == b""
    assert done.stdout.decode() == "".join(f"<{word}>" for word in words)


async def test_the_command_runs_in_a_directory_below_the_root(ssh_target, tmp_path):
    (tmp_path / "sub dir" / "inner").mkdir(parents=True)
    (tmp_path / "sub dir" / "inner" / "here.txt").write_text("x")
    done = await ssh_target.run_command(["ls"], "sub dir/inner")
    assert (done.exit_status, done.stdout) == (0, b"here.txt\n")
    at_root = await ssh_target.run_command(["pwd"])
    assert at_root.stdout.decode().strip() == ssh_target.root


async def test_exit_status_and_standard_error_are_reported(ssh_target):
    failed = await ssh_target.run_command(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (failed.exit_status, failed.stdout, failed.stderr) == (3, b"out\n", b"err\n")
    missing = await ssh_target.run_command(["mevedel-no-such-command", "x"])
    assert missing.exit_status == 127


@pytest.mark.parametrize("cwd", ["..", "sub/../..", "/etc", "a//b"])
async def test_a_directory_outside_the_root_is_refused(ssh_target, tmp_path, cwd):
    marker = tmp_path.parent / f"{tmp_path.name}-ran"
    with pytest.raises(InvalidTargetPath):
        await ssh_target.run_command(["touch", str(marker)], cwd)
    assert not marker.exists()


async def test_a_symlink_out_of_the_root_or_a_missing_directory_runs_nothing(ssh_target, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "escape").symlink_to(outside)
    marker = outside / "ran"
    for cwd in ("escape", "no-such-dir"):
        with pytest.raises(TargetOperationError) as info:
            await ssh_target.run_command(["touch", "ran"], cwd)
        assert info.value.path == cwd and str(tmp_path) not in str(info.value)
    assert not marker.exists()
    # A link that stays inside the root resolves to a different directory
    # than its spelling names, so it is refused too.
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with pytest.raises(TargetOperationError):
        await ssh_target.run_command(["true"], "alias")
    assert (await ssh_target.run_command(["true"], "real")).exit_status == 0


async def test_a_command_past_its_timeout_is_unavailable_and_stopped(ssh_target, tmp_path):
    with pytest.raises(TargetUnavailable, match="did not finish within") as info:
        await ssh_target.run_command(["sh", "-c", "sleep 3; touch late"], timeout=0.5)
    assert info.value.outcome_unknown
    await asyncio.sleep(3.5)
    assert not (tmp_path / "late").exists()
