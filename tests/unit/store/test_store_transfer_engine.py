"""A control transfer detaches the agent's own history: the next owner's
first prompt starts a new native conversation from a transcript excerpt,
never the previous owner's agent session."""

from __future__ import annotations

from mevedel_server.store import ClientIdentity
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
