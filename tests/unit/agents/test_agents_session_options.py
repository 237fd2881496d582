"""A session's agent modes and config options, below the engine: what an
agent's answer offers (its untrusted ids bounded), which choice wins, how
a value is checked, and the sidecar record of the choice (a metadata
write; what it cannot hold refused, never written)."""

from __future__ import annotations

import pytest
from acp import schema
from tests.unit.store.content.test_content_turns import commit, conversation, full_turn

from mevedel_server.agents.config import AgentSpec, agents_problem, config_from_settings
from mevedel_server.agents.errors import AgentError
from mevedel_server.agents.session_options import (
    MAX_OFFERED,
    Offered,
    Want,
    check,
    parse_assignment,
    wanted,
)
from mevedel_server.store.content.sidecar import (
    AgentChoice,
    encode_sidecar,
    load_sidecar,
)
from mevedel_server.store.content.turns import ConversationError


def offer(modes=None, config=None) -> Offered:
    return Offered.of(schema.NewSessionResponse(session_id="s", modes=modes, config_options=config))


MODEL = schema.SessionConfigOptionSelect(
    type="select", id="model", name="Model", current_value="small", category="model",
    options=[schema.SessionConfigSelectGroup(group="g", name="Fast ones", options=[
        schema.SessionConfigSelectOption(value="small", name="Small"), schema.SessionConfigSelectOption(value="bad\nvalue", name="Bad")])],
)
FAST = schema.SessionConfigOptionBoolean(type="boolean", id="fast", name="Fast", current_value=False)


def test_an_agents_offer_keeps_only_ids_that_can_be_chosen_and_kept_and_is_bounded():
    modes = schema.SessionModeState(current_mode_id="x" * 300, available_modes=[
        schema.SessionMode(id="ask", name="  Ask\n me "), schema.SessionMode(id="x" * 300, name="too long"),
        schema.SessionMode(id="two\nlines", name="odd"), *[schema.SessionMode(id=f"m{n}", name="m") for n in range(MAX_OFFERED + 50)],
    ])
    offered = offer(modes, [MODEL, FAST])
    assert offered.modes[0].id == "ask" and offered.modes[0].name == "Ask me"
    assert all(len(m.id) <= 256 and "\n" not in m.id for m in offered.modes) and len(offered.modes) <= MAX_OFFERED
    assert offered.current_mode is None  # not one that can be kept
    model = offered.option("model")
    assert [(v.value, v.group) for v in model.values] == [("small", "Fast ones")]
    assert offered.option("fast").kind == "boolean" and offered.option("fast").current is False


def test_this_prompts_choice_wins_over_the_sessions_over_the_settings_defaults():
    spec = AgentSpec("claude", ("claude",), mode="acceptEdits", options={"model": "opus", "effort": "high"})
    wants = wanted(spec, AgentChoice(mode="plan", config={"model": "sonnet"}), AgentChoice(config={"effort": "low"}))
    assert [(w.config_id, w.value, w.source) for w in wants] == [
        (None, "plan", "the session's choice"),
        ("effort", "low", "this prompt's choice"),
        ("model", "sonnet", "the session's choice"),
    ]
    defaults = wanted(spec, None)
    assert [(w.config_id, w.value, w.source) for w in defaults] == [
        (None, "acceptEdits", "the default in agents.claude.mode"),
        ("model", "opus", "the default in agents.claude.options.model"),
        ("effort", "high", "the default in agents.claude.options.effort"),
    ]
    assert wanted(AgentSpec("plain", ("p",)), None) == []


def test_a_value_is_checked_against_what_the_agent_offers():
    offered = offer(schema.SessionModeState(current_mode_id="ask", available_modes=[schema.SessionMode(id="ask", name="Ask")]), [MODEL, FAST])
    assert check(Want(None, "ask", "x"), offered) == ("ask", None)
    assert "its modes: ask" in check(Want(None, "plan", "x"), offered)[1]
    assert check(Want("fast", "TRUE", "x"), offered) == (True, None)  # typed on the command line
    assert check(Want("fast", "yes", "x"), offered)[1] == "fast takes true or false"
    assert "values of model: small" in check(Want("model", "large", "x"), offered)[1]
    assert "its options: model, fast" in check(Want("effort", "high", "x"), offered)[1]
    assert check(Want(None, "ask", "x"), offer())[1] == "it offers no modes"


def test_set_takes_id_equals_value():
    assert parse_assignment(" model = large ") == ("model", "large")
    for bad in ("model", "=large", "model=", "  "):
        with pytest.raises(ValueError, match="ID=VALUE"):
            parse_assignment(bad)


def test_the_choice_is_kept_in_the_sidecar_and_what_it_cannot_hold_is_refused():
    c = conversation()
    full_turn(c)
    commit(c)
    c.set_agent_choice("claude", AgentChoice(mode="plan", config={"model": "opus", "fast": True}), at=1100)
    candidate = c.metadata_candidate()
    assert candidate.kind == "sidecar" and "session.json" in candidate.changed
    again = load_sidecar(encode_sidecar(candidate.sidecar))
    assert again.agent_choices == {"claude": AgentChoice(mode="plan", config={"model": "opus", "fast": True})}
    for bad in (AgentChoice(mode="two\nlines"), AgentChoice(mode="x" * 257), AgentChoice(config={"model": ""})):
        with pytest.raises(ConversationError, match="cannot be kept"):
            c.set_agent_choice("claude", bad, at=1101)
    assert c.sidecar.agent_choices["claude"].mode == "plan"  # unchanged
    c.set_agent_choice("claude", None, at=1102)
    assert c.sidecar.agent_choices == {}


def test_a_sidecar_written_before_agent_choices_still_loads():
    c = conversation()
    full_turn(c)
    data = encode_sidecar(commit(c).sidecar)
    assert b'"agent_choices":{}' in data
    older = data.replace(b'"agent_choices":{},', b"")
    assert load_sidecar(older).agent_choices == {}


def test_per_agent_defaults_are_validated_naming_the_entry():
    good = {"claude": {"command": ["claude"], "mode": "plan", "options": {"model": "opus", "fast": True}}}
    assert agents_problem(good) is None
    spec = config_from_settings({"agents": good}, where="settings").agents["claude"]
    assert (spec.mode, dict(spec.options)) == ("plan", {"model": "opus", "fast": True})
    # Defaults are not the process: a changed default does not restart a running agent.
    assert spec == AgentSpec("claude", ("claude",))
    for entry, said in (
        ({"command": ["c"], "mode": ""}, "claude.mode must be a mode id"),
        ({"command": ["c"], "mode": "a\nb"}, "claude.mode must be a mode id"),
        ({"command": ["c"], "options": {"model": 3}}, "claude.options must map"),
        ({"command": ["c"], "options": ["model"]}, "claude.options must map"),
    ):
        assert said in agents_problem({"claude": entry})
        with pytest.raises(AgentError, match="settings: agents"):
            config_from_settings({"agents": {"claude": entry}}, where="settings")
