"""``mevedel prompt --mode ID --set ID=VALUE`` against the scripted ACP
agent advertising modes and config options: the choice is applied before
the prompt, remembered in the session's sidecar, applied again by the next
agent process (a later prompt is a new process, as on another machine),
the settings' per-agent defaults apply under it, and a choice the agent
does not take fails the prompt naming the choice and the agent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.unit.cli.test_cli_prompt import AGENT, mevedel
from tests.unit.cli.test_cli_session import committed

MODES = {"current": "ask", "available": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}, {"id": "plan", "name": "Plan"}]}
CONFIG = [
    {"id": "model", "name": "Model", "category": "model", "current": "small",
     "options": [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}]},
    {"id": "fast", "name": "Fast", "type": "boolean", "current": False},
]


def configure(tmp_path: Path, turns: list, *, defaults: dict | None = None, **script) -> Path:
    log = tmp_path / "agent.jsonl"
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"turns": turns, "log": str(log), "modes": MODES, "config_options": CONFIG, **script}))
    config = tmp_path / "config" / "mevedel" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"scripted": {"command": [sys.executable, str(AGENT), str(path)], **(defaults or {})}}}))
    return log


def events(log: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == kind] if log.exists() else []


def choices(workspace: Path) -> dict:
    """The session's committed sidecar's ``agent_choices``, as JSON."""
    (found,) = (workspace / ".mevedel" / "sessions").iterdir()
    recorded = committed(workspace, found.name).sidecar.agent_choices
    return {agent: {"mode": c.mode, "config": c.config} for agent, c in recorded.items()}


def test_a_chosen_mode_and_model_are_applied_remembered_and_applied_again_by_the_next_agent_process(workspace, tmp_path):
    log = configure(tmp_path, [[{"echo_options": True}]])
    first = mevedel(workspace, tmp_path, "prompt", "--mode", "plan", "--set", "model=large", "--set", "fast=true", "Go")
    assert first.returncode == 0, first.stderr
    assert "options: mode=plan model=large fast=true" in first.stdout
    assert [e["params"]["modeId"] for e in events(log, "set_mode")] == ["plan"]
    assert sorted((e["params"]["configId"], e["params"]["value"]) for e in events(log, "set_config_option")) == [("fast", True), ("model", "large")]
    assert choices(workspace) == {"scripted": {"mode": "plan", "config": {"model": "large", "fast": True}}}

    # The next prompt is a new agent process: the session's choice is set
    # again before the prompt is sent.
    second = mevedel(workspace, tmp_path, "prompt", "Again")
    assert second.returncode == 0, second.stderr
    assert "options: mode=plan model=large fast=true" in second.stdout
    pids = {e["pid"] for e in events(log, "start")}
    assert len(pids) == 2
    assert len(events(log, "set_mode")) == 2 and events(log, "set_mode")[1]["pid"] != events(log, "set_mode")[0]["pid"]
    order = [e["event"] for e in map(json.loads, log.read_text().splitlines()) if e["event"] in ("set_mode", "prompt")]
    assert order == ["set_mode", "prompt", "set_mode", "prompt"]  # applied before each prompt, never after

    # A later choice replaces only what it names.
    third = mevedel(workspace, tmp_path, "prompt", "--set", "model=small", "Third")
    assert "options: mode=plan model=small fast=true" in third.stdout
    assert choices(workspace)["scripted"] == {"mode": "plan", "config": {"model": "small", "fast": True}}


def test_the_settings_defaults_apply_under_the_sessions_choice(workspace, tmp_path):
    configure(tmp_path, [[{"echo_options": True}]], defaults={"mode": "code", "options": {"model": "large"}})
    first = mevedel(workspace, tmp_path, "prompt", "Go")
    assert first.returncode == 0, first.stderr
    assert "options: mode=code model=large fast=false" in first.stdout
    assert choices(workspace) == {}  # defaults are not the session's choice
    chosen = mevedel(workspace, tmp_path, "prompt", "--mode", "plan", "Plan it")
    assert "options: mode=plan model=large fast=false" in chosen.stdout


def test_a_mode_the_agent_does_not_offer_fails_the_prompt_naming_it_and_nothing_is_recorded(workspace, tmp_path):
    log = configure(tmp_path, [[{"echo_options": True}]])
    refused = mevedel(workspace, tmp_path, "prompt", "--mode", "bogus", "Go")
    assert refused.returncode == 1
    assert "mode 'bogus'" in refused.stderr and "agent 'scripted'" in refused.stderr
    assert "ask, code, plan" in refused.stderr and "Traceback" not in refused.stderr
    assert events(log, "prompt") == []  # nothing was sent
    assert not list((workspace / ".mevedel" / "sessions").glob("*/.publications"))  # no turn recorded
    after = mevedel(workspace, tmp_path, "prompt", "Go")
    assert after.returncode == 0 and "options: mode=ask" in after.stdout  # the refused choice was not remembered


def test_a_value_the_agent_refuses_and_a_typo_in_set_are_reported(workspace, tmp_path):
    log = configure(tmp_path, [[{"echo_options": True}]], refuse=["model=large"])
    refused = mevedel(workspace, tmp_path, "prompt", "--set", "model=large", "Go")
    assert refused.returncode == 1
    assert "model=large" in refused.stderr and "agent 'scripted'" in refused.stderr and "not available now" in refused.stderr
    assert events(log, "prompt") == []
    typo = mevedel(workspace, tmp_path, "prompt", "--set", "model", "Go")
    assert typo.returncode == 1 and "--set 'model'" in typo.stderr and "ID=VALUE" in typo.stderr


def test_the_agents_own_mode_change_is_remembered_and_a_choice_it_no_longer_offers_is_named_on_resume(workspace, tmp_path):
    configure(tmp_path, [[{"set_mode": "code"}, {"echo_options": True}]])
    first = mevedel(workspace, tmp_path, "prompt", "--mode", "plan", "Plan, then code")
    assert first.returncode == 0, first.stderr
    assert "options: mode=code" in first.stdout
    assert choices(workspace)["scripted"]["mode"] == "code"  # a resume does not undo the agent's switch
    # Elsewhere (another installation of the agent) mode "code" is not offered.
    configure(tmp_path, [[{"echo_options": True}]], modes={"current": "ask", "available": [{"id": "ask", "name": "Ask"}]})
    refused = mevedel(workspace, tmp_path, "prompt", "Again")
    assert refused.returncode == 1
    assert "mode 'code' (the session's choice)" in refused.stderr and "agent 'scripted'" in refused.stderr
    fixed = mevedel(workspace, tmp_path, "prompt", "--mode", "ask", "Again")
    assert fixed.returncode == 0 and "options: mode=ask" in fixed.stdout


def test_an_agent_that_answers_but_keeps_its_value_is_named_too(workspace, tmp_path):
    log = configure(tmp_path, [[{"echo_options": True}]], ignore=["model=large"])
    refused = mevedel(workspace, tmp_path, "prompt", "--set", "model=large", "Go")
    assert refused.returncode == 1
    assert "model=large (this prompt's choice)" in refused.stderr and "the agent kept model=small" in refused.stderr
    assert "agent 'scripted'" in refused.stderr and events(log, "prompt") == []


def test_an_agent_reporting_a_value_the_session_cannot_keep_changes_nothing_kept(workspace, tmp_path):
    """An agent's own update is untrusted: a value the sidecar cannot hold
    (a newline in it) leaves the session's choice as it was, the turn and
    the session intact."""
    configure(tmp_path, [[{"set_config": {"id": "model", "value": "odd\nvalue"}}, {"say": "still here"}]])
    first = mevedel(workspace, tmp_path, "prompt", "--set", "model=large", "Go")
    assert first.returncode == 0 and "still here" in first.stdout, first.stderr
    assert choices(workspace)["scripted"]["config"] == {"model": "large"}
    configure(tmp_path, [[{"echo_options": True}]])  # each prompt is a new process: its turn 0
    again = mevedel(workspace, tmp_path, "prompt", "Again")
    assert again.returncode == 0 and "model=large" in again.stdout, again.stderr
