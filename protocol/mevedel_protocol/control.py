"""Params and results of the ``mevedel/control/*`` requests (control
transfer between clients) and of the ``mevedel/control/didChange``
notification.

``take`` is the one action of a client that wants to write a session: a
free or expired lease is acquired (an expired foreign one after the user
confirms), a held one is *requested* and the owner's server asks its user
(``window/showMessageRequest``: Grant / Keep). ``release`` saves, publishes
and releases, leaving the session open read-only. ``grant`` / ``keep``
answer a request from outside the prompt; ``status`` says where a transfer
stands on this side.
"""

from typing import Literal, Optional

import attrs

from .session import SessionState

TakeOutcome = Literal["acquired", "took-over", "requested", "already-owner"]
Role = Literal["owner", "requester", "none"]
Phase = Literal["idle", "asking", "draining", "requested", "granted"]
EventPhase = Literal[
    "asking", "draining", "released", "kept", "requested", "granted", "acquired", "rejected", "void", "failed"
]


@attrs.define
class ControlTakeParams:
    """Take control of a session (default: the folder's current one).
    ``confirm_takeover`` answers the expired-lease question in advance."""

    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None
    confirm_takeover: bool = False


@attrs.define
class ControlTakeResult:
    """``acquired`` / ``took-over``: the session is writable here now.
    ``requested``: the owner (``owner_host``) was asked; the session stays
    read-only until ``mevedel/control/didChange`` says ``acquired`` (or
    ``rejected``, ``void``, ``failed``). ``already-owner``: nothing to do."""

    session_id: str
    outcome: TakeOutcome
    state: SessionState
    owner_host: Optional[str] = None


@attrs.define
class ControlReleaseResult:
    """The lease is released; ``committed`` says whether the save before it
    published a new head. ``state`` is read-only (following)."""

    session_id: str
    committed: bool
    state: SessionState


@attrs.define
class ControlStatus:
    """Where a transfer stands on this side. ``role`` ``owner`` (phases
    ``asking``: a request waits for an answer, granted unanswered at the
    target-clock second ``deadline``; ``draining``: granted, waiting for
    ``waiting_for``), ``requester`` (``requested``, ``granted``) or
    ``none`` (``idle``)."""

    session_id: str
    role: Role
    phase: Phase
    owner_host: Optional[str] = None
    requester_host: Optional[str] = None
    waiting_for: Optional[str] = None
    deadline: Optional[int] = None


@attrs.define
class ControlDidChangeParams:
    """A transfer step a person on this side should see; ``message`` is a
    sentence for them. Owner phases: ``asking``, ``draining`` (with
    ``waiting_for``), ``released``, ``kept``. Requester phases:
    ``requested``, ``granted`` (the owner is finishing), ``acquired``
    (writable now), ``rejected`` (the owner kept it), ``void`` (the owner
    changed or its lease expired: take control again), ``failed``
    (acquired, but the committed state could not be loaded: released again,
    still read-only)."""

    workspace_folder: str
    session_id: str
    role: Role
    phase: EventPhase
    message: str
    owner_host: Optional[str] = None
    requester_host: Optional[str] = None
    waiting_for: Optional[str] = None
    deadline: Optional[int] = None
