"""Comments routed to a session, carried to its agent by the next prompt.

A comment reaches the session working on the item
(:meth:`.attachments.SessionArtifacts.comment`); its agent learns of it
when that session's next agent turn starts: the prompt carries every
comment routed to the session and not yet delivered, oldest first, each
naming its item by title and ``shared://`` address. A comment counts as
delivered once a turn that carried it completed (the agent answered the
prompt); a turn that failed or was interrupted leaves it for the next one.
The mark is kept in the item's discussion (``delivered_in``), so no
process's later turn carries it again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .attachments import SessionArtifacts
from .errors import ArtifactError
from .records import Comment

_log = logging.getLogger(__name__)

#: The most comments one prompt carries; the rest wait for the next turn.
MAX_COMMENTS_PER_PROMPT = 50

HEADER = (
    "Comments the user left on shared items you work on, delivered once "
    "(read an item with its shared:// address; reply in your answer):"
)


@dataclass(frozen=True)
class Mail:
    item_id: str
    title: str
    comments: tuple[Comment, ...]


async def pending_mail(artifacts: SessionArtifacts, session_id: str) -> list[Mail]:
    """The comments routed to ``session_id`` that no completed turn
    carried yet: on its attached items and on the item whose own
    conversation it is (when the pair agrees), read in one pass. An item
    that cannot be read is left for later; a store that cannot be read at
    all raises (the engine then sends the prompt without mail)."""
    attached = artifacts.attached(session_id)
    own = artifacts.service.sessions.dedicated_artifact(session_id)
    wanted = set(attached) | ({own} if own is not None else set())
    found = await artifacts.store.discussions(wanted)
    mail: list[Mail] = []
    left = MAX_COMMENTS_PER_PROMPT
    for item_id, (meta, comments) in sorted(found.items()):
        if item_id not in attached and meta.dedicated_session != session_id:
            continue  # only a pair that agrees counts
        pending = [c for c in comments if c.session_id == session_id and c.delivered_in is None][:left]
        if pending:
            mail.append(Mail(item_id, meta.title, tuple(pending)))
            left -= len(pending)
        if left <= 0:
            break
    return mail


def mail_text(mail: list[Mail]) -> str:
    lines = [HEADER]
    for item in mail:
        lines.append(f'"{item.title}" (shared://{item.item_id}):')
        for comment in item.comments:
            text = comment.text.strip().replace("\n", "\n  ")
            lines.append(f"- comment {comment.number} by {comment.author}: {text}")
    return "\n".join(lines)


async def mark_delivered(artifacts: SessionArtifacts, mail: list[Mail], turn: int) -> None:
    """The agent answered the prompt of ``turn`` that carried ``mail``."""
    for item in mail:
        try:
            await artifacts.store.mark_delivered(item.item_id, (c.number for c in item.comments), turn)
        except ArtifactError as error:  # a deleted item: nothing left to deliver
            _log.info("comments on %s stay undelivered: %s", item.item_id, error)
