"""Errors of remote targets: the target could not be reached, or a program's
outcome is unknown. Messages name the host as the user wrote it, never the
backing root."""

from __future__ import annotations

from .errors import TargetError


class TargetUnavailable(TargetError):
    """The target could not run a program, or did not report its outcome.

    ``outcome_unknown`` is true when the request may have reached the target
    (the program may have run in whole or in part): the caller must
    re-observe the state it depends on. It is false when the request provably
    never ran."""

    def __init__(self, host: str, reason: str, *, outcome_unknown: bool = False) -> None:
        super().__init__("", reason)
        self.args = (f"ssh target {host}: {reason}",)
        self.host = host
        self.outcome_unknown = outcome_unknown


class HostKeyRefused(TargetUnavailable):
    """The host key is unknown, changed, or checking was turned off: the
    connection is refused rather than trusting the host."""


class WorkspaceLocationError(ValueError):
    """A workspace location that cannot be used as written; the message
    names the authored text and the reason."""

    def __init__(self, authored: str, reason: str) -> None:
        super().__init__(f"'{authored}': {reason}")
        self.authored = authored
        self.reason = reason


class SshLocationError(WorkspaceLocationError):
    """An SSH workspace location that cannot be used as written."""
