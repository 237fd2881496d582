"""Oversized tool output, saved as ``artifact://`` (the spec's "Persisted
output": oversized tool notices emit followable artifact:// addresses,
never session-storage paths).

A Glob or Grep answer longer than :data:`MAX_OUTPUT_CHARS` is written in
full to the bound session's ``tool-results/`` through the workspace's
target (the same pinned, link-refusing descriptor chain every resolver
write uses) and answered with its head and the address to page through it
with Read. It is saved only in a session this client holds open and
writable -- a session it merely joined, or an unknown id, gets nothing
created -- and without one the answer is cut with a notice instead.

Read answers never need this: a Read is already paged, so a page too long
to show is shortened to whole lines and ends with the exact next-page call.
"""

from __future__ import annotations

import datetime
import secrets

from ..resources import TOOL_RESULTS, Places, ResolverContext, save_artifact

#: The most characters one tool answer carries (about 16,000 tokens).
MAX_OUTPUT_CHARS = 64_000
#: How much of a persisted answer is shown inline.
PREVIEW_CHARS = 4_000


def handle_name(tool: str) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{tool.lower()}-{stamp}-{secrets.token_hex(3)}.txt"


async def persist(text: str, tool: str, context: ResolverContext) -> str | None:
    """Save ``text`` under the session's ``tool-results/``; its
    ``artifact://`` address, or None when it cannot be saved here."""
    session_id = context.session_id
    allowed = context.session_writable
    if session_id is None or allowed is None or not allowed(session_id):
        return None
    session = Places(context).session
    if session is None or session.target is None:
        return None
    return await save_artifact(session.target, session.path([TOOL_RESULTS]), [handle_name(tool)], text.encode("utf-8", "surrogatepass"))


async def bound_output(text: str, tool: str, context: ResolverContext) -> str:
    """``text`` when it fits; else its head and the artifact:// address of
    the whole (or, where nothing can be saved, its head and a notice)."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    head = text[:PREVIEW_CHARS].rpartition("\n")[0] or text[:PREVIEW_CHARS]
    saved = await persist(text, tool, context)
    if saved is not None:
        lines = text.count("\n") + 1
        return (
            f"{head}\n...\n-- the {tool} output is {len(text):,} characters ({lines:,} lines), more than one answer "
            f"carries ({MAX_OUTPUT_CHARS:,}); all of it is saved as {saved}: Read {saved} (offset=N to page), "
            f"or Grep {saved} for what you need"
        )
    return (
        f"{head}\n...\n-- the {tool} output is {len(text):,} characters, more than one answer carries "
        f"({MAX_OUTPUT_CHARS:,}), and without a session held open here it cannot be saved as artifact://; "
        "narrow the call (a more specific path, pattern or glob, or a smaller limit)"
    )
