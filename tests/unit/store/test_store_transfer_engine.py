"""A control transfer detaches the agent's own history: the next owner's
first prompt starts a new native conversation from a transcript excerpt,
never the previous owner's agent session. The binding's end is published by
the release's own commit: a grant costs no program for it."""

from __future__ import annotations

import msgspec
import pytest

from counted_programs import CountedPrograms
from mevedel_server.store import PRODUCT_STORAGE, ClientIdentity
from mevedel_server.store.content.sidecar import EngineRef, EngineState
from mevedel_server.store.service import EvidenceInput, SessionService
from mevedel_server.store.service.control import SessionControl
from mevedel_server.targets import LocalTarget

ENGINE = EngineRef(agent="claude", fingerprint="a" * 64, native_session_id="native-1", machine="desk", state=EngineState.READY)


async def owned(root) -> tuple[SessionService, SessionControl, str]:
    owner = SessionService(LocalTarget(root), ClientIdentity("desk-client", "desk"))
    control = SessionControl(owner)
    control.configure(prompt_timeout=30)
    sid = (await owner.sessions.create()).session_id
    await owner.turns.begin_turn(sid, "first")
    await owner.turns.append(sid, EvidenceInput("response", text="answer"))
    owner.agents.set_engine(sid, ENGINE)
    await owner.turns.settle(sid)
    assert owner.agents.engine(sid) == ENGINE
    return owner, control, sid


async def test_a_grant_hands_over_a_detached_agent_history(tmp_path):
    owner, owner_ctl, sid = await owned(tmp_path)
    asker = SessionService(LocalTarget(tmp_path), ClientIdentity("laptop-client", "laptop"))
    asker_ctl = SessionControl(asker)
    asker_ctl.configure(prompt_timeout=30)
    await asker_ctl.take(sid)
    await owner_ctl.poll()
    await owner_ctl.grant(sid)
    await owner_ctl.poll()
    await asker_ctl.poll()
    assert asker.info(sid).access.value == "writable"
    engine = asker.agents.engine(sid)
    assert engine is not None and engine.state is EngineState.DETACHED and engine.native_session_id is None
    assert engine.agent == "claude"  # the session still remembers which agent it uses


async def test_releasing_control_detaches_it_too(tmp_path):
    owner, owner_ctl, sid = await owned(tmp_path)
    await owner_ctl.release(sid)
    assert owner.agents.engine(sid).state is EngineState.DETACHED


async def test_a_cli_grant_after_a_prompt_is_six_programs(tmp_path):
    """``mevedel session grant-control`` after a ``mevedel prompt`` (the
    agent binding ready): the listing with the request it finds (2), the
    claim with the committed bytes (1), the mailbox look with the clock (1),
    the decision (1), and the release, whose commit is the final publication
    with the binding ended (1): seven while that publication was a commit
    of its own before the release."""
    cli = {**PRODUCT_STORAGE, "one_command": True, "leases_outlive_process": True}
    me = ClientIdentity("cli-client", "desk")
    prompt = SessionService(LocalTarget(tmp_path), me, **cli)
    sid = (await prompt.sessions.create()).session_id
    await prompt.turns.begin_turn(sid, "first")
    await prompt.turns.append(sid, EvidenceInput("response", text="answer"))
    prompt.agents.set_engine(sid, ENGINE)
    await prompt.turns.settle(sid)
    await prompt.sessions.detach()
    asker = SessionService(LocalTarget(tmp_path), ClientIdentity("laptop-client", "laptop"))
    asker_ctl = SessionControl(asker)
    await asker_ctl.take(sid)

    counting = CountedPrograms(LocalTarget(tmp_path))
    grant = SessionService(counting, me, **cli)
    (row,) = (await grant.sessions.list()).rows
    assert row.session_id == sid and row.holder_is_self
    await grant.sessions.open(sid, "resume")
    control = SessionControl(grant)
    await control.poll()
    await control.grant(sid)
    await grant.sessions.detach()
    assert counting.programs == 6

    await asker_ctl.poll()
    assert asker.info(sid).access.value == "writable"
    assert asker.agents.engine(sid).state is EngineState.DETACHED


@pytest.mark.parametrize("binding", ["ready", "detached"], ids=["after-a-prompt", "after-a-rewind"])
async def test_a_servers_grant_is_its_decision_and_its_release(tmp_path, binding):
    """An editor's server hands over through the same drain: its grant is
    two programs, the decision and the release, whether the release commits
    the binding's end (a prompt came last) or the binding was ended and
    published already (a Rewind came last: nothing left to publish)."""
    counting = CountedPrograms(LocalTarget(tmp_path))
    owner = SessionService(counting, ClientIdentity("desk-client", "desk"))
    control = SessionControl(owner)
    sid = (await owner.sessions.create()).session_id
    await owner.turns.begin_turn(sid, "first")
    await owner.turns.append(sid, EvidenceInput("response", text="answer"))
    owner.agents.set_engine(sid, ENGINE)
    await owner.turns.settle(sid)
    if binding == "detached":
        owner.agents.set_engine(sid, msgspec.structs.replace(ENGINE, native_session_id=None, state=EngineState.DETACHED))
        assert (await owner.sessions.save(sid)).committed
    asker = SessionService(LocalTarget(tmp_path), ClientIdentity("laptop-client", "laptop"))
    asker_ctl = SessionControl(asker)
    await asker_ctl.take(sid)
    await control.poll()
    before = counting.programs
    await control.grant(sid)
    assert counting.programs - before == 2
    await asker_ctl.poll()
    assert asker.info(sid).access.value == "writable"
    assert asker.agents.engine(sid).state is EngineState.DETACHED
