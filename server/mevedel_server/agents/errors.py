"""How the agent engine fails: one exception with a stable kind, the input
it is about, the reason, and what the user can do about it."""

from __future__ import annotations

#: Kinds (documented in docs/protocol.md, "Errors").
NOT_CONFIGURED = "agent-not-configured"
NOT_INSTALLED = "agent-not-installed"
NEEDS_LOGIN = "agent-needs-login"
FAILED = "agent-failed"
ATTACHMENT_REFUSED = "attachment-refused"
#: The agent does not offer, or refused, a mode or config option chosen.
OPTION_REFUSED = "agent-option-refused"
#: The user aborted the prompt (``mevedel/turn/abort``) before its turn began.
PROMPT_ABORTED = "prompt-aborted"


class AgentError(Exception):
    """A prompt that could not be served, or a turn the agent failed.

    ``authored`` names what the user wrote or configured (an agent name,
    an attachment); ``reason`` says what went wrong; ``action`` says what to
    do next. None of them names a backing path or holds a traceback."""

    def __init__(self, kind: str, authored: str, reason: str, action: str | None = None) -> None:
        super().__init__(f"{authored}: {reason}")
        self.kind = kind
        self.authored = authored
        self.reason = reason
        self.action = action

    @property
    def message(self) -> str:
        return f"{self.authored}: {self.reason}" + (f" ({self.action})" if self.action else "")
