"""A retained agent's name and path, and the limits a delegation checks
first (pure: no I/O).

A retained agent is named by its caller with one path segment
(``[a-z0-9][a-z0-9_-]*``, at most 64 characters); its path is its
caller's path and that segment (``helper``, ``helper/search``), which is
what ``agent://root/PATH`` and ``history://root/PATH`` address.
"""

from __future__ import annotations

import re

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")

#: ``subagentMaxDepth`` unless set: a root agent's sub-agent is depth 1.
DEFAULT_MAX_DEPTH = 2
#: ``subagentMaxConcurrent`` unless set: sub-agent turns running at once in
#: one session.
DEFAULT_MAX_CONCURRENT = 4
DEPTH_BOUNDS = (1, 8)
CONCURRENT_BOUNDS = (1, 32)


class DelegationRefused(Exception):
    """An ``Agent`` call refused before anything ran; ``message`` names the
    argument or the limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise DelegationRefused(f"Agent: the argument 'name' must be a string, not {type(name).__name__}")
    if not NAME.match(name):
        raise DelegationRefused(
            f"Agent: name {name!r} is not a retained agent's name: one to 64 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit (e.g. 'reviewer')"
        )
    return name


def child_path(caller_path: str | None, name: str) -> str:
    """The path of ``name`` started by the agent at ``caller_path`` (None:
    the session's root agent)."""
    return name if not caller_path else f"{caller_path}/{name}"


def depth(path: str) -> int:
    return path.count("/") + 1


class SubAgentFailed(Exception):
    """A sub-agent's turn that did not complete; ``message`` is what its
    caller reads (the outcome named, and the partial answer)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
