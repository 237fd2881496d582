"""Errors of the session store. Messages name sessions, hosts and
session-relative files, never a backing filesystem path."""

from __future__ import annotations

from ..targets import TargetError


class StoreError(Exception):
    """Base of every session-store refusal. One about a session is a
    :class:`SessionRefusal`: it keeps the session apart from its words."""


class SessionRefusal(StoreError):
    """A refusal about one session, its words (``said``) apart from the
    session (``session_id``), so that each entry point names the session
    once, in its own form: the CLI says ``str()`` -- ``session <id>: <said>``,
    or ``session <id> <said>`` for words that go on from the session's name
    (``continues``: "does not exist") -- and an LSP answer has the ID as its
    ``authored`` and the words as its ``reason``."""

    def __init__(self, session_id: str, said: str, *, continues: bool = False) -> None:
        super().__init__(f"session {session_id}{' ' if continues else ': '}{said}")
        self.session_id = session_id
        self.said = said


def naming_session(named: str, error: BaseException) -> str:
    """``error`` in words that name its session once, for a message about
    session ``named`` (as the person gave it): a session refusal names its
    own; anything else is said after ``named``."""
    return str(error) if isinstance(error, SessionRefusal) else f"session {named}: {error}"


class KindedRefusal(StoreError):
    """A refusal of an authored input that carries its own stable error kind
    (the artifact store's): ``kind``, ``authored`` and ``reason``."""

    def __init__(self, kind: str, authored: str, reason: str) -> None:
        super().__init__(f"{authored}: {reason}")
        self.kind = kind
        self.authored = authored
        self.reason = reason


class InvalidSessionId(StoreError, ValueError):
    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"{text!r} is not a session ID: {reason}")
        self.text = text
        self.reason = reason


class SessionOccupied(SessionRefusal):
    """Materialization found the session directory already present."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, "already exists", continues=True)


class SessionMissing(SessionRefusal):
    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, "does not exist", continues=True)


class LeaseObservationError(SessionRefusal):
    """The lease could not be observed: it changed on every attempt, or a
    claim's program did not read what it had to."""


class LeaseUnavailable(SessionRefusal):
    """The lease is held or contested; the caller does not own the session.
    The words go on from the session's name (``continues``) unless told."""

    def __init__(
        self,
        session_id: str,
        said: str,
        *,
        continues: bool = True,
        holder_client: str | None = None,
        holder_host: str | None = None,
        state: str | None = None,
        expires_at: int | None = None,
        now: int | None = None,
        holder_ended: bool = False,
    ) -> None:
        super().__init__(session_id, said, continues=continues)
        self.holder_client = holder_client
        self.holder_host = holder_host
        self.state = state
        self.expires_at = expires_at
        self.now = now
        #: The holder's process was proven to have ended before its lease
        #: expired (nothing of it can still be writing).
        self.holder_ended = holder_ended


class LeaseHeld(LeaseUnavailable):
    """Another client holds an unexpired lease."""


class TransferReserved(LeaseHeld):
    """The lease was released to a named requester of a control transfer,
    whose short fence has not expired yet."""


class TakeoverNeedsConfirmation(LeaseUnavailable):
    """Another client's lease has expired, or its holder process was proven
    to have ended (``holder_ended``); taking it over needs the user's
    explicit confirmation (``confirm_takeover=True``)."""


class IdentityNeedsConfirmation(SessionRefusal):
    """The session was made in another workspace (its sidecar records a
    different workspace identity, as when a session directory is copied
    from another project): resuming it binds it to this one, which needs
    the user's explicit confirmation (``confirm_identity=True``)."""

    def __init__(self, session_id: str, recorded: str, current: str | None) -> None:
        here = f"this workspace's ({current[:12]}...)" if current else "this workspace, which has no identity yet"
        super().__init__(
            session_id,
            f"belongs to another workspace (identity {recorded[:12]}...), not {here}; "
            "binding it to this workspace needs confirmation",
            continues=True,
        )
        self.recorded = recorded
        self.current = current


class ClaimRaced(LeaseUnavailable):
    """Another client won the generation election this claim took part in
    (``why``: how the claim found out)."""

    def __init__(self, session_id: str, why: str) -> None:
        super().__init__(session_id, why, continues=False)


class LeaseLost(SessionRefusal):
    """This client's generation is no longer the current one: it was taken
    over or superseded, so its write was refused (``reason``: how)."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(session_id, f"lease lost: {reason}")
        self.reason = reason


class PublicationFailed(SessionRefusal):
    """A publication did not reach its commit point; the prior head is still
    authoritative and the publication is pending (retry or abandon).
    ``reason``: why it failed."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(session_id, f"publication pending: {reason}")
        self.reason = reason
        #: The pending save is recorded in the session directory, so that a
        #: later process can retry it (False: only this process holds it).
        self.recorded = False
        #: Not recorded there (its host could not be reached), but kept on
        #: this machine until this client next resumes the session.
        self.spooled = False


class PublicationPending(SessionRefusal):
    """A new publication was asked for while an earlier one is pending
    (``reason``: why that one is)."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(session_id, f"an earlier publication is pending ({reason}); retry or abandon it first")
        self.reason = reason


# A conversation's refusals: the session service's own refusals derive
# from them, and it need not load the conversation to raise one.
class ConversationError(StoreError):
    """An operation the conversation's current state does not allow."""


class ContentError(StoreError):
    """Restored bytes do not form a consistent conversation."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


#: What resolves an :class:`OutcomeUnknown` once the host is back, in words
#: that name no client's command (a CLI or an editor adds its own).
_FOLLOW_UPS = {
    "retry-recovery": "retry the recovery: it finishes or undoes a {op} left half done, or says that nothing is "
    "left to resolve and what the session holds",
    "retry-publication": "retry the publication: it publishes it unless the host already holds it",
    "list": "list the sessions: the new session is there if the {op} was applied",
}


def unknown_outcome(
    state: str, operation: str, dropped: BaseException, unreachable: BaseException, *, follow_up: str, marker: str | None = None
) -> str:
    """The words for a change the host stopped answering in and cannot be
    reached to tell about: what may be true (``state``), the two failures,
    a recovery marker only as one that may be there, and what resolves it
    once the host answers (``follow_up``, a key of ``_FOLLOW_UPS``). The one
    way such an outcome is told: never a claim the client cannot check."""
    lost, gone = target_error_in(dropped), target_error_in(unreachable)
    host = getattr(gone, "host", None) or getattr(lost, "host", None)
    named = f"ssh target {host}" if host else "the host"
    parts = [
        f"{state}: the connection to {named} was lost during the {operation} "
        f"({_reason(dropped, lost)}) and it cannot be reached now ({_reason(unreachable, gone)})"
    ]
    if marker is not None:
        parts.append(f"recovery {marker} may be left on the host, and blocks changes to the session until it is resolved")
    parts.append("when the host can be reached again, " + _FOLLOW_UPS[follow_up].format(op=operation))
    return "; ".join(parts)


class OutcomeUnknown(SessionRefusal):
    """A multi-step change whose host stopped answering and cannot be reached
    to tell how it ended (see :func:`unknown_outcome`)."""

    kind = "unavailable"

    def __init__(
        self, session_id: str, operation: str, state: str, dropped: BaseException, unreachable: BaseException,
        *, follow_up: str, marker: str | None = None,
    ) -> None:
        super().__init__(session_id, unknown_outcome(state, operation, dropped, unreachable, follow_up=follow_up, marker=marker))
        self.operation = operation
        self.follow_up = follow_up
        self.marker = marker


class PublicationUnknown(PublicationFailed):
    """A publication whose host stopped answering and cannot be reached to
    tell whether its head committed: pending like any failed one (a retry
    publishes it unless the host already holds it), said to be unknown."""

    follow_up = "retry-publication"

    def __init__(self, session_id: str, dropped: BaseException, unreachable: BaseException) -> None:
        state = "it may or may not have been published"
        super().__init__(session_id, unknown_outcome(state, "publication", dropped, unreachable, follow_up=self.follow_up))
        self.dropped = dropped
        self.unreachable = unreachable


def target_error_in(error: BaseException) -> TargetError | None:
    """The target's own error in ``error``'s chain (a publication's
    failure wraps the dropped connection)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TargetError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _reason(error: BaseException, found: TargetError | None) -> str:
    return str(error) if found is None else found.reason if getattr(found, "host", None) else str(found)


def cause_in_words(session_id: str, cause: BaseException) -> str:
    """Why a change of session ``session_id`` failed, for a message that
    names the session already and says what became of the change: a
    connection to a host lost as exactly that, a failed publication by its
    reason (the change gave it up: "publication pending" would be untrue),
    anything else in its own words, without the session's name again."""
    found = target_error_in(cause)
    host = getattr(found, "host", None)
    if found is not None and host:
        return f"the connection to ssh target {host} was lost ({found.reason})"
    if isinstance(cause, PublicationFailed):
        return cause.reason
    if isinstance(cause, SessionRefusal) and cause.session_id == session_id:
        return cause.said
    return str(cause)
