"""The one failure type of the MCP client."""

from __future__ import annotations

from typing import Literal

#: ``not-configured``: no server of that name; ``needs-approval``: a
#: workspace server the user has not approved (or refused now);
#: ``missing``: the server says the resource does not exist; ``failed``: the
#: server could not be started, died, timed out or answered an error.
Kind = Literal["not-configured", "needs-approval", "missing", "failed"]


class McpClientError(Exception):
    def __init__(self, kind: Kind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
