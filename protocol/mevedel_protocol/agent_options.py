"""An agent's session modes and config options (model, reasoning effort,
...): ``mevedel/agent/options``, ``mevedel/agent/setOption`` and the
``mevedel/agent/didChangeOptions`` notification. ``docs/protocol.md``
documents every field.
"""

from typing import Literal, Optional, Union

import attrs


@attrs.define
class AgentOptionsParams:
    """The session's modes and options (default: the folder's current
    session); ``agent`` names another agent than the session's."""

    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None
    agent: Optional[str] = None


@attrs.define
class AgentSetOptionParams:
    """Choose ``mode`` and/or one config option (``configId`` and its
    ``value``: a value id, or true/false for a boolean option)."""

    session_id: Optional[str] = None
    workspace_folder: Optional[str] = None
    agent: Optional[str] = None
    mode: Optional[str] = None
    config_id: Optional[str] = None
    value: Optional[Union[str, bool]] = None


@attrs.define
class AgentMode:
    id: str
    name: str
    description: Optional[str] = None


@attrs.define
class AgentOptionValue:
    value: str
    name: str
    description: Optional[str] = None
    group: Optional[str] = None


@attrs.define
class AgentConfigOption:
    """One config option: ``current`` is the value in effect (see
    ``AgentOptions``), ``chosen`` whether the session's own choice set it."""

    id: str
    name: str
    kind: Literal["select", "boolean"]
    current: Union[str, bool]
    chosen: bool
    values: list[AgentOptionValue] = attrs.Factory(list)
    description: Optional[str] = None
    category: Optional[str] = None


@attrs.define
class AgentOptions:
    """What a chat's mode and model picker shows for one session."""

    workspace_folder: str
    session_id: str
    agent: str
    running: bool
    known: bool
    current_mode: Optional[str] = None
    mode_chosen: bool = False
    modes: list[AgentMode] = attrs.Factory(list)
    config_options: list[AgentConfigOption] = attrs.Factory(list)
