"""Modes and models through the real server: the scripted ACP agent
advertises session modes and config options; ``mevedel/agent/options``
and ``mevedel/agent/didChangeOptions`` show them, ``mevedel/agent/setOption``
chooses (sent at once to a running agent), the choice is remembered in the
session and applied again by a new agent process, a fork carries it, and a
choice the agent does not take is refused naming it and the agent."""

from __future__ import annotations

import asyncio
import json

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import request
from .test_agent_turns import configure, events, prompt

MODES = {"current": "ask", "available": [{"id": "ask", "name": "Ask"}, {"id": "plan", "name": "Plan", "description": "think first"}]}
CONFIG = [
    {"id": "model", "name": "Model", "category": "model", "current": "small",
     "options": [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}]},
    {"id": "fast", "name": "Fast", "type": "boolean", "current": False},
]


class Options:
    """``mevedel/agent/didChangeOptions`` as they arrive."""

    def __init__(self, client) -> None:
        self.seen: list[dict] = []
        self.arrived = asyncio.Event()

        def note(params) -> None:
            self.seen.append(json.loads(json.dumps(params, default=lambda o: o.__dict__)))
            self.arrived.set()

        client.feature(methods.AGENT_DID_CHANGE_OPTIONS)(note)


async def refused(client, method: str, params: dict) -> dict:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, method, params)
    return caught.value.data


def said(log, kind="prompt") -> list[dict]:
    return [e for e in events(log) if e["event"] == kind]


async def test_the_picker_shows_what_the_agent_offers_and_a_choice_is_applied_remembered_and_reapplied(client, workspace):
    watch = Options(client)
    log = configure(client, workspace, [[{"echo_options": True}]], load_session=True, modes=MODES, config_options=CONFIG,
                    refuse=["model=large"])
    first = await prompt(client, "One")
    sid = first["sessionId"]
    before = await request(client, methods.AGENT_OPTIONS, {"sessionId": sid})
    assert before["running"] and before["known"] and before["agent"] == "scripted"
    assert before["currentMode"] == "ask" and [m["id"] for m in before["modes"]] == ["ask", "plan"]
    assert [(o["id"], o["kind"], o["current"]) for o in before["configOptions"]] == [("model", "select", "small"), ("fast", "boolean", False)]
    assert watch.seen and watch.seen[-1]["sessionId"] == sid and watch.seen[-1]["modes"]

    chosen = await request(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "mode": "plan"})
    assert chosen["currentMode"] == "plan" and chosen["modeChosen"]
    assert [e["params"]["modeId"] for e in said(log, "set_mode")] == ["plan"]  # sent at once to the running agent
    fast = await request(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "configId": "fast", "value": True})
    flag = next(o for o in fast["configOptions"] if o["id"] == "fast")
    assert flag["current"] is True and flag["chosen"]
    assert watch.seen[-1]["currentMode"] == "plan"

    # Refused: a mode it does not offer, and a value it refuses.
    bogus = await refused(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "mode": "bogus"})
    assert bogus["kind"] == "agent-option-refused" and "mode 'bogus'" in bogus["reason"] and "ask, plan" in bogus["reason"]
    assert "scripted" in bogus["authored"]
    large = await refused(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "configId": "model", "value": "large"})
    assert "model=large" in large["reason"] and "not available now" in large["reason"] and "scripted" in large["authored"]
    kept = await request(client, methods.AGENT_OPTIONS, {"sessionId": sid})
    model = next(o for o in kept["configOptions"] if o["id"] == "model")
    assert (model["current"], model["chosen"], model["category"], [v["value"] for v in model["values"]]) == ("small", False, "model", ["small", "large"])

    second = await prompt(client, "Two", sessionId=sid)
    assert second["outcome"] == "completed"
    # A new agent process (the session closed and opened again): the
    # remembered choice is set before the prompt is sent.
    await request(client, methods.SESSION_CLOSE, {"sessionId": sid})
    await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    closed = await request(client, methods.AGENT_OPTIONS, {"sessionId": sid})
    assert not closed["running"] and closed["known"] and closed["currentMode"] == "plan" and closed["modeChosen"]
    await prompt(client, "Three", sessionId=sid)
    pids = [e["pid"] for e in said(log, "start")]
    assert len(set(pids)) == 2
    last = [e for e in events(log) if e["pid"] == pids[-1] and e["event"] in ("load_session", "set_mode", "set_config_option", "prompt")]
    assert [e["event"] for e in last] == ["load_session", "set_mode", "set_config_option", "prompt"]
    assert last[1]["params"]["modeId"] == "plan" and last[2]["params"] | {"sessionId": None} == {"sessionId": None, "configId": "fast", "value": True}

    # A fork carries the choice.
    fork = await request(client, methods.FORK_PREPARE, {"turn": 1, "sessionId": sid})
    child = (await request(client, methods.FORK_COMMIT, {"token": fork["token"], "sessionId": sid}))["session"]["sessionId"]
    forked = await request(client, methods.AGENT_OPTIONS, {"sessionId": child})
    assert forked["currentMode"] == "plan" and forked["modeChosen"] and not forked["running"]


async def test_a_remembered_choice_the_agent_no_longer_offers_fails_the_prompt_before_sending_it(client, workspace):
    log = configure(client, workspace, [[{"echo_options": True}]], modes=MODES, config_options=CONFIG)
    first = await prompt(client, "One")
    sid = first["sessionId"]
    await request(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "configId": "model", "value": "large"})
    await request(client, methods.SESSION_CLOSE, {"sessionId": sid})
    # Another installation of the agent, which offers no "large".
    configure(client, workspace, [[{"echo_options": True}]], modes=MODES,
              config_options=[{**CONFIG[0], "options": [{"value": "small", "name": "Small"}]}])
    await request(client, methods.SESSION_OPEN, {"sessionId": sid})
    prompts = len(said(log))
    with pytest.raises(JsonRpcException) as caught:
        await prompt(client, "Two", sessionId=sid)
    data = caught.value.data
    assert data["kind"] == "agent-option-refused"
    assert "model=large (the session's choice)" in data["reason"] and "scripted" in data["authored"] and "values of model: small" in data["reason"]
    assert len(said(log)) == prompts  # nothing was sent
    fixed = await request(client, methods.AGENT_SET_OPTION, {"sessionId": sid, "configId": "model", "value": "small"})
    assert next(o for o in fixed["configOptions"] if o["id"] == "model")["current"] == "small"
    assert (await prompt(client, "Two", sessionId=sid))["outcome"] == "completed"
