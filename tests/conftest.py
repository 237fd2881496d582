"""Shared fixtures: only the SSH servers of the SSH target tests (see
``ssh_fixtures``); everything else lives beside its tests."""

from ssh_fixtures import fault_server, openssh_server  # noqa: F401
