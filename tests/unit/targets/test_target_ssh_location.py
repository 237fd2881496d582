"""Workspace locations as a person writes them (directory, file: URI,
ssh:// address), their canonical ssh:// form, the ``remoteWorkspaces``
setting's checks, and a deferred SSH target that connects at its first
program."""

from __future__ import annotations

from pathlib import Path

import pytest

from mevedel_protocol import Settings
from mevedel_server.lsp.configuration import merge_settings
from mevedel_server.targets import (
    LocalTarget,
    PathAbsentError,
    SshLocation,
    TargetError,
    TargetUnavailable,
    WorkspaceLocationError,
    parse_ssh_location,
)
from mevedel_server.targets.location import parse_workspace_location, workspace_target


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ssh://alice@box:2222/srv/project", SshLocation("box", "/srv/project", "alice", 2222)),
        ("ssh://box/~/project", SshLocation("box", "~/project")),
        ("file:///srv/project", Path("/srv/project")),
        ("/srv/project", Path("/srv/project")),
        ("relative/dir", Path("relative/dir")),
    ],
)
def test_workspace_locations(text, expected):
    assert parse_workspace_location(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "names no workspace"),
        ("ssh:/box/x", "ssh://[user@]host[:port]/path"),
        ("ssh://box", "names no directory"),
        ("ssh://box:99999/x", "not a valid ssh:// address"),
        ("ssh://u:secret@box/x", "passwords do not belong"),
        ("ftp://box/x", "unknown scheme 'ftp:'"),
        ("file://elsewhere/x", "a file: URI names a directory of this machine"),
    ],
)
def test_malformed_locations_name_the_text_and_the_reason(text, reason):
    with pytest.raises(WorkspaceLocationError) as caught:
        parse_workspace_location(text)
    assert reason in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    "location",
    [
        SshLocation("box", "/a dir/with%percent", "bob", 22),
        SshLocation("::1", "~/x"),
        SshLocation("box", "/bytes/\udcff"),
    ],
)
def test_the_canonical_address_reads_back_as_the_same_location(location):
    assert location.uri.startswith("ssh://")
    assert parse_ssh_location(location.uri) == location


def test_remote_workspaces_setting_is_checked_entry_by_entry():
    merged, problems = merge_settings(Settings(), {"remoteWorkspaces": ["ssh://box/srv/p"]})
    assert merged.remote_workspaces == ["ssh://box/srv/p"] and problems == []
    kept, problems = merge_settings(merged, {"remoteWorkspaces": ["ssh://box/srv/p", "box:/srv/q"]})
    assert kept.remote_workspaces == ["ssh://box/srv/p"]
    [problem] = problems
    assert "remoteWorkspaces" in problem.message and "[1]" in problem.message and "'box:/srv/q'" in problem.message


async def test_a_deferred_target_connects_at_its_first_program(openssh_server, tmp_path):
    local = workspace_target(tmp_path)
    assert isinstance(local, LocalTarget)
    remote = workspace_target(parse_ssh_location(openssh_server.url(tmp_path)), **openssh_server.options())
    try:
        assert remote.connections == 0  # configuring reaches nothing
        await remote.create_exclusive("made-remotely", b"bytes")
        assert (tmp_path / "made-remotely").read_bytes() == b"bytes" and remote.connections == 1
    finally:
        await remote.close()


async def test_a_deferred_target_that_cannot_connect_fails_each_program_and_retries(openssh_server, tmp_path):
    missing = tmp_path / "not-yet"
    target = workspace_target(parse_ssh_location(openssh_server.url(missing)), **openssh_server.options())
    try:
        with pytest.raises(PathAbsentError):
            await target.list_dir(".")
        missing.mkdir()
        assert await target.list_dir(".") == []  # the next program pins the root afresh
    finally:
        await target.close()


async def test_an_unusable_ssh_setting_is_unavailable_not_a_crash(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host broken\n  Port notanumber\n")
    target = workspace_target(parse_ssh_location("ssh://broken/x"), config=[str(config)])
    with pytest.raises(TargetUnavailable) as caught:
        await target.list_dir(".")
    assert "broken" in str(caught.value)


async def test_a_missing_or_wrong_workspace_directory_names_the_address_and_the_host(openssh_server, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for where, why in ((tmp_path / "not-there", "does not exist"), (a_file, "is not a directory")):
        url = openssh_server.url(where)
        target = workspace_target(parse_ssh_location(url), **openssh_server.options())
        try:
            with pytest.raises(TargetError) as caught:
                await target.list_dir(".")
        finally:
            await target.close()
        assert str(caught.value) == f"{url}: the workspace directory on {target.host} {why}"


async def test_a_deferred_target_pins_its_root_with_its_first_program(openssh_server, tmp_path):
    """The first program carries the root check: one remote process, one
    round trip, where a command over SSH used to pay one more for the pin."""
    (tmp_path / "there").write_bytes(b"x")
    target = workspace_target(parse_ssh_location(openssh_server.url(tmp_path)), **openssh_server.options())
    try:
        assert await target.read("there") == b"x"
        assert target.round_trips == 1
        assert await target.read("there") == b"x"
        assert target.round_trips == 2
    finally:
        await target.close()
